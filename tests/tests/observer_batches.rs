//! Batches of one strong observer's notifications in one transaction: a conflict inside a
//! batch, a crash in the batch's commit, a hot cell that always conflicts and a failing
//! cell must not break "at most one committed run per change", and must not hold the other
//! cells of the batch back. Effects are counted in the store (committed runs), not in memory.

mod common;
use common::*;
use observers::{
    observer_fn, observer_fn_with, DeadLetter, ObserverError, Registry, Worker, WorkerConfig,
};
use percolator::txn::{Client, CrashPoint, TxnError};
use percolator::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Workers that find a backlog at once (no hint grace) and batch up to 16 cells.
fn batching() -> WorkerConfig {
    WorkerConfig {
        idle_interval: Duration::from_millis(20),
        max_idle_interval: Duration::from_millis(200),
        retry_backoff: Duration::from_millis(5),
        heartbeat: Duration::from_millis(100),
        hint_grace: Duration::ZERO,
        scanners: 1,
        batch_size: 16,
        ..WorkerConfig::default()
    }
}

fn row(i: usize) -> String {
    format!("r{i:02}")
}

/// Writes in/<row>/v for `rows` rows in one transaction (one scan page: one batch).
async fn change_all(c: &Client, rows: usize, value: &str) {
    let t = c.begin().await.unwrap();
    for i in 0..rows {
        t.set(Cell::new("in", row(i), "v"), value);
    }
    t.commit().await.unwrap();
}

/// The committed runs of each row (out/<row>/runs, incremented by every committed run).
async fn committed_runs(c: &Client, rows: usize) -> Vec<i64> {
    let r = c.begin().await.unwrap();
    let mut runs = Vec::new();
    for i in 0..rows {
        runs.push(num(r.get(&Cell::new("out", row(i), "runs")).await.unwrap()).unwrap_or(0));
    }
    runs
}

/// The observer body every test uses: copies in/<row>/v to out/<row>/v and counts the run
/// in out/<row>/runs (read-modify-write, so a run committed twice shows).
async fn copy_and_count(txn: &percolator::Transaction, cell: &Cell) -> Result<(), ObserverError> {
    let value = txn.get(cell).await?.unwrap_or_default();
    let runs = Cell::new("out", &cell.row, "runs");
    let n = num(txn.get(&runs).await?).unwrap_or(0);
    txn.set(Cell::new("out", &cell.row, "v"), value);
    txn.set(runs, (n + 1).to_string());
    Ok(())
}

/// The copy observer on in/v, with a twist: after its writes on row `hot`, while
/// `interfere()` holds, another client (`outer`) commits `external` over cells of the
/// running batch.
fn copy_interfered(
    outer: Client,
    hot: &'static [u8],
    interfere: impl Fn() -> bool + Send + Sync + 'static,
    external: fn(&percolator::Transaction),
) -> Arc<Registry> {
    let state = (outer, Arc::new(interfere));
    let copy = observer_fn_with(
        state,
        move |(outer, interfere), txn, cell: Cell| async move {
            copy_and_count(&txn, &cell).await?;
            if cell.row == hot && interfere() {
                outer
                    .run(|t| async move {
                        external(&t);
                        Ok::<_, TxnError>(())
                    })
                    .await?;
            }
            Ok(())
        },
    );
    strong_registry("in", "v", "copy", copy)
}

/// `registry` declared to `c`, and one change of in/<row>/v for each of `rows` rows.
async fn declare_and_change(c: &Client, registry: &Registry, rows: usize, value: &str) {
    registry.declare(c);
    change_all(c, rows, value).await;
}

/// While a batch of 16 runs, another transaction commits a write to one of the batch's
/// output cells and a second change of its input: the batch conflicts, is split, and every
/// change is still run at most once (the conflicted row once or twice, as its second change
/// may be covered by the same run; every other row exactly once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflict_inside_a_batch_splits_it_and_runs_each_change_once() {
    let c = memory_client();
    let rows = 16;
    let fired = Arc::new(AtomicBool::new(false));
    let flag = fired.clone();
    // Another client commits over one cell of this batch meanwhile, once.
    let registry = copy_interfered(
        c.clone(),
        b"r05",
        move || !flag.swap(true, Ordering::SeqCst),
        |t| {
            t.set(Cell::new("out", "r05", "v"), "external");
            t.set(Cell::new("in", "r05", "v"), "second");
        },
    );
    declare_and_change(&c, &registry, rows, "first").await;
    let worker = Worker::start(c.clone(), registry, batching());
    quiesce([&worker]).await;
    let m = worker.metrics().snapshot();
    worker.shutdown().await;
    assert!(fired.load(Ordering::SeqCst));
    assert!(m.splits >= 1, "the conflicted batch was split: {m:?}");
    assert!(m.batches >= 1, "halves committed as batches: {m:?}");
    let runs = committed_runs(&c, rows).await;
    for (i, n) in runs.iter().enumerate() {
        if i == 5 {
            assert!((1..=2).contains(n), "r05 ran {n} times for 2 changes");
        } else {
            assert_eq!(*n, 1, "{} ran {n} times for 1 change", row(i));
        }
    }
    let r = c.begin().await.unwrap();
    assert_eq!(
        r.get(&Cell::new("out", "r05", "v")).await.unwrap(),
        Some(b"second".to_vec()),
        "the second change was run after the external write"
    );
}

/// A crash in the commit of a batch (at each step of the protocol): the worker is killed
/// right after; a second worker finishes. Each row's change was run exactly once, counted
/// in the store (a partly committed batch re-run, or a batch's run lost, would show).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_mid_batch_leaves_each_change_run_exactly_once() {
    let points: [fn(CrashPoint) -> bool; 5] = [
        |p| matches!(p, CrashPoint::Prewrote { primary: true, .. }),
        |p| {
            matches!(
                p,
                CrashPoint::Prewrote {
                    primary: false,
                    locked: 5
                }
            )
        },
        |p| p == CrashPoint::AllPrewritten,
        |p| p == CrashPoint::Committed,
        |p| matches!(p, CrashPoint::SecondaryCommitted { committed: 3 }),
    ];
    for (n, point) in points.into_iter().enumerate() {
        let c = memory_client();
        let rows = 12;
        let crashed = Arc::new(AtomicBool::new(false));
        let registry = |crash: Option<Arc<AtomicBool>>| {
            let copy = observer_fn_with(crash, move |crash, txn, cell: Cell| async move {
                if let Some(crashed) = crash {
                    // Every transaction of the first worker crashes at `point` once (the
                    // first to reach it).
                    txn.set_crash_hook(Arc::new(move |p| {
                        point(p) && !crashed.swap(true, Ordering::SeqCst)
                    }));
                }
                copy_and_count(&txn, &cell).await
            });
            strong_registry("in", "v", "copy", copy)
        };
        let first = registry(Some(crashed.clone()));
        declare_and_change(&c, &first, rows, "x").await;
        let a = Worker::start(
            c.clone(),
            first,
            WorkerConfig {
                id: format!("a{n}"),
                ..batching()
            },
        );
        tokio::time::timeout(Duration::from_secs(60), async {
            while !crashed.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await
        .expect("the batch reached the crash point");
        a.kill();
        let b = Worker::start(
            c.clone(),
            registry(None),
            WorkerConfig {
                id: format!("b{n}"),
                ..batching()
            },
        );
        quiesce([&b]).await;
        b.shutdown().await;
        let runs = committed_runs(&c, rows).await;
        assert_eq!(
            runs,
            vec![1; rows],
            "crash point {n}: committed runs per row"
        );
    }
}

/// One cell of the batch conflicts on every attempt (another client commits over its output
/// each time it runs): the batch is split and every other cell is run while the hot one is
/// still failing; once it calms down, it runs too, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_cell_does_not_starve_the_rest_of_its_batch() {
    let c = memory_client();
    let rows = 16;
    let hot = Arc::new(AtomicBool::new(true));
    let flag = hot.clone();
    let registry = copy_interfered(
        c.clone(),
        b"r09",
        move || flag.load(Ordering::SeqCst),
        |t| t.set(Cell::new("out", "r09", "v"), "external"),
    );
    declare_and_change(&c, &registry, rows, "x").await;
    let worker = Worker::start(c.clone(), registry, batching());
    // A liveness bound, not a timing claim: the others finish while r09 still conflicts.
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let runs = committed_runs(&c, rows).await;
            if runs.iter().enumerate().all(|(i, n)| i == 9 || *n == 1) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the cells beside the hot one were run");
    assert_eq!(
        committed_runs(&c, rows).await[9],
        0,
        "r09 never committed while hot"
    );
    hot.store(false, Ordering::SeqCst);
    quiesce([&worker]).await;
    let m = worker.metrics().snapshot();
    worker.shutdown().await;
    assert!(m.splits >= 1, "{m:?}");
    assert_eq!(committed_runs(&c, rows).await, vec![1; rows]);
}

/// The test observer ([`copy_and_count`]) failing on row `broken` after its writes (which
/// then roll back).
fn copy_failing_on(broken: &'static str) -> Arc<dyn observers::Observer> {
    observer_fn(move |txn, cell: Cell| async move {
        copy_and_count(&txn, &cell).await?;
        if cell.row == broken.as_bytes() {
            return Err(ObserverError::failed(format!("{broken} is broken")));
        }
        Ok(())
    })
}

/// Runs one batching worker (3 failures make a dead letter) until quiet, checks that
/// exactly one dead letter was parked, for row `broken`, and returns the worker's metrics.
async fn run_with_one_dead_letter(
    c: &Client,
    registry: Arc<Registry>,
    broken: &str,
) -> observers::MetricsSnapshot {
    let worker = Worker::start(
        c.clone(),
        registry,
        WorkerConfig {
            max_failures: 3,
            ..batching()
        },
    );
    quiesce([&worker]).await;
    let m = worker.metrics().snapshot();
    worker.shutdown().await;
    let letters = DeadLetter::list(c).await.unwrap();
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert!(
        letters[0].error.contains(&format!("{broken} is broken")),
        "{letters:?}"
    );
    let Ok(percolator::codec::Key::Notify { cell, .. }) = c.codec().decode(&letters[0].notify_key)
    else {
        panic!("not a notify key");
    };
    assert_eq!(cell.row, broken.as_bytes());
    assert!(m.splits >= 1, "{m:?}");
    m
}

/// One cell of the batch always fails: it alone is dead-lettered, every other cell of the
/// batch runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_cell_is_dead_lettered_alone() {
    let c = memory_client();
    let rows = 16;
    let registry = strong_registry("in", "v", "copy", copy_failing_on("r03"));
    declare_and_change(&c, &registry, rows, "x").await;
    let m = run_with_one_dead_letter(&c, registry, "r03").await;
    assert_eq!(m.dead_lettered, 1, "{m:?}");
    let mut expected = vec![1; rows];
    expected[3] = 0;
    assert_eq!(committed_runs(&c, rows).await, expected);
}

/// A weak observer is batched too (no acknowledgments): 16 weak notifications found in one
/// scan page run in batches, every row's effect is committed at least once, and a failing
/// cell is split off and dead-lettered alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weak_notifications_run_in_batches_and_a_failing_cell_is_dead_lettered_alone() {
    let c = memory_client();
    let rows = 16;
    let mut registry = Registry::new();
    registry
        .weak("in", "v", "copy", copy_failing_on("r05"))
        .unwrap();
    let registry = Arc::new(registry);
    // A plain write of an observed column notifies strongly; a weak observer's work comes
    // from weak notifications (the strong ones run it too, without the check).
    declare_and_change(&c, &registry, rows, "x").await;
    for i in 0..rows {
        c.weak_notify(&Cell::new("in", row(i), "v")).await.unwrap();
    }
    let m = run_with_one_dead_letter(&c, registry, "r05").await;
    assert!(m.batches >= 1, "no weak batch committed: {m:?}");
    let runs = committed_runs(&c, rows).await;
    for (i, n) in runs.iter().enumerate() {
        if i == 5 {
            assert_eq!(*n, 0, "the failing row committed: {runs:?}");
        } else {
            assert!(*n >= 1, "row {i} never ran: {runs:?}");
        }
    }
}
