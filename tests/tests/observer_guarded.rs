//! Guarded observers (`Registry::guarded`): triggered like strong ones, run without the
//! acknowledgment column. Runs of one change repeat when a notify key outlives its handled
//! run (its delete failed); the observer's own guard makes every repeat write nothing, so
//! each change has exactly one committed run with effects, and no acknowledgment is written.

mod common;
use common::*;
use observers::{observer_fn, Registry, Worker, WorkerConfig};
use percolator::kv::intercept::{Call, Hooks, Intercepted};
use percolator::kv::{KvError, KvResult, MemoryKv, RawKv};
use percolator::ts::LocalClock;
use percolator::{Cell, Client};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Fails the first `left` batch deletes (the worker's deletes of handled notify keys): the
/// keys stay, and the worker handles them again.
struct LostDeletes {
    left: AtomicU64,
    failed: AtomicU64,
}

#[async_trait::async_trait]
impl Hooks for LostDeletes {
    async fn before(&self, call: Call<'_>) -> KvResult<()> {
        if matches!(call, Call::BatchDelete { .. })
            && self
                .left
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        {
            self.failed.fetch_add(1, Ordering::SeqCst);
            return Err(KvError::Unavailable {
                op: call.op().name(),
                message: "injected: delete lost".to_string(),
            });
        }
        Ok(())
    }
}

/// A guarded observer on `g/v`: reads the guard `g/<row>/done`; when it is absent, appends
/// one mark to `g/<row>/log` and sets the guard (a run with effects); when present, writes
/// nothing. `calls` counts the observer's calls.
fn guarded_registry(calls: Arc<AtomicU64>) -> Arc<Registry> {
    let mut registry = Registry::new();
    registry
        .guarded(
            "g",
            "v",
            "guarded",
            observer_fn(move |txn, cell: Cell| {
                let calls = calls.clone();
                async move {
                    calls.fetch_add(1, Ordering::SeqCst);
                    let guard = Cell::new("g", &cell.row, "done");
                    if txn.get(&guard).await?.is_some() {
                        return Ok(());
                    }
                    let log = Cell::new("g", &cell.row, "log");
                    let mut marks = txn.get(&log).await?.unwrap_or_default();
                    marks.push(b'|');
                    txn.set(log, marks);
                    txn.set(guard, "1");
                    Ok(())
                }
            }),
        )
        .unwrap();
    Arc::new(registry)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guarded_observer_repeats_without_effects_and_writes_no_acknowledgment() {
    let kv: Arc<dyn RawKv> = Arc::new(MemoryKv::new());
    let lossy = Arc::new(Intercepted::wrap(
        kv.clone(),
        LostDeletes {
            left: AtomicU64::new(3),
            failed: AtomicU64::new(0),
        },
    ));
    let clock = Arc::new(LocalClock::new());
    let writer = Client::with_config(kv, clock.clone(), test_config());
    let client = Client::with_config(lossy.clone(), clock, test_config());
    let calls = Arc::new(AtomicU64::new(0));
    let registry = guarded_registry(calls.clone());
    // The writer declares the column as a loader does: its commits notify (strongly).
    registry.declare(&writer);
    let worker = Worker::start(
        client.clone(),
        registry,
        WorkerConfig {
            idle_interval: Duration::from_millis(20),
            max_idle_interval: Duration::from_millis(100),
            retry_backoff: Duration::from_millis(2),
            hint_grace: Duration::ZERO,
            batch_size: 16,
            ..WorkerConfig::default()
        },
    );
    let rows: Vec<String> = (0..64).map(|i| format!("r{i:03}")).collect();
    let t = writer.begin().await.unwrap();
    for row in &rows {
        t.set(Cell::new("g", row, "v"), "x");
    }
    t.commit().await.unwrap();
    tokio::time::timeout(Duration::from_secs(60), worker.wait_until_quiescent())
        .await
        .expect("the worker quiesces (a liveness bound)")
        .unwrap();
    worker.shutdown().await;

    let failed = lossy.hooks().failed.load(Ordering::SeqCst);
    assert_eq!(failed, 3, "the injected lost deletes happened");
    let calls = calls.load(Ordering::SeqCst);
    assert!(
        calls > rows.len() as u64,
        "handled keys whose delete was lost ran again: {calls} calls for {} changes",
        rows.len()
    );
    let r = writer.begin().await.unwrap();
    for row in &rows {
        let cell = Cell::new("g", row, "v");
        assert_eq!(
            r.get(&Cell::new("g", row, "log")).await.unwrap(),
            Some(b"|".to_vec()),
            "row {row}: exactly one committed run with effects"
        );
        assert_eq!(
            r.get(&Registry::ack_cell(&cell, "guarded")).await.unwrap(),
            None,
            "row {row}: no acknowledgment written"
        );
    }
}
