//! Writes that TiKV applied and then answered with a region error (a leader change after
//! the entry committed): tikv-client drops its cached region and sends the write again. A
//! repeated put or delete is harmless; a repeated CAS finds its own value and answers
//! `swapped = false, previous = new` (the retry hazard). The adapter passes that through
//! (callers with unique values read it as success) or, with `unique_cas_values`, reports the
//! swap; either way no increment is lost or counted twice.

use minitikv::{RunningServer, ServerConfig};
use percolator::kv::{scan_all, KeyRange, RawKv, ScanOrder};
use percolator_tikv::{TikvConfig, TikvKv};
use std::sync::Arc;
use std::time::Duration;

async fn server(seed: u64) -> RunningServer {
    minitikv::start(ServerConfig {
        faults: minitikv::Faults {
            seed,
            applied_region_error: 0.3,
            ..minitikv::Faults::none()
        },
        ..ServerConfig::in_memory()
    })
    .await
    .expect("minitikv")
}

fn config(server: &RunningServer, unique_cas_values: bool) -> TikvConfig {
    let mut config = TikvConfig::new(vec![server.endpoint()]);
    config.op_timeout = Duration::from_secs(30);
    config.unique_cas_values = unique_cas_values;
    config
}

/// Four tasks increment one counter 25 times each by CAS. The value is the history of
/// increments (one token per writer and step), so it is unique, and a CAS reported failed
/// whose current value already holds our token applied (the client repeated it after the
/// region error; another writer may have swapped after it).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn repeated_cases_after_apply_count_every_increment_once() {
    let server = server(7).await;
    let kv = Arc::new(
        TikvKv::connect(config(&server, false))
            .await
            .expect("connect"),
    );
    let key = b"applied/counter".to_vec();
    let mut tasks = Vec::new();
    for writer in 0..4u32 {
        let (kv, key) = (kv.clone(), key.clone());
        tasks.push(tokio::spawn(async move {
            let mut hazards = 0u32;
            for step in 0..25u32 {
                let token = format!("<{writer}.{step}>").into_bytes();
                let mut current = kv.get(&key).await.expect("get");
                loop {
                    let mut new = current.clone().unwrap_or_default();
                    new.extend_from_slice(&token);
                    let out = kv
                        .compare_and_swap(key.clone(), current.clone(), new)
                        .await
                        .expect("cas");
                    if out.swapped {
                        break;
                    }
                    let found = out.previous.clone().unwrap_or_default();
                    if found.windows(token.len()).any(|w| w == token.as_slice()) {
                        hazards += 1;
                        break;
                    }
                    current = out.previous;
                }
            }
            hazards
        }));
    }
    let mut hazards = 0;
    for t in tasks {
        hazards += t.await.expect("task");
    }
    let last = kv.get(&key).await.expect("get").expect("counter");
    let increments = last.iter().filter(|b| **b == b'>').count();
    assert_eq!(increments, 100, "{}", String::from_utf8_lossy(&last));
    let faults = server.fault_counts();
    assert!(faults.applied_region_error > 0, "{faults:?}");
    // The client repeated CASes that had applied, and the callers saw it.
    assert!(
        hazards > 0,
        "no repeated CAS reached the caller ({faults:?})"
    );
    server.shutdown().await;
}

/// With `unique_cas_values`, the adapter reports a repeated CAS that had applied as the
/// swap it was; puts, batch puts and deletes repeated after they applied leave the data as
/// written.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_adapter_reports_an_applied_cas_as_swapped() {
    let server = server(11).await;
    let kv = TikvKv::connect(config(&server, true))
        .await
        .expect("connect");
    for i in 0..60u32 {
        let key = format!("applied/cas/{i:03}").into_bytes();
        let out = kv
            .compare_and_swap(key.clone(), None, format!("v{i}").into_bytes())
            .await
            .expect("cas");
        assert!(out.swapped && out.previous.is_none(), "CAS {i}: {out:?}");
    }
    let pairs: Vec<_> = (0..200u32)
        .map(|i| (format!("applied/put/{i:03}").into_bytes(), vec![i as u8]))
        .collect();
    kv.batch_put(pairs.clone()).await.expect("batch_put");
    let doomed: Vec<_> = pairs.iter().step_by(2).map(|(k, _)| k.clone()).collect();
    kv.batch_delete(doomed).await.expect("batch_delete");
    let left = scan_all(&kv, KeyRange::prefix(b"applied/put/"), ScanOrder::Forward)
        .await
        .expect("scan");
    let expected: Vec<_> = pairs.into_iter().skip(1).step_by(2).collect();
    assert_eq!(left, expected);
    assert!(server.fault_counts().applied_region_error > 0);
    server.shutdown().await;
}
