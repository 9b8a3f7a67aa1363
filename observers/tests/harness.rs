//! The author's test harness (`observers::testing`): a chain of two observers reaches its
//! end state; a failing observer's notification is dead-lettered, reported, and runs again
//! once replayed; a chain that never ends is reported instead of hanging the test.

use observers::testing::Harness;
use observers::{observer_fn, ObserverError, Registry, WorkerError};
use percolator::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn num(v: Option<Vec<u8>>) -> u64 {
    v.and_then(|b| String::from_utf8(b).ok()?.parse().ok())
        .unwrap_or(0)
}

/// in/<row>/v → mid/<row>/len (first observer) → out/all/total (second observer, summing).
fn chain() -> Registry {
    let mut registry = Registry::new();
    registry
        .strong(
            "in",
            "v",
            "measure",
            observer_fn(|txn, cell: Cell| async move {
                let v = txn.get(&cell).await?.unwrap_or_default();
                txn.set(Cell::new("mid", &cell.row, "len"), v.len().to_string());
                Ok(())
            }),
        )
        .unwrap();
    registry
        .strong(
            "mid",
            "len",
            "sum",
            observer_fn(|txn, _cell: Cell| async move {
                // The total is recomputed from every row: idempotent, whatever ran before.
                let rows = txn.scan(b"mid", b"", None).await?;
                let total: u64 = rows
                    .into_iter()
                    .filter(|(c, _)| c.column == b"len")
                    .map(|(_, v)| num(Some(v)))
                    .sum();
                txn.set(Cell::new("out", "all", "total"), total.to_string());
                Ok(())
            }),
        )
        .unwrap();
    registry
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_of_two_observers_reaches_its_end_state() {
    let h = Harness::new(chain());
    let mut expected = 0;
    for i in 0..20u64 {
        let value = "x".repeat(i as usize + 1);
        expected += value.len() as u64;
        h.write(Cell::new("in", format!("r{i:02}"), "v"), value)
            .await
            .unwrap();
    }
    let quiet = h.run_until_quiet().await.unwrap();
    assert!(
        quiet.ran >= 21,
        "20 measures and at least one sum: {quiet:?}"
    );
    assert_eq!(quiet.failures, 0);
    assert!(quiet.dead_letters.is_empty());
    let total = h.read(&Cell::new("out", "all", "total")).await.unwrap();
    assert_eq!(num(total), expected);
    // A second round sees only what changed since the first.
    h.write(Cell::new("in", "r00", "v"), "xxxxxxxxxx")
        .await
        .unwrap();
    let quiet = h.run_until_quiet().await.unwrap();
    assert!(quiet.ran >= 2 && quiet.ran < 21, "{quiet:?}");
    let total = h.read(&Cell::new("out", "all", "total")).await.unwrap();
    assert_eq!(num(total), expected - 1 + 10);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_observer_is_dead_lettered_reported_and_replayed() {
    let broken = Arc::new(AtomicBool::new(true));
    let calls = Arc::new(AtomicU64::new(0));
    let mut registry = Registry::new();
    {
        let (broken, calls) = (broken.clone(), calls.clone());
        registry
            .strong(
                "orders",
                "placed",
                "export",
                observer_fn(move |txn, cell: Cell| {
                    let (broken, calls) = (broken.clone(), calls.clone());
                    async move {
                        calls.fetch_add(1, Ordering::SeqCst);
                        if broken.load(Ordering::SeqCst) {
                            return Err(ObserverError::failed("export endpoint down"));
                        }
                        txn.set(Cell::new("orders", &cell.row, "exported"), "yes");
                        Ok(())
                    }
                }),
            )
            .unwrap();
    }
    let h = Harness::new(registry);
    h.write(Cell::new("orders", "o1", "placed"), "42")
        .await
        .unwrap();
    h.write(Cell::new("orders", "o2", "placed"), "7")
        .await
        .unwrap();
    let quiet = h.run_until_quiet().await.unwrap();
    assert_eq!(quiet.ran, 0, "{quiet:?}");
    assert_eq!(quiet.dead_lettered, 2, "{quiet:?}");
    // Each notification failed max_failures (3) times before it was parked.
    assert_eq!(quiet.failures, 6, "{quiet:?}");
    // At least one call per failure; more when both cells were first tried together in one
    // batch (a failing batch is split and its cells retried alone, see `WorkerConfig::batch_size`).
    assert!(calls.load(Ordering::SeqCst) >= 6);
    let mut rows: Vec<Vec<u8>> = quiet
        .dead_letters
        .iter()
        .map(|p| p.cell.clone().expect("a notify key").row)
        .collect();
    rows.sort();
    assert_eq!(rows, vec![b"o1".to_vec(), b"o2".to_vec()]);
    assert!(quiet
        .dead_letters
        .iter()
        .all(|p| p.error.contains("export endpoint down")));
    let exported = h.read(&Cell::new("orders", "o1", "exported")).await;
    assert_eq!(exported.unwrap(), None);

    // Fixed: replay the letters and the observer runs once more for each.
    broken.store(false, Ordering::SeqCst);
    assert_eq!(h.replay_dead_letters().await.unwrap(), 2);
    let quiet = h.run_until_quiet().await.unwrap();
    let counts = (quiet.ran, quiet.failures, quiet.dead_lettered);
    assert_eq!(counts, (2, 0, 0), "{quiet:?}");
    assert!(quiet.dead_letters.is_empty());
    for row in ["o1", "o2"] {
        let exported = h.read_string(&Cell::new("orders", row, "exported")).await;
        assert_eq!(exported.unwrap().as_deref(), Some("yes"));
    }
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_observer_is_dead_lettered_with_its_message() {
    let mut registry = Registry::new();
    registry
        .strong(
            "t",
            "c",
            "panics",
            observer_fn(|_txn, _cell: Cell| async move { panic!("bad input") }),
        )
        .unwrap();
    let h = Harness::new(registry);
    h.write(Cell::new("t", "r", "c"), "v").await.unwrap();
    let quiet = h.run_until_quiet().await.unwrap();
    assert_eq!(quiet.dead_letters.len(), 1);
    assert!(
        quiet.dead_letters[0].error.contains("bad input"),
        "{quiet:?}"
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_that_never_ends_is_reported_not_hung() {
    let mut registry = Registry::new();
    // Each run changes the very cell it observes: a new change, a new run, forever.
    registry
        .strong(
            "loop",
            "n",
            "again",
            observer_fn(|txn, cell: Cell| async move {
                let n = num(txn.get(&cell).await?);
                txn.set(cell, (n + 1).to_string());
                Ok(())
            }),
        )
        .unwrap();
    let h = Harness::new(registry).with_timeout(Duration::from_millis(500));
    h.write(Cell::new("loop", "r", "n"), "0").await.unwrap();
    match h.run_until_quiet().await {
        Err(WorkerError::NotQuiet { .. }) => {}
        other => panic!("expected NotQuiet, got {other:?}"),
    }
    h.shutdown().await;
}
