//! Protocol corner cases: the CAS retry hazard, delayed prewrites, large values, GC.
//!
//! Each check takes an empty base store and builds its client on it (wrapped in fault or
//! hook layers where it needs them); `txn_protocol.rs` runs them on the memory store,
//! `txn_tikv.rs` on TiKV. [`for_each_protocol_check!`] names them all.

use super::{cell, client_on, count_locks, num, setup, test_config};
use percolator::codec::Space;
use percolator::kv::intercept::{Call, Hooks, Intercepted};
use percolator::kv::{scan_all, Faults, FaultyKv, RawKv, ScanOrder};
use percolator::txn::{ClientConfig, TxnError, TxnStatus};
use percolator::{KvError, Timestamp};
use std::sync::Arc;
use std::time::Duration;

/// Calls `$m! { name, ... }` with the name of every check of this module.
macro_rules! for_each_protocol_check {
    ($m:ident) => {
        $m! {
            cas_reported_failed_but_applied_is_success,
            delayed_secondary_prewrite_after_rollback_never_commits,
            delayed_primary_prewrite_after_rollback_never_succeeds,
            large_values_live_out_of_line,
            deletes_are_versions,
            finished_transactions_refuse_more_work,
            gc_keeps_what_the_safe_point_can_see_and_drops_the_rest,
            repeated_overwrites_and_gc_stay_bounded,
            corrupt_heads_are_typed_errors,
            gc_tombstone_keeps_versions_committed_after_the_safe_point,
            snapshot_overtaken_by_gc_refuses_reads,
            every_version_stays_readable_from_the_head_or_v,
        }
    };
}

/// Every successful increment is counted exactly once although CASes that applied are often
/// reported as failed.
pub async fn cas_reported_failed_but_applied_is_success(kv: Arc<dyn RawKv>) {
    let faulty = Arc::new(FaultyKv::new(
        kv,
        Faults {
            cas_hazard: 0.5,
            delay: 0.2,
            max_delay: Duration::from_millis(2),
            ..Default::default()
        },
    ));
    let c = client_on(faulty.clone(), test_config());
    setup(&c, &[("n", 0), ("m", 0)]).await;
    let mut handles = Vec::new();
    for _ in 0..4 {
        let c = c.clone();
        handles.push(tokio::spawn(async move {
            let mut done = 0;
            for _ in 0..25 {
                let r = c
                    .run(|txn| async move {
                        let n = num(txn.get(&cell("n")).await?).unwrap_or(0);
                        let m = num(txn.get(&cell("m")).await?).unwrap_or(0);
                        txn.set(cell("n"), (n + 1).to_string());
                        txn.set(cell("m"), (m + 1).to_string());
                        Ok::<_, TxnError>(())
                    })
                    .await;
                match r {
                    Ok(()) => done += 1,
                    Err(e) => assert!(e.is_retryable(), "unexpected error {e}"),
                }
            }
            done
        }));
    }
    let mut committed = 0;
    for h in handles {
        committed += h.await.unwrap();
    }
    assert!(
        faulty.hazards_injected() > 0,
        "the hazard was never injected"
    );
    let r = c.begin().await.unwrap();
    assert_eq!(num(r.get(&cell("n")).await.unwrap()), Some(committed));
    assert_eq!(num(r.get(&cell("m")).await.unwrap()), Some(committed));
    assert!(committed > 0);
}

/// Hooks that hold back the CAS of one key until released.
struct Gate {
    gated_key: Vec<u8>,
    armed: std::sync::atomic::AtomicBool,
    gate: tokio::sync::Semaphore,
    waiting: tokio::sync::Notify,
}

#[async_trait::async_trait]
impl Hooks for Gate {
    async fn before(&self, call: Call<'_>) -> Result<(), KvError> {
        // Only the first CAS of the key after arming (T1's prewrite) is held back.
        use std::sync::atomic::Ordering::SeqCst;
        if let Call::CompareAndSwap { key, .. } = call {
            if key == self.gated_key.as_slice()
                && self
                    .armed
                    .compare_exchange(true, false, SeqCst, SeqCst)
                    .is_ok()
            {
                self.waiting.notify_one();
                let permit = self.gate.acquire().await.expect("gate open");
                permit.forget();
            }
        }
        Ok(())
    }
}

async fn delayed_prewrite_scenario(inner: Arc<dyn RawKv>, delay_primary: bool) {
    let codec = percolator::KeyCodec::new("test");
    let (p, s) = (cell("p"), cell("s"));
    let gated = if delay_primary { &p } else { &s };
    let kv = Arc::new(Intercepted::wrap(
        inner,
        Gate {
            gated_key: codec.head(gated),
            armed: std::sync::atomic::AtomicBool::new(false),
            gate: tokio::sync::Semaphore::new(0),
            waiting: tokio::sync::Notify::new(),
        },
    ));
    let gate = kv.hooks();
    // T1 stands for a stalled process: it sends no heartbeats either.
    let config = ClientConfig {
        heartbeat: false,
        ..test_config()
    };
    let c = client_on(kv.clone(), config);
    setup(&c, &[("p", 1), ("s", 2)]).await;
    gate.armed.store(true, std::sync::atomic::Ordering::SeqCst);
    let t1 = c.begin().await.unwrap();
    t1.set(p.clone(), "10");
    t1.set(s.clone(), "20");
    let commit = tokio::spawn({
        let t1 = t1.clone();
        async move { t1.commit().await }
    });
    // T1's CAS of the gated head is now held back. Another reader meets T1's other lock;
    // once it expires, T1 is rolled back for good.
    gate.waiting.notified().await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let t2 = c.begin().await.unwrap();
    let other = if delay_primary { &s } else { &p };
    let seen = num(t2.get(other).await.unwrap());
    assert_eq!(
        seen,
        Some(if delay_primary { 2 } else { 1 }),
        "T1 must be rolled back"
    );
    assert_eq!(
        c.txn_status(&p, t1.start_ts()).await.unwrap(),
        TxnStatus::RolledBack
    );
    gate.gate.add_permits(1000);
    let result = commit.await.unwrap();
    assert!(
        matches!(
            result,
            Err(TxnError::Aborted { .. }) | Err(TxnError::Conflict { .. })
        ),
        "a prewrite delayed past the rollback must not let T1 commit: {result:?}"
    );
    let t3 = c.begin().await.unwrap();
    assert_eq!(num(t3.get(&p).await.unwrap()), Some(1));
    assert_eq!(num(t3.get(&s).await.unwrap()), Some(2));
    c.resolve_all_locks().await.unwrap();
    assert_eq!(count_locks(&c).await, 0);
}

pub async fn delayed_secondary_prewrite_after_rollback_never_commits(kv: Arc<dyn RawKv>) {
    delayed_prewrite_scenario(kv, false).await;
}

pub async fn delayed_primary_prewrite_after_rollback_never_succeeds(kv: Arc<dyn RawKv>) {
    delayed_prewrite_scenario(kv, true).await;
}

pub async fn large_values_live_out_of_line(kv: Arc<dyn RawKv>) {
    let c = client_on(kv, test_config());
    let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let t = c.begin().await.unwrap();
    t.set(cell("big"), big.clone());
    t.set(cell("small"), "s");
    t.commit().await.unwrap();
    let data = scan_all(
        c.store().as_ref(),
        c.codec().space_range(Space::Data),
        ScanOrder::Forward,
    )
    .await
    .unwrap();
    assert_eq!(data.len(), 1, "only the large value goes to a D key");
    let r = c.begin().await.unwrap();
    assert_eq!(r.get(&cell("big")).await.unwrap(), Some(big));
    assert_eq!(r.get(&cell("small")).await.unwrap(), Some(b"s".to_vec()));
}

pub async fn deletes_are_versions(kv: Arc<dyn RawKv>) {
    let c = client_on(kv, test_config());
    setup(&c, &[("x", 1)]).await;
    let before = c.begin().await.unwrap();
    let t = c.begin().await.unwrap();
    t.delete(cell("x"));
    t.commit().await.unwrap();
    assert_eq!(num(before.get(&cell("x")).await.unwrap()), Some(1));
    let after = c.begin().await.unwrap();
    assert_eq!(after.get(&cell("x")).await.unwrap(), None);
}

pub async fn finished_transactions_refuse_more_work(kv: Arc<dyn RawKv>) {
    let c = client_on(kv, test_config());
    let t = c.begin().await.unwrap();
    t.set(cell("x"), "1");
    t.commit().await.unwrap();
    assert!(matches!(t.commit().await, Err(TxnError::Finished { .. })));
    assert!(matches!(
        t.get(&cell("x")).await,
        Err(TxnError::Finished { .. })
    ));
}

fn gc_config() -> ClientConfig {
    ClientConfig {
        namespace: b"test".to_vec(),
        lock_ttl: Duration::from_millis(200),
        max_lifetime: Duration::from_millis(500),
        gc_lag: Duration::from_millis(700),
        inline_limit: 8,
        ..ClientConfig::default()
    }
}

async fn count_space(c: &percolator::Client, space: Space) -> usize {
    scan_all(
        c.store().as_ref(),
        c.codec().space_range(space),
        ScanOrder::Forward,
    )
    .await
    .unwrap()
    .len()
}

/// How many superseded versions are stored: `V` entries and the versions heads keep in
/// `recent`, counted once each (a spilled version may briefly be in both).
async fn count_old_versions(c: &percolator::Client) -> usize {
    use percolator::codec::Key;
    let mut versions = std::collections::HashSet::new();
    let heads = scan_all(
        c.store().as_ref(),
        c.codec().space_range(Space::Head),
        ScanOrder::Forward,
    )
    .await
    .unwrap();
    for (key, bytes) in heads {
        let Ok(Key::Head(cell)) = c.codec().decode(&key) else {
            panic!("not a head key: {}", key.escape_ascii());
        };
        let head = percolator::record::Head::decode(&bytes).unwrap();
        versions.extend(head.recent.iter().map(|v| (cell.clone(), v.commit_ts)));
    }
    let stored = scan_all(
        c.store().as_ref(),
        c.codec().space_range(Space::Version),
        ScanOrder::Forward,
    )
    .await
    .unwrap();
    for (key, _) in stored {
        let Ok(Key::Version(cell, commit_ts)) = c.codec().decode(&key) else {
            panic!("not a version key: {}", key.escape_ascii());
        };
        versions.insert((cell, commit_ts));
    }
    versions.len()
}

/// GC keeps every value visible at or after the safe point and removes the rest.
pub async fn gc_keeps_what_the_safe_point_can_see_and_drops_the_rest(kv: Arc<dyn RawKv>) {
    let c = client_on(kv, gc_config());
    let write = |v: String| {
        let c = c.clone();
        async move {
            let t = c.begin().await.unwrap();
            t.set(cell("x"), v);
            t.commit().await.unwrap()
        }
    };
    let mut commits = Vec::new();
    for i in 1..=5 {
        // Values longer than the inline limit: every version has a D key.
        commits.push(write(format!("value-{i:04}-long")).await);
    }
    // A cell deleted below the safe point, and one with a crashed writer's lock.
    setup(&c, &[("gone", 1)]).await;
    let t = c.begin().await.unwrap();
    t.delete(cell("gone"));
    t.commit().await.unwrap();
    let crashed = c.begin().await.unwrap();
    crashed.set(cell("locked"), "never");
    crashed.set_crash_hook(Arc::new(|_| true));
    assert!(crashed.commit().await.is_err());

    let safe_point: Timestamp = c.oracle().get_timestamp().await.unwrap();
    for i in 6..=8 {
        commits.push(write(format!("value-{i:04}-long")).await);
    }
    assert_eq!(
        count_old_versions(&c).await,
        7 + 1,
        "V and the heads hold v1..v7 and gone@1"
    );
    // Too recent a safe point is refused.
    assert!(matches!(
        c.gc(c.oracle().get_timestamp().await.unwrap()).await,
        Err(TxnError::InvalidArgument(_))
    ));
    tokio::time::sleep(Duration::from_millis(800)).await;
    let stats = c.gc(safe_point).await.unwrap();
    assert_eq!(stats.locks_resolved, 1, "{stats:?}");
    assert_eq!(stats.heads_tombstoned, 1, "{stats:?}");
    assert_eq!(count_locks(&c).await, 0);

    // Readers at or after the safe point see what they saw before.
    let at = |ts: Timestamp| {
        let c = c.clone();
        async move {
            let snap = c.snapshot_at(ts).await.unwrap();
            snap.get(&cell("x")).await.unwrap()
        }
    };
    assert_eq!(at(safe_point).await, Some(b"value-0005-long".to_vec()));
    for (i, ts) in commits.iter().enumerate().skip(5) {
        assert_eq!(
            at(*ts).await,
            Some(format!("value-{:04}-long", i + 1).into_bytes())
        );
    }
    let snap = c.snapshot_at(safe_point).await.unwrap();
    assert_eq!(snap.get(&cell("gone")).await.unwrap(), None);
    assert_eq!(snap.get(&cell("locked")).await.unwrap(), None);
    // Below the safe point is refused rather than answered wrongly.
    assert!(matches!(
        c.snapshot_at(commits[1]).await,
        Err(TxnError::SnapshotTooOld { .. })
    ));
    // v5 (newest at or below sp), v6, v7 are kept; D keeps exactly the values of v5..v8.
    assert_eq!(count_old_versions(&c).await, 3);
    assert_eq!(count_space(&c, Space::Data).await, 4);
}

/// Old data does not grow without bound: repeated overwrites plus GC keep V small.
pub async fn repeated_overwrites_and_gc_stay_bounded(kv: Arc<dyn RawKv>) {
    let c = client_on(kv, gc_config());
    for round in 0..3 {
        for i in 0..30 {
            let t = c.begin().await.unwrap();
            t.set(cell("hot"), format!("{round}-{i}"));
            t.commit().await.unwrap();
        }
        let sp = c.oracle().get_timestamp().await.unwrap();
        tokio::time::sleep(Duration::from_millis(750)).await;
        c.gc(sp).await.unwrap();
        assert!(count_old_versions(&c).await <= 1, "round {round}");
    }
    let r = c.begin().await.unwrap();
    assert_eq!(r.get(&cell("hot")).await.unwrap(), Some(b"2-29".to_vec()));
}

/// Corrupt head bytes give a typed error, not a panic.
pub async fn corrupt_heads_are_typed_errors(kv: Arc<dyn RawKv>) {
    let c = client_on(kv, test_config());
    let key = c.codec().head(&cell("bad"));
    c.store().put(key, b"garbage".to_vec()).await.unwrap();
    let t = c.begin().await.unwrap();
    assert!(matches!(
        t.get(&cell("bad")).await,
        Err(TxnError::Corrupt { .. })
    ));
}

/// Hooks that run a callback (once) right after GC shrinks a head to a tombstone, before GC
/// deletes the cell's versions: the window in which new transactions may commit the cell again.
struct AfterTombstone {
    hook:
        tokio::sync::Mutex<Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>>>,
}

#[async_trait::async_trait]
impl Hooks for AfterTombstone {
    async fn swapped(
        &self,
        _key: &[u8],
        new: &[u8],
        out: percolator::CasOutcome,
    ) -> Result<percolator::CasOutcome, KvError> {
        let tombstone = percolator::record::Head::decode(new)
            .is_ok_and(|h| h.latest.is_none() && h.lock.is_none() && h.floor > 0);
        if out.swapped && tombstone {
            let hook = self.hook.lock().await.take();
            if let Some(hook) = hook {
                hook.await;
            }
        }
        Ok(out)
    }
}

/// Review finding: after the tombstone CAS, GC must not delete versions committed above the
/// safe point (a new transaction may commit the cell and a later one push it into V).
pub async fn gc_tombstone_keeps_versions_committed_after_the_safe_point(kv: Arc<dyn RawKv>) {
    let kv = Arc::new(Intercepted::wrap(
        kv,
        AfterTombstone {
            hook: tokio::sync::Mutex::new(None),
        },
    ));
    let c = client_on(kv.clone(), gc_config());
    setup(&c, &[("x", 0)]).await;
    let t = c.begin().await.unwrap();
    t.delete(cell("x"));
    t.commit().await.unwrap();
    let sp = c.oracle().get_timestamp().await.unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    let (tx, rx) = tokio::sync::oneshot::channel();
    {
        let c = c.clone();
        *kv.hooks().hook.lock().await = Some(Box::pin(async move {
            // t1 commits x=1; t2 commits x=2, pushing t1's version into V.
            let t1 = c.begin().await.unwrap();
            t1.set(cell("x"), "1");
            let c1 = t1.commit().await.unwrap();
            let t2 = c.begin().await.unwrap();
            t2.set(cell("x"), "2");
            t2.commit().await.unwrap();
            let _ = tx.send((t1.start_ts(), c1));
        }));
    }
    let stats = c.gc(sp).await.unwrap();
    assert_eq!(stats.heads_tombstoned, 1);
    let (t1_start, c1) = rx.await.expect("hook ran");
    assert_eq!(
        c.txn_status(&cell("x"), t1_start).await.unwrap(),
        TxnStatus::Committed(c1),
        "t1's commit record survived GC"
    );
    let snap = c.snapshot_at(c1).await.unwrap();
    assert_eq!(num(snap.get(&cell("x")).await.unwrap()), Some(1));
    let now = c.begin().await.unwrap();
    assert_eq!(num(now.get(&cell("x")).await.unwrap()), Some(2));
}

/// Review finding: a snapshot at a chosen timestamp that GC passes while it is open refuses
/// to answer instead of returning a read that may have missed deleted versions.
pub async fn snapshot_overtaken_by_gc_refuses_reads(kv: Arc<dyn RawKv>) {
    let c = client_on(kv, gc_config());
    setup(&c, &[("x", 1)]).await;
    let old = c.oracle().get_timestamp().await.unwrap();
    setup(&c, &[("x", 2)]).await;
    let snap = c.snapshot_at(old).await.unwrap();
    assert_eq!(num(snap.get(&cell("x")).await.unwrap()), Some(1));
    tokio::time::sleep(Duration::from_millis(800)).await;
    let sp = c.oracle().get_timestamp().await.unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    c.gc(sp).await.unwrap();
    assert!(matches!(
        snap.get(&cell("x")).await,
        Err(TxnError::SnapshotTooOld { .. })
    ));
}

/// Heads keep the few newest versions and spill older ones to V: a snapshot taken before each
/// commit still reads the version before it, and each writer's status is still `Committed`,
/// for small values (spilled every few commits) and values too large to keep many of.
pub async fn every_version_stays_readable_from_the_head_or_v(kv: Arc<dyn RawKv>) {
    let c = client_on(kv, test_config());
    for (name, len) in [("small", 4usize), ("large", 300)] {
        let target = cell(name);
        // (snapshot begun before commit i, value committed by i, writer start_ts, commit_ts)
        let mut history = Vec::new();
        for i in 0..13u8 {
            let before = c.begin().await.unwrap();
            let value = vec![b'a' + i; len];
            let w = c.begin().await.unwrap();
            w.set(target.clone(), value.clone());
            let writer = w.start_ts();
            let commit_ts = w.commit().await.unwrap();
            history.push((before, value, writer, commit_ts));
        }
        for (i, (before, _, writer, commit_ts)) in history.iter().enumerate() {
            let expected = i.checked_sub(1).map(|p| history[p].1.clone());
            assert_eq!(
                before.get(&target).await.unwrap(),
                expected,
                "{name}: snapshot before commit {i}"
            );
            assert_eq!(
                c.txn_status(&target, *writer).await.unwrap(),
                TxnStatus::Committed(*commit_ts),
                "{name}: status of writer {i}"
            );
        }
        let now = c.begin().await.unwrap();
        assert_eq!(
            now.get(&target).await.unwrap(),
            history.last().map(|h| h.1.clone())
        );
    }
}
