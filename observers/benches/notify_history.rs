//! The cost of finding work after a long history (issue 16): a worker on the embedded store
//! handles `NOTIFY_HISTORY` notifications (default 1,000,000; their delete markers stay in the
//! LSM tree until compaction drops them), then the notify space holds 10 live notifications
//! on a column nobody observes. The bench counts what the worker's scans of the notify space
//! cost from then on (store calls and entries returned, through a counting wrapper: a scan
//! returns only live entries either way, so these show the passes' rhythm, not the markers),
//! and times one scan of the live notifications from the notify floor against one from the
//! start of the notify space, after the worker stopped: the markers a scan walks inside the
//! store show only in that time (what every pass cost before the floor). How many markers
//! are left depends on how far compaction got, so the second figure varies between runs.
//!
//! Run: `cargo bench -p percolator-observers --bench notify_history` (`NOTIFY_HISTORY=100000` for a
//! quick look). The last line is JSON: `handled`, `live`, `scan_calls`, `entries_returned`,
//! `entries_per_call`, `floor_scan_us`, `start_scan_us`, `handle_per_sec`.

use observers::{observer_fn, Registry, Worker, WorkerConfig};
use percolator::codec::Space;
use percolator::kv::intercept::{Hooks, Intercepted};
use percolator::kv::KvPair;
use percolator::ts::LocalClock;
use percolator::{Cell, Client, ClientConfig, KeyRange, RawKv, ScanOrder};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Counts the scans of the notify space and the entries they return.
struct NotifyScans {
    notify: KeyRange,
    calls: AtomicU64,
    entries: AtomicU64,
}

impl Hooks for NotifyScans {
    fn scanned(&self, range: &KeyRange, _limit: usize, _order: ScanOrder, pairs: &[KvPair]) {
        if self.notify.contains(&range.start) {
            self.calls.fetch_add(1, Ordering::Relaxed);
            self.entries
                .fetch_add(pairs.len() as u64, Ordering::Relaxed);
        }
    }
}

/// The median of `n` timed scans of `range` (limit 1,000) on `kv`; also checks they return
/// `expect` entries.
async fn timed_scan(kv: &dyn RawKv, range: &KeyRange, expect: usize, n: usize) -> f64 {
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let got = kv
            .scan(range.clone(), 1000, ScanOrder::Forward)
            .await
            .expect("scan");
        times.push(t.elapsed().as_secs_f64() * 1e6);
        assert_eq!(got.len(), expect, "live notifications in {range:?}");
    }
    times.sort_by(f64::total_cmp);
    times[n / 2]
}

async fn run(handled: u64) {
    let dir = tempfile::tempdir().expect("temp dir");
    let embedded: Arc<dyn RawKv> =
        Arc::new(percolator::txn::open_embedded(dir.path(), Default::default()).expect("open"));
    let config = ClientConfig::with_namespace("bench");
    let codec = percolator::KeyCodec::new("bench");
    let kv = Arc::new(Intercepted::wrap(
        embedded.clone(),
        NotifyScans {
            notify: codec.space_range(Space::Notify),
            calls: AtomicU64::new(0),
            entries: AtomicU64::new(0),
        },
    ));
    let client = Client::with_config(kv.clone(), Arc::new(LocalClock::new()), config);
    let mut registry = Registry::new();
    registry
        .strong(
            "events",
            "v",
            "noop",
            observer_fn(|_txn, _cell: Cell| async move { Ok(()) }),
        )
        .expect("register");
    let worker = Worker::start(
        client.clone(),
        Arc::new(registry),
        WorkerConfig {
            id: "history".into(),
            scanners: 1,
            idle_interval: Duration::from_millis(20),
            max_idle_interval: Duration::from_millis(100),
            ..WorkerConfig::default()
        },
    );
    // The history: `handled` changes in transactions of 1,000 cells, 4 writers at a time.
    let started = Instant::now();
    let per_txn = 1000u64;
    let txns = handled.div_ceil(per_txn);
    let writers = 4u64;
    let mut tasks = Vec::new();
    for w in 0..writers {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let mut t = w;
            while t < txns {
                let txn = client.begin().await.expect("begin");
                for i in t * per_txn..((t + 1) * per_txn).min(handled) {
                    txn.set(Cell::new("events", format!("r{i:09}"), "v"), "x");
                }
                txn.commit().await.expect("commit");
                t += writers;
            }
        }));
    }
    for t in tasks {
        t.await.expect("writer");
    }
    worker.wait_until_quiescent().await.expect("quiesce");
    let handle_secs = started.elapsed().as_secs_f64();
    let processed = worker.metrics().snapshot().processed;
    assert_eq!(processed, handled, "every change handled once");
    eprintln!(
        "handled {handled} notifications in {handle_secs:.1} s ({:.0}/s)",
        handled as f64 / handle_secs
    );
    // Ten live notifications, in a later second than every handled one, on a column no
    // worker observes: they stay.
    let handled_until = percolator::txn::wall_bucket();
    while percolator::txn::wall_bucket() <= handled_until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let live = 10usize;
    let txn = client.begin().await.expect("begin");
    for i in 0..live {
        txn.notify(Cell::new("events", format!("live{i}"), "unobserved"));
    }
    txn.commit().await.expect("commit");
    while client.notify_floor().await.expect("floor") <= handled_until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The worker's own scans from here on, over a few seconds.
    let hooks = kv.hooks();
    hooks.calls.store(0, Ordering::Relaxed);
    hooks.entries.store(0, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (calls, entries) = (
        hooks.calls.load(Ordering::Relaxed),
        hooks.entries.load(Ordering::Relaxed),
    );
    worker.shutdown().await;
    // One scan from the floor against one from the start of the space, on the store itself.
    let floor = client.notify_floor().await.expect("floor");
    let floor_us = timed_scan(&*embedded, &codec.notify_from(floor), live, 9).await;
    let start_us = timed_scan(&*embedded, &codec.space_range(Space::Notify), live, 3).await;
    let per_call = entries as f64 / calls.max(1) as f64;
    println!(
        "{handled} handled, {live} live: the worker's scans made {calls} store calls returning {entries} entries ({per_call:.1} per call); one scan from the notify floor {floor_us:.0} us, from the start of the space {start_us:.0} us"
    );
    println!(
        "{{\"handled\":{handled},\"live\":{live},\"scan_calls\":{calls},\"entries_returned\":{entries},\"entries_per_call\":{per_call:.2},\"floor_scan_us\":{floor_us:.0},\"start_scan_us\":{start_us:.0},\"handle_per_sec\":{:.0}}}",
        handled as f64 / handle_secs
    );
}

fn main() {
    let handled: u64 = std::env::var("NOTIFY_HISTORY")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run(handled));
}
