//! The connection task of an [`OracleClient`](super::OracleClient) ([`Driver`]): rounds in
//! flight on one connection, replies matched in order, failover (the linearizability
//! argument is in the parent module's documentation).

use super::queue::{Queue, Serving};
use super::{ClientConfig, ClientError, MAX_IN_FLIGHT};
use crate::proto::{self, GetRequest, Reply};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tracing::debug;

pub(super) struct Conn {
    pub(super) stream: TcpStream,
    pub(super) buf: Vec<u8>,
    pub(super) out: Vec<u8>,
}

#[derive(Debug)]
pub(super) enum RpcError {
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
    pub(super) async fn connect(addr: &str) -> Result<Conn, RpcError> {
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
    pub(super) async fn read_reply(&mut self) -> Result<Reply, RpcError> {
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

pub(super) fn reply_id(reply: &Reply) -> u64 {
    match reply {
        Reply::Timestamps { req_id, .. }
        | Reply::NotLeader { req_id, .. }
        | Reply::Error { req_id, .. } => *req_id,
    }
}

/// A round taken from the queue and not yet answered.
pub(super) struct Flight {
    pub(super) serving: Serving,
    pub(super) count: u32,
    /// When the round was taken (and first sent): its `request_timeout` runs from here.
    pub(super) taken: Instant,
    /// Its request on the current connection (`req_id`, when written: its `rpc_timeout`
    /// runs from there); `None` until (re)sent.
    pub(super) sent: Option<(u64, Instant)>,
}

/// The connection task: takes pending requests as rounds, keeps up to [`MAX_IN_FLIGHT`] of
/// them in flight on one connection, hands each reply's timestamps out in queue order, and
/// on any failure resends every unanswered round (in order) to the next address, until each
/// round's request timeout.
pub(super) struct Driver {
    pub(super) queue: Arc<Queue>,
    pub(super) addrs: Vec<String>,
    pub(super) config: ClientConfig,
    pub(super) conn: Option<Conn>,
    /// The address in use (modulo the number of addresses).
    pub(super) idx: usize,
    pub(super) req_id: u64,
    /// Unanswered rounds, oldest first; the ones sent on `conn` come before the others.
    pub(super) flights: VecDeque<Flight>,
    /// Failures since the last answered round (or since idle); a whole cycle of addresses
    /// failing in a row pauses `retry_backoff`.
    pub(super) failures_in_row: usize,
    /// The last failure, reported to rounds that time out.
    pub(super) last: String,
    /// Recent round size, decaying: a lone requester brings it down to 1.
    pub(super) recent: u32,
    /// Connections refused in a row (any other outcome resets it), for
    /// [`ClientConfig::give_up_refused`].
    pub(super) refused_in_row: usize,
}

impl Drop for Driver {
    fn drop(&mut self) {
        // Rounds in flight complete through their `Serving` guards.
        self.queue.shut();
    }
}

impl Driver {
    pub(super) fn new(queue: Arc<Queue>, addrs: Vec<String>, config: ClientConfig) -> Driver {
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
            refused_in_row: 0,
        }
    }

    pub(super) async fn run(mut self) {
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
    pub(super) async fn take_rounds(&mut self) {
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
                self.refused_in_row = 0;
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
    pub(super) async fn gather(&self) {
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
    pub(super) async fn send_all(&mut self) {
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
                match self.connect().await {
                    Ok(()) => self.refused_in_row = 0,
                    Err((e, refused)) => {
                        self.refused_in_row = if refused { self.refused_in_row + 1 } else { 0 };
                        self.fail(e, None);
                        self.give_up_if_refused();
                        continue;
                    }
                }
            }
            match self.write_unsent().await {
                Ok(()) => return,
                Err(e) => self.fail(e, None),
            }
        }
    }

    /// Fails every round with [`ClientError::Refused`] once every address refused the
    /// connection [`ClientConfig::give_up_refused`] times in a row.
    pub(super) fn give_up_if_refused(&mut self) {
        let Some(rounds) = self.config.give_up_refused else {
            return;
        };
        if self.refused_in_row < self.addrs.len() * rounds.max(1) as usize {
            return;
        }
        for f in self.flights.drain(..) {
            f.serving.finish(Err(ClientError::Refused {
                rounds: rounds.max(1),
                last: self.last.clone(),
            }));
        }
        self.refused_in_row = 0;
        self.failures_in_row = 0;
    }

    /// Fails every round whose request timeout ran out, with the last failure seen.
    pub(super) fn expire(&mut self) {
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

    pub(super) fn addr(&self) -> &str {
        &self.addrs[self.idx % self.addrs.len()]
    }

    /// Connects to the current address, handshake included.
    /// The error says why, and whether the address refused the connection.
    pub(super) async fn connect(&mut self) -> Result<(), (String, bool)> {
        let addr = self.addr();
        match tokio::time::timeout(self.config.connect_timeout, Conn::connect(addr)).await {
            Ok(Ok(c)) => {
                self.conn = Some(c);
                Ok(())
            }
            Ok(Err(e)) => {
                let refused = matches!(&e, RpcError::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused);
                Err((e.to_string(), refused))
            }
            Err(_) => Err((String::from("connect timed out"), false)),
        }
    }

    /// Writes the requests of the rounds not yet sent on the connection, in one write.
    pub(super) async fn write_unsent(&mut self) -> Result<(), String> {
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
    pub(super) async fn await_event(&mut self) {
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
    pub(super) fn on_reply(&mut self, reply: Reply) {
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
    pub(super) fn answer(&mut self, first: u64) {
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
    pub(super) fn fail(&mut self, what: String, next: Option<usize>) {
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
