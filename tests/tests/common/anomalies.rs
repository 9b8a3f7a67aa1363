//! Hermitage-style anomaly suite: two interleaved transactions each. Snapshot isolation must
//! prevent G0, G1a, G1b, G1c, lost update (P4), read skew (G-single) and phantoms over a scan;
//! it allows write skew (G2-item).
//!
//! Each check takes a client on an empty store; `txn_anomalies.rs` runs them on the memory
//! store, `txn_tikv.rs` on TiKV. [`for_each_anomaly!`] names them all, so a new check runs on
//! every backend.

use super::{cell, count_locks, num, setup};
use percolator::txn::{Client, CrashPoint, TxnError};
use percolator::Cell;
use std::sync::Arc;

/// Calls `$m! { name, ... }` with the name of every check of this module.
macro_rules! for_each_anomaly {
    ($m:ident) => {
        $m! {
            g0_write_cycles_prevented,
            g1a_aborted_reads_prevented,
            g1b_intermediate_reads_prevented,
            g1c_circular_information_flow_prevented,
            p4_lost_update_prevented,
            g_single_read_skew_prevented,
            phantoms_over_a_scan_prevented,
            g2_item_write_skew_allowed,
        }
    };
}

fn is_conflict(r: &Result<percolator::Timestamp, TxnError>) -> bool {
    matches!(r, Err(TxnError::Conflict { .. }))
}

pub async fn g0_write_cycles_prevented(c: &Client) {
    setup(c, &[("x", 10), ("y", 20)]).await;
    let t1 = c.begin().await.unwrap();
    let t2 = c.begin().await.unwrap();
    t1.set(cell("x"), "11");
    t2.set(cell("x"), "12");
    t1.set(cell("y"), "21");
    t2.set(cell("y"), "22");
    t1.commit().await.unwrap();
    assert!(
        is_conflict(&t2.commit().await),
        "second writer must conflict"
    );
    let r = c.begin().await.unwrap();
    assert_eq!(num(r.get(&cell("x")).await.unwrap()), Some(11));
    assert_eq!(num(r.get(&cell("y")).await.unwrap()), Some(21));
}

pub async fn g1a_aborted_reads_prevented(c: &Client) {
    setup(c, &[("x", 10), ("y", 20)]).await;
    // T1 dies after locking both cells, before its commit point.
    let t1 = c.begin().await.unwrap();
    t1.set(cell("x"), "101");
    t1.set(cell("y"), "201");
    t1.set_crash_hook(Arc::new(|p| p == CrashPoint::AllPrewritten));
    assert!(matches!(t1.commit().await, Err(TxnError::InjectedCrash(_))));
    assert_eq!(count_locks(c).await, 2, "the crashed writer left its locks");
    // T2 (later) waits for the locks to expire, rolls them back, and reads the old values.
    let t2 = c.begin().await.unwrap();
    assert_eq!(num(t2.get(&cell("x")).await.unwrap()), Some(10));
    assert_eq!(num(t2.get(&cell("y")).await.unwrap()), Some(20));
    // Also with an explicit rollback.
    let t3 = c.begin().await.unwrap();
    t3.set(cell("x"), "102");
    t3.rollback();
    let t4 = c.begin().await.unwrap();
    assert_eq!(num(t4.get(&cell("x")).await.unwrap()), Some(10));
}

pub async fn g1b_intermediate_reads_prevented(c: &Client) {
    setup(c, &[("x", 10)]).await;
    let t1 = c.begin().await.unwrap();
    t1.set(cell("x"), "101");
    let t2 = c.begin().await.unwrap();
    assert_eq!(num(t2.get(&cell("x")).await.unwrap()), Some(10));
    t1.set(cell("x"), "11");
    t1.commit().await.unwrap();
    assert_eq!(
        num(t2.get(&cell("x")).await.unwrap()),
        Some(10),
        "snapshot is stable"
    );
    let t3 = c.begin().await.unwrap();
    assert_eq!(
        num(t3.get(&cell("x")).await.unwrap()),
        Some(11),
        "never the intermediate 101"
    );
}

pub async fn g1c_circular_information_flow_prevented(c: &Client) {
    setup(c, &[("x", 10), ("y", 20)]).await;
    let t1 = c.begin().await.unwrap();
    let t2 = c.begin().await.unwrap();
    t1.set(cell("x"), "11");
    t2.set(cell("y"), "22");
    assert_eq!(num(t1.get(&cell("y")).await.unwrap()), Some(20));
    assert_eq!(num(t2.get(&cell("x")).await.unwrap()), Some(10));
    t1.commit().await.unwrap();
    t2.commit().await.unwrap();
}

pub async fn p4_lost_update_prevented(c: &Client) {
    setup(c, &[("x", 10)]).await;
    let t1 = c.begin().await.unwrap();
    let t2 = c.begin().await.unwrap();
    let a = num(t1.get(&cell("x")).await.unwrap()).unwrap();
    let b = num(t2.get(&cell("x")).await.unwrap()).unwrap();
    t1.set(cell("x"), (a + 1).to_string());
    t2.set(cell("x"), (b + 1).to_string());
    t1.commit().await.unwrap();
    assert!(is_conflict(&t2.commit().await), "lost update must conflict");
    // Also when T2 commits while T1's lock is still in place (live lock: conflict, no wait).
    let t3 = c.begin().await.unwrap();
    let t4 = c.begin().await.unwrap();
    t3.set(cell("x"), "30");
    t4.set(cell("x"), "40");
    t3.set_crash_hook(Arc::new(|p| p == CrashPoint::AllPrewritten));
    assert!(t3.commit().await.is_err());
    assert!(is_conflict(&t4.commit().await), "a live lock is a conflict");
}

pub async fn g_single_read_skew_prevented(c: &Client) {
    setup(c, &[("x", 10), ("y", 20)]).await;
    let t1 = c.begin().await.unwrap();
    assert_eq!(num(t1.get(&cell("x")).await.unwrap()), Some(10));
    let t2 = c.begin().await.unwrap();
    t2.set(cell("x"), "12");
    t2.set(cell("y"), "18");
    t2.commit().await.unwrap();
    assert_eq!(
        num(t1.get(&cell("y")).await.unwrap()),
        Some(20),
        "read skew"
    );
    // Even when T2's secondary is still locked (T2 crashed right after its commit point),
    // a reader started later rolls it forward and sees both writes.
    let t3 = c.begin().await.unwrap();
    t3.set(cell("x"), "13");
    t3.set(cell("y"), "17");
    t3.set_crash_hook(Arc::new(|p| p == CrashPoint::Committed));
    assert!(matches!(t3.commit().await, Err(TxnError::InjectedCrash(_))));
    let t4 = c.begin().await.unwrap();
    let x = num(t4.get(&cell("x")).await.unwrap()).unwrap();
    let y = num(t4.get(&cell("y")).await.unwrap()).unwrap();
    assert_eq!((x, y), (13, 17));
}

pub async fn phantoms_over_a_scan_prevented(c: &Client) {
    setup(c, &[("a", 1), ("b", 2), ("c", 3)]).await;
    let t1 = c.begin().await.unwrap();
    let before = t1.scan(b"t", b"a", Some(b"z")).await.unwrap();
    assert_eq!(before.len(), 3);
    let t2 = c.begin().await.unwrap();
    t2.set(cell("bb"), "99");
    t2.delete(cell("c"));
    t2.commit().await.unwrap();
    let after = t1.scan(b"t", b"a", Some(b"z")).await.unwrap();
    assert_eq!(before, after, "a repeated scan must not see phantoms");
    let t3 = c.begin().await.unwrap();
    let rows: Vec<Vec<u8>> = t3
        .scan(b"t", b"a", Some(b"z"))
        .await
        .unwrap()
        .into_iter()
        .map(|(cell, _)| cell.row)
        .collect();
    assert_eq!(rows, vec![b"a".to_vec(), b"b".to_vec(), b"bb".to_vec()]);
    // Own writes show in the scan.
    t3.set(Cell::new("t", "ab", "v"), "5");
    t3.delete(cell("a"));
    let own: Vec<Vec<u8>> = t3
        .scan(b"t", b"a", None)
        .await
        .unwrap()
        .into_iter()
        .map(|(cell, _)| cell.row)
        .collect();
    assert_eq!(own, vec![b"ab".to_vec(), b"b".to_vec(), b"bb".to_vec()]);
}

pub async fn g2_item_write_skew_allowed(c: &Client) {
    setup(c, &[("x", 10), ("y", 20)]).await;
    let t1 = c.begin().await.unwrap();
    let t2 = c.begin().await.unwrap();
    let (x1, y1) = (
        num(t1.get(&cell("x")).await.unwrap()).unwrap(),
        num(t1.get(&cell("y")).await.unwrap()).unwrap(),
    );
    let (x2, y2) = (
        num(t2.get(&cell("x")).await.unwrap()).unwrap(),
        num(t2.get(&cell("y")).await.unwrap()).unwrap(),
    );
    t1.set(cell("x"), (x1 + y1).to_string());
    t2.set(cell("y"), (x2 + y2).to_string());
    t1.commit().await.unwrap();
    t2.commit().await.unwrap();
}
