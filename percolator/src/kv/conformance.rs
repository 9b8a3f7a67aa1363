// Longer than ~500 lines on purpose: this file is the RawKv contract's checks, one list
// that every backend runs in full (`run_all`). Splitting it would scatter the contract
// across files and make a missing check harder to see; each check is a short independent
// function under its own key prefix.
//! The [`RawKv`] conformance suite, generic over backends (feature `testkit`).
//!
//! Every backend runs the same checks. Each check works under its own key prefix, so checks
//! may share a store. Checks panic (with a message naming the check) on a violation, as tests do.
//!
//! ```no_run
//! # async fn demo() {
//! use percolator::kv::{conformance, MemoryKv};
//! use std::sync::Arc;
//! conformance::run_all(Arc::new(MemoryKv::new()), b"conformance/").await;
//! # }
//! ```
//!
//! A test crate runs the suite on a backend with one line, [`conformance_suite!`]
//! (`percolator::conformance_suite!`), which writes one test per check.
//!
//! [`conformance_suite!`]: crate::conformance_suite

use super::{
    scan_all, CasOutcome, CasRequest, KeyRange, KvError, RangePager, RawKv, ScanOrder,
    MAX_SCAN_LIMIT,
};
use std::sync::Arc;
use std::time::Duration;

fn key(prefix: &[u8], suffix: &[u8]) -> Vec<u8> {
    let mut k = prefix.to_vec();
    k.extend_from_slice(suffix);
    k
}

/// How long one check may take in [`within`] before it counts as hung.
pub const NO_HANG: Duration = Duration::from_secs(60);

/// Runs `fut` to completion, panicking with `what` if it takes longer than [`NO_HANG`]: a
/// store call that loops (as tikv-client's scan once did) fails the test instead of hanging it.
pub async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(NO_HANG, fut)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {NO_HANG:?}"))
}

/// Writes `mod $module` with one `#[tokio::test]` (multi-threaded, 4 workers) per check of
/// the suite, each on a store of its own, under the prefix `conf/` and within [`NO_HANG`].
///
/// `|check| open` is an async expression (it may use `check`, the check's name, e.g. to
/// seed a fault injector) giving `(guard, Arc<dyn RawKv>)`; the guard (a temporary
/// directory, a server) is dropped when the check ends. Items of the calling module are in
/// scope of `open`; the calling crate needs `tokio` (with its `macros` feature).
///
/// ```ignore
/// percolator::conformance_suite!(memory_backend, |_check| async {
///     ((), Arc::new(MemoryKv::new()) as Arc<dyn RawKv>)
/// });
/// ```
///
/// [`NO_HANG`]: crate::kv::conformance::NO_HANG
#[macro_export]
macro_rules! conformance_suite {
    ($module:ident, |$check:ident| $open:expr) => {
        $crate::conformance_suite!(@checks $module, |$check| $open;
            absent_vs_empty => |kv, p| $crate::kv::conformance::absent_vs_empty(kv.as_ref(), p);
            binary_keys => |kv, p| $crate::kv::conformance::binary_keys(kv.as_ref(), p);
            large_values => |kv, p| $crate::kv::conformance::large_values(kv.as_ref(), p);
            batch_calls => |kv, p| $crate::kv::conformance::batch_calls(kv.as_ref(), p);
            cas_semantics => |kv, p| $crate::kv::conformance::cas_semantics(kv.as_ref(), p);
            cas_counter_8x100 => |kv, p| $crate::kv::conformance::cas_counter(kv.clone(), p, 8, 100);
            batch_cas_semantics =>
                |kv, p| $crate::kv::conformance::batch_cas_semantics(kv.as_ref(), p);
            batch_cas_counters_6x40 =>
                |kv, p| $crate::kv::conformance::batch_cas_counters(kv.clone(), p, 6, 40);
            scans => |kv, p| $crate::kv::conformance::scans(kv.as_ref(), p);
            scan_limits_are_checked =>
                |kv, p| $crate::kv::conformance::scan_limits_are_checked(kv.as_ref(), p);
            paging_past_10240 => |kv, p| $crate::kv::conformance::paging(kv.as_ref(), p, 25_000);
            all_checks_share_one_store => |kv, p| $crate::kv::conformance::run_all(kv.clone(), p);
        );
    };
    (@checks $module:ident, |$check:ident| $open:expr;
        $($name:ident => |$kv:ident, $p:ident| $body:expr;)*) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    let $check: &'static str = stringify!($name);
                    let (_guard, $kv): (_, ::std::sync::Arc<dyn $crate::kv::RawKv>) = $open.await;
                    let $p: &[u8] = b"conf/";
                    $crate::kv::conformance::within($check, $body).await;
                }
            )*
        }
    };
}

/// Runs every check, each under `prefix` plus the check's name.
pub async fn run_all(kv: Arc<dyn RawKv>, prefix: &[u8]) {
    let p = |name: &str| key(prefix, name.as_bytes());
    absent_vs_empty(kv.as_ref(), &p("absent/")).await;
    binary_keys(kv.as_ref(), &p("binary/")).await;
    large_values(kv.as_ref(), &p("large/")).await;
    batch_calls(kv.as_ref(), &p("batch/")).await;
    cas_semantics(kv.as_ref(), &p("cas/")).await;
    cas_counter(kv.clone(), &p("counter/"), 8, 100).await;
    batch_cas_semantics(kv.as_ref(), &p("bcas/")).await;
    batch_cas_counters(kv.clone(), &p("bcounters/"), 6, 40).await;
    scans(kv.as_ref(), &p("scan/")).await;
    scan_limits_are_checked(kv.as_ref(), &p("limits/")).await;
    paging(kv.as_ref(), &p("paging/"), 25_000).await;
}

/// An absent key reads as `None`; an empty value reads as `Some(empty)`; delete removes.
pub async fn absent_vs_empty(kv: &dyn RawKv, prefix: &[u8]) {
    let absent = key(prefix, b"absent");
    let empty = key(prefix, b"empty");
    assert_eq!(
        kv.get(&absent).await.unwrap(),
        None,
        "absent key must read None"
    );
    kv.put(empty.clone(), Vec::new()).await.unwrap();
    assert_eq!(
        kv.get(&empty).await.unwrap(),
        Some(Vec::new()),
        "empty value must read Some(empty)"
    );
    let got = kv
        .batch_get(&[absent.clone(), empty.clone()])
        .await
        .unwrap();
    assert_eq!(
        got,
        vec![None, Some(Vec::new())],
        "batch_get keeps absent vs empty"
    );
    let scanned = scan_all(kv, KeyRange::prefix(prefix), ScanOrder::Forward)
        .await
        .unwrap();
    assert_eq!(
        scanned,
        vec![(empty.clone(), Vec::new())],
        "scan returns empty values"
    );
    kv.delete(empty.clone()).await.unwrap();
    assert_eq!(
        kv.get(&empty).await.unwrap(),
        None,
        "deleted key must read None"
    );
    kv.delete(absent).await.unwrap();
}

/// Keys and values with every byte value, `0x00` and `0xFF` included, round-trip and sort
/// bytewise.
pub async fn binary_keys(kv: &dyn RawKv, prefix: &[u8]) {
    let suffixes: Vec<Vec<u8>> = vec![
        vec![0x00],
        vec![0x00, 0x00],
        vec![0x00, 0xFF],
        vec![0x01],
        vec![0x7F, 0x80],
        vec![0xFF],
        vec![0xFF, 0x00],
        vec![0xFF, 0xFF, 0xFF],
    ];
    for (i, s) in suffixes.iter().enumerate() {
        let value: Vec<u8> = (0..=255u8).rev().chain([i as u8]).collect();
        kv.put(key(prefix, s), value).await.unwrap();
    }
    for (i, s) in suffixes.iter().enumerate() {
        let value: Vec<u8> = (0..=255u8).rev().chain([i as u8]).collect();
        assert_eq!(
            kv.get(&key(prefix, s)).await.unwrap(),
            Some(value),
            "binary key {s:?}"
        );
    }
    let scanned = scan_all(kv, KeyRange::prefix(prefix), ScanOrder::Forward)
        .await
        .unwrap();
    let keys: Vec<Vec<u8>> = scanned.into_iter().map(|(k, _)| k).collect();
    let mut expected: Vec<Vec<u8>> = suffixes.iter().map(|s| key(prefix, s)).collect();
    expected.sort();
    assert_eq!(keys, expected, "binary keys must sort bytewise");
}

/// A 1 MiB value round-trips through put, get, scan and CAS.
pub async fn large_values(kv: &dyn RawKv, prefix: &[u8]) {
    let big: Vec<u8> = (0..1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let k = key(prefix, b"big");
    kv.put(k.clone(), big.clone()).await.unwrap();
    assert_eq!(
        kv.get(&k).await.unwrap().as_deref(),
        Some(big.as_slice()),
        "1 MiB get"
    );
    let scanned = kv
        .scan(KeyRange::prefix(prefix), 10, ScanOrder::Forward)
        .await
        .unwrap();
    assert_eq!(scanned.len(), 1);
    assert_eq!(scanned[0].1.len(), big.len(), "1 MiB scan");
    let mut bigger = big.clone();
    bigger.reverse();
    let out = kv
        .compare_and_swap(k.clone(), Some(big.clone()), bigger.clone())
        .await
        .unwrap();
    assert!(out.swapped, "CAS with a matching 1 MiB value must swap");
    assert_eq!(kv.get(&k).await.unwrap(), Some(bigger), "1 MiB CAS result");
}

/// batch_put, batch_get and batch_delete behave like their single-key forms.
pub async fn batch_calls(kv: &dyn RawKv, prefix: &[u8]) {
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..100u32)
        .map(|i| (key(prefix, &i.to_be_bytes()), i.to_le_bytes().to_vec()))
        .collect();
    kv.batch_put(pairs.clone()).await.unwrap();
    let mut keys: Vec<Vec<u8>> = pairs.iter().map(|(k, _)| k.clone()).collect();
    keys.push(key(prefix, b"missing"));
    let got = kv.batch_get(&keys).await.unwrap();
    assert_eq!(got.len(), keys.len(), "batch_get answers every key");
    for (i, (_, v)) in pairs.iter().enumerate() {
        assert_eq!(got[i].as_ref(), Some(v), "batch_get value {i}");
    }
    assert_eq!(got[100], None, "batch_get of a missing key");
    kv.batch_delete(keys[..50].to_vec()).await.unwrap();
    let got = kv.batch_get(&keys).await.unwrap();
    assert!(
        got[..50].iter().all(Option::is_none),
        "batch_delete removed"
    );
    assert!(
        got[50..100].iter().all(Option::is_some),
        "batch_delete kept the rest"
    );
    kv.batch_put(Vec::new()).await.unwrap();
    kv.batch_delete(Vec::new()).await.unwrap();
    assert!(kv.batch_get(&[]).await.unwrap().is_empty());
}

/// CAS on absent, matching and mismatching values, always returning the current value.
pub async fn cas_semantics(kv: &dyn RawKv, prefix: &[u8]) {
    let k = key(prefix, b"k");
    let cas = |expected: Option<&[u8]>, new: &[u8]| {
        kv.compare_and_swap(k.clone(), expected.map(<[u8]>::to_vec), new.to_vec())
    };
    // Absent key, expecting a value: no swap, previous None.
    assert_eq!(
        cas(Some(b"x"), b"a").await.unwrap(),
        CasOutcome {
            previous: None,
            swapped: false
        },
        "CAS expecting a value on an absent key"
    );
    assert_eq!(kv.get(&k).await.unwrap(), None);
    // Absent key, expecting absent: swap.
    assert_eq!(
        cas(None, b"a").await.unwrap(),
        CasOutcome {
            previous: None,
            swapped: true
        },
        "CAS expecting absent on an absent key"
    );
    // Present key, expecting absent: no swap, returns current.
    assert_eq!(
        cas(None, b"b").await.unwrap(),
        CasOutcome {
            previous: Some(b"a".to_vec()),
            swapped: false
        },
        "CAS expecting absent on a present key"
    );
    // Mismatch.
    assert_eq!(
        cas(Some(b"zz"), b"b").await.unwrap(),
        CasOutcome {
            previous: Some(b"a".to_vec()),
            swapped: false
        },
        "CAS with a mismatching value"
    );
    assert_eq!(kv.get(&k).await.unwrap(), Some(b"a".to_vec()));
    // Match.
    assert_eq!(
        cas(Some(b"a"), b"b").await.unwrap(),
        CasOutcome {
            previous: Some(b"a".to_vec()),
            swapped: true
        },
        "CAS with a matching value"
    );
    assert_eq!(kv.get(&k).await.unwrap(), Some(b"b".to_vec()));
    // Empty values are values, distinct from absence.
    assert!(
        cas(Some(b"b"), b"").await.unwrap().swapped,
        "CAS to an empty value"
    );
    assert_eq!(
        cas(None, b"c").await.unwrap(),
        CasOutcome {
            previous: Some(Vec::new()),
            swapped: false
        },
        "an empty value is not absent for CAS"
    );
    assert!(
        cas(Some(b""), b"d").await.unwrap().swapped,
        "CAS from an empty value"
    );
    // A CAS on a key written by put sees the put.
    kv.put(k.clone(), b"p".to_vec()).await.unwrap();
    assert!(
        cas(Some(b"p"), b"q").await.unwrap().swapped,
        "CAS after put"
    );
}

/// Batched CAS: each request decided on its own key as a single CAS would be, outcomes in
/// request order, an empty batch answered empty, and a batch naming a key twice refused
/// with `InvalidArgument` before anything applies.
pub async fn batch_cas_semantics(kv: &dyn RawKv, prefix: &[u8]) {
    let k = |name: &[u8]| key(prefix, name);
    assert_eq!(
        kv.batch_compare_and_swap(Vec::new()).await.unwrap(),
        Vec::new(),
        "an empty batch"
    );
    kv.put(k(b"present"), b"p".to_vec()).await.unwrap();
    kv.put(k(b"empty"), Vec::new()).await.unwrap();
    let requests = vec![
        CasRequest::new(k(b"absent"), None, b"a1".to_vec()),
        CasRequest::new(k(b"present"), Some(b"wrong".to_vec()), b"p1".to_vec()),
        CasRequest::new(k(b"empty"), Some(Vec::new()), b"e1".to_vec()),
        CasRequest::new(k(b"absent2"), Some(b"x".to_vec()), b"a2".to_vec()),
        CasRequest::new(k(b"present2"), None, b"q1".to_vec()),
    ];
    let outcomes = kv.batch_compare_and_swap(requests).await.unwrap();
    let expected = [
        (None, true),
        (Some(b"p".to_vec()), false),
        (Some(Vec::new()), true),
        (None, false),
        (None, true),
    ];
    assert_eq!(outcomes.len(), expected.len(), "one outcome per request");
    for (i, (outcome, (previous, swapped))) in outcomes.iter().zip(expected).enumerate() {
        assert_eq!(
            outcome,
            &CasOutcome { previous, swapped },
            "batched CAS request {i}: outcome in request order"
        );
    }
    for (name, value) in [
        (&b"absent"[..], Some(&b"a1"[..])),
        (b"present", Some(b"p")),
        (b"empty", Some(b"e1")),
        (b"absent2", None),
        (b"present2", Some(b"q1")),
    ] {
        assert_eq!(
            kv.get(&k(name)).await.unwrap().as_deref(),
            value,
            "value of {} after the batch",
            name.escape_ascii()
        );
    }
    // One key twice: refused as a whole, nothing applied.
    let twice = vec![
        CasRequest::new(k(b"dup-other"), None, b"o".to_vec()),
        CasRequest::new(k(b"dup"), None, b"d1".to_vec()),
        CasRequest::new(k(b"dup"), Some(b"d1".to_vec()), b"d2".to_vec()),
    ];
    match kv.batch_compare_and_swap(twice).await {
        Err(KvError::InvalidArgument { .. }) => {}
        other => panic!("a batch naming one key twice must be refused, got {other:?}"),
    }
    assert_eq!(
        kv.get(&k(b"dup")).await.unwrap(),
        None,
        "refused batch applied"
    );
    assert_eq!(
        kv.get(&k(b"dup-other")).await.unwrap(),
        None,
        "refused batch applied"
    );
}

/// Concurrent increments of `counters` keys, half of the tasks through batched CAS (all
/// counters in one batch, re-batching the ones not yet done) and half through single CAS,
/// with the same hazard-aware decision per key as [`cas_counter`]. Every counter must end
/// with every increment exactly once: each request of a batch is atomic for its key, also
/// against single CASes of the key.
pub async fn batch_cas_counters(kv: Arc<dyn RawKv>, prefix: &[u8], tasks: u64, per_task: u64) {
    const ENTRY: usize = 6;
    const COUNTERS: usize = 4;
    fn entries(value: &[u8]) -> impl Iterator<Item = (u16, u32)> + '_ {
        value.chunks_exact(ENTRY).map(|c| {
            (
                u16::from_be_bytes([c[0], c[1]]),
                u32::from_be_bytes([c[2], c[3], c[4], c[5]]),
            )
        })
    }
    let keys: Vec<Vec<u8>> = (0..COUNTERS as u8)
        .map(|i| key(prefix, &[b'c', i]))
        .collect();
    let mut handles = Vec::new();
    for task in 0..tasks {
        let kv = kv.clone();
        let keys = keys.clone();
        let task = task as u16;
        let batched = task.is_multiple_of(2);
        handles.push(tokio::spawn(async move {
            let mut current: Vec<Option<Vec<u8>>> = kv.batch_get(&keys).await.unwrap();
            for seq in 0..per_task as u32 {
                let mut pending: Vec<usize> = (0..keys.len()).collect();
                while !pending.is_empty() {
                    let news: Vec<Vec<u8>> = pending
                        .iter()
                        .map(|&i| {
                            let mut new = current[i].clone().unwrap_or_default();
                            new.extend_from_slice(&task.to_be_bytes());
                            new.extend_from_slice(&seq.to_be_bytes());
                            new
                        })
                        .collect();
                    let outcomes: Vec<CasOutcome> = if batched {
                        let requests = pending
                            .iter()
                            .zip(&news)
                            .map(|(&i, new)| {
                                CasRequest::new(keys[i].clone(), current[i].clone(), new.clone())
                            })
                            .collect();
                        kv.batch_compare_and_swap(requests).await.unwrap()
                    } else {
                        let mut out = Vec::new();
                        for (&i, new) in pending.iter().zip(&news) {
                            out.push(
                                kv.compare_and_swap(
                                    keys[i].clone(),
                                    current[i].clone(),
                                    new.clone(),
                                )
                                .await
                                .unwrap(),
                            );
                        }
                        out
                    };
                    assert_eq!(outcomes.len(), pending.len(), "one outcome per request");
                    let mut still = Vec::new();
                    for ((&i, new), out) in pending.iter().zip(news).zip(outcomes) {
                        let found = out.previous.clone().unwrap_or_default();
                        if out.swapped || found == new {
                            current[i] = Some(new);
                            continue;
                        }
                        current[i] = out.previous;
                        if !entries(&found).any(|e| e == (task, seq)) {
                            still.push(i);
                        }
                    }
                    pending = still;
                }
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    for k in &keys {
        let end = kv.get(k).await.unwrap().expect("counter exists");
        let mut seen = std::collections::HashSet::new();
        for e in entries(&end) {
            assert!(seen.insert(e), "increment {e:?} applied twice");
        }
        assert_eq!(
            seen.len() as u64,
            tasks * per_task,
            "batched CAS increments lost updates"
        );
    }
}

/// Concurrent CAS increments, checkable under the retry hazard: a CAS whose reply was lost
/// may have applied, and its retry then reports "not swapped" with our own value (or with a
/// later writer's value built on ours). Every value is the counter's whole history, the
/// list of `(task, seq)` increments applied so far, so every value is unique and each task
/// decides like a careful caller: a CAS is ours if it swapped, if the key holds exactly our
/// value, or if the value found lists our increment; otherwise it retries from the value
/// found. At the end every increment must appear exactly once (no lost update, no
/// increment applied twice).
pub async fn cas_counter(kv: Arc<dyn RawKv>, prefix: &[u8], tasks: u64, per_task: u64) {
    const ENTRY: usize = 6;
    fn entries(value: &[u8]) -> impl Iterator<Item = (u16, u32)> + '_ {
        value.chunks_exact(ENTRY).map(|c| {
            (
                u16::from_be_bytes([c[0], c[1]]),
                u32::from_be_bytes([c[2], c[3], c[4], c[5]]),
            )
        })
    }
    let k = key(prefix, b"counter");
    let mut handles = Vec::new();
    for task in 0..tasks {
        let kv = kv.clone();
        let k = k.clone();
        let task = task as u16;
        handles.push(tokio::spawn(async move {
            let mut current = kv.get(&k).await.unwrap();
            for seq in 0..per_task as u32 {
                loop {
                    let mut new = current.clone().unwrap_or_default();
                    assert_eq!(new.len() % ENTRY, 0, "counter value is a list of entries");
                    new.extend_from_slice(&task.to_be_bytes());
                    new.extend_from_slice(&seq.to_be_bytes());
                    let out = kv
                        .compare_and_swap(k.clone(), current.clone(), new.clone())
                        .await
                        .unwrap();
                    let found = out.previous.clone().unwrap_or_default();
                    if out.swapped || found == new {
                        current = Some(new);
                        break;
                    }
                    current = out.previous;
                    if entries(&found).any(|e| e == (task, seq)) {
                        // Applied, then built upon by another task before our retry.
                        break;
                    }
                }
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    let end = kv.get(&k).await.unwrap().expect("counter exists");
    let mut seen = std::collections::HashSet::new();
    for e in entries(&end) {
        assert!(seen.insert(e), "increment {e:?} applied twice");
    }
    for task in 0..tasks as u16 {
        for seq in 0..per_task as u32 {
            assert!(
                seen.contains(&(task, seq)),
                "increment {:?} lost",
                (task, seq)
            );
        }
    }
    assert_eq!(
        seen.len() as u64,
        tasks * per_task,
        "concurrent CAS increments lost updates"
    );
}

/// Bounded, empty, reverse and limited scans.
pub async fn scans(kv: &dyn RawKv, prefix: &[u8]) {
    let k = |i: u8| key(prefix, &[b'k', i]);
    // Neighbours just outside the prefix must never show up.
    let mut before = prefix.to_vec();
    before.pop();
    let pairs: Vec<_> = (0..20u8).map(|i| (k(i), vec![i])).collect();
    kv.batch_put(pairs).await.unwrap();
    let all = KeyRange::prefix(prefix);

    let fwd = kv.scan(all.clone(), 100, ScanOrder::Forward).await.unwrap();
    assert_eq!(fwd.len(), 20, "forward scan of the whole prefix");
    assert!(
        fwd.windows(2).all(|w| w[0].0 < w[1].0),
        "forward scan is ascending"
    );

    let rev = kv.scan(all.clone(), 100, ScanOrder::Reverse).await.unwrap();
    let mut expected = fwd.clone();
    expected.reverse();
    assert_eq!(rev, expected, "reverse scan is the forward scan reversed");

    let bounded = kv
        .scan(KeyRange::new(k(5), k(9)), 100, ScanOrder::Forward)
        .await
        .unwrap();
    let got: Vec<u8> = bounded.iter().map(|(_, v)| v[0]).collect();
    assert_eq!(got, vec![5, 6, 7, 8], "bounded scan is [start, end)");

    let bounded_rev = kv
        .scan(KeyRange::new(k(5), k(9)), 100, ScanOrder::Reverse)
        .await
        .unwrap();
    let got: Vec<u8> = bounded_rev.iter().map(|(_, v)| v[0]).collect();
    assert_eq!(
        got,
        vec![8, 7, 6, 5],
        "bounded reverse scan starts below end"
    );

    let limited = kv.scan(all.clone(), 3, ScanOrder::Forward).await.unwrap();
    let got: Vec<u8> = limited.iter().map(|(_, v)| v[0]).collect();
    assert_eq!(got, vec![0, 1, 2], "forward limit");
    let limited = kv.scan(all.clone(), 3, ScanOrder::Reverse).await.unwrap();
    let got: Vec<u8> = limited.iter().map(|(_, v)| v[0]).collect();
    assert_eq!(got, vec![19, 18, 17], "reverse limit");

    // Empty ranges: nothing in them, inverted, and start == end.
    let mut gap_start = k(19);
    gap_start.push(0);
    let empty = kv
        .scan(
            KeyRange::new(gap_start.clone(), key(prefix, b"l")),
            10,
            ScanOrder::Forward,
        )
        .await
        .unwrap();
    assert!(empty.is_empty(), "scan of a range holding no key");
    let empty = kv
        .scan(
            KeyRange::new(gap_start, key(prefix, b"l")),
            10,
            ScanOrder::Reverse,
        )
        .await
        .unwrap();
    assert!(empty.is_empty(), "reverse scan of a range holding no key");
    let inverted = kv
        .scan(KeyRange::new(k(9), k(5)), 10, ScanOrder::Forward)
        .await
        .unwrap();
    assert!(inverted.is_empty(), "scan of an inverted range");
    let point = kv
        .scan(KeyRange::new(k(7), k(7)), 10, ScanOrder::Forward)
        .await
        .unwrap();
    assert!(point.is_empty(), "scan of [k, k)");

    // An unbounded end still starts at start.
    let open = kv
        .scan(KeyRange::from(k(18)), 2, ScanOrder::Forward)
        .await
        .unwrap();
    let got: Vec<u8> = open.iter().map(|(_, v)| v[0]).collect();
    assert_eq!(got, vec![18, 19], "scan with an open end");
}

/// Scan limits outside `1..=MAX_SCAN_LIMIT` are refused with `InvalidArgument`.
pub async fn scan_limits_are_checked(kv: &dyn RawKv, prefix: &[u8]) {
    for limit in [0, MAX_SCAN_LIMIT + 1] {
        match kv
            .scan(KeyRange::prefix(prefix), limit, ScanOrder::Forward)
            .await
        {
            Err(KvError::InvalidArgument { .. }) => {}
            other => panic!("scan with limit {limit} must be refused, got {other:?}"),
        }
    }
}

/// A range of `count` keys (more than one scan returns) pages through completely, in both
/// orders and with several page sizes.
pub async fn paging(kv: &dyn RawKv, prefix: &[u8], count: u32) {
    let pairs: Vec<_> = (0..count)
        .map(|i| (key(prefix, &i.to_be_bytes()), i.to_be_bytes().to_vec()))
        .collect();
    for chunk in pairs.chunks(2000) {
        kv.batch_put(chunk.to_vec()).await.unwrap();
    }
    let range = KeyRange::prefix(prefix);
    let fwd = scan_all(kv, range.clone(), ScanOrder::Forward)
        .await
        .unwrap();
    assert_eq!(fwd.len(), count as usize, "forward paging finds every key");
    assert!(
        fwd.iter()
            .enumerate()
            .all(|(i, (_, v))| v.as_slice() == (i as u32).to_be_bytes()),
        "forward paging returns keys in order, none repeated"
    );
    let rev = scan_all(kv, range.clone(), ScanOrder::Reverse)
        .await
        .unwrap();
    assert_eq!(rev.len(), count as usize, "reverse paging finds every key");
    assert!(
        rev.iter()
            .enumerate()
            .all(|(i, (_, v))| v.as_slice() == (count - 1 - i as u32).to_be_bytes()),
        "reverse paging returns keys in reverse order, none repeated"
    );
    for page_size in [1usize, 7, MAX_SCAN_LIMIT] {
        let sub = KeyRange::new(
            key(prefix, &10u32.to_be_bytes()),
            key(prefix, &40u32.to_be_bytes()),
        );
        for order in [ScanOrder::Forward, ScanOrder::Reverse] {
            let mut pager = RangePager::new(kv, sub.clone(), order, page_size);
            let mut seen = Vec::new();
            while let Some(page) = pager.next_page().await.unwrap() {
                assert!(page.len() <= page_size, "page larger than asked");
                seen.extend(page.into_iter().map(|(_, v)| v));
            }
            let mut expected: Vec<Vec<u8>> =
                (10..40u32).map(|i| i.to_be_bytes().to_vec()).collect();
            if order == ScanOrder::Reverse {
                expected.reverse();
            }
            assert_eq!(seen, expected, "pager {order:?} with page size {page_size}");
        }
    }
}

/// A task looping over store calls lets other tasks of its thread run: the loop below stops
/// as soon as the caller gets control back. Meaningful on a current-thread runtime, where a
/// backend whose calls never yield would run all `LIMIT` calls before anyone else.
pub async fn calls_yield_to_other_tasks(kv: Arc<dyn RawKv>, prefix: &[u8]) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    const LIMIT: u64 = 10_000;
    let k = key(prefix, b"spin");
    kv.put(k.clone(), b"v".to_vec()).await.expect("put");
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicU64::new(0));
    let spinner = {
        let (kv, stop, calls) = (kv.clone(), stop.clone(), calls.clone());
        tokio::spawn(async move {
            for _ in 0..LIMIT {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                kv.get(&k).await.expect("get");
                calls.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    tokio::task::yield_now().await;
    stop.store(true, Ordering::SeqCst);
    spinner.await.expect("spinner task");
    let calls = calls.load(Ordering::SeqCst);
    assert!(
        calls < LIMIT,
        "calls_yield_to_other_tasks: {calls} store calls in a row never yielded to other tasks"
    );
}
