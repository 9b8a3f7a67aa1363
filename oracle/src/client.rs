// Longer than ~500 lines on purpose: the batching queue (rounds), the pipelining driver
// and its connection carry one linearizability argument (below) that depends on how the
// three interact: when a request joins a round, when its frame is written, how replies
// are matched in order and unanswered rounds resent. Kept together so that argument can be
// checked against the code in one place. (The config/stats/error types and the wire
// `Conn` could move out, but that alone would not bring it under 500.)
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
//!   request in it, pipelined or not (`ARCHITECTURE.md`, "Timestamp oracle");
//! - replies are matched to rounds strictly in order by `req_id`; anything else drops the
//!   connection, and every unanswered round is sent again, as a new request, elsewhere.

use crate::proto::{self, GetRequest, Reply, MAX_COUNT};
use async_trait::async_trait;
use percolator::{Timestamp, TimestampError, TimestampSource};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tracing::debug;

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
/// [`MAX_COUNT`] requests. `gone` once the connection task has ended: no round would be sent.
struct Pending {
    full: Vec<(Arc<Round>, u32)>,
    current: Arc<Round>,
    count: u32,
    gone: bool,
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
    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn pending_count(&self) -> u32 {
        let p = self.lock();
        p.count + p.full.len() as u32 * MAX_COUNT
    }

    /// Takes the oldest pending round and its request count, if any request is pending.
    fn take_round(&self) -> Option<(Arc<Round>, u32)> {
        let mut p = self.lock();
        if !p.full.is_empty() {
            Some(p.full.remove(0))
        } else if p.count > 0 {
            let count = std::mem::replace(&mut p.count, 0);
            Some((std::mem::replace(&mut p.current, Round::new()), count))
        } else {
            None
        }
    }

    /// The connection task ended: fails every pending round, and every later request.
    fn shut(&self) {
        let mut p = self.lock();
        p.gone = true;
        let mut rounds: Vec<Arc<Round>> = p.full.drain(..).map(|(r, _)| r).collect();
        rounds.push(p.current.clone());
        drop(p);
        for round in rounds {
            drop(Serving(round));
        }
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

    /// The next reply on the connection. Cancel-safe: bytes read stay in `buf`.
    async fn read_reply(&mut self) -> Result<Reply, RpcError> {
        let mut chunk = [0u8; 1024];
        loop {
            if let Some((reply, used)) =
                proto::decode_reply(&self.buf).map_err(|e| RpcError::Protocol(e.to_string()))?
            {
                self.buf.drain(..used);
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

fn reply_id(reply: &Reply) -> u64 {
    match reply {
        Reply::Timestamps { req_id, .. }
        | Reply::NotLeader { req_id, .. }
        | Reply::Error { req_id, .. } => *req_id,
    }
}

/// A round taken from the queue and not yet answered.
struct Flight {
    serving: Serving,
    count: u32,
    /// When the round was taken (and first sent): its `request_timeout` runs from here.
    taken: Instant,
    /// Its request on the current connection (`req_id`, when written: its `rpc_timeout`
    /// runs from there); `None` until (re)sent.
    sent: Option<(u64, Instant)>,
}

/// The connection task: takes pending requests as rounds, keeps up to [`MAX_IN_FLIGHT`] of
/// them in flight on one connection, hands each reply's timestamps out in queue order, and
/// on any failure resends every unanswered round (in order) to the next address, until each
/// round's request timeout.
struct Driver {
    queue: Arc<Queue>,
    addrs: Vec<String>,
    config: ClientConfig,
    conn: Option<Conn>,
    /// The address in use (modulo the number of addresses).
    idx: usize,
    req_id: u64,
    /// Unanswered rounds, oldest first; the ones sent on `conn` come before the others.
    flights: VecDeque<Flight>,
    /// Failures since the last answered round (or since idle); a whole cycle of addresses
    /// failing in a row pauses `retry_backoff`.
    failures_in_row: usize,
    /// The last failure, reported to rounds that time out.
    last: String,
    /// Recent round size, decaying: a lone requester brings it down to 1.
    recent: u32,
}

impl Drop for Driver {
    fn drop(&mut self) {
        // Rounds in flight complete through their `Serving` guards.
        self.queue.shut();
    }
}

impl Driver {
    fn new(queue: Arc<Queue>, addrs: Vec<String>, config: ClientConfig) -> Driver {
        Driver {
            queue,
            addrs,
            config,
            conn: None,
            idx: 0,
            req_id: 0,
            flights: VecDeque::with_capacity(MAX_IN_FLIGHT),
            failures_in_row: 0,
            last: String::from("none"),
            recent: 0,
        }
    }

    async fn run(mut self) {
        loop {
            self.take_rounds().await;
            if self.flights.is_empty() {
                if self.queue.closed.load(Ordering::Acquire) {
                    return;
                }
                self.queue.notify.notified().await;
                continue;
            }
            self.send_all().await;
            if !self.flights.is_empty() {
                self.await_event().await;
            }
        }
    }

    /// Moves pending requests into new rounds while fewer than [`MAX_IN_FLIGHT`] are in
    /// flight.
    async fn take_rounds(&mut self) {
        if self.flights.len() >= MAX_IN_FLIGHT {
            return;
        }
        self.gather().await;
        while self.flights.len() < MAX_IN_FLIGHT {
            let Some((round, count)) = self.queue.take_round() else {
                return;
            };
            if self.flights.is_empty() {
                // A fresh start: earlier failures belong to rounds already finished.
                self.failures_in_row = 0;
                self.last = String::from("none");
            }
            // Halves toward the current round size, never below it: after a burst, a lone
            // requester stops paying for `gather`'s yields within a few rounds.
            self.recent = count.max(self.recent / 2 + count / 2);
            self.flights.push_back(Flight {
                serving: Serving(round),
                count,
                taken: Instant::now(),
                sent: None,
            });
        }
    }

    /// Under concurrency, lets tasks that are already runnable (typically the requesters
    /// just handed their timestamps) queue their next request first, so it joins the next
    /// round instead of straggling into a tiny extra one. A lone requester does not pay for
    /// the yield.
    async fn gather(&self) {
        if self.recent <= 1 {
            return;
        }
        // Yield while more requests keep arriving (a large wake-up spills into the runtime's
        // global queue and takes more than one turn to drain).
        let mut seen = self.queue.pending_count();
        for _ in 0..4 {
            tokio::task::yield_now().await;
            let now = self.queue.pending_count();
            if now == seen || now >= self.recent {
                break;
            }
            seen = now;
        }
    }

    /// Writes every round not yet sent on the connection, connecting first if needed. On a
    /// failure moves on through the addresses; returns once every round is sent or has
    /// timed out.
    async fn send_all(&mut self) {
        loop {
            if self.conn.is_none() {
                self.expire();
                if self.flights.is_empty() {
                    return;
                }
                if self.failures_in_row >= self.addrs.len() {
                    self.failures_in_row = 0;
                    tokio::time::sleep(self.config.retry_backoff).await;
                }
                if let Err(e) = self.connect().await {
                    self.fail(e, None);
                    continue;
                }
            }
            match self.write_unsent().await {
                Ok(()) => return,
                Err(e) => self.fail(e, None),
            }
        }
    }

    /// Fails every round whose request timeout ran out, with the last failure seen.
    fn expire(&mut self) {
        let timeout = self.config.request_timeout;
        let last = &self.last;
        self.flights.retain(|f| {
            if f.taken.elapsed() < timeout {
                return true;
            }
            f.serving.finish(Err(ClientError::Timeout {
                timeout,
                last: last.clone(),
            }));
            false
        });
    }

    fn addr(&self) -> &str {
        &self.addrs[self.idx % self.addrs.len()]
    }

    /// Connects to the current address, handshake included.
    async fn connect(&mut self) -> Result<(), String> {
        let addr = self.addr();
        match tokio::time::timeout(self.config.connect_timeout, Conn::connect(addr)).await {
            Ok(Ok(c)) => {
                self.conn = Some(c);
                Ok(())
            }
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(String::from("connect timed out")),
        }
    }

    /// Writes the requests of the rounds not yet sent on the connection, in one write.
    async fn write_unsent(&mut self) -> Result<(), String> {
        let Some(conn) = self.conn.as_mut() else {
            return Err(String::from("not connected"));
        };
        conn.out.clear();
        let now = Instant::now();
        for f in self.flights.iter_mut().filter(|f| f.sent.is_none()) {
            self.req_id += 1;
            f.sent = Some((self.req_id, now));
            let req = GetRequest {
                req_id: self.req_id,
                count: f.count,
            };
            proto::encode_request(req, &mut conn.out);
        }
        if conn.out.is_empty() {
            return Ok(());
        }
        match tokio::time::timeout(self.config.rpc_timeout, conn.stream.write_all(&conn.out)).await
        {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("write blocked for {:?}", self.config.rpc_timeout)),
        }
    }

    /// Waits for the reply to the oldest round (dropping the connection past its
    /// `rpc_timeout`) or, while there is room for another round, for new requests.
    async fn await_event(&mut self) {
        let Some((_, sent_at)) = self.flights.front().and_then(|f| f.sent) else {
            return;
        };
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        let deadline = tokio::time::Instant::from_std(sent_at + self.config.rpc_timeout);
        let room = self.flights.len() < MAX_IN_FLIGHT;
        let read = tokio::select! {
            read = tokio::time::timeout_at(deadline, conn.read_reply()) => read,
            _ = self.queue.notify.notified(), if room => return,
        };
        match read {
            Ok(Ok(reply)) => self.on_reply(reply),
            Ok(Err(e)) => self.fail(e.to_string(), None),
            Err(_) => {
                let what = format!("no reply within {:?}", self.config.rpc_timeout);
                self.fail(what, None);
            }
        }
    }

    /// Hands a reply to the oldest round; anything but that round's timestamps drops the
    /// connection.
    fn on_reply(&mut self, reply: Reply) {
        let Some(front) = self.flights.front() else {
            return self.fail(
                String::from("protocol error: reply with nothing in flight"),
                None,
            );
        };
        let (id, count) = (reply_id(&reply), front.count);
        if front.sent.map(|(sent_id, _)| sent_id) != Some(id) {
            let what = format!("protocol error: unexpected reply to request {id}");
            return self.fail(what, None);
        }
        match reply {
            Reply::Timestamps {
                first, count: n, ..
            } if n == count && first.checked_add(u64::from(n)).is_some() => {
                self.answer(first);
            }
            Reply::Timestamps {
                first, count: n, ..
            } => {
                let what = format!("asked for {count} timestamps, got {n} from {first}");
                self.fail(what, None);
            }
            Reply::NotLeader { hint, .. } => {
                let next = self
                    .addrs
                    .iter()
                    .position(|a| *a == hint)
                    .filter(|&i| !hint.is_empty() && i != self.idx % self.addrs.len());
                self.fail(String::from("not leader"), next);
            }
            Reply::Error { message, .. } => self.fail(message, None),
        }
    }

    /// The oldest round got its timestamps from `first` on.
    fn answer(&mut self, first: u64) {
        let Some(f) = self.flights.pop_front() else {
            return;
        };
        f.serving.finish(Ok(first));
        self.queue.round_trips.fetch_add(1, Ordering::Relaxed);
        self.queue
            .served
            .fetch_add(u64::from(f.count), Ordering::Relaxed);
        self.failures_in_row = 0;
    }

    /// A failure at the current address: drops the connection, so every unanswered round is
    /// resent, and moves on to address `next` (default: the following one).
    fn fail(&mut self, what: String, next: Option<usize>) {
        let addr = self.addr().to_string();
        debug!(%addr, error = %what, in_flight = self.flights.len(), "oracle request failed");
        self.last = format!("{addr}: {what}");
        self.conn = None;
        for f in &mut self.flights {
            f.sent = None;
        }
        self.failures_in_row += 1;
        match next {
            Some(i) => self.idx = i,
            None => self.idx += 1,
        }
    }
}
