//! What a client tells in-process code about its commits: `Client::notify_hints`.

mod common;
use common::*;
use percolator::record::Notification;

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
        let key = c.codec().notify(cell, first.notify_ts, first.bucket);
        assert!(c.store().get(&key).await.unwrap().is_some(), "{cell}");
    }
    // The plain commit published nothing: the next hint is the weak notification.
    let weak = hints.recv().await.unwrap();
    assert_eq!(weak.notification, Notification::Weak);
    assert_eq!(weak.cells, vec![cell("w")]);
}
