//! The fixed seeds CI runs (a few of the default 60 simulated seconds each, on two
//! threads): every one must pass. A seed that fails here is a bug in the product or the
//! simulator, never a flake: replay it with `percolator-sim replay SEED` (docs/testing.md).

use percolator_sim::runner::run_seeds;
use percolator_sim::RunOptions;

/// The seeds CI runs.
const SEEDS: std::ops::Range<u64> = 0..6;

#[test]
fn the_ci_seeds_pass() {
    let failures = std::sync::Mutex::new(Vec::new());
    let summary = run_seeds(
        SEEDS.start,
        SEEDS.end - SEEDS.start,
        2,
        &RunOptions::default(),
        &|r| {
            if !r.passed() {
                failures
                    .lock()
                    .unwrap()
                    .push(format!("seed {}: {:?}", r.seed, r.violations));
            }
        },
    )
    .expect("the simulation runs");
    assert_eq!(summary.seeds, SEEDS.end - SEEDS.start);
    assert!(
        summary.failures == 0,
        "failing seeds (replay each with `percolator-sim replay SEED`):\n{}",
        failures.into_inner().unwrap().join("\n")
    );
    assert!(summary.stats.crashes >= summary.seeds);
    assert!(summary.stats.takeovers >= summary.seeds);
    assert!(summary.stats.gc_overlaps >= 2 * summary.seeds);
}
