//! Observers through outages and after GC: a store or oracle outage longer than
//! `max_failures` attempts is retried for as long as it lasts and never dead-letters a
//! notification (only the observer's own failures count); a batch that meets an outage is
//! retried whole, not split; a weak observer's dead letter replayed after GC removed its
//! writer's evidence still runs the observer.

mod common;
use common::*;
use observers::{observer_fn, DeadLetter, ObserverError, Registry, Worker, WorkerConfig};
use percolator::kv::intercept::{Call, Hooks, Intercepted};
use percolator::kv::{KvError, KvResult, MemoryKv, RawKv};
use percolator::ts::{LocalClock, Timestamp, TimestampError, TimestampSource};
use percolator::txn::ClientConfig;
use percolator::{Cell, Client};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn quick(max_failures: u32) -> WorkerConfig {
    WorkerConfig {
        idle_interval: Duration::from_millis(20),
        max_idle_interval: Duration::from_millis(100),
        retry_backoff: Duration::from_millis(2),
        hint_grace: Duration::ZERO,
        max_failures,
        ..WorkerConfig::default()
    }
}

/// While `down`, fails as unavailable every call that touches a key containing `needle`
/// (the store is down for those keys, as a region without a leader is).
struct KeyOutage {
    needle: Vec<u8>,
    down: AtomicBool,
}

impl KeyOutage {
    fn touches(&self, call: &Call<'_>) -> bool {
        let hit = |k: &[u8]| k.windows(self.needle.len()).any(|w| w == self.needle);
        match call {
            Call::Get { key } | Call::Put { key, .. } | Call::Delete { key } => hit(key),
            Call::CompareAndSwap { key, .. } => hit(key),
            Call::BatchGet { keys } | Call::BatchDelete { keys } => keys.iter().any(|k| hit(k)),
            Call::BatchPut { pairs } => pairs.iter().any(|(k, _)| hit(k)),
            Call::BatchCompareAndSwap { requests } => requests.iter().any(|r| hit(&r.key)),
            _ => false,
        }
    }
}

#[async_trait::async_trait]
impl Hooks for KeyOutage {
    async fn before(&self, call: Call<'_>) -> KvResult<()> {
        if self.down.load(Ordering::SeqCst) && self.touches(&call) {
            return Err(KvError::Unavailable {
                op: call.op().name(),
                message: "injected outage".to_string(),
            });
        }
        Ok(())
    }
}

/// A timestamp source that is down while `down` is set.
struct FlakyOracle {
    clock: Arc<LocalClock>,
    down: AtomicBool,
}

#[async_trait::async_trait]
impl TimestampSource for FlakyOracle {
    async fn get_timestamp(&self) -> Result<Timestamp, TimestampError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(TimestampError::Unavailable("injected outage".to_string()));
        }
        self.clock.get_timestamp().await
    }
}

/// Waits until the worker met the outage `attempts` times (or gave up on a notification,
/// or counted failures: what the old policy did), then ends the outage with `end`.
async fn outage_lasts(worker: &Worker, attempts: u64, end: impl FnOnce()) {
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let m = worker.metrics().snapshot();
            if m.transient >= attempts || m.dead_lettered > 0 || m.failures > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the worker meets the outage (a liveness bound)");
    end();
}

/// A strong observer on `o/v` copying each cell to `o/<row>/copy`, counting its calls.
fn copying_registry(calls: Arc<AtomicU64>) -> Arc<Registry> {
    let mut registry = Registry::new();
    registry
        .strong(
            "o",
            "v",
            "copy",
            observer_fn(move |txn, cell: Cell| {
                let calls = calls.clone();
                async move {
                    let value = txn.get(&cell).await?.unwrap_or_default();
                    txn.set(Cell::new("o", &cell.row, "copy"), value);
                    calls.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                }
            }),
        )
        .unwrap();
    Arc::new(registry)
}

async fn quiesce(worker: &Worker) {
    tokio::time::timeout(Duration::from_secs(60), worker.wait_until_quiescent())
        .await
        .expect("the worker quiesces (a liveness bound)")
        .unwrap();
}

/// The committed copies of `rows`: each must exist.
async fn assert_copied(client: &Client, rows: &[String]) {
    let r = client.begin().await.unwrap();
    for row in rows {
        assert_eq!(
            r.get(&Cell::new("o", row, "copy")).await.unwrap(),
            Some(b"x".to_vec()),
            "row {row} copied"
        );
    }
}

/// Changes of `o/<row>/v` for `rows`, committed in one transaction by `writer` whose
/// primary is another cell (so the writer's status is read from a key the outage spares,
/// and the outage meets the observer's own transaction).
async fn change(writer: &Client, rows: &[String]) {
    let t = writer.begin().await.unwrap();
    t.set(Cell::new("a", "primary", "v"), "p");
    for row in rows {
        t.set(Cell::new("o", row, "v"), "x");
    }
    t.commit().await.unwrap();
}

/// A store outage on the observed cells' keys that outlasts `max_failures` attempts
/// several times over: no dead letter, no failure counted, every change handled by one
/// committed run; with `batch_size` above one, the batch is retried whole, never split.
async fn store_outage(batch_size: usize, cells: usize) {
    let kv: Arc<dyn RawKv> = Arc::new(MemoryKv::new());
    let down = Arc::new(Intercepted::wrap(
        kv.clone(),
        KeyOutage {
            needle: b"outage".to_vec(),
            down: AtomicBool::new(true),
        },
    ));
    // The writer reaches the store; the worker's client meets the outage.
    let clock = Arc::new(LocalClock::new());
    let writer = Client::with_config(kv, clock.clone(), test_config());
    writer.observe_column("o", "v");
    let client = Client::with_config(down.clone(), clock, test_config());
    let calls = Arc::new(AtomicU64::new(0));
    let config = WorkerConfig {
        batch_size,
        ..quick(2)
    };
    let worker = Worker::start(client.clone(), copying_registry(calls.clone()), config);
    let rows: Vec<String> = (0..cells).map(|i| format!("outage-{i}")).collect();
    change(&writer, &rows).await;
    outage_lasts(&worker, 10, || {
        down.hooks().down.store(false, Ordering::SeqCst)
    })
    .await;
    quiesce(&worker).await;
    let m = worker.metrics().snapshot();
    assert!(DeadLetter::list(&writer).await.unwrap().is_empty(), "{m:?}");
    assert_eq!((m.dead_lettered, m.failures), (0, 0), "{m:?}");
    assert_eq!(
        m.splits, 0,
        "a batch that met an outage is retried whole: {m:?}"
    );
    assert_eq!(m.processed, cells as u64, "{m:?}");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        cells as u64,
        "one call per change"
    );
    assert_copied(&writer, &rows).await;
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_outage_is_retried_not_dead_lettered() {
    store_outage(32, 8).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_outage_on_a_single_run_is_retried_not_dead_lettered() {
    store_outage(1, 1).await;
}

/// An oracle outage met by the worker, outlasting `max_failures` attempts several times
/// over: no dead letter, no failure counted, one committed run per change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oracle_outage_is_retried_not_dead_lettered() {
    let kv: Arc<dyn RawKv> = Arc::new(MemoryKv::new());
    let clock = Arc::new(LocalClock::new());
    let oracle = Arc::new(FlakyOracle {
        clock: clock.clone(),
        down: AtomicBool::new(false),
    });
    let writer = Client::with_config(kv.clone(), clock, test_config());
    writer.observe_column("o", "v");
    let client = Client::with_config(kv, oracle.clone(), test_config());
    let calls = Arc::new(AtomicU64::new(0));
    let worker = Worker::start(client.clone(), copying_registry(calls.clone()), quick(2));
    // A first change handled: the worker has joined and owns its share (its heartbeats
    // need the oracle too).
    let mut rows = vec!["row-0".to_string()];
    change(&writer, &rows).await;
    quiesce(&worker).await;
    assert_eq!(worker.metrics().snapshot().processed, 1);
    oracle.down.store(true, Ordering::SeqCst);
    let more: Vec<String> = (1..4).map(|i| format!("row-{i}")).collect();
    change(&writer, &more).await;
    rows.extend(more);
    outage_lasts(&worker, 10, || oracle.down.store(false, Ordering::SeqCst)).await;
    quiesce(&worker).await;
    let m = worker.metrics().snapshot();
    assert!(DeadLetter::list(&writer).await.unwrap().is_empty(), "{m:?}");
    assert_eq!((m.dead_lettered, m.failures), (0, 0), "{m:?}");
    assert_eq!(m.processed, rows.len() as u64, "{m:?}");
    assert_copied(&writer, &rows).await;
    worker.shutdown().await;
}

/// A weak observer fails until its letter is parked; its writer's primary is then
/// overwritten six times and GC passes the writer. A replay runs the observer once: the
/// letter kept the decided record, not the writer's raw strong record (whose evidence GC
/// removed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weak_observers_dead_letter_replays_after_gc() {
    let kv: Arc<dyn RawKv> = Arc::new(MemoryKv::new());
    let clock = Arc::new(LocalClock::new());
    let config = ClientConfig {
        max_lifetime: Duration::from_millis(200),
        gc_lag: Duration::from_millis(300),
        ..test_config()
    };
    // The writer has its own client: its notify keys reach the worker by scans, holding the
    // strong record (a hint would carry the decided one).
    let writer = Client::with_config(kv.clone(), clock.clone(), config.clone());
    writer.observe_column("w", "v");
    let client = Client::with_config(kv, clock, config);
    let (healthy, runs) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let mut registry = Registry::new();
    let (h, r) = (healthy.clone(), runs.clone());
    registry
        .weak(
            "w",
            "v",
            "flaky",
            observer_fn(move |_txn, _cell: Cell| {
                let (h, r) = (h.clone(), r.clone());
                async move {
                    if !h.load(Ordering::SeqCst) {
                        return Err(ObserverError::failed("downstream down"));
                    }
                    r.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                }
            }),
        )
        .unwrap();
    let worker = Worker::start(client.clone(), Arc::new(registry), quick(2));
    // The primary (first in key order) is another cell.
    let primary = Cell::new("a", "primary", "v");
    let t = writer.begin().await.unwrap();
    t.set(primary.clone(), "0");
    t.set(Cell::new("w", "r", "v"), "x");
    t.commit().await.unwrap();
    tokio::time::timeout(Duration::from_secs(60), async {
        while DeadLetter::list(&client).await.unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the letter is parked");
    for i in 1..=6 {
        let t = writer.begin().await.unwrap();
        t.set(primary.clone(), i.to_string());
        t.commit().await.unwrap();
    }
    // GC past every one of those writes, once the lag allows it.
    let past = writer.begin().await.unwrap().start_ts();
    tokio::time::timeout(Duration::from_secs(60), async {
        while writer.gc(past).await.is_err() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("GC runs once its lag allows");
    healthy.store(true, Ordering::SeqCst);
    for letter in DeadLetter::list(&client).await.unwrap() {
        letter.replay(&client).await.unwrap();
    }
    quiesce(&worker).await;
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the replay ran the observer"
    );
    assert!(DeadLetter::list(&client).await.unwrap().is_empty());
    worker.shutdown().await;
}
