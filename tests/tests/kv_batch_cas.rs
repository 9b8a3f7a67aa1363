//! Batched CAS through the interceptor: faults injected per key hit any subset of a batch,
//! and what a caller may assume of a batch that returned `Err` (each request applied wholly
//! or not at all, any subset of them) holds.

use async_trait::async_trait;
use percolator::kv::intercept::{Call, Hooks, Intercepted, Op};
use percolator::kv::{
    CasOutcome, CasRequest, Faults, FaultyKv, KvError, KvResult, MemoryKv, RawKv,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Fails the requests whose key ends in `b` before the store, and loses the reply of those
/// ending in `a` after it; counts what it saw.
#[derive(Default)]
struct PerKey {
    batches: AtomicUsize,
    keys: AtomicUsize,
}

#[async_trait]
impl Hooks for PerKey {
    async fn before(&self, call: Call<'_>) -> KvResult<()> {
        match call {
            Call::BatchCompareAndSwap { .. } => {
                self.batches.fetch_add(1, Ordering::SeqCst);
            }
            Call::CompareAndSwap {
                key, batched: true, ..
            } => {
                self.keys.fetch_add(1, Ordering::SeqCst);
                if key.ends_with(b"b") {
                    return Err(KvError::Unavailable {
                        op: "compare_and_swap",
                        message: "refused".into(),
                    });
                }
            }
            _ => {}
        }
        Ok(())
    }

    async fn swapped(&self, key: &[u8], _new: &[u8], outcome: CasOutcome) -> KvResult<CasOutcome> {
        if key.ends_with(b"a") {
            return Err(KvError::Unavailable {
                op: "compare_and_swap",
                message: "reply lost".into(),
            });
        }
        Ok(outcome)
    }
}

/// One new key per kind of fault the hooks here inject by the key's last byte: `a` (reply
/// lost after the store), `b` (refused before it), `c` (none).
fn one_per_fault() -> Vec<CasRequest> {
    vec![
        CasRequest::new(b"k1a".to_vec(), None, b"1".to_vec()),
        CasRequest::new(b"k2b".to_vec(), None, b"2".to_vec()),
        CasRequest::new(b"k3c".to_vec(), None, b"3".to_vec()),
    ]
}

/// After [`one_per_fault`]: every request applied but the refused one.
async fn applied_all_but_the_refused(memory: &MemoryKv) {
    assert_eq!(memory.get(b"k1a").await.unwrap(), Some(b"1".to_vec()));
    assert_eq!(memory.get(b"k2b").await.unwrap(), None);
    assert_eq!(memory.get(b"k3c").await.unwrap(), Some(b"3".to_vec()));
}

#[tokio::test]
async fn per_key_faults_hit_a_subset_of_the_batch() {
    let memory = Arc::new(MemoryKv::new());
    let kv = Intercepted::wrap(memory.clone(), PerKey::default());
    let err = kv
        .batch_compare_and_swap(one_per_fault())
        .await
        .unwrap_err();
    assert!(matches!(err, KvError::Unavailable { .. }), "{err:?}");
    assert_eq!(kv.hooks().batches.load(Ordering::SeqCst), 1);
    assert_eq!(kv.hooks().keys.load(Ordering::SeqCst), 3);
    // The lost reply applied, the refused request did not, the clean one applied.
    applied_all_but_the_refused(&memory).await;
    // Without faulty keys the batch answers in order.
    let out = kv
        .batch_compare_and_swap(vec![
            CasRequest::new(b"k3c".to_vec(), Some(b"3".to_vec()), b"33".to_vec()),
            CasRequest::new(b"k4c".to_vec(), Some(b"x".to_vec()), b"4".to_vec()),
        ])
        .await
        .unwrap();
    assert!(out[0].swapped && !out[1].swapped && out[1].previous.is_none());
    // One key twice is refused before any hook or store sees it.
    let err = kv
        .batch_compare_and_swap(vec![
            CasRequest::new(b"k5c".to_vec(), None, b"5".to_vec()),
            CasRequest::new(b"k5c".to_vec(), None, b"6".to_vec()),
        ])
        .await
        .unwrap_err();
    assert!(matches!(err, KvError::InvalidArgument { .. }), "{err:?}");
    assert_eq!(memory.get(b"k5c").await.unwrap(), None);
    assert_eq!(Op::BatchCompareAndSwap.name(), "batch_compare_and_swap");
}

/// Refuses the batched requests whose key ends in `b`, and never looks at outcomes
/// ([`Hooks::sees_swaps`] is `false`: the requests go to the store without copies).
struct RefusesWithoutLooking;

#[async_trait]
impl Hooks for RefusesWithoutLooking {
    fn sees_swaps(&self) -> bool {
        false
    }

    async fn before(&self, call: Call<'_>) -> KvResult<()> {
        match call {
            Call::CompareAndSwap {
                key, batched: true, ..
            } if key.ends_with(b"b") => Err(KvError::Unavailable {
                op: "compare_and_swap",
                message: "refused".into(),
            }),
            _ => Ok(()),
        }
    }
}

#[tokio::test]
async fn hooks_that_do_not_look_still_forward_exactly_the_requests_they_pass() {
    let memory = Arc::new(MemoryKv::new());
    memory.put(b"k4c".to_vec(), b"old".to_vec()).await.unwrap();
    let kv = Intercepted::wrap(memory.clone(), RefusesWithoutLooking);
    let err = kv
        .batch_compare_and_swap(one_per_fault())
        .await
        .unwrap_err();
    assert!(matches!(err, KvError::Unavailable { .. }), "{err:?}");
    applied_all_but_the_refused(&memory).await;
    // Passed requests are answered in order, each with the store's outcome.
    let out = kv
        .batch_compare_and_swap(vec![
            CasRequest::new(b"k4c".to_vec(), None, b"4".to_vec()),
            CasRequest::new(b"k3c".to_vec(), Some(b"3".to_vec()), b"33".to_vec()),
        ])
        .await
        .unwrap();
    assert_eq!(
        out,
        vec![
            CasOutcome {
                previous: Some(b"old".to_vec()),
                swapped: false
            },
            CasOutcome {
                previous: Some(b"3".to_vec()),
                swapped: true
            },
        ]
    );
    let single = kv
        .compare_and_swap(b"k3c".to_vec(), Some(b"33".to_vec()), b"333".to_vec())
        .await
        .unwrap();
    assert!(single.swapped);
    assert_eq!(memory.get(b"k3c").await.unwrap(), Some(b"333".to_vec()));
}

/// Random faults (lost replies before and after the store, the retry hazard): over many
/// batches of fresh keys, a batch that returned `Err` left each key either untouched or
/// holding its new value, and some such batches applied only part of their requests; a
/// batch that returned `Ok` reports each request as the store decided it, up to the hazard
/// (reported not swapped, finding its own value).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faulty_batches_apply_any_subset_and_nothing_else() {
    let memory = Arc::new(MemoryKv::new());
    let kv = FaultyKv::new(
        memory.clone(),
        Faults {
            cas_hazard: 0.2,
            delay: 0.1,
            max_delay: Duration::from_millis(1),
            unavailable: 0.2,
        },
    );
    let (mut failed, mut partial) = (0, 0);
    for batch in 0..300u32 {
        let keys: Vec<Vec<u8>> = (0..6u8)
            .map(|i| format!("b{batch:04}/{i}").into_bytes())
            .collect();
        // Half of the keys exist already with a value the batch expects.
        for k in keys.iter().step_by(2) {
            memory.put(k.clone(), b"old".to_vec()).await.unwrap();
        }
        let requests: Vec<CasRequest> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let expected = (i % 2 == 0).then(|| b"old".to_vec());
                CasRequest::new(k.clone(), expected, format!("new{batch}/{i}").into_bytes())
            })
            .collect();
        let result = kv.batch_compare_and_swap(requests.clone()).await;
        let mut applied = 0;
        for r in &requests {
            let now = memory.get(&r.key).await.unwrap();
            if now.as_deref() == Some(r.new.as_slice()) {
                applied += 1;
            } else {
                assert_eq!(now, r.expected, "key {:?} neither old nor new", r.key);
            }
        }
        match result {
            Ok(outcomes) => {
                assert_eq!(outcomes.len(), requests.len());
                for (r, o) in requests.iter().zip(outcomes) {
                    let own = o.previous.as_deref() == Some(r.new.as_slice());
                    assert!(o.swapped || own, "request {:?} not applied: {o:?}", r.key);
                }
                assert_eq!(applied, requests.len(), "an Ok batch applied every request");
            }
            Err(e) => {
                assert!(matches!(e, KvError::Unavailable { .. }), "{e:?}");
                failed += 1;
                if applied > 0 && applied < requests.len() {
                    partial += 1;
                }
            }
        }
    }
    assert!(
        failed > 0 && partial > 0,
        "failed {failed}, partial {partial}"
    );
    assert!(kv.hazards_injected() > 0);
}
