//! The hint path from a worker's start: a commit made in the worker's process before the
//! worker settled (owns nothing yet) is handed to it by its hint once it settles, not left
//! to a scan (here 60 s away), so a loader may start with its workers.

use observers::testing::Harness;
use observers::{observer_fn, Registry, WorkerConfig};
use percolator::Cell;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_before_the_worker_settled_is_hinted_once_it_settles() {
    let (ran, mut runs) = tokio::sync::mpsc::unbounded_channel();
    let mut registry = Registry::new();
    registry
        .strong(
            "t",
            "c",
            "seen",
            observer_fn(move |_txn, cell: Cell| {
                let ran = ran.clone();
                async move {
                    let _ = ran.send(cell);
                    Ok(())
                }
            }),
        )
        .expect("register");
    // Scans a minute apart: only the hint can bring the change within the test's bound.
    // The harness does not wait for the worker to settle (a 500 ms heartbeat here).
    let h = Harness::with_config(
        registry,
        WorkerConfig {
            idle_interval: Duration::from_secs(60),
            max_idle_interval: Duration::from_secs(60),
            ..WorkerConfig::default()
        },
    );
    h.write(Cell::new("t", "r", "c"), "v").await.expect("write");
    let cell = tokio::time::timeout(Duration::from_secs(30), runs.recv())
        .await
        .expect("run within 30 s: hinted, not scanned")
        .expect("a run");
    assert_eq!(cell, Cell::new("t", "r", "c"));
    assert_eq!(h.worker().metrics().snapshot().hinted, 1);
    h.worker().shutdown().await;
}
