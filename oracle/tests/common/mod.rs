//! Helpers shared by the oracle tests: recorded calls and the checks run on them, and the
//! real `oracle` binary as a child process.
#![allow(dead_code)]

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One successful `get_timestamp`: who asked, when it began and returned, what it got.
#[derive(Clone, Copy, Debug)]
pub struct Call {
    pub caller: usize,
    pub start: Instant,
    pub end: Instant,
    pub ts: u64,
}

/// A shared log of calls.
#[derive(Clone, Default)]
pub struct Log(pub Arc<Mutex<Vec<Call>>>);

impl Log {
    pub fn push(&self, calls: Vec<Call>) {
        self.0.lock().unwrap().extend(calls);
    }
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

/// The real `oracle serve` binary, started and ready (it printed its address).
pub struct OracleProcess {
    pub child: Child,
    pub addr: String,
}

impl OracleProcess {
    pub fn start(store: &str, listen: &str, extra: &[&str]) -> OracleProcess {
        let mut child = Command::new(env!("CARGO_BIN_EXE_oracle"))
            .args(["serve", "--store", store, "--listen", listen])
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawning oracle serve");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("reading the readiness line");
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        OracleProcess { child, addr }
    }

    /// SIGKILL, and reap.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for OracleProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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
) -> (oracle::proto::Reply, Instant, Instant) {
    let start = Instant::now();
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    // Handshake and request in one write: they wait in the socket even if the server is
    // stopped.
    let mut out = oracle::proto::hello(oracle::proto::VERSION).to_vec();
    oracle::proto::encode_request(
        oracle::proto::GetRequest {
            req_id: 1,
            count: 1,
        },
        &mut out,
    );
    s.write_all(&out).await.unwrap();
    let mut hello = [0u8; oracle::proto::HELLO_LEN];
    s.read_exact(&mut hello).await.unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 256];
    loop {
        if let Some((reply, _)) = oracle::proto::decode_reply(&buf).unwrap() {
            return (reply, start, Instant::now());
        }
        let n = s.read(&mut chunk).await.unwrap();
        assert!(n > 0, "connection closed without a reply");
        buf.extend_from_slice(&chunk[..n]);
    }
}
