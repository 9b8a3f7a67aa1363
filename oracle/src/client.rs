//! [`OracleClient`]: one connection per process, batching concurrent requests into one round
//! trip, failing over across oracle addresses.

use crate::proto::{self, GetRequest, Reply, MAX_COUNT};
use async_trait::async_trait;
use percolator::{Timestamp, TimestampError, TimestampSource};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tracing::debug;

/// Timeouts and retry pacing of an [`OracleClient`].
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// Limit for one round trip; past it the connection is dropped and the next address tried.
    pub rpc_timeout: Duration,
    /// Limit for connecting and the handshake.
    pub connect_timeout: Duration,
    /// Limit for one `get_timestamp` call, failovers included.
    pub request_timeout: Duration,
    /// Pause after every address refused or failed once in a row.
    pub retry_backoff: Duration,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            rpc_timeout: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_secs(10),
            retry_backoff: Duration::from_millis(50),
        }
    }
}

/// Counters of an [`OracleClient`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Successful round trips.
    pub round_trips: u64,
    /// Timestamps they carried.
    pub timestamps: u64,
}

/// Why an [`OracleClient`] call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
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

/// The requests of one round trip. Each request takes the next index; the connection task
/// sets the outcome (the first timestamp of the range) once, then wakes every requester.
struct Round {
    outcome: OnceLock<Result<u64, ClientError>>,
    done: Notify,
}

impl Round {
    fn new() -> Arc<Round> {
        Arc::new(Round {
            outcome: OnceLock::new(),
            done: Notify::new(),
        })
    }
}

/// Requests not yet sent: `current` collects new ones; `full` holds rounds that reached
/// [`MAX_COUNT`] requests.
struct Pending {
    full: Vec<(Arc<Round>, u32)>,
    current: Arc<Round>,
    count: u32,
}

struct Queue {
    pending: Mutex<Pending>,
    notify: Notify,
    closed: AtomicBool,
    round_trips: AtomicU64,
    served: AtomicU64,
}

struct Inner {
    queue: Arc<Queue>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.queue.closed.store(true, Ordering::Release);
        self.queue.notify.notify_one();
    }
}

impl Queue {
    fn pending_count(&self) -> u32 {
        let p = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        p.count + p.full.len() as u32 * MAX_COUNT
    }
}

/// Completes a round when dropped, so no requester waits forever.
struct Serving(Arc<Round>);

impl Serving {
    fn finish(&self, outcome: Result<u64, ClientError>) {
        let _ = self.0.outcome.set(outcome);
        self.0.done.notify_waiters();
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        if self.0.outcome.get().is_none() {
            self.finish(Err(ClientError::Closed));
        }
    }
}

/// A client of the oracle service. Clone it freely: clones share one connection, and every
/// request pending when a round trip starts is served by that one round trip (a request for
/// N timestamps, answered with a range). Nothing is served from a cached range, so every
/// timestamp is fresh from the leader (linearizable).
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
            }),
            notify: Notify::new(),
            closed: AtomicBool::new(false),
            round_trips: AtomicU64::new(0),
            served: AtomicU64::new(0),
        });
        handle.spawn(drive(queue.clone(), addrs, config));
        Ok(OracleClient {
            inner: Arc::new(Inner { queue }),
        })
    }

    /// Successful round trips and the timestamps they carried, since the client was built
    /// (their ratio is the achieved batch size).
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
            let mut p = queue.pending.lock().unwrap_or_else(|p| p.into_inner());
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

struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    out: Vec<u8>,
}

#[derive(Debug)]
enum RpcError {
    Io(std::io::Error),
    Protocol(String),
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RpcError::Io(e) => write!(f, "{e}"),
            RpcError::Protocol(e) => write!(f, "protocol error: {e}"),
        }
    }
}

impl From<std::io::Error> for RpcError {
    fn from(e: std::io::Error) -> Self {
        RpcError::Io(e)
    }
}

impl Conn {
    async fn connect(addr: &str) -> Result<Conn, RpcError> {
        let mut stream = TcpStream::connect(addr).await?;
        let _ = stream.set_nodelay(true);
        stream.write_all(&proto::hello(proto::VERSION)).await?;
        let mut hello = [0u8; proto::HELLO_LEN];
        stream.read_exact(&mut hello).await?;
        let version = proto::parse_hello(&hello).map_err(|e| RpcError::Protocol(e.to_string()))?;
        if version != proto::VERSION {
            return Err(RpcError::Protocol(format!(
                "server speaks protocol version {version}, client {}",
                proto::VERSION
            )));
        }
        Ok(Conn {
            stream,
            buf: Vec::with_capacity(256),
            out: Vec::with_capacity(64),
        })
    }

    async fn round_trip(&mut self, req: GetRequest) -> Result<Reply, RpcError> {
        self.out.clear();
        proto::encode_request(req, &mut self.out);
        self.stream.write_all(&self.out).await?;
        let mut chunk = [0u8; 1024];
        loop {
            if let Some((reply, used)) =
                proto::decode_reply(&self.buf).map_err(|e| RpcError::Protocol(e.to_string()))?
            {
                self.buf.drain(..used);
                let id = match &reply {
                    Reply::Timestamps { req_id, .. }
                    | Reply::NotLeader { req_id, .. }
                    | Reply::Error { req_id, .. } => *req_id,
                };
                if id != req.req_id {
                    return Err(RpcError::Protocol(format!(
                        "reply to request {id}, expected {}",
                        req.req_id
                    )));
                }
                return Ok(reply);
            }
            let n = self.stream.read(&mut chunk).await?;
            if n == 0 {
                return Err(RpcError::Io(std::io::ErrorKind::UnexpectedEof.into()));
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// The connection task: takes every pending request, asks for that many timestamps in one
/// round trip, hands them out in queue order; retries across addresses until the request
/// timeout.
async fn drive(queue: Arc<Queue>, addrs: Vec<String>, config: ClientConfig) {
    let mut conn: Option<Conn> = None;
    let mut idx = 0usize;
    let mut req_id = 0u64;
    // Recent round size, decaying: a lone requester brings it down to 1.
    let mut recent = 0u32;
    loop {
        // Under concurrency, let tasks that are already runnable (typically the requesters
        // just handed their timestamps) queue their next request first, so it joins this
        // round trip instead of the next one. A lone requester does not pay for the yield.
        if recent > 1 {
            // Yield while more requests keep arriving (a large wake-up spills into the
            // runtime's global queue and takes more than one turn to drain).
            let mut seen = queue.pending_count();
            for _ in 0..4 {
                tokio::task::yield_now().await;
                let now = queue.pending_count();
                if now == seen || now >= recent {
                    break;
                }
                seen = now;
            }
        }
        let taken = {
            let mut p = queue.pending.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(full) = p.full.pop() {
                Some(full)
            } else if p.count > 0 {
                let count = std::mem::replace(&mut p.count, 0);
                Some((std::mem::replace(&mut p.current, Round::new()), count))
            } else {
                None
            }
        };
        let Some((round, count)) = taken else {
            if queue.closed.load(Ordering::Acquire) {
                return;
            }
            queue.notify.notified().await;
            continue;
        };
        recent = recent.max(count).max(recent / 2 + count / 2);
        let serving = Serving(round);
        let started = Instant::now();
        let mut failures_in_row = 0usize;
        let mut last = String::from("none");
        loop {
            if started.elapsed() >= config.request_timeout {
                serving.finish(Err(ClientError::Timeout {
                    timeout: config.request_timeout,
                    last: last.clone(),
                }));
                break;
            }
            if failures_in_row >= addrs.len() {
                failures_in_row = 0;
                tokio::time::sleep(config.retry_backoff).await;
            }
            let addr = &addrs[idx % addrs.len()];
            let c = match &mut conn {
                Some(c) => c,
                None => {
                    match tokio::time::timeout(config.connect_timeout, Conn::connect(addr)).await {
                        Ok(Ok(c)) => conn.insert(c),
                        Ok(Err(e)) => {
                            last = format!("{addr}: {e}");
                            debug!(%addr, error = %e, "oracle connect failed");
                            idx += 1;
                            failures_in_row += 1;
                            continue;
                        }
                        Err(_) => {
                            last = format!("{addr}: connect timed out");
                            idx += 1;
                            failures_in_row += 1;
                            continue;
                        }
                    }
                }
            };
            req_id += 1;
            let req = GetRequest { req_id, count };
            match tokio::time::timeout(config.rpc_timeout, c.round_trip(req)).await {
                Ok(Ok(Reply::Timestamps {
                    first, count: n, ..
                })) if n == count => {
                    serving.finish(Ok(first));
                    queue.round_trips.fetch_add(1, Ordering::Relaxed);
                    queue.served.fetch_add(u64::from(count), Ordering::Relaxed);
                    break;
                }
                Ok(Ok(Reply::Timestamps { count: n, .. })) => {
                    last = format!("{addr}: asked for {count} timestamps, got {n}");
                    conn = None;
                    idx += 1;
                    failures_in_row += 1;
                }
                Ok(Ok(Reply::NotLeader { hint, .. })) => {
                    last = format!("{addr}: not leader");
                    conn = None;
                    failures_in_row += 1;
                    match addrs.iter().position(|a| *a == hint) {
                        Some(i) if !hint.is_empty() && i != idx % addrs.len() => idx = i,
                        _ => idx += 1,
                    }
                }
                Ok(Ok(Reply::Error { message, .. })) => {
                    last = format!("{addr}: {message}");
                    failures_in_row += 1;
                    idx += 1;
                    conn = None;
                }
                Ok(Err(e)) => {
                    last = format!("{addr}: {e}");
                    debug!(%addr, error = %e, "oracle round trip failed");
                    conn = None;
                    idx += 1;
                    failures_in_row += 1;
                }
                Err(_) => {
                    last = format!("{addr}: no reply within {:?}", config.rpc_timeout);
                    conn = None;
                    idx += 1;
                    failures_in_row += 1;
                }
            }
        }
    }
}
