//! [`OracleClient`]: one connection per process, batching concurrent requests into rounds
//! (one request each), pipelining up to [`MAX_IN_FLIGHT`] rounds on the connection, failing
//! over across oracle addresses.
//!
//! Why pipelining keeps timestamps linearizable (a request that begins after another
//! request's reply gets a larger timestamp):
//! - a request is only placed into a round taken from the queue after the request began, and
//!   that round's frame is written (on every connection it is ever sent on) after it was taken;
//! - the server reads a connection's frames in order and answers each from a source that only
//!   grows (one leader allocates ranges under one mutex after the requests arrived), so a
//!   frame written after another request's reply arrived is answered above that reply;
//! - across a leader change, the server's epoch check before each reply batch covers every
//!   request in it, pipelined or not (`oracle::design`);
//! - replies are matched to rounds strictly in order by `req_id`; anything else drops the
//!   connection, and every unanswered round is sent again, as a new request, elsewhere.

mod driver;
mod queue;

use crate::proto::MAX_COUNT;
use async_trait::async_trait;
use driver::Driver;
use percolator::{Timestamp, TimestampError, TimestampSource};
use queue::{Inner, Pending, Queue, Round};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// Most rounds in flight on the connection at once. With one, the client and the server
/// take turns idling for a whole round trip (cross-thread wake-ups dominate it); with more,
/// requests arriving meanwhile go out at once, and the server serves them while the client
/// hands out the previous reply. Beyond a few, the same requests only split into smaller
/// rounds.
pub const MAX_IN_FLIGHT: usize = 4;

/// Timeouts and retry pacing of an [`OracleClient`].
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// Limit for one round trip (from writing a round to its reply); past it the connection
    /// is dropped and the next address tried.
    pub rpc_timeout: Duration,
    /// Limit for connecting and the handshake.
    pub connect_timeout: Duration,
    /// Limit for one `get_timestamp` call, failovers included (measured per round, from when
    /// it was first sent).
    pub request_timeout: Duration,
    /// Pause after every address refused or failed once in a row.
    pub retry_backoff: Duration,
    /// With `Some(n)`: fail the pending calls with [`ClientError::Refused`] once every
    /// address refused the connection `n` times in a row (nothing listens there: a short,
    /// bounded retry for a command-line client such as `oracle get`). `None`, the default,
    /// retries until `request_timeout`, as a long-lived process rides out an oracle restart.
    pub give_up_refused: Option<u32>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            rpc_timeout: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_secs(10),
            retry_backoff: Duration::from_millis(50),
            give_up_refused: None,
        }
    }
}

/// Counters of an [`OracleClient`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Rounds answered with timestamps (one request and reply each; up to
    /// [`MAX_IN_FLIGHT`] of them overlap).
    pub round_trips: u64,
    /// Timestamps they carried.
    pub timestamps: u64,
}

/// Why an [`OracleClient`] call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The client was built with no address.
    #[error("no oracle address given")]
    NoAddress,
    /// No runtime to run the client's connection task on.
    #[error("OracleClient needs a running tokio runtime")]
    NoRuntime,
    /// No oracle answered within the request timeout; `last` is the last failure seen.
    #[error("no oracle answered within {timeout:?} (last failure: {last})")]
    Timeout {
        /// The request timeout.
        timeout: Duration,
        /// The last failure seen while retrying.
        last: String,
    },
    /// Every address refused the connection, round after round
    /// ([`ClientConfig::give_up_refused`]): no oracle listens there.
    #[error("no oracle is listening: every address refused the connection {rounds} times in a row (last: {last})")]
    Refused {
        /// Rounds over every address.
        rounds: u32,
        /// The last refusal.
        last: String,
    },
    /// The client was dropped while the request was pending.
    #[error("oracle client closed")]
    Closed,
}

impl From<ClientError> for TimestampError {
    fn from(e: ClientError) -> Self {
        match e {
            ClientError::Timeout { timeout, .. } => TimestampError::Timeout(timeout),
            other => TimestampError::Unavailable(other.to_string()),
        }
    }
}

/// A client of the oracle service. Clone it freely: clones share one connection. The
/// requests pending when the connection task takes a round are served by that round (one
/// request for N timestamps, answered with a range); while up to [`MAX_IN_FLIGHT`] rounds
/// await their replies, requests arriving meanwhile go out in the next round at once.
/// Nothing is served from a cached range, so every timestamp is fresh from the leader
/// (linearizable; see the module documentation).
#[derive(Clone)]
pub struct OracleClient {
    inner: Arc<Inner>,
}

impl OracleClient {
    /// A client of the oracles at `addrs` (`host:port`; standbys answer "not leader" and the
    /// client moves on). Connects lazily; must be called inside a tokio runtime.
    pub fn new(addrs: Vec<String>, config: ClientConfig) -> Result<Self, ClientError> {
        if addrs.is_empty() {
            return Err(ClientError::NoAddress);
        }
        let handle = tokio::runtime::Handle::try_current().map_err(|_| ClientError::NoRuntime)?;
        let queue = Arc::new(Queue {
            pending: Mutex::new(Pending {
                full: Vec::new(),
                current: Round::new(),
                count: 0,
                gone: false,
            }),
            notify: Notify::new(),
            closed: AtomicBool::new(false),
            round_trips: AtomicU64::new(0),
            served: AtomicU64::new(0),
        });
        handle.spawn(Driver::new(queue.clone(), addrs, config).run());
        Ok(OracleClient {
            inner: Arc::new(Inner { queue }),
        })
    }

    /// Rounds answered with timestamps and the timestamps they carried, since the client was
    /// built (their ratio is the achieved batch size).
    pub fn stats(&self) -> ClientStats {
        let q = &self.inner.queue;
        ClientStats {
            round_trips: q.round_trips.load(Ordering::Relaxed),
            timestamps: q.served.load(Ordering::Relaxed),
        }
    }

    /// One fresh timestamp, larger than every timestamp any oracle client received before
    /// this call began.
    pub async fn get_timestamp(&self) -> Result<Timestamp, ClientError> {
        let queue = &self.inner.queue;
        let (round, index) = {
            let mut p = queue.lock();
            if p.gone {
                return Err(ClientError::Closed);
            }
            if p.count == MAX_COUNT {
                let full = std::mem::replace(&mut p.current, Round::new());
                p.full.push((full, MAX_COUNT));
                p.count = 0;
            }
            let index = p.count;
            p.count += 1;
            if index == 0 {
                queue.notify.notify_one();
            }
            (p.current.clone(), index)
        };
        // A `Notified` receives `notify_waiters` from its creation on, so the outcome
        // cannot be set unseen between the check and the wait.
        let done = round.done.notified();
        if round.outcome.get().is_none() {
            done.await;
        }
        match round.outcome.get() {
            Some(Ok(first)) => Ok(Timestamp(first + u64::from(index))),
            Some(Err(e)) => Err(e.clone()),
            None => Err(ClientError::Closed),
        }
    }
}

#[async_trait]
impl TimestampSource for OracleClient {
    async fn get_timestamp(&self) -> Result<Timestamp, TimestampError> {
        Ok(OracleClient::get_timestamp(self).await?)
    }
}
