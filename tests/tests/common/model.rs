//! Randomized histories checked against a model: random transactions on a small key set,
//! run concurrently with random crash injection and store faults. Afterwards:
//! - every read of a committed transaction returns the value of the latest write committed
//!   before its start_ts (or its own write);
//! - no committed write is lost and no aborted write is visible (the final state is the
//!   latest committed write of each cell);
//! - committed writers of one cell never overlap (first committer wins).
//!
//! Run on the faulty memory store by `txn_model.rs`, on TiKV by `txn_tikv.rs`.

use super::{client_on, count_locks, test_config};
use percolator::kv::RawKv;
use percolator::txn::{CrashPoint, TxnError, TxnStatus};
use percolator::{Cell, Timestamp};
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const KEYS: usize = 5;

#[derive(Debug, Clone)]
struct Record {
    start_ts: u64,
    primary: Option<Cell>,
    /// Key, value read, and the transaction's own buffered write of the key at that moment.
    #[allow(clippy::type_complexity)]
    reads: Vec<(usize, Option<Vec<u8>>, Option<Option<Vec<u8>>>)>,
    writes: Vec<(usize, Option<Vec<u8>>)>,
    /// Commit timestamp if the transaction reported a commit.
    commit_ts: Option<u64>,
    crashed: bool,
}

fn key(i: usize) -> Cell {
    Cell::new("m", format!("k{i}"), "v")
}

/// One randomized history on `kv` (an empty store; the caller chooses the faults): 6 tasks of
/// `txns_per_task` transactions each, checked against the model.
pub async fn run_history(kv: Arc<dyn RawKv>, seed: u64, txns_per_task: usize) {
    let c = client_on(kv, test_config());
    let history = Arc::new(Mutex::new(Vec::<Record>::new()));
    let mut tasks = Vec::new();
    for task in 0..6u64 {
        let (c, history) = (c.clone(), history.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed * 100 + task);
            for n in 0..txns_per_task {
                let t = c.begin().await.unwrap();
                let crash_after: Option<u64> = rng.gen_bool(0.15).then(|| rng.gen_range(0..5));
                if let Some(k) = crash_after {
                    let seen = Arc::new(AtomicU64::new(0));
                    t.set_crash_hook(Arc::new(move |_p: CrashPoint| {
                        seen.fetch_add(1, Ordering::SeqCst) == k
                    }));
                }
                let mut rec = Record {
                    start_ts: t.start_ts().0,
                    primary: None,
                    reads: Vec::new(),
                    writes: Vec::new(),
                    commit_ts: None,
                    crashed: false,
                };
                let mut ok = true;
                for _ in 0..rng.gen_range(1..5) {
                    let k = rng.gen_range(0..KEYS);
                    if rng.gen_bool(0.5) {
                        match t.get(&key(k)).await {
                            Ok(v) => {
                                let own = rec
                                    .writes
                                    .iter()
                                    .find(|(w, _)| *w == k)
                                    .map(|(_, v)| v.clone());
                                rec.reads.push((k, v, own))
                            }
                            Err(e) => panic!("read failed: {e}"),
                        }
                    } else {
                        let v = if rng.gen_bool(0.15) {
                            None
                        } else {
                            Some(format!("{}-{task}-{n}-{k}", rec.start_ts).into_bytes())
                        };
                        match &v {
                            Some(v) => t.set(key(k), v.clone()),
                            None => t.delete(key(k)),
                        }
                        rec.writes.retain(|(w, _)| *w != k);
                        rec.writes.push((k, v));
                    }
                }
                rec.writes.sort_by_key(|(k, _)| *k);
                rec.primary = rec.writes.first().map(|(k, _)| key(*k));
                match t.commit().await {
                    Ok(ts) => rec.commit_ts = Some(ts.0),
                    Err(TxnError::InjectedCrash(_)) => rec.crashed = true,
                    Err(e) if e.is_retryable() => ok = false,
                    Err(e) => panic!("commit failed: {e}"),
                }
                if ok || rec.crashed {
                    history.lock().unwrap().push(rec);
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    c.resolve_all_locks().await.unwrap();
    assert_eq!(count_locks(&c).await, 0);

    // Decide the fate of crashed writers through their primary, as any reader would.
    let mut records = history.lock().unwrap().clone();
    for rec in records.iter_mut().filter(|r| r.crashed) {
        if let Some(primary) = &rec.primary {
            match c
                .txn_status(primary, Timestamp(rec.start_ts))
                .await
                .unwrap()
            {
                TxnStatus::Committed(ts) => rec.commit_ts = Some(ts.0),
                TxnStatus::RolledBack => {}
                TxnStatus::Pending => panic!("still pending after resolution"),
            }
        }
    }
    // Committed writes per key, by commit_ts.
    // Per key: (commit_ts, start_ts, value) of every committed write.
    type Committed = Vec<(u64, u64, Option<Vec<u8>>)>;
    let mut writes: BTreeMap<usize, Committed> = BTreeMap::new();
    for rec in &records {
        if let Some(c_ts) = rec.commit_ts {
            for (k, v) in &rec.writes {
                writes
                    .entry(*k)
                    .or_default()
                    .push((c_ts, rec.start_ts, v.clone()));
            }
        }
    }
    for list in writes.values_mut() {
        list.sort_by_key(|(c_ts, _, _)| *c_ts);
        for pair in list.windows(2) {
            // First committer wins: a writer must start after the previous one committed.
            assert!(
                pair[1].1 > pair[0].0,
                "overlapping committed writers: {pair:?}"
            );
        }
    }
    let visible = |k: usize, ts: u64| -> Option<Vec<u8>> {
        writes
            .get(&k)
            .and_then(|l| l.iter().rev().find(|(c_ts, _, _)| *c_ts < ts))
            .and_then(|(_, _, v)| v.clone())
    };
    let mut checked = 0;
    for rec in records.iter().filter(|r| r.commit_ts.is_some()) {
        for (k, v, own) in &rec.reads {
            // A key the transaction already wrote reads back its own write; any other key
            // reads the latest write committed before start_ts.
            let expected = match own {
                Some(own) => own.clone(),
                None => visible(*k, rec.start_ts),
            };
            assert!(
                *v == expected,
                "txn {} read {:?} of k{k}, expected {:?}",
                rec.start_ts,
                v.as_deref().map(String::from_utf8_lossy),
                expected.as_deref().map(String::from_utf8_lossy)
            );
            checked += 1;
        }
    }
    let reader = c.begin().await.unwrap();
    for k in 0..KEYS {
        let expected = writes
            .get(&k)
            .and_then(|l| l.last())
            .and_then(|(_, _, v)| v.clone());
        assert_eq!(
            reader.get(&key(k)).await.unwrap(),
            expected,
            "final value of k{k}"
        );
    }
    assert!(checked > 20, "too few reads checked: {checked}");
}
