//! The notify floor (`percolator::design::notify`): scanners raise it past drained
//! buckets; writers that put notify keys below a floor raised meanwhile move them above it,
//! and the raiser moves the ones it finds below after its raise. No notification is lost.

mod common;
use common::*;
use observers::{observer_fn, Registry, Worker, WorkerConfig};
use percolator::codec::Key;
use percolator::kv::intercept::{Call, Hooks, Intercepted, Op};
use percolator::kv::{scan_all, KvError, KvResult, MemoryKv, RawKv, ScanOrder};
use percolator::txn::{wall_bucket, ClientConfig};
use percolator::{Cell, Client};
use rand::Rng;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Every notify key of the namespace: (bucket, cell, ts).
async fn notify_keys(client: &percolator::Client) -> Vec<(u64, Cell, u64)> {
    let range = client.codec().space_range(percolator::codec::Space::Notify);
    scan_all(client.store().as_ref(), range, ScanOrder::Forward)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|(k, _)| match client.codec().decode(&k) {
            Ok(Key::Notify { bucket, cell, ts }) => Some((bucket, cell, ts)),
            _ => None,
        })
        .collect()
}

/// A key put below the floor before the raise is moved above it by the raise; a writer
/// whose clock is behind a raised floor puts (or moves) its key at or above it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_below_a_raised_floor_are_moved_above_it() {
    let kv: Arc<dyn RawKv> = Arc::new(MemoryKv::new());
    let raiser = client_on(kv.clone(), test_config());
    let lagging = client_on(kv.clone(), test_config());
    let now = wall_bucket();
    // A writer's key that landed in an old bucket, unseen by the scan that chose the floor.
    let stale = raiser.codec().notify(&cell("old"), 7, now - 100);
    kv.put(stale.clone(), b"record".to_vec()).await.unwrap();
    let raise = raiser.raise_notify_floor(0, now + 50).await.unwrap();
    assert!(raise.raised);
    assert_eq!(raise.relocated, 1);
    assert_eq!(kv.get(&stale).await.unwrap(), None);
    // A raise to a floor already passed does nothing.
    assert!(!raiser.raise_notify_floor(0, now + 40).await.unwrap().raised);
    // A client that never saw the floor: its clock says `now`, the floor is 50 s ahead.
    let key = lagging
        .put_notification(&cell("late"), 9, b"record".to_vec())
        .await
        .unwrap();
    assert!(kv.get(&key).await.unwrap().is_some());
    let keys = notify_keys(&raiser).await;
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(
        keys.iter().all(|(bucket, _, _)| *bucket >= now + 50),
        "{keys:?}"
    );
}

/// Randomized: writers (separate clients, so separate views of the floor) put notifications
/// while a raiser keeps pushing the floor ahead of their clocks, obeying the scanner's rule
/// (never past the oldest key its scan from the floor found and left) and handles most keys
/// it finds. Afterwards every notification was handled or is at or above the floor, and none
/// is below it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_writers_and_raises_lose_no_notification() {
    racing_writers_and_raises(Arc::new(MemoryKv::new()), 30, 20_000).await;
}

/// The same race on TiKV (`minitikv` in process, through `TikvKv`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_writers_and_raises_lose_no_notification_on_tikv() {
    let tikv = tikv_store().await;
    racing_writers_and_raises(tikv.kv.clone(), 10, 20_000).await;
}

/// The same race in TiKV's weather (three stores, regions split, merged and moved every
/// 10 ms through the namespace, busy servers, region errors, replies lost after apply): the
/// floor's CAS meets the retry hazard and scans cross moving region boundaries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_writers_and_raises_lose_no_notification_in_tikv_weather() {
    let tikv = tikv_weather_store(16).await;
    racing_writers_and_raises(tikv.kv.clone(), 10, 20_000).await;
}

/// The race on `kv`: writers go on until the floor was raised `raises_wanted` times (at least
/// 300 notifications each, at most `max_per_writer`).
async fn racing_writers_and_raises(kv: Arc<dyn RawKv>, raises_wanted: u32, max_per_writer: u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let raised = Arc::new(AtomicU32::new(0));
    // The raiser also plays the observers: it handles (deletes) most keys it finds.
    let raiser = {
        let client = client_on(kv.clone(), test_config());
        let (stop, raised) = (stop.clone(), raised.clone());
        tokio::spawn(async move {
            let mut raises = 0u32;
            let mut handled = BTreeSet::new();
            while !stop.load(Ordering::SeqCst) {
                let floor = client.notify_floor().await.unwrap();
                let range = client.codec().notify_from(floor);
                let page = scan_all(client.store().as_ref(), range, ScanOrder::Forward)
                    .await
                    .unwrap();
                let mut oldest: Option<u64> = None;
                // It leaves a tenth of a small pass, about two keys of a large one (a slow
                // store's passes are large: leaving a tenth would pin the floor for good).
                let leave = (2.0 / page.len().max(1) as f64).min(0.1);
                let mut done = Vec::new();
                for (key, _) in page {
                    let Ok(Key::Notify { bucket, cell, ts }) = client.codec().decode(&key) else {
                        continue;
                    };
                    if rand::thread_rng().gen_bool(leave) {
                        oldest = Some(oldest.map_or(bucket, |o| o.min(bucket)));
                    } else {
                        done.push(key);
                        handled.insert((cell, ts));
                    }
                }
                client.store().batch_delete(done).await.unwrap();
                let step = rand::thread_rng().gen_range(1..3);
                let to = oldest
                    .unwrap_or(u64::MAX)
                    .min(floor.max(wall_bucket()) + step);
                if client.raise_notify_floor(floor, to).await.unwrap().raised {
                    raises += 1;
                    raised.fetch_add(1, Ordering::SeqCst);
                }
                tokio::task::yield_now().await;
            }
            (raises, handled)
        })
    };
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let client = client_on(kv.clone(), test_config());
            let raised = raised.clone();
            tokio::spawn(async move {
                let mut written = BTreeSet::new();
                // At least 300 each, and on until the floor was raised `raises_wanted` times
                // meanwhile (or `max_per_writer`: writers that keep filling the floor's bucket
                // can hold it).
                for i in 0u64..max_per_writer {
                    if i >= 300 && raised.load(Ordering::SeqCst) >= raises_wanted {
                        break;
                    }
                    let cell = cell(&format!("w{w}-{i}"));
                    client
                        .put_notification(&cell, i, b"record".to_vec())
                        .await
                        .unwrap();
                    written.insert((cell, i));
                    if i % 16 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
                written
            })
        })
        .collect();
    let mut written = BTreeSet::new();
    for w in writers {
        written.extend(w.await.unwrap());
    }
    stop.store(true, Ordering::SeqCst);
    let (raises, handled) = raiser.await.unwrap();
    assert!(
        raises >= 5,
        "only {raises} raises: the race was not exercised"
    );
    let client = client_on(kv.clone(), test_config());
    let floor = client.notify_floor().await.unwrap();
    let keys = notify_keys(&client).await;
    let below: Vec<_> = keys.iter().filter(|(b, _, _)| *b < floor).collect();
    assert!(below.is_empty(), "keys below the floor {floor}: {below:?}");
    let mut found: BTreeSet<(Cell, u64)> = keys.into_iter().map(|(_, c, ts)| (c, ts)).collect();
    found.extend(handled);
    let lost: Vec<_> = written.difference(&found).collect();
    assert!(
        lost.is_empty(),
        "{} notifications lost: {lost:?}",
        lost.len()
    );
}

/// When an injected fault fires: before the call reaches the store, or after the store
/// applied it (its reply lost).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Before,
    After,
}

/// Fails the `nth` call of one kind (counted from when it is armed) as unavailable, before
/// or after it applied. Calls of a raise run one after another, so "the nth get" names one
/// step of it.
struct StepFault {
    target: (Op, u32, Phase),
    armed: AtomicBool,
    seen: std::sync::Mutex<std::collections::HashMap<Op, u32>>,
    fail_after: AtomicBool,
    fired: AtomicBool,
}

impl StepFault {
    fn new(op: Op, nth: u32, phase: Phase) -> Self {
        StepFault {
            target: (op, nth, phase),
            armed: AtomicBool::new(false),
            seen: Default::default(),
            fail_after: AtomicBool::new(false),
            fired: AtomicBool::new(false),
        }
    }

    fn unavailable(&self, op: Op) -> KvError {
        self.fired.store(true, Ordering::SeqCst);
        KvError::Unavailable {
            op: op.name(),
            message: "injected between the steps of a floor raise".to_string(),
        }
    }
}

#[async_trait::async_trait]
impl Hooks for StepFault {
    async fn before(&self, call: Call<'_>) -> KvResult<()> {
        let op = call.op();
        if !self.armed.load(Ordering::SeqCst) || op != self.target.0 {
            return Ok(());
        }
        let n = {
            let mut seen = self.seen.lock().unwrap();
            let n = seen.entry(op).or_default();
            *n += 1;
            *n
        };
        if n == self.target.1 {
            match self.target.2 {
                Phase::Before => return Err(self.unavailable(op)),
                Phase::After => self.fail_after.store(true, Ordering::SeqCst),
            }
        }
        Ok(())
    }

    async fn after(&self, op: Op) -> KvResult<()> {
        if op == self.target.0 && self.fail_after.swap(false, Ordering::SeqCst) {
            return Err(self.unavailable(op));
        }
        Ok(())
    }
}

/// A strong observer on `t/v` that counts its runs.
fn counting_registry(runs: Arc<AtomicU32>) -> Arc<Registry> {
    let mut registry = Registry::new();
    registry
        .strong(
            "t",
            "v",
            "count",
            observer_fn(move |_txn, _cell: Cell| {
                let runs = runs.clone();
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                }
            }),
        )
        .unwrap();
    Arc::new(registry)
}

/// One committed change of an observed cell whose notify key sits below the floor a raise
/// (made through `raiser`) is about to move past it, as a writer's key does when its floor
/// read came before the raise. Returns the raise's target.
async fn change_below_the_next_floor(client: &Client, row: &str) -> u64 {
    let txn = client.begin().await.unwrap();
    txn.set(cell(row), "x");
    txn.notify(cell(row));
    txn.commit().await.unwrap();
    wall_bucket() + 3
}

/// A worker on `kv` handles what is left; afterwards the observer ran once for the change,
/// and the rescan the raise owed is done.
async fn observer_runs_once(kv: Arc<dyn RawKv>, config: ClientConfig, step: &str) {
    let runs = Arc::new(AtomicU32::new(0));
    let client = client_on(kv, config);
    let worker = Worker::start(
        client.clone(),
        counting_registry(runs.clone()),
        WorkerConfig {
            idle_interval: Duration::from_millis(20),
            max_idle_interval: Duration::from_millis(100),
            retry_backoff: Duration::from_millis(5),
            hint_grace: Duration::ZERO,
            ..WorkerConfig::default()
        },
    );
    // Liveness bounds, not timing claims.
    tokio::time::timeout(Duration::from_secs(60), async {
        while runs.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        worker.wait_until_quiescent().await.unwrap();
        while client.notify_floor_record().await.unwrap().owes_rescan() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{step}: the change below the floor was never handled"));
    worker.shutdown().await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "{step}: observer runs");
}

/// Every step of a raise (each get, CAS, scan, put and delete of the raise and its rescan,
/// failed before it reached the store or after it applied) cut short: the notification below
/// the new floor is still handled, exactly once, by a worker that comes after.
async fn raises_cut_short_at_every_step(kv: Arc<dyn RawKv>) {
    let mut fired = 0;
    for op in [
        Op::Get,
        Op::CompareAndSwap,
        Op::Scan,
        Op::BatchPut,
        Op::BatchDelete,
    ] {
        for nth in 1..=3 {
            for phase in [Phase::Before, Phase::After] {
                let step = format!("{}#{nth} {phase:?}", op.name());
                let config = ClientConfig {
                    namespace: format!("cut-{}-{nth}-{phase:?}", op.name()).into_bytes(),
                    ..test_config()
                };
                let faulty = Arc::new(Intercepted::wrap(
                    kv.clone(),
                    StepFault::new(op, nth, phase),
                ));
                let raiser = client_on(faulty.clone(), config.clone());
                let to = change_below_the_next_floor(&raiser, "changed").await;
                let from = raiser.notify_floor().await.unwrap();
                faulty.hooks().armed.store(true, Ordering::SeqCst);
                let result = raiser.raise_notify_floor(from, to).await;
                faulty.hooks().armed.store(false, Ordering::SeqCst);
                if faulty.hooks().fired.load(Ordering::SeqCst) {
                    fired += 1;
                } else {
                    result.unwrap_or_else(|e| panic!("{step}: {e}"));
                }
                observer_runs_once(kv.clone(), config, &step).await;
            }
        }
    }
    // Get x3, CAS x2, scan x1, put x1, delete x1, each in two phases.
    assert!(fired >= 16, "only {fired} steps were cut short");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raise_cut_short_at_any_step_loses_no_notification() {
    raises_cut_short_at_every_step(Arc::new(MemoryKv::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raise_cut_short_at_any_step_loses_no_notification_on_tikv() {
    let tikv = tikv_store().await;
    raises_cut_short_at_every_step(tikv.kv.clone()).await;
}

/// The retry hazard between two raisers: R1's raise applies and its reply is lost; R2
/// raises further and its rescan fails too. The change below both floors is still handled
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_raisers_with_lost_replies_lose_no_notification() {
    let kv: Arc<dyn RawKv> = Arc::new(MemoryKv::new());
    let config = test_config();
    let r1 = Arc::new(Intercepted::wrap(
        kv.clone(),
        StepFault::new(Op::CompareAndSwap, 1, Phase::After),
    ));
    let r2 = Arc::new(Intercepted::wrap(
        kv.clone(),
        StepFault::new(Op::Scan, 1, Phase::Before),
    ));
    let raiser1 = client_on(r1.clone(), config.clone());
    let raiser2 = client_on(r2.clone(), config.clone());
    let to = change_below_the_next_floor(&raiser1, "changed").await;
    let from = raiser1.notify_floor().await.unwrap();
    r1.hooks().armed.store(true, Ordering::SeqCst);
    assert!(raiser1.raise_notify_floor(from, to).await.is_err());
    r2.hooks().armed.store(true, Ordering::SeqCst);
    let from2 = raiser2.notify_floor().await.unwrap();
    assert_eq!(from2, from, "readers start below the skipped range");
    assert!(raiser2.raise_notify_floor(from2, to + 2).await.is_err());
    // R1 retries its raise: it finds the floor past its target and still owes the rescan.
    r1.hooks().armed.store(false, Ordering::SeqCst);
    let again = raiser1.raise_notify_floor(from, to).await.unwrap();
    assert!(!again.raised);
    assert_eq!(again.relocated, 1, "the retry did the owed rescan");
    observer_runs_once(kv, config, "racing raisers").await;
}
