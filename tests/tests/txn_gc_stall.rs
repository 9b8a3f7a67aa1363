//! Snapshots against GC after stalls: a reader whose start_ts reaches it late (a slow oracle
//! reply, a paused process) or whose scan outlives its snapshot must never see a value other
//! than the newest version committed before its start_ts. When GC may have removed what it
//! needs, the read fails with `SnapshotTooOld`, never with a wrong answer or `Corrupt`.
//!
//! The GC client runs with a short GC lag; the reader's own lifetime is long, so that no
//! local-clock check on the reader's side can catch the stall: only the published safe point
//! can (as when oracle time runs ahead of the reader's clock after a takeover, or a VM pause
//! stops the reader's monotonic clock).

mod common;
use async_trait::async_trait;
use common::clocks::StallingClock;
use common::*;
use percolator::kv::intercept::{Call, Hooks, Intercepted};
use percolator::kv::{KvError, MemoryKv, RawKv};
use percolator::ts::{LocalClock, Timestamp};
use percolator::txn::{Client, ClientConfig, TxnError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// The reader's configuration: a lifetime far beyond the test, so only timestamps can tell.
fn reader_config() -> ClientConfig {
    ClientConfig {
        max_lifetime: Duration::from_secs(600),
        gc_lag: Duration::from_secs(601),
        ..test_config()
    }
}

/// The GC client's configuration: a short lag (it shares the reader's clock).
fn gc_config() -> ClientConfig {
    ClientConfig {
        max_lifetime: Duration::from_millis(20),
        gc_lag: Duration::from_millis(30),
        ..test_config()
    }
}

/// Runs GC at a safe point at or above `at_least` as soon as the GC lag allows it.
async fn gc_above(gc: &Client, at_least: Timestamp) {
    loop {
        match gc.gc(at_least).await {
            Ok(_) => return,
            Err(TxnError::InvalidArgument(_)) => tokio::time::sleep(Duration::from_millis(5)).await,
            Err(e) => panic!("gc failed: {e}"),
        }
    }
}

async fn write(client: &Client, rows: &[&str], value: &[u8]) -> Timestamp {
    let txn = client.begin().await.unwrap();
    for row in rows {
        txn.set(cell(row), value.to_vec());
    }
    txn.commit().await.unwrap()
}

fn assert_too_old<T: std::fmt::Debug>(result: Result<T, TxnError>, what: &str) {
    match result {
        Err(TxnError::SnapshotTooOld { .. }) => {}
        other => panic!("{what}: expected SnapshotTooOld, got {other:?}"),
    }
}

/// Writers commit v1 then v2; the reader draws its start_ts between them but receives it
/// only after GC at a safe point above v2 removed v1. Its get and its scan must fail with
/// `SnapshotTooOld` (before the fix they returned "absent": v1 was gone, v2 is too new).
async fn late_start_ts(value_len: usize) {
    let kv: Arc<dyn RawKv> = Arc::new(MemoryKv::new());
    let clock = Arc::new(StallingClock::new());
    let writer = Client::with_config(kv.clone(), clock.clone(), reader_config());
    let reader = Client::with_config(kv.clone(), clock.clone(), reader_config());
    let gc = Client::with_config(kv.clone(), clock.clone(), gc_config());
    let rows = ["a", "b", "c"];
    let v1 = vec![b'1'; value_len];
    let v2 = vec![b'2'; value_len];
    // Enough commits of v1 that it also sits in V, not only in the head's recent list.
    for _ in 0..6 {
        write(&writer, &rows, &v1).await;
    }

    for scan in [false, true] {
        clock.armed.store(true, Ordering::SeqCst);
        let stalled = {
            let reader = reader.clone();
            tokio::spawn(async move {
                let txn = reader.begin().await?;
                if scan {
                    txn.scan(b"t", b"", None).await.map(|cells| cells.len())
                } else {
                    txn.get(&cell("a")).await.map(|v| v.map_or(0, |v| v.len()))
                }
            })
        };
        // The reader's start_ts is drawn (between v1 and v2) and held back.
        clock.drawn.acquire().await.unwrap().forget();
        let v2_ts = write(&writer, &rows, &v2).await;
        gc_above(&gc, v2_ts).await;
        clock.release.add_permits(1);
        let what = if scan { "scan" } else { "get" };
        assert_too_old(stalled.await.unwrap(), what);
        write(&writer, &rows, &v1).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_start_ts_never_reads_below_the_gc_safe_point() {
    late_start_ts(8).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_start_ts_never_reads_below_the_gc_safe_point_out_of_line() {
    late_start_ts(4096).await;
}

/// Hooks that, once armed, hold back the first read of an out-of-line value (`D` key) until
/// released: a scan that stalls between reading a head and fetching its value.
struct StallDataReads {
    data_prefix: Vec<u8>,
    armed: AtomicBool,
    reached: Semaphore,
    release: Semaphore,
}

#[async_trait]
impl Hooks for StallDataReads {
    async fn before(&self, call: Call<'_>) -> Result<(), KvError> {
        if let Call::Get { key } = call {
            if key.starts_with(&self.data_prefix) && self.armed.swap(false, Ordering::SeqCst) {
                self.reached.add_permits(1);
                self.release.acquire().await.expect("open").forget();
            }
        }
        Ok(())
    }
}

/// A scan reads a head whose latest version (visible to it) has an out-of-line value, then
/// stalls; meanwhile v2 commits and GC above v2 deletes v1's value. The scan must fail with
/// `SnapshotTooOld`, not `Corrupt("out-of-line value (missing)")`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_outliving_its_snapshot_is_too_old_not_corrupt() {
    let codec = percolator::KeyCodec::new(test_config().namespace);
    let kv = Arc::new(Intercepted::wrap(
        Arc::new(MemoryKv::new()),
        StallDataReads {
            data_prefix: codec.space_range(percolator::codec::Space::Data).start,
            armed: AtomicBool::new(false),
            reached: Semaphore::new(0),
            release: Semaphore::new(0),
        },
    ));
    let stall = kv.hooks();
    let clock = Arc::new(LocalClock::new());
    let writer = Client::with_config(kv.clone(), clock.clone(), reader_config());
    let reader = Client::with_config(kv.clone(), clock.clone(), reader_config());
    let gc = Client::with_config(kv.clone(), clock.clone(), gc_config());
    let big = |b: u8| vec![b; 4096];
    write(&writer, &["a"], &big(b'1')).await;

    stall.armed.store(true, Ordering::SeqCst);
    let txn = reader.begin().await.unwrap();
    let scanning = tokio::spawn(async move { txn.scan(b"t", b"", None).await });
    stall.reached.acquire().await.unwrap().forget();
    let v2_ts = write(&writer, &["a"], &big(b'2')).await;
    gc_above(&gc, v2_ts).await;
    stall.release.add_permits(1);
    assert_too_old(scanning.await.unwrap(), "scan");

    // Without GC in between, the same stall reads the right value.
    stall.armed.store(true, Ordering::SeqCst);
    let txn = reader.begin().await.unwrap();
    let scanning = tokio::spawn(async move { txn.scan(b"t", b"", None).await });
    stall.reached.acquire().await.unwrap().forget();
    write(&writer, &["a"], &big(b'3')).await;
    stall.release.add_permits(1);
    let cells = scanning.await.unwrap().expect("scan without GC");
    assert_eq!(cells.len(), 1);
    assert_eq!(cells[0].1, big(b'2'));
}
