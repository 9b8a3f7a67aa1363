//! Simulated wall clocks: each host reads the run's simulated time (Tokio's paused clock)
//! from a fixed epoch, off by its own skew.

use tokio::time::Instant;

/// The wall-clock time (ms since the Unix epoch) at which every run starts: 30 s before a
/// UTC midnight (2023-11-15), so photon's event days change during the chaos and the
/// IdRegistry boundary is raised past the first day's clicks (`crate::photon`).
pub const SIM_EPOCH_MS: u64 = 1_700_006_370_000;

/// The simulated time of a run.
#[derive(Clone, Copy, Debug)]
pub struct SimTime {
    start: Instant,
}

impl SimTime {
    /// Simulated time starting now (call inside the run's runtime).
    pub fn start() -> Self {
        SimTime {
            start: Instant::now(),
        }
    }

    /// Milliseconds since the run started.
    pub fn elapsed_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// The run's true wall-clock time, in ms since the epoch.
    pub fn now_ms(&self) -> u64 {
        SIM_EPOCH_MS + self.elapsed_ms()
    }
}

/// One host's clock: the simulated time, off by `skew_ms`.
#[derive(Clone, Copy, Debug)]
pub struct HostClock {
    /// The run's time.
    pub time: SimTime,
    /// How far this host's clock is ahead (negative: behind).
    pub skew_ms: i64,
}

impl HostClock {
    /// The host's reading, ms since the epoch.
    pub fn read_ms(&self) -> u64 {
        self.time.now_ms().saturating_add_signed(self.skew_ms)
    }
}

impl percolator::clock::WallClock for HostClock {
    fn now_ms(&self) -> u64 {
        self.read_ms()
    }
}
