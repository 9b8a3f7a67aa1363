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
            // What every seed must contain (issue 40): a simulated minute with a crash, an
            // oracle takeover and two overlapping GC passes.
            let s = &r.stats;
            if s.sim_seconds < 60.0 || s.crashes < 1 || s.takeovers < 1 || s.gc_overlaps < 2 {
                failures.lock().unwrap().push(format!(
                    "seed {} ran {} simulated s, {} crashes, {} takeovers, {} overlapping GC passes",
                    r.seed, s.sim_seconds, s.crashes, s.takeovers, s.gc_overlaps
                ));
            }
        },
    )
    .expect("the simulation runs");
    assert_eq!(summary.seeds, SEEDS.end - SEEDS.start);
    let failures = failures.into_inner().unwrap();
    assert!(
        summary.failures == 0 && failures.is_empty(),
        "failing seeds (replay each with `percolator-sim replay SEED`):\n{}",
        failures.join("\n")
    );
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
