//! `Worker::wait_until_quiescent` under a store whose scans fail transiently: the check is
//! made again instead of failing the wait (a drain of a run failed on the first such
//! error), and a store that keeps failing fails it in the end.

use async_trait::async_trait;
use observers::testing::Harness;
use observers::{observer_fn, Registry, WorkerConfig};
use percolator::kv::intercept::{Call, Hooks, Intercepted, Op};
use percolator::kv::{KvError, KvResult, MemoryKv};
use percolator::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Fails the next `failures` scans as unavailable (as a store adapter does once its own
/// retries ran out), then lets scans through.
struct FailingScans {
    failures: AtomicU64,
    failed: AtomicU64,
}

#[async_trait]
impl Hooks for FailingScans {
    async fn before(&self, call: Call<'_>) -> KvResult<()> {
        if call.op() != Op::Scan {
            return Ok(());
        }
        let take = self
            .failures
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if take.is_ok() {
            self.failed.fetch_add(1, Ordering::SeqCst);
            return Err(KvError::Unavailable {
                op: "scan",
                message: "an injected outage".into(),
            });
        }
        Ok(())
    }

    fn sees_swaps(&self) -> bool {
        false
    }
}

/// A harness over `store` whose worker observes `t/c`, its own scans a minute apart: only
/// the wait's checks scan.
fn harness_on(store: Arc<Intercepted<FailingScans>>) -> Harness {
    let mut registry = Registry::new();
    registry
        .strong(
            "t",
            "c",
            "seen",
            observer_fn(|_txn, _cell: Cell| async { Ok(()) }),
        )
        .expect("register");
    let config = Harness::scans_a_minute_apart(WorkerConfig::default());
    Harness::on_store(store, registry, config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_failures_of_the_check_are_checked_again() {
    let store = Arc::new(Intercepted::wrap(
        Arc::new(MemoryKv::new()),
        FailingScans {
            failures: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        },
    ));
    let harness = harness_on(store.clone());
    let worker = harness.worker();
    store.hooks().failures.store(5, Ordering::SeqCst);
    tokio::time::timeout(Duration::from_secs(30), worker.wait_until_quiescent())
        .await
        .expect("quiescent within 30 s")
        .expect("transient failures are checked again, not returned");
    assert!(
        store.hooks().failed.load(Ordering::SeqCst) >= 5,
        "the injected failures were met"
    );
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_store_that_keeps_failing_fails_the_wait() {
    let store = Arc::new(Intercepted::wrap(
        Arc::new(MemoryKv::new()),
        FailingScans {
            failures: AtomicU64::new(u64::MAX),
            failed: AtomicU64::new(0),
        },
    ));
    let harness = harness_on(store.clone());
    let worker = harness.worker();
    let waited = tokio::time::timeout(
        observers::QUIESCENCE_RETRY_FOR * 2,
        worker.wait_until_quiescent(),
    )
    .await
    .expect("the wait ends");
    assert!(
        matches!(
            waited,
            Err(observers::WorkerError::Storage(KvError::Unavailable { .. }))
        ),
        "{waited:?}"
    );
    harness.shutdown().await;
}
