//! Many seeds: run on a few threads (each seed on its own thread's runtime, so results do
//! not depend on the number of threads), reported in seed order.

use crate::error::SimError;
use crate::report::{SeedReport, Stats};
use crate::world::{run_seed, RunOptions};
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The totals of a search.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    /// Seeds run.
    pub seeds: u64,
    /// Seeds that failed.
    pub failures: u64,
    /// The failing seeds.
    pub failed_seeds: Vec<u64>,
    /// Summed counters (`wall_seconds` is the elapsed time of the whole search).
    #[serde(flatten)]
    pub stats: Stats,
}

/// Runs seeds `from..from + count` on `threads` threads; `each` sees every report as it
/// completes (in completion order).
pub fn run_seeds(
    from: u64,
    count: u64,
    threads: usize,
    options: &RunOptions,
    each: &(dyn Fn(&SeedReport) + Sync),
) -> Result<Summary, SimError> {
    let started = std::time::Instant::now();
    let next = AtomicU64::new(from);
    let reports: Mutex<Vec<SeedReport>> = Mutex::new(Vec::new());
    let error: Mutex<Option<SimError>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if seed >= from + count {
                    return;
                }
                match run_seed(seed, options) {
                    Ok(report) => {
                        each(&report);
                        reports
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(report);
                    }
                    Err(e) => {
                        *error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                        next.store(u64::MAX / 2, Ordering::Relaxed);
                        return;
                    }
                }
            });
        }
    });
    if let Some(e) = error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    let mut reports = reports.into_inner().unwrap_or_else(|p| p.into_inner());
    reports.sort_by_key(|r| r.seed);
    let mut summary = Summary::default();
    for r in &reports {
        summary.seeds += 1;
        if !r.passed() {
            summary.failures += 1;
            summary.failed_seeds.push(r.seed);
        }
        summary.stats.add(&r.stats);
    }
    summary.stats.wall_seconds = started.elapsed().as_secs_f64();
    Ok(summary)
}
