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

/// Seed 68 of `run --seeds 100 --from 30` (at the commit that put photon's join in the
/// simulation): a join from a snapshot before the IdRegistry boundary's first raise and a
/// run settling the same click `too_old` from the raised boundary both committed (a joined
/// click `too_old`). Fixed in `photon::registry::settle_below_boundary`; the regression test
/// is `photon::join::tests::a_join_and_a_settling_run_from_a_raised_boundary_do_not_both_commit`.
#[test]
fn seed_68_a_join_and_a_settling_run_do_not_both_commit() {
    let report = percolator_sim::run_seed(68, &RunOptions::default()).expect("the simulation runs");
    assert!(report.passed(), "seed 68: {:?}", report.violations);
}
