//! The trace of a run: every store call (process, kind, key, outcome) and every timestamp
//! drawn, in order, folded into a hash (FNV-1a, 64 bits: stable across builds and
//! platforms); kept as text lines too when a file was asked for. Two runs of a seed give
//! the same hash, or the simulation is not deterministic.

use std::sync::{Arc, Mutex};

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

#[derive(Debug)]
struct State {
    hash: u64,
    events: u64,
    lines: Option<Vec<String>>,
    /// When the trace began (lines start with the simulated milliseconds since).
    began: tokio::time::Instant,
}

/// A shared trace recorder.
#[derive(Clone, Debug)]
pub struct Trace(Arc<Mutex<State>>);

impl Trace {
    /// A trace; `keep_lines` keeps every event as text (for `--trace FILE`), each line
    /// starting with the simulated milliseconds since the trace began.
    pub fn new(keep_lines: bool) -> Self {
        Trace(Arc::new(Mutex::new(State {
            hash: FNV_OFFSET,
            events: 0,
            lines: keep_lines.then(Vec::new),
            began: tokio::time::Instant::now(),
        })))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether text lines are kept (callers skip formatting otherwise).
    pub fn keeps_lines(&self) -> bool {
        self.state().lines.is_some()
    }

    /// Records one event: its parts are hashed in order; `line` builds its text only when
    /// lines are kept.
    pub fn record(&self, parts: &[&[u8]], line: impl FnOnce() -> String) {
        let mut s = self.state();
        let mut h = s.hash;
        for part in parts {
            for b in (part.len() as u32).to_le_bytes().iter().chain(part.iter()) {
                h ^= u64::from(*b);
                h = h.wrapping_mul(FNV_PRIME);
            }
        }
        s.hash = h;
        s.events += 1;
        let ms = s.began.elapsed().as_millis();
        if let Some(lines) = s.lines.as_mut() {
            lines.push(format!("{ms:>7} {}", line()));
        }
    }

    /// The hash of everything recorded so far.
    pub fn hash(&self) -> u64 {
        self.state().hash
    }

    /// How many events were recorded.
    pub fn events(&self) -> u64 {
        self.state().events
    }

    /// The kept lines (empty unless kept).
    pub fn take_lines(&self) -> Vec<String> {
        self.state().lines.take().unwrap_or_default()
    }
}
