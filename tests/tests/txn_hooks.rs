//! What a client tells in-process code about its commits: `Transaction::on_commit` hooks and
//! `Client::notify_hints`.

mod common;
use common::*;
use percolator::record::Notification;
use percolator::TxnError;
use std::sync::{Arc, Mutex};

/// The hook runs once with the commit_ts after a successful commit, never after a rollback
/// or a commit that fails on a conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_commit_runs_only_after_a_successful_commit() {
    let c = memory_client();
    setup(&c, &[("x", 1)]).await;
    let seen: Arc<Mutex<Vec<(&'static str, u64)>>> = Arc::default();
    let hook = |name: &'static str| {
        let seen = seen.clone();
        move |ts: percolator::Timestamp| seen.lock().unwrap().push((name, ts.0))
    };

    let committed = c.begin().await.unwrap();
    committed.set(cell("x"), "2");
    committed.on_commit(hook("committed"));
    let commit_ts = committed.commit().await.unwrap();

    let rolled_back = c.begin().await.unwrap();
    rolled_back.set(cell("x"), "3");
    rolled_back.on_commit(hook("rolled back"));
    rolled_back.rollback();

    // Two writers of one cell: the later committer conflicts and its hook must not run.
    let first = c.begin().await.unwrap();
    let second = c.begin().await.unwrap();
    first.set(cell("x"), "4");
    second.set(cell("x"), "5");
    first.on_commit(hook("first"));
    second.on_commit(hook("conflicting"));
    let first_ts = first.commit().await.unwrap();
    let conflict = second.commit().await;
    assert!(
        matches!(conflict, Err(TxnError::Conflict { .. })),
        "{conflict:?}"
    );

    let read_only = c.begin().await.unwrap();
    let _ = read_only.get(&cell("x")).await.unwrap();
    read_only.on_commit(hook("read-only"));
    let read_ts = read_only.commit().await.unwrap();

    assert_eq!(
        *seen.lock().unwrap(),
        vec![
            ("committed", commit_ts.0),
            ("first", first_ts.0),
            ("read-only", read_ts.0)
        ]
    );
}

/// A commit that writes an observed column or notifies a cell publishes exactly those cells,
/// with the commit_ts and the timestamp inside its notify keys; other commits publish
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_hints_name_the_cells_and_the_commit() {
    let c = memory_client();
    c.observe_column("t", "v");
    let mut hints = c.notify_hints();

    let t = c.begin().await.unwrap();
    t.set(cell("a"), "1"); // observed column: notifies
    t.set(percolator::Cell::new("t", "a", "other"), "1"); // not observed
    t.notify(percolator::Cell::new("u", "b", "w")); // explicit
    let start_ts = t.start_ts().0;
    let commit_ts = t.commit().await.unwrap().0;

    let plain = c.begin().await.unwrap();
    plain.set(percolator::Cell::new("t", "z", "other"), "1");
    plain.commit().await.unwrap();

    c.weak_notify(&cell("w")).await.unwrap();

    let first = hints.recv().await.unwrap();
    assert_eq!(first.notify_ts, start_ts);
    assert_eq!(first.notification, Notification::Committed { commit_ts });
    let mut cells = first.cells.clone();
    cells.sort();
    let mut expected = vec![cell("a"), percolator::Cell::new("u", "b", "w")];
    expected.sort();
    assert_eq!(cells, expected);
    // The notify keys exist where the hint says.
    for cell in &first.cells {
        let key = c.codec().notify(cell, first.notify_ts);
        assert!(c.store().get(&key).await.unwrap().is_some(), "{cell}");
    }
    // The plain commit published nothing: the next hint is the weak notification.
    let weak = hints.recv().await.unwrap();
    assert_eq!(weak.notification, Notification::Weak);
    assert_eq!(weak.cells, vec![cell("w")]);
}
