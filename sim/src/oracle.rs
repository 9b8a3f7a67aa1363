//! The simulated timestamp oracle: one leader among the hosts serves strictly increasing
//! timestamps on its own (skewed) clock from a persisted window, as `oracle serve` does
//! (`oracle::design`): a leader never serves above the window end it persisted, and a new
//! leader starts above that end, so a takeover by a host whose clock is behind still keeps
//! timestamps strictly increasing (invariant T1). A takeover makes the oracle unavailable
//! for a while: requests wait for the new leader (as `OracleClient` retries), and a request
//! waiting longer than the client's timeout fails.

use crate::clock::HostClock;
use crate::faults::Faults;
use crate::store::Life;
use crate::trace::Trace;
use async_trait::async_trait;
use percolator::ts::{Timestamp, TimestampError, TimestampSource};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// How far ahead of what it serves a leader persists its window.
const WINDOW: u64 = 3_000;
/// How long a request waits for a leader before it fails (`OracleClient`'s timeout).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug)]
struct State {
    leader: usize,
    last: u64,
    window_end_ms: u64,
    unavailable_until: Option<Instant>,
    takeovers: u64,
}

/// The oracle shared by every process.
#[derive(Debug)]
pub struct SimOracle {
    hosts: Vec<HostClock>,
    faults: Arc<Faults>,
    trace: Trace,
    state: Mutex<State>,
}

impl SimOracle {
    /// An oracle led by host 0, served on `hosts`' clocks.
    pub fn new(hosts: Vec<HostClock>, faults: Arc<Faults>, trace: Trace) -> Arc<Self> {
        Arc::new(SimOracle {
            hosts,
            faults,
            trace,
            state: Mutex::new(State {
                leader: 0,
                last: 0,
                window_end_ms: 0,
                unavailable_until: None,
                takeovers: 0,
            }),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Host `to` takes over after `gap` without a leader.
    pub fn takeover(&self, to: usize, gap: Duration) {
        let mut s = self.state();
        s.leader = to % self.hosts.len();
        // The new leader reads the persisted window and starts above it.
        s.last = s.last.max(Timestamp::compose(s.window_end_ms, 0).0);
        s.unavailable_until = Some(Instant::now() + gap);
        s.takeovers += 1;
        self.faults.count();
    }

    /// Takeovers so far.
    pub fn takeovers(&self) -> u64 {
        self.state().takeovers
    }

    fn serve(&self) -> Option<Timestamp> {
        let mut s = self.state();
        if s.unavailable_until.is_some_and(|u| Instant::now() < u) {
            return None;
        }
        let now_ms = self.hosts[s.leader].read_ms();
        let ts = (s.last + 1).max(Timestamp::compose(now_ms, 0).0);
        let ts_ms = Timestamp(ts).physical_ms();
        if ts_ms >= s.window_end_ms {
            s.window_end_ms = ts_ms + WINDOW;
        }
        s.last = ts;
        Some(Timestamp(ts))
    }

    fn unavailable_for(&self) -> Option<Duration> {
        let s = self.state();
        s.unavailable_until
            .and_then(|u| u.checked_duration_since(Instant::now()))
    }
}

/// One incarnation's oracle client.
#[derive(Debug)]
pub struct ProcessOracle {
    oracle: Arc<SimOracle>,
    life: Arc<Life>,
}

impl ProcessOracle {
    /// A client of `oracle` for incarnation `life`.
    pub fn new(oracle: Arc<SimOracle>, life: Arc<Life>) -> Self {
        ProcessOracle { oracle, life }
    }
}

#[async_trait]
impl TimestampSource for ProcessOracle {
    async fn get_timestamp(&self) -> Result<Timestamp, TimestampError> {
        self.life.stop_if_dead().await;
        let o = &self.oracle;
        let began = Instant::now();
        if o.faults.chaos() && o.faults.rng.chance(0.3) {
            tokio::time::sleep(o.faults.rng.millis(0, 2)).await;
        }
        loop {
            self.life.stop_if_dead().await;
            if let Some(ts) = o.serve() {
                let p = [self.life.process as u8];
                o.trace.record(&[&p, b"ts", &ts.0.to_le_bytes()], || {
                    format!("p{} ts {}", self.life.process, ts.0)
                });
                return Ok(ts);
            }
            let wait = o.unavailable_for().unwrap_or(Duration::from_millis(1));
            if began.elapsed() + wait > REQUEST_TIMEOUT {
                tokio::time::sleep(REQUEST_TIMEOUT.saturating_sub(began.elapsed())).await;
                return Err(TimestampError::Timeout(REQUEST_TIMEOUT));
            }
            tokio::time::sleep(wait).await;
        }
    }
}
