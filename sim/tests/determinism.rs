//! Two runs of a seed in one process give the same trace: nothing in the product or the
//! harness depends on anything but the seed (not on hash-map seeds, which differ between
//! the two runs here, nor on the wall clock or thread-local randomness).

use percolator_sim::{run_seed, RunOptions};

#[test]
fn two_replays_of_a_seed_have_the_same_trace() {
    let options = RunOptions {
        sim_secs: 15,
        ..RunOptions::default()
    };
    for seed in [3, 11] {
        let a = run_seed(seed, &options).expect("run");
        let b = run_seed(seed, &options).expect("run");
        assert_eq!(
            (a.trace_hash, a.stats.trace_events),
            (b.trace_hash, b.stats.trace_events),
            "seed {seed} ran differently twice"
        );
        assert!(a.stats.trace_events > 1000, "the seed did something");
    }
}
