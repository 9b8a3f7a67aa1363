//! A GC pass retries its idempotent store calls (scans, batched reads, batched deletes) when
//! they fail transiently (`percolator::design::gc`, "Transient failures"): a pass makes
//! calls per cell, so without retries a store failing one call in a few hundred fails almost
//! every pass on a table of thousands of cells, and GC never completes (the simulator's
//! passes completed only before and after its faults). A call that keeps failing still ends
//! the pass with the store's error. The rewrites of pending write-once records go in
//! batched CASes, and a batch that fails goes again request by request.

mod common;

use common::test_config;
use percolator::kv::intercept::{Call, Hooks, Intercepted, Op, OpCounts};
use percolator::kv::{KvError, KvResult, MemoryKv, RawKv, UNAVAILABLE_RETRIES};
use percolator::ts::{LocalClock, Timestamp};
use percolator::txn::{Client, ClientConfig, TxnError};
use percolator::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const GC_LAG: Duration = Duration::from_millis(50);

/// Fails scans, batched reads and batched deletes before they reach the store: each
/// `fail_in_a_row` times, then lets one through.
#[derive(Debug)]
struct Flaky {
    fail_in_a_row: u64,
    calls: AtomicU64,
    failed: AtomicU64,
}

impl Flaky {
    fn new(fail_in_a_row: u64) -> Self {
        Flaky {
            fail_in_a_row,
            calls: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        }
    }
}

#[async_trait::async_trait]
impl Hooks for Flaky {
    async fn before(&self, call: Call<'_>) -> KvResult<()> {
        let idempotent = matches!(
            call,
            Call::Scan { .. }
                | Call::ScanMany { .. }
                | Call::BatchGet { .. }
                | Call::BatchDelete { .. }
        );
        if !idempotent {
            return Ok(());
        }
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        if n % (self.fail_in_a_row + 1) < self.fail_in_a_row {
            self.failed.fetch_add(1, Ordering::Relaxed);
            return Err(KvError::Unavailable {
                op: call.op().name(),
                message: "flaky".to_string(),
            });
        }
        Ok(())
    }
}

/// Applies every CAS, and reports every other one (the first, the third, ...) as failed: its
/// reply lost.
#[derive(Debug, Default)]
struct LostReplies {
    cases: AtomicU64,
    lost: AtomicU64,
}

#[async_trait::async_trait]
impl Hooks for LostReplies {
    async fn after(&self, op: Op) -> KvResult<()> {
        if op != Op::CompareAndSwap {
            return Ok(());
        }
        if self.cases.fetch_add(1, Ordering::Relaxed).is_multiple_of(2) {
            self.lost.fetch_add(1, Ordering::Relaxed);
            return Err(KvError::Unavailable {
                op: op.name(),
                message: "reply lost".to_string(),
            });
        }
        Ok(())
    }
}

fn config() -> ClientConfig {
    ClientConfig {
        gc_lag: GC_LAG,
        ..test_config()
    }
}

fn client(kv: Arc<dyn RawKv>, clock: &Arc<LocalClock>) -> Client {
    let client = Client::with_config(kv, clock.clone(), config());
    client.write_once_column("events", "body");
    client
}

/// Writes an ordinary cell three times and a write-once cell twice (as records), on a
/// healthy store; returns a safe point above every write, once it is past the GC lag.
async fn history(writer: &Client) -> Timestamp {
    for n in 0..3 {
        let txn = writer.begin().await.unwrap();
        txn.set(Cell::new("t", "r", "c"), format!("v{n}"));
        if n > 0 {
            txn.set(Cell::new("events", "e1", "body"), format!("body {n}"));
        }
        txn.commit().await.unwrap();
    }
    safe_point_past_lag(writer).await
}

/// A safe point above every write `writer` made so far, once it is past the GC lag.
async fn safe_point_past_lag(writer: &Client) -> Timestamp {
    let txn = writer.begin().await.unwrap();
    let sp = txn.start_ts();
    txn.rollback();
    tokio::time::sleep(GC_LAG * 3).await;
    sp
}

/// What GC kept of [`history`] is what a snapshot after the safe point reads: the newest
/// writes.
async fn assert_history_kept(store: Arc<dyn RawKv>, clock: &Arc<LocalClock>) {
    let txn = client(store, clock).begin().await.unwrap();
    assert_eq!(
        txn.get(&Cell::new("t", "r", "c")).await.unwrap().as_deref(),
        Some(&b"v2"[..])
    );
    assert_eq!(
        txn.get(&Cell::new("events", "e1", "body"))
            .await
            .unwrap()
            .as_deref(),
        Some(&b"body 2"[..])
    );
}

#[tokio::test]
async fn a_gc_pass_completes_through_transient_failures_of_its_reads_and_deletes() {
    let store: Arc<dyn RawKv> = Arc::new(MemoryKv::new());
    let clock = Arc::new(LocalClock::new());
    let sp = history(&client(store.clone(), &clock)).await;
    // Every idempotent call fails twice, then goes through.
    let flaky = Arc::new(Intercepted::wrap(store.clone(), Flaky::new(2)));
    let gc = client(flaky.clone(), &clock);
    let stats = gc.gc(sp).await.expect("the pass retries each failed call");
    assert!(flaky.hooks().failed.load(Ordering::Relaxed) > 0);
    assert_eq!(stats.versions_deleted, 2, "{stats:?}");
    assert_eq!(stats.records_deleted, 1, "{stats:?}");
    assert_history_kept(store, &clock).await;
}

#[tokio::test]
async fn a_gc_pass_fails_when_a_call_keeps_failing() {
    let store: Arc<dyn RawKv> = Arc::new(MemoryKv::new());
    let clock = Arc::new(LocalClock::new());
    let sp = history(&client(store.clone(), &clock)).await;
    // One failure more than the retries.
    let flaky = Arc::new(Intercepted::wrap(
        store.clone(),
        Flaky::new(u64::from(UNAVAILABLE_RETRIES) + 1),
    ));
    let gc = client(flaky.clone(), &clock);
    match gc.gc(sp).await {
        Err(TxnError::Storage(KvError::Unavailable { message, .. })) => {
            assert_eq!(message, "flaky")
        }
        other => panic!("expected the store's error, got {other:?}"),
    }
    assert_eq!(
        flaky.hooks().failed.load(Ordering::Relaxed),
        u64::from(UNAVAILABLE_RETRIES) + 1,
        "the first idempotent call of the pass was tried 1 + {UNAVAILABLE_RETRIES} times"
    );
}

#[tokio::test]
async fn a_gc_pass_completes_when_its_cases_apply_and_lose_their_replies() {
    let store: Arc<dyn RawKv> = Arc::new(MemoryKv::new());
    let clock = Arc::new(LocalClock::new());
    let writer = client(store.clone(), &clock);
    // A cell deleted (its head shrinks to a tombstone), besides the history (a head whose
    // older versions are trimmed, pending records rewritten as committed).
    let txn = writer.begin().await.unwrap();
    txn.set(Cell::new("t", "gone", "c"), "x");
    txn.commit().await.unwrap();
    let txn = writer.begin().await.unwrap();
    txn.delete(Cell::new("t", "gone", "c"));
    txn.commit().await.unwrap();
    let sp = history(&writer).await;
    let lossy = Arc::new(Intercepted::wrap(store.clone(), LostReplies::default()));
    let gc = client(lossy.clone(), &clock);
    let stats = gc
        .gc(sp)
        .await
        .expect("each CAS is retried after its lost reply");
    assert!(lossy.hooks().lost.load(Ordering::Relaxed) >= 3, "{stats:?}");
    assert_eq!(stats.heads_tombstoned, 1, "{stats:?}");
    assert_eq!(stats.records_deleted, 1, "{stats:?}");
    let txn = client(store.clone(), &clock).begin().await.unwrap();
    assert_eq!(txn.get(&Cell::new("t", "gone", "c")).await.unwrap(), None);
    assert_history_kept(store, &clock).await;
    // A second pass finds nothing left to do.
    let again = gc.gc(sp).await.expect("a second pass");
    assert_eq!(
        again.versions_deleted + again.records_deleted + again.heads_tombstoned,
        0,
        "{again:?}"
    );
}

/// The pending records of a page are rewritten as committed in batched CASes (a prewrite
/// round's size each), not one CAS per record: a pass over 600 records of 3 loader-shaped
/// transactions makes a few batched calls and none per record, and what it rewrote reads
/// back.
#[tokio::test]
async fn a_gc_pass_rewrites_pending_records_in_batched_calls() {
    let store: Arc<dyn RawKv> = Arc::new(MemoryKv::new());
    let clock = Arc::new(LocalClock::new());
    let writer = client(store.clone(), &clock);
    for batch in 0..3 {
        let txn = writer.begin().await.unwrap();
        txn.set(Cell::new("t", "offset", "c"), format!("{batch}"));
        for i in 0..200 {
            txn.set(
                Cell::new("events", format!("e{batch}-{i:03}"), "body"),
                format!("body {batch}/{i}"),
            );
        }
        txn.commit().await.unwrap();
    }
    let sp = safe_point_past_lag(&writer).await;
    let counted = Arc::new(Intercepted::wrap(store.clone(), OpCounts::default()));
    let stats = client(counted.clone(), &clock).gc(sp).await.unwrap();
    assert_eq!(stats.records_resolved, 600, "{stats:?}");
    // The evidence of the first two commits (the offset cell's older versions) is trimmed,
    // so the reads below need the rewrites: a record left pending reads as `CommitUnknown`.
    assert_eq!(stats.versions_deleted, 2, "{stats:?}");
    let (single, batches) = (
        counted.hooks().get(Op::CompareAndSwap),
        counted.hooks().get(Op::BatchCompareAndSwap),
    );
    // The single CASes left are the pass's own (the safe points it publishes, the offset
    // cell's trimmed head).
    assert!(
        single < 10,
        "{single} single CASes, {batches} batched calls"
    );
    assert!((3..=6).contains(&batches), "{batches} batched calls");
    let txn = client(store, &clock).begin().await.unwrap();
    for batch in 0..3 {
        let body = txn
            .get(&Cell::new("events", format!("e{batch}-199"), "body"))
            .await
            .unwrap();
        assert_eq!(
            body.as_deref(),
            Some(format!("body {batch}/199").as_bytes())
        );
    }
}

/// A pass asks which of a page's heads have versions in `V` in one call, instead of a scan
/// per head (on TiKV, a round trip per head kept, every pass): 300 cells written once cost
/// a handful of scans, and the versions a rewritten cell spilled are still collected.
#[tokio::test]
async fn a_gc_pass_probes_a_page_of_heads_for_versions_at_once() {
    let store: Arc<dyn RawKv> = Arc::new(MemoryKv::new());
    let clock = Arc::new(LocalClock::new());
    let writer = client(store.clone(), &clock);
    let txn = writer.begin().await.unwrap();
    for i in 0..300 {
        txn.set(Cell::new("once", format!("r{i:03}"), "c"), "x");
    }
    txn.commit().await.unwrap();
    // One cell rewritten often enough to spill versions to `V`.
    for n in 0..12 {
        let txn = writer.begin().await.unwrap();
        txn.set(Cell::new("t", "hot", "c"), format!("v{n}"));
        txn.commit().await.unwrap();
    }
    let sp = safe_point_past_lag(&writer).await;
    let counted = Arc::new(Intercepted::wrap(store.clone(), OpCounts::default()));
    let stats = client(counted.clone(), &clock).gc(sp).await.unwrap();
    let scans = counted.hooks().get(Op::Scan) + counted.hooks().get(Op::ScanMany);
    assert!(scans < 30, "{scans} scans for 301 heads");
    assert_eq!(stats.versions_deleted, 11, "{stats:?}");
    let txn = client(store, &clock).begin().await.unwrap();
    assert_eq!(
        txn.get(&Cell::new("t", "hot", "c"))
            .await
            .unwrap()
            .as_deref(),
        Some(&b"v11"[..])
    );
}
