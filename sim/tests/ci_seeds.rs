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

/// Seeds that found bugs in photon's join (each failed on the build before its fix; the
/// regression tests are in `photon::join::tests`):
/// - 68 of `run --seeds 100 --from 30`: a join from a snapshot before the IdRegistry
///   boundary's first raise and a run settling the same click `too_old` from the raised
///   boundary both committed (a joined click `too_old`; fixed in
///   `photon::registry::settle_below_boundary`,
///   `a_join_and_a_settling_run_from_a_raised_boundary_do_not_both_commit`);
/// - 200 of `run --seeds 100 --from 130`: a park from a snapshot without the query and a
///   join from one with it both committed (a joined click `waiting`; fixed in
///   `photon::join`'s park, `a_park_and_a_join_of_one_click_do_not_both_commit`).
const FOUND: [u64; 2] = [68, 200];

#[test]
fn the_seeds_that_found_bugs_pass() {
    let failures = std::sync::Mutex::new(Vec::new());
    for seed in FOUND {
        let summary = run_seeds(seed, 1, 1, &RunOptions::default(), &|r| {
            if !r.passed() {
                failures
                    .lock()
                    .unwrap()
                    .push(format!("seed {}: {:?}", r.seed, r.violations));
            }
        })
        .expect("the simulation runs");
        assert_eq!(summary.seeds, 1);
    }
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
