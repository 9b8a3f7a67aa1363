//! Reprocessing (`observers::renotify`): cells written before their observer existed are
//! processed once it is registered and the column renotified: every cell holding a value
//! exactly once, also when a pass is cut short (a page limit, a failing store between a
//! page's notify keys and its progress record) and resumed; a prefix limits the rows;
//! `force` runs a strong observer again on cells it already handled.

mod common;
use common::*;
use observers::renotify::{renotifies_in_progress, renotify, RenotifyOptions, RenotifyReport};
use observers::{observer_fn, Registry, Worker};
use percolator::kv::intercept::{Call, Hooks, Intercepted};
use percolator::kv::{KvError, KvResult, MemoryKv, RawKv};
use percolator::txn::Client;
use percolator::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Writes `docs/<row>/body` for every row (and `docs/<row>/title`, another column), with no
/// observer declared: no notify key is put.
async fn write_rows(c: &Client, rows: &[String]) {
    for chunk in rows.chunks(50) {
        let t = c.begin().await.unwrap();
        for row in chunk {
            t.set(Cell::new("docs", row, "body"), format!("body of {row}"));
            t.set(Cell::new("docs", row, "title"), format!("title of {row}"));
        }
        t.commit().await.unwrap();
    }
}

/// A worker whose strong observer on `docs/body` counts its committed runs per row in
/// `runs/<row>/n` (in the run's own transaction: a run that did not commit is not counted).
fn counting_worker(c: &Client) -> Worker {
    let mut registry = Registry::new();
    registry
        .strong(
            "docs",
            "body",
            "count",
            observer_fn(|txn, cell: Cell| async move {
                let n = Cell::new("runs", &cell.row, "n");
                let runs = num(txn.get(&n).await?).unwrap_or(0);
                txn.set(n, (runs + 1).to_string());
                Ok(())
            }),
        )
        .unwrap();
    Worker::start(c.clone(), Arc::new(registry), quick())
}

async fn quiesce(worker: &Worker) {
    tokio::time::timeout(Duration::from_secs(60), worker.wait_until_quiescent())
        .await
        .expect("the worker did not quiesce in 60 s")
        .unwrap();
}

/// Committed runs per row, in the store.
async fn runs(c: &Client, rows: &[String]) -> Vec<i64> {
    let t = c.begin().await.unwrap();
    let cells: Vec<Cell> = rows.iter().map(|r| Cell::new("runs", r, "n")).collect();
    let values = t.get_many(&cells).await.unwrap();
    values.into_iter().map(|v| num(v).unwrap_or(0)).collect()
}

fn rows(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i:03}")).collect()
}

fn options(page_size: usize) -> RenotifyOptions {
    RenotifyOptions {
        page_size,
        ..RenotifyOptions::default()
    }
}

async fn every_existing_cell_is_processed_exactly_once(c: Client) {
    let all = rows("r", 40);
    write_rows(&c, &all).await;
    // A deleted cell holds no value: not notified.
    let t = c.begin().await.unwrap();
    t.delete(Cell::new("docs", "r007", "body"));
    t.commit().await.unwrap();
    let worker = counting_worker(&c);
    quiesce(&worker).await;
    assert!(
        runs(&c, &all).await.iter().all(|n| *n == 0),
        "nothing notified yet"
    );

    let report = renotify(&c, b"docs", b"body", &options(7)).await.unwrap();
    assert!(report.finished && !report.resumed, "{report:?}");
    assert_eq!(report.progress.rows_done, 40);
    assert_eq!(report.progress.notified, 39);
    assert_eq!(report.pages, 6);
    assert!(renotifies_in_progress(&c).await.unwrap().is_empty());
    quiesce(&worker).await;
    let counted = runs(&c, &all).await;
    for (row, n) in all.iter().zip(&counted) {
        let want = if row == "r007" { 0 } else { 1 };
        assert_eq!(*n, want, "runs of {row}");
    }

    // Again: the acknowledgments cover every cell, nothing runs; with force, each runs once
    // more. (A fresh worker: the first remembers the keys it just handled for a few seconds
    // and would leave the same keys, put again in the same second, alone until then.)
    worker.shutdown().await;
    let worker = counting_worker(&c);
    renotify(&c, b"docs", b"body", &options(7)).await.unwrap();
    quiesce(&worker).await;
    assert_eq!(runs(&c, &all).await, counted);
    let forced = RenotifyOptions {
        force: true,
        ..options(16)
    };
    renotify(&c, b"docs", b"body", &forced).await.unwrap();
    quiesce(&worker).await;
    let twice: Vec<i64> = counted.iter().map(|n| n * 2).collect();
    assert_eq!(runs(&c, &all).await, twice);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn existing_cells_are_processed_exactly_once_memory() {
    every_existing_cell_is_processed_exactly_once(memory_client()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn existing_cells_are_processed_exactly_once_tikv() {
    let store = tikv_store().await;
    every_existing_cell_is_processed_exactly_once(client_on(store.kv.clone(), test_config())).await;
}

/// Fails the `nth` CAS of a renotify progress record (counting from 1) before it reaches the
/// store: the page's notify keys are in the store, its progress is not.
struct FailProgressCas {
    nth: u64,
    seen: AtomicU64,
}

#[async_trait::async_trait]
impl Hooks for FailProgressCas {
    async fn before(&self, call: Call<'_>) -> KvResult<()> {
        if let Call::CompareAndSwap { key, .. } = call {
            let is_progress = key.windows(9).any(|w| w == b"renotify/");
            if is_progress && self.seen.fetch_add(1, Ordering::SeqCst) + 1 == self.nth {
                return Err(KvError::Unavailable {
                    op: "compare_and_swap",
                    message: "injected: progress CAS lost".into(),
                });
            }
        }
        Ok(())
    }
}

/// A pass cut short by a page limit, then by a failing store between a page's notify keys
/// and its progress record, resumes where its record says; every row still runs exactly
/// once (the redone page puts the same keys, which the acknowledgments absorb), with and
/// without force. Fails if a pass notified at fresh timestamps (the redone rows ran twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_cut_short_resumes_and_runs_every_row_once() {
    for force in [false, true] {
        let kv: Arc<dyn RawKv> = Arc::new(MemoryKv::new());
        let c = client_on(kv.clone(), test_config());
        let all = rows("r", 30);
        write_rows(&c, &all).await;
        let opts = RenotifyOptions {
            force,
            max_pages: Some(2),
            ..options(4)
        };
        let first = renotify(&c, b"docs", b"body", &opts).await.unwrap();
        assert!(!first.finished && !first.resumed, "{first:?}");
        assert_eq!(first.progress.rows_done, 8);
        let listed = renotifies_in_progress(&c).await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].last_row.as_deref(), Some(&b"r007"[..]));
        assert_eq!(listed[0].force_ts.is_some(), force);

        // The creation CAS is not made again (the record exists): the first CAS of this call
        // records its first page, the second fails after the second page's keys were put.
        let failing = Client::with_config(
            Arc::new(Intercepted::wrap(
                kv.clone(),
                FailProgressCas {
                    nth: 2,
                    seen: AtomicU64::new(0),
                },
            )),
            c.oracle().clone(),
            test_config(),
        );
        let cut = renotify(
            &failing,
            b"docs",
            b"body",
            &RenotifyOptions {
                max_pages: None,
                ..opts.clone()
            },
        )
        .await;
        assert!(cut.is_err(), "the injected failure is reported: {cut:?}");
        let listed = renotifies_in_progress(&c).await.unwrap();
        assert_eq!(listed[0].rows_done, 12, "the failed page is not recorded");

        let done: RenotifyReport = renotify(
            &c,
            b"docs",
            b"body",
            &RenotifyOptions {
                max_pages: None,
                ..opts
            },
        )
        .await
        .unwrap();
        assert!(done.finished && done.resumed, "{done:?}");
        assert_eq!(done.progress.rows_done, 30);
        assert_eq!(done.progress.notified, 30);
        // The worker starts after the passes, so it meets the redone page's keys twice when
        // the redo fell in another second (another bucket): the acknowledgments absorb the
        // second. (Started before, it may have handled the first copy already, and would leave
        // a copy put again in the same bucket alone for a few seconds: slower, same result.)
        let worker = counting_worker(&c);
        quiesce(&worker).await;
        assert_eq!(runs(&c, &all).await, vec![1; 30], "force {force}");
        worker.shutdown().await;
    }
}

/// With a prefix, only the rows starting with it are notified; the pass's record is its
/// own (a pass over other rows of the column does not meet it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_limits_the_rows() {
    let c = memory_client();
    let a = rows("a/", 12);
    let b = rows("b/", 12);
    write_rows(&c, &a).await;
    write_rows(&c, &b).await;
    let worker = counting_worker(&c);
    let report = renotify(
        &c,
        b"docs",
        b"body",
        &RenotifyOptions {
            prefix: b"a/".to_vec(),
            ..options(5)
        },
    )
    .await
    .unwrap();
    assert!(report.finished);
    assert_eq!(report.progress.notified, 12);
    quiesce(&worker).await;
    assert_eq!(runs(&c, &a).await, vec![1; 12]);
    assert_eq!(runs(&c, &b).await, vec![0; 12]);
    worker.shutdown().await;
}

/// Notify keys go where scanners look: with the notify floor raised ahead of the wall clock
/// by another client, a renotifying client that has never seen the floor still puts every
/// key at or above it (the commit path's settling), and the worker runs every row. Fails if
/// the keys were put at this second's bucket without settling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_keys_land_at_or_above_a_raised_floor() {
    let kv: Arc<dyn RawKv> = Arc::new(MemoryKv::new());
    let c = client_on(kv.clone(), test_config());
    let all = rows("r", 10);
    write_rows(&c, &all).await;
    let ahead = percolator::txn::wall_bucket() + 3600;
    c.raise_notify_floor(0, ahead).await.unwrap();
    assert_eq!(c.notify_floor().await.unwrap(), ahead);

    let other = Client::with_config(kv.clone(), c.oracle().clone(), test_config());
    let report = renotify(&other, b"docs", b"body", &options(4))
        .await
        .unwrap();
    assert_eq!(report.progress.notified, 10);
    let pending = observers::admin::notifications(&c, 100).await.unwrap();
    assert_eq!(pending.len(), 10, "every key is found from the floor on");
    assert!(pending.iter().all(|n| n.bucket >= ahead), "{pending:?}");

    let worker = counting_worker(&c);
    quiesce(&worker).await;
    assert_eq!(runs(&c, &all).await, vec![1; 10]);
    worker.shutdown().await;
}
