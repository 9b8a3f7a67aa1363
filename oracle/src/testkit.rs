//! Helpers for tests of the oracle (feature `testkit`), used by this package's tests and by
//! `oracle-server`'s: recorded calls and the checks run on them, a concurrent load of
//! requesters, raw protocol requests. They panic on failure, as test code does.

use percolator::TimestampSource;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One successful `get_timestamp`: who asked, when it began and returned, what it got.
#[derive(Clone, Copy, Debug)]
pub struct Call {
    /// Which requester asked.
    pub caller: usize,
    /// When the call began.
    pub start: Instant,
    /// When it returned.
    pub end: Instant,
    /// The timestamp it got.
    pub ts: u64,
}

/// A shared log of calls.
#[derive(Clone, Default)]
pub struct Log(pub Arc<Mutex<Vec<Call>>>);

impl Log {
    /// Appends the calls of one requester.
    pub fn push(&self, calls: Vec<Call>) {
        self.0.lock().unwrap().extend(calls);
    }
    /// Takes every call recorded so far.
    pub fn take(&self) -> Vec<Call> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// Every timestamp distinct; strictly increasing per caller (in call order); and
/// linearizable: a call that began after another returned got a larger timestamp.
pub fn check_all(calls: &[Call]) {
    assert!(!calls.is_empty(), "no calls recorded");
    let mut seen = HashSet::with_capacity(calls.len());
    for c in calls {
        assert!(seen.insert(c.ts), "timestamp {} handed out twice", c.ts);
    }
    let mut by_caller: Vec<&Call> = calls.iter().collect();
    by_caller.sort_by_key(|c| (c.caller, c.start));
    for w in by_caller.windows(2) {
        if w[0].caller == w[1].caller {
            assert!(
                w[1].ts > w[0].ts,
                "caller {} got {} after {}",
                w[0].caller,
                w[1].ts,
                w[0].ts
            );
        }
    }
    check_linearizable(calls);
}

/// For every pair with `a.end < b.start`: `a.ts < b.ts`.
pub fn check_linearizable(calls: &[Call]) {
    let mut by_end: Vec<&Call> = calls.iter().collect();
    by_end.sort_by_key(|c| c.end);
    let mut by_start: Vec<&Call> = calls.iter().collect();
    by_start.sort_by_key(|c| c.start);
    let mut i = 0;
    let mut max_done: Option<&Call> = None;
    for b in by_start {
        while i < by_end.len() && by_end[i].end < b.start {
            if max_done.is_none_or(|m| by_end[i].ts > m.ts) {
                max_done = Some(by_end[i]);
            }
            i += 1;
        }
        if let Some(a) = max_done {
            assert!(
                b.ts > a.ts,
                "not linearizable: {} returned by a call that began after a call returned {} \
                 (callers {} and {})",
                b.ts,
                a.ts,
                b.caller,
                a.caller
            );
        }
    }
}

/// A port that was free a moment ago.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Polls `cond` every 5 ms; panics after `limit` (a hang guard, not a timing assertion).
pub async fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "gave up waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// One raw request on a fresh connection, recorded as a call if it got timestamps.
pub async fn raw_request(
    addr: impl tokio::net::ToSocketAddrs,
) -> (crate::proto::Reply, Instant, Instant) {
    let start = Instant::now();
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    // Handshake and request in one write: they wait in the socket even if the server is
    // stopped.
    let mut out = crate::proto::hello(crate::proto::VERSION).to_vec();
    crate::proto::encode_request(
        crate::proto::GetRequest {
            req_id: 1,
            count: 1,
        },
        &mut out,
    );
    s.write_all(&out).await.unwrap();
    let mut hello = [0u8; crate::proto::HELLO_LEN];
    s.read_exact(&mut hello).await.unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 256];
    loop {
        if let Some((reply, _)) = crate::proto::decode_reply(&buf).unwrap() {
            return (reply, start, Instant::now());
        }
        let n = s.read(&mut chunk).await.unwrap();
        assert!(n > 0, "connection closed without a reply");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The call a raw request made, if it got timestamps (a refusal such as "not leader" is no
/// call): for adding [`raw_request`]s to the calls of a [`Load`] before checking them.
pub fn raw_call(
    reply: &crate::proto::Reply,
    start: Instant,
    end: Instant,
    caller: usize,
) -> Option<Call> {
    match reply {
        crate::proto::Reply::Timestamps { first, .. } => Some(Call {
            caller,
            start,
            end,
            ts: *first,
        }),
        _ => None,
    }
}

/// What a [`Load`] requester does when a call fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnError {
    /// Panic: every call must succeed (failover is the client's job).
    Panic,
    /// Ask again (servers are expected to be down for a while); only successes are recorded.
    Retry,
}

/// Concurrent requesters asking for timestamps in a loop, each recording its successful
/// calls, until [`Load::finish`] (or, with a call budget, until each has made its calls).
pub struct Load {
    log: Log,
    done: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    /// Starts `tasks_per_client` requesters on each of `clients` (caller numbers
    /// `client * tasks_per_client + task`), each asking until stopped, or `calls` times if
    /// given. Clients are taken as [`TimestampSource`]s, the way transactions use them (an
    /// [`OracleClient`](crate::OracleClient) is one). Must be called inside a tokio runtime.
    pub fn start(
        clients: &[Arc<dyn TimestampSource>],
        tasks_per_client: usize,
        calls: Option<usize>,
        on_error: OnError,
    ) -> Load {
        let log = Log::default();
        let done = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for (c, client) in clients.iter().enumerate() {
            for t in 0..tasks_per_client {
                let (client, log, done, stop) =
                    (client.clone(), log.clone(), done.clone(), stop.clone());
                let caller = c * tasks_per_client + t;
                tasks.push(tokio::spawn(async move {
                    let mut recorded = Vec::with_capacity(calls.unwrap_or(0));
                    while !stop.load(Ordering::Relaxed) && calls.is_none_or(|n| recorded.len() < n)
                    {
                        let start = Instant::now();
                        match client.get_timestamp().await {
                            Ok(ts) => {
                                recorded.push(Call {
                                    caller,
                                    start,
                                    end: Instant::now(),
                                    ts: ts.0,
                                });
                                done.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) if on_error == OnError::Panic => {
                                panic!("caller {caller}: get_timestamp failed: {e}")
                            }
                            Err(_) => {}
                        }
                    }
                    log.push(recorded);
                }));
            }
        }
        Load {
            log,
            done,
            stop,
            tasks,
        }
    }

    /// Successful calls so far.
    pub fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    /// Waits until `n` more calls have succeeded; panics after `guard` (a hang guard).
    pub async fn progress(&self, n: u64, guard: Duration) {
        let target = self.done() + n;
        wait_until("clients to make progress", guard, || self.done() >= target).await;
    }

    /// Stops the requesters (each finishes its call in progress), and returns every call.
    pub async fn finish(self) -> Vec<Call> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            if let Err(e) = t.await {
                std::panic::resume_unwind(e.into_panic());
            }
        }
        self.log.take()
    }

    /// Stops the load, adds each of `raw` (single requests made with [`raw_request`] beside
    /// the load; a reply that is not timestamps adds nothing) as its own caller, numbered from
    /// 10,000, and checks the whole history with [`check_all`].
    pub async fn finish_and_check(self, raw: &[&(crate::proto::Reply, Instant, Instant)]) {
        let mut calls = self.finish().await;
        for (i, (reply, start, end)) in raw.iter().enumerate() {
            calls.extend(raw_call(reply, *start, *end, 10_000 + i));
        }
        check_all(&calls);
    }
}
