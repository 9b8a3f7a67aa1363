//! Compare-and-swap: single and batched semantics, and counters CASed by concurrent tasks (atomicity).

use super::key;
use crate::kv::{CasOutcome, CasRequest, KvError, RawKv};
use std::sync::Arc;

/// CAS on absent, matching and mismatching values, always returning the current value.
pub async fn cas_semantics(kv: &dyn RawKv, prefix: &[u8]) {
    let k = key(prefix, b"k");
    let cas = |expected: Option<&[u8]>, new: &[u8]| {
        let request = kv.compare_and_swap(k.clone(), expected.map(<[u8]>::to_vec), new.to_vec());
        let new = new.to_vec();
        let expected = expected.map(<[u8]>::to_vec);
        async move {
            request
                .await
                // The checks' values are unique per key (the retry hazard decided).
                .map(|out| out.own_write_decided(expected, &new))
        }
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

/// A CAS decides on the value the latest write of its key left, whatever made that write: a
/// put, a batched put, a delete, a batched delete, a single or a batched CAS (a backend that
/// kept what its CASes read, or routed some calls past the others, would fail it). Each round
/// a CAS first reads and writes the key, another call writes it, then a CAS expecting the
/// value from before that write fails with the written one, single and batched alike, and a
/// CAS expecting the written value swaps.
pub async fn cas_sees_every_write(kv: &dyn RawKv, prefix: &[u8]) {
    let k = key(prefix, b"k");
    let other = key(prefix, b"other");
    let mut made = 0u32;
    let mut fresh = move || {
        made += 1;
        format!("v{made}").into_bytes()
    };
    let mut current: Option<Vec<u8>> = None;
    for write in [
        "put",
        "batch_put",
        "delete",
        "batch_delete",
        "cas",
        "batch_cas",
    ] {
        let first = fresh();
        let out = own_cas(kv, &k, current, first.clone(), false).await;
        assert!(
            out.swapped,
            "{write}: the round's first CAS swaps ({out:?})"
        );
        let before = Some(first);
        let written = match write {
            "put" | "batch_put" => {
                let v = fresh();
                if write == "put" {
                    kv.put(k.clone(), v.clone()).await.unwrap();
                } else {
                    let pairs = vec![(other.clone(), fresh()), (k.clone(), v.clone())];
                    kv.batch_put(pairs).await.unwrap();
                }
                Some(v)
            }
            "delete" => {
                kv.delete(k.clone()).await.unwrap();
                None
            }
            "batch_delete" => {
                kv.batch_delete(vec![other.clone(), k.clone()])
                    .await
                    .unwrap();
                None
            }
            _ => {
                let v = fresh();
                let out = own_cas(kv, &k, before.clone(), v.clone(), write == "batch_cas").await;
                assert!(out.swapped, "the written {write} swaps");
                Some(v)
            }
        };
        let stale = fresh();
        for batched in [false, true] {
            assert_eq!(
                own_cas(kv, &k, before.clone(), stale.clone(), batched).await,
                CasOutcome {
                    previous: written.clone(),
                    swapped: false
                },
                "after {write}, a CAS (batched: {batched}) expecting the value from before it"
            );
        }
        let next = fresh();
        let out = own_cas(kv, &k, written.clone(), next.clone(), false).await;
        assert!(
            out.swapped,
            "after {write}, a CAS expecting the written value swaps"
        );
        current = Some(next);
    }
    assert_eq!(kv.get(&k).await.unwrap(), current);
}

/// Asserts the value under `prefix ‖ name` of each `(name, value)` (`None`: absent) after
/// `what`.
async fn assert_values(
    kv: &dyn RawKv,
    prefix: &[u8],
    expected: &[(&[u8], Option<&[u8]>)],
    what: &str,
) {
    for &(name, value) in expected {
        assert_eq!(
            kv.get(&key(prefix, name)).await.unwrap().as_deref(),
            value,
            "value of {} after {what}",
            name.escape_ascii()
        );
    }
}

/// One CAS of `key` from `expected` to `new` (unique to the caller, so a retried CAS that
/// applied reads as swapped: the retry hazard decided), single or as a batch of one.
async fn own_cas(
    kv: &dyn RawKv,
    key: &[u8],
    expected: Option<Vec<u8>>,
    new: Vec<u8>,
    batched: bool,
) -> CasOutcome {
    let out = if batched {
        let request = CasRequest {
            key: key.to_vec(),
            expected: expected.clone(),
            new: new.clone(),
        };
        let mut outs = kv.batch_compare_and_swap(vec![request]).await.unwrap();
        assert_eq!(outs.len(), 1, "one outcome per request");
        outs.remove(0)
    } else {
        kv.compare_and_swap(key.to_vec(), expected.clone(), new.clone())
            .await
            .unwrap()
    };
    out.own_write_decided(expected, &new)
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
    let asked: Vec<(Option<Vec<u8>>, Vec<u8>)> = requests
        .iter()
        .map(|r| (r.expected.clone(), r.new.clone()))
        .collect();
    let outcomes: Vec<CasOutcome> = kv
        .batch_compare_and_swap(requests)
        .await
        .unwrap()
        .into_iter()
        .zip(&asked)
        .map(|(out, (expected, new))| out.own_write_decided(expected.clone(), new))
        .collect();
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
    assert_values(
        kv,
        prefix,
        &[
            (b"absent", Some(b"a1")),
            (b"present", Some(b"p")),
            (b"empty", Some(b"e1")),
            (b"absent2", None),
            (b"present2", Some(b"q1")),
        ],
        "the batch",
    )
    .await;
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

/// Puts with CASes in one call ([`RawKv::batch_put_and_compare_and_swap`]): every pair
/// written, each request decided as a batched CAS would decide it (outcomes in request
/// order), empty calls answered empty, and a key both put and swapped (or swapped twice)
/// refused with `InvalidArgument` before anything applies.
pub async fn batch_put_and_cas_semantics(kv: &dyn RawKv, prefix: &[u8]) {
    let k = |name: &[u8]| key(prefix, name);
    assert_eq!(
        kv.batch_put_and_compare_and_swap(Vec::new(), Vec::new())
            .await
            .unwrap(),
        Vec::new(),
        "an empty call"
    );
    kv.put(k(b"head"), b"h0".to_vec()).await.unwrap();
    let pairs = vec![(k(b"extra1"), b"x1".to_vec()), (k(b"extra2"), Vec::new())];
    let requests = vec![
        CasRequest::new(k(b"head"), Some(b"h0".to_vec()), b"h1".to_vec()),
        CasRequest::new(k(b"other"), Some(b"wrong".to_vec()), b"o1".to_vec()),
        CasRequest::new(k(b"new"), None, b"n1".to_vec()),
    ];
    let outcomes: Vec<CasOutcome> = kv
        .batch_put_and_compare_and_swap(pairs, requests)
        .await
        .unwrap()
        .into_iter()
        .zip([
            (Some(b"h0".to_vec()), b"h1".to_vec()),
            (Some(b"wrong".to_vec()), b"o1".to_vec()),
            (None, b"n1".to_vec()),
        ])
        .map(|(out, (expected, new))| out.own_write_decided(expected, &new))
        .collect();
    assert_eq!(
        outcomes,
        vec![
            CasOutcome {
                previous: Some(b"h0".to_vec()),
                swapped: true
            },
            CasOutcome {
                previous: None,
                swapped: false
            },
            CasOutcome {
                previous: None,
                swapped: true
            },
        ],
        "outcomes in request order"
    );
    assert_values(
        kv,
        prefix,
        &[
            (b"extra1", Some(b"x1")),
            (b"extra2", Some(b"")),
            (b"head", Some(b"h1")),
            (b"other", None),
            (b"new", Some(b"n1")),
        ],
        "the call",
    )
    .await;
    // Pairs alone, and requests alone, are a batch put and a batched CAS.
    kv.batch_put_and_compare_and_swap(vec![(k(b"alone"), b"a".to_vec())], Vec::new())
        .await
        .unwrap();
    assert_eq!(kv.get(&k(b"alone")).await.unwrap(), Some(b"a".to_vec()));
    // A key both put and swapped: refused as a whole, nothing applied.
    let refused = kv
        .batch_put_and_compare_and_swap(
            vec![
                (k(b"both-other"), b"o".to_vec()),
                (k(b"both"), b"p".to_vec()),
            ],
            vec![CasRequest::new(k(b"both"), None, b"c".to_vec())],
        )
        .await;
    assert!(
        matches!(refused, Err(KvError::InvalidArgument { .. })),
        "a key both put and swapped must be refused, got {refused:?}"
    );
    assert_values(
        kv,
        prefix,
        &[(b"both", None), (b"both-other", None)],
        "a refused call",
    )
    .await;
    let twice = kv
        .batch_put_and_compare_and_swap(
            vec![(k(b"twice-pair"), b"p".to_vec())],
            vec![
                CasRequest::new(k(b"twice"), None, b"1".to_vec()),
                CasRequest::new(k(b"twice"), None, b"2".to_vec()),
            ],
        )
        .await;
    assert!(
        matches!(twice, Err(KvError::InvalidArgument { .. })),
        "a key swapped twice must be refused, got {twice:?}"
    );
    assert_eq!(kv.get(&k(b"twice-pair")).await.unwrap(), None);
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
