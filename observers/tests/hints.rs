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
        Harness::scans_a_minute_apart(WorkerConfig::default()),
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

/// The sizes of the runs that handled the next `n` keys, sorted.
async fn take(n: usize, ran: &mut tokio::sync::mpsc::UnboundedReceiver<usize>) -> Vec<usize> {
    let mut got = Vec::new();
    let mut total = 0;
    while total < n {
        let size = tokio::time::timeout(Duration::from_secs(30), ran.recv())
            .await
            .expect("runs within 30 s: hinted, not scanned")
            .expect("a run");
        total += size;
        got.push(size);
    }
    got.sort_unstable();
    got
}

/// Records the size of every batch it is handed.
struct BatchSizes(tokio::sync::mpsc::UnboundedSender<usize>);

#[async_trait::async_trait]
impl observers::Observer for BatchSizes {
    async fn observe(
        &self,
        txn: percolator::Transaction,
        cell: Cell,
    ) -> Result<(), observers::ObserverError> {
        self.observe_batch(txn, std::slice::from_ref(&cell)).await
    }

    async fn observe_batch(
        &self,
        _txn: percolator::Transaction,
        cells: &[Cell],
    ) -> Result<(), observers::ObserverError> {
        let _ = self.0.send(cells.len());
        Ok(())
    }
}

/// A burst of one observer's notifications (one commit of 96 cells, handed over by its
/// hint) fills `BURST_RUNS` runs of 12 instead of 24 runs of the batch size (4), up to
/// `max_batch_size`; a trickle (one commit of 3) is still run at the batch size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_notifications_grows_its_batches_and_a_trickle_does_not() {
    let (sizes, mut ran) = tokio::sync::mpsc::unbounded_channel();
    let mut registry = Registry::new();
    registry
        .strong("t", "c", "sizes", std::sync::Arc::new(BatchSizes(sizes)))
        .expect("register");
    // Scans a minute apart: each commit reaches the worker as one hint.
    let h = Harness::with_config(
        registry,
        Harness::scans_a_minute_apart(WorkerConfig {
            // Young keys are the hint path's for a minute after this client's puts, so a
            // scan pass on a starved machine leaves the burst to its hint.
            hint_grace: Duration::from_secs(60),
            batch_size: 4,
            max_batch_size: 16,
            ..WorkerConfig::default()
        }),
    );
    let commit = |rows: std::ops::Range<usize>| {
        let client = h.client().clone();
        async move {
            let txn = client.begin().await.expect("begin");
            for i in rows {
                txn.set(Cell::new("t", format!("r{i:03}"), "c"), "v");
            }
            txn.commit().await.expect("commit");
        }
    };
    h.worker().wait_until_settled().await;
    commit(0..96).await;
    let burst = take(96, &mut ran).await;
    assert_eq!(
        burst,
        vec![12; observers::BURST_RUNS],
        "96 keys in 8 runs of 12"
    );
    commit(96..99).await;
    let trickle = take(3, &mut ran).await;
    assert_eq!(trickle, vec![3], "3 keys in one run, as before");
    h.worker().shutdown().await;
}
