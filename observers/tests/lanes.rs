//! An observer whose batches all write one hot cell (a running total, as an aggregate over few
//! keys does): after its first write conflicts, the worker runs fewer of its transactions at once
//! (`observers::design::worker`, "Lanes") instead of running them side by side, where all but
//! one conflict and split in halves, down to single cells.

use observers::testing::Harness;
use observers::{Registry, WorkerConfig};
use percolator::{Cell, Transaction};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Adds its batch's size to the total in `agg/total/n`; counts its attempts and the most of
/// them under way at once.
struct Total {
    attempts: AtomicUsize,
    going: AtomicUsize,
    most: AtomicUsize,
}

fn total_cell() -> Cell {
    Cell::new("agg", "total", "n")
}

#[async_trait::async_trait]
impl observers::Observer for Total {
    async fn observe(&self, txn: Transaction, cell: Cell) -> Result<(), observers::ObserverError> {
        self.observe_batch(txn, std::slice::from_ref(&cell)).await
    }

    async fn observe_batch(
        &self,
        txn: Transaction,
        cells: &[Cell],
    ) -> Result<(), observers::ObserverError> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        let going = self.going.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(going, Ordering::SeqCst);
        let read = txn.get(&total_cell()).await;
        // Under way long enough for the runs beside it to meet its write.
        tokio::time::sleep(Duration::from_millis(2)).await;
        self.going.fetch_sub(1, Ordering::SeqCst);
        let total: usize = match read? {
            Some(v) => String::from_utf8_lossy(&v).parse().unwrap_or(0),
            None => 0,
        };
        txn.set(total_cell(), (total + cells.len()).to_string());
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_that_conflict_on_one_cell_run_fewer_at_once() {
    const CELLS: usize = 2_000;
    let observer = Arc::new(Total {
        attempts: AtomicUsize::new(0),
        going: AtomicUsize::new(0),
        most: AtomicUsize::new(0),
    });
    let mut registry = Registry::new();
    registry
        .strong("t", "c", "total", observer.clone())
        .expect("register");
    let h = Harness::with_config(
        registry,
        WorkerConfig {
            batch_size: 32,
            max_batch_size: 128,
            ..Harness::worker_config()
        },
    )
    .with_timeout(Duration::from_secs(120));
    // One transaction of all the changes: the worker meets them as one burst.
    let txn = h.client().begin().await.expect("begin");
    for i in 0..CELLS {
        txn.set(Cell::new("t", format!("r{i:05}"), "c"), "v");
    }
    txn.commit().await.expect("commit");
    let quiet = h.run_until_quiet().await.expect("quiet");
    assert_eq!(quiet.dead_letters.len(), 0);
    assert_eq!(
        h.read_string(&total_cell()).await.expect("read").as_deref(),
        Some(CELLS.to_string().as_str()),
        "every change counted once"
    );
    let snapshot = h.worker().metrics().snapshot();
    let attempts = observer.attempts.load(Ordering::SeqCst);
    // Side by side, a burst's batches all but one conflict, and each conflict splits its
    // batch in halves: with the lane never lowered, 190-235 conflicts in 310-385 attempts.
    // Fewer at once after the first conflicts: about 40 in about 95 (the first burst's, then
    // one for each probe of a higher limit).
    assert!(
        snapshot.conflicts < 100 && attempts < 200,
        "{} conflicts and {attempts} attempts for {CELLS} changes (at most {} at once)",
        snapshot.conflicts,
        observer.most.load(Ordering::SeqCst)
    );
    h.shutdown().await;
}
