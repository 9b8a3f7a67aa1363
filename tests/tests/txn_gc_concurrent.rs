//! Concurrent GC passes as a supported configuration (`percolator::design::gc`): three GC
//! loops, two loaders (write-once events, redeliveries, retention deletes through the head),
//! two workers of one strong observer, and readers whose snapshots stall past the GC lag, all
//! at once on one store for `PERCOLATOR_GC_STRESS_SECS` (default 60) seconds. Afterwards:
//! every committed change was observed exactly once (no loss, no second committed run), no
//! committed write is lost, and every read was its snapshot's value or `SnapshotTooOld`.

mod common;

use common::test_config;
use observers::{observer_fn_with, Worker};
use percolator::kv::{MemoryKv, RawKv};
use percolator::ts::{LocalClock, Timestamp};
use percolator::txn::{Client, ClientConfig, TxnError};
use percolator::Cell;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const EVENTS: &str = "events";
/// Safe points lag the oracle by this much: far less than a stalled reader waits.
const GC_LAG: Duration = Duration::from_millis(300);

fn event(id: u64) -> Cell {
    Cell::new(EVENTS, format!("e{id:08}"), "body")
}

/// What the observer has seen of an event: the commit_ts of each version it read, in order.
fn seen(cell: &Cell) -> Cell {
    Cell::new("seen", &cell.row, "v")
}

/// The committed history: per event, each committed write (commit_ts, value; `None` a
/// delete); events whose last write's outcome is unknown are not checked.
#[derive(Default)]
struct History {
    writes: BTreeMap<Cell, Vec<(u64, Option<Vec<u8>>)>>,
    unknown: HashSet<Cell>,
    /// Reads to check at the end: (cell, snapshot, what it returned).
    reads: Vec<(Cell, u64, Result<Option<Vec<u8>>, String>)>,
}

impl History {
    fn value_at(&self, cell: &Cell, ts: u64) -> Option<Vec<u8>> {
        self.writes.get(cell).and_then(|writes| {
            writes
                .iter()
                .filter(|(c, _)| *c <= ts)
                .max_by_key(|(c, _)| *c)
                .and_then(|(_, v)| v.clone())
        })
    }
}

fn client(kv: &Arc<dyn RawKv>, clock: &Arc<LocalClock>, config: ClientConfig) -> Client {
    let client = Client::with_config(kv.clone(), clock.clone(), config);
    client.write_once_column(EVENTS, "body");
    client
}

fn writer_config() -> ClientConfig {
    ClientConfig {
        lock_ttl: Duration::from_millis(100),
        max_lifetime: Duration::from_millis(250),
        gc_lag: GC_LAG,
        ..test_config()
    }
}

/// Commits `txn`'s writes of `cells` and records the outcome in `history`.
async fn commit_and_record(
    txn: percolator::Transaction,
    cells: &[(Cell, Option<Vec<u8>>)],
    history: &Mutex<History>,
) {
    let result = txn.commit().await;
    let mut history = history.lock().unwrap();
    match result {
        Ok(commit_ts) => {
            for (cell, value) in cells {
                history
                    .writes
                    .entry(cell.clone())
                    .or_default()
                    .push((commit_ts.0, value.clone()));
            }
        }
        // Certainly not committed.
        Err(
            TxnError::Conflict { .. } | TxnError::Aborted { .. } | TxnError::WrittenOnce { .. },
        ) => {}
        Err(TxnError::SnapshotTooOld { .. }) => {}
        Err(_) => {
            for (cell, _) in cells {
                history.unknown.insert(cell.clone());
            }
        }
    }
}

/// A loader: batches of new events with its offset, redeliveries of earlier events, and
/// retention deletes of one event (a transaction of write-once cells only: through the head).
async fn loader(client: Client, id: u64, stop: Arc<AtomicBool>, history: Arc<Mutex<History>>) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(id);
    let offset = Cell::new("loader", format!("l{id}"), "offset");
    let mut next = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let Ok(txn) = client.begin().await else {
            continue;
        };
        let roll = rng.gen_range(0..10);
        let cells: Vec<(Cell, Option<Vec<u8>>)> = if roll < 7 || next == 0 {
            let n = rng.gen_range(1..4);
            let ids = (next..next + n)
                .map(|i| id * 1_000_000 + i)
                .collect::<Vec<_>>();
            next += n;
            ids.into_iter()
                .map(|i| (event(i), Some(format!("event {i}").into_bytes())))
                .collect()
        } else if roll < 9 {
            let i = id * 1_000_000 + rng.gen_range(0..next);
            vec![(event(i), Some(format!("event {i} again").into_bytes()))]
        } else {
            let i = id * 1_000_000 + rng.gen_range(0..next);
            vec![(event(i), None)]
        };
        let once_only = cells.iter().all(|(_, v)| v.is_none());
        if !once_only {
            // The loader's offset: the ordinary cell that orders its batches.
            if txn.get(&offset).await.is_err() {
                continue;
            }
            txn.set(offset.clone(), next.to_string());
        }
        for (cell, value) in &cells {
            match value {
                Some(v) => txn.set(cell.clone(), v.clone()),
                None => txn.delete(cell.clone()),
            }
        }
        commit_and_record(txn, &cells, &history).await;
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..5))).await;
    }
}

/// A GC loop: a pass at a safe point just past the lag, then a short random pause.
async fn gc_loop(client: Client, seed: u64, stop: Arc<AtomicBool>) -> usize {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut passes = 0;
    while !stop.load(Ordering::SeqCst) {
        let Ok(txn) = client.begin().await else {
            continue;
        };
        let now = txn.start_ts();
        txn.rollback();
        let lag = GC_LAG.as_millis() as u64 + 5;
        let sp = Timestamp::compose(now.physical_ms().saturating_sub(lag), 0);
        match client.gc(sp).await {
            Ok(_) => passes += 1,
            Err(TxnError::InvalidArgument(_)) => {}
            Err(e) => panic!("GC pass failed: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..40))).await;
    }
    passes
}

/// A reader whose snapshot often stalls past the GC lag before it reads.
async fn reader(client: Client, seed: u64, stop: Arc<AtomicBool>, history: Arc<Mutex<History>>) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    while !stop.load(Ordering::SeqCst) {
        let Ok(txn) = client.begin().await else {
            continue;
        };
        let pause = if rng.gen_bool(0.5) { 600 } else { 0 };
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..50) + pause)).await;
        let cells: Vec<Cell> = {
            let history = history.lock().unwrap();
            let known: Vec<&Cell> = history.writes.keys().collect();
            if known.is_empty() {
                continue;
            }
            (0..4)
                .map(|_| known[rng.gen_range(0..known.len())].clone())
                .collect()
        };
        let answers: Vec<Result<Option<Vec<u8>>, String>> = match txn.get_many(&cells).await {
            Ok(values) => values.into_iter().map(Ok).collect(),
            Err(TxnError::SnapshotTooOld { .. }) => continue,
            Err(e) => cells.iter().map(|_| Err(e.to_string())).collect(),
        };
        let mut history = history.lock().unwrap();
        for (cell, answer) in cells.into_iter().zip(answers) {
            history.reads.push((cell, txn.start_ts().0, answer));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_passes_workers_loaders_and_stalled_readers_at_once() {
    let secs: u64 = std::env::var("PERCOLATOR_GC_STRESS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let kv: Arc<dyn RawKv> = Arc::new(MemoryKv::new());
    let clock = Arc::new(LocalClock::new());
    let history = Arc::new(Mutex::new(History::default()));
    let stop = Arc::new(AtomicBool::new(false));

    // One strong observer: appends the commit_ts of the version it reads to `seen`.
    let observer = observer_fn_with((), |(), txn, cell: Cell| async move {
        let (_, commit_ts) = txn.get_versioned(&cell).await?;
        let mut list = txn
            .get(&seen(&cell))
            .await?
            .map(|v| String::from_utf8_lossy(&v).into_owned())
            .unwrap_or_default();
        list.push_str(&format!("{},", commit_ts.unwrap_or(0)));
        txn.set(seen(&cell), list);
        Ok(())
    });
    let registry = common::strong_registry(EVENTS, "body", "seen", observer);
    let mut workers = Vec::new();
    for w in 0..2 {
        let config = observers::WorkerConfig {
            id: format!("w{w}"),
            ..common::quick()
        };
        workers.push(Worker::start(
            client(&kv, &clock, writer_config()),
            registry.clone(),
            config,
        ));
    }
    let mut tasks = Vec::new();
    for l in 1..=2 {
        let c = client(&kv, &clock, writer_config());
        registry.declare(&c);
        tasks.push(tokio::spawn(loader(c, l, stop.clone(), history.clone())));
    }
    let reader_config = ClientConfig {
        max_lifetime: Duration::from_secs(600),
        ..test_config()
    };
    for r in 0..2 {
        let c = client(&kv, &clock, reader_config.clone());
        tasks.push(tokio::spawn(reader(
            c,
            100 + r,
            stop.clone(),
            history.clone(),
        )));
    }
    let mut gcs = Vec::new();
    for g in 0..3 {
        let c = client(&kv, &clock, writer_config());
        gcs.push(tokio::spawn(gc_loop(c, 200 + g, stop.clone())));
    }
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        t.await.unwrap();
    }
    let mut passes = 0;
    for g in gcs {
        passes += g.await.unwrap();
    }
    common::quiesce(workers.iter()).await;
    for w in workers {
        w.shutdown().await;
    }

    let history = std::mem::take(&mut *history.lock().unwrap());
    let check = client(&kv, &clock, reader_config);
    let txn = check.begin().await.unwrap();
    let mut changes = 0;
    for (cell, writes) in &history.writes {
        if history.unknown.contains(cell) {
            continue;
        }
        changes += writes.len();
        // No committed write lost.
        let newest = writes.iter().max_by_key(|(c, _)| *c).unwrap();
        assert_eq!(
            txn.get(cell).await.unwrap(),
            newest.1,
            "{cell}: the newest committed write"
        );
        // Observed: the newest change, each version at most once.
        let list = txn
            .get(&seen(cell))
            .await
            .unwrap()
            .map(|v| String::from_utf8_lossy(&v).into_owned())
            .unwrap_or_default();
        let list: Vec<u64> = list
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().unwrap())
            .collect();
        let distinct: HashSet<&u64> = list.iter().collect();
        assert_eq!(
            distinct.len(),
            list.len(),
            "{cell}: a version observed twice: {list:?}"
        );
        assert_eq!(
            list.last(),
            Some(&newest.0),
            "{cell}: the newest change was not observed: {list:?}, writes {writes:?}"
        );
    }
    let mut reads = 0;
    for (cell, at, answer) in &history.reads {
        if history.unknown.contains(cell) {
            continue;
        }
        match answer {
            Ok(value) => {
                assert_eq!(*value, history.value_at(cell, *at), "{cell} read at {at}");
                reads += 1;
            }
            Err(e) => panic!("{cell} read at {at} failed: {e}"),
        }
    }
    eprintln!(
        "{secs} s: {changes} committed changes, {passes} GC passes, {reads} reads checked, {} unknown",
        history.unknown.len()
    );
    assert!(changes > 0 && passes > 3 && reads > 0);
}
