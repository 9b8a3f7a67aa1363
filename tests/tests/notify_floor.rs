//! The notify floor (ARCHITECTURE.md "The notify space"): scanners raise it past drained
//! buckets; writers that put notify keys below a floor raised meanwhile move them above it,
//! and the raiser moves the ones it finds below after its raise. No notification is lost.

mod common;
use common::*;
use percolator::codec::Key;
use percolator::kv::{scan_all, MemoryKv, RawKv, ScanOrder};
use percolator::txn::wall_bucket;
use percolator::Cell;
use rand::Rng;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

/// Every notify key of the namespace: (bucket, cell, ts).
async fn notify_keys(client: &percolator::Client) -> Vec<(u64, Cell, u64)> {
    let range = client.codec().space_range(percolator::codec::Space::Notify);
    scan_all(client.store().as_ref(), range, ScanOrder::Forward)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|(k, _)| match client.codec().decode(&k) {
            Ok(Key::Notify { bucket, cell, ts }) => Some((bucket, cell, ts)),
            _ => None,
        })
        .collect()
}

/// A key put below the floor before the raise is moved above it by the raise; a writer
/// whose clock is behind a raised floor puts (or moves) its key at or above it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_below_a_raised_floor_are_moved_above_it() {
    let kv: Arc<dyn RawKv> = Arc::new(MemoryKv::new());
    let raiser = client_on(kv.clone(), test_config());
    let lagging = client_on(kv.clone(), test_config());
    let now = wall_bucket();
    // A writer's key that landed in an old bucket, unseen by the scan that chose the floor.
    let stale = raiser.codec().notify(&cell("old"), 7, now - 100);
    kv.put(stale.clone(), b"record".to_vec()).await.unwrap();
    let raise = raiser.raise_notify_floor(0, now + 50).await.unwrap();
    assert!(raise.raised);
    assert_eq!(raise.relocated, 1);
    assert_eq!(kv.get(&stale).await.unwrap(), None);
    // A raise from a floor that is no longer current does nothing.
    assert!(!raiser.raise_notify_floor(0, now + 60).await.unwrap().raised);
    // A client that never saw the floor: its clock says `now`, the floor is 50 s ahead.
    let key = lagging
        .put_notification(&cell("late"), 9, b"record".to_vec())
        .await
        .unwrap();
    assert!(kv.get(&key).await.unwrap().is_some());
    let keys = notify_keys(&raiser).await;
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(
        keys.iter().all(|(bucket, _, _)| *bucket >= now + 50),
        "{keys:?}"
    );
}

/// Randomized: writers (separate clients, so separate views of the floor) put notifications
/// while a raiser keeps pushing the floor ahead of their clocks, obeying the scanner's rule
/// (never past the oldest key its scan from the floor found and left) and handles most keys
/// it finds. Afterwards every notification was handled or is at or above the floor, and none
/// is below it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_writers_and_raises_lose_no_notification() {
    racing_writers_and_raises(Arc::new(MemoryKv::new()), 30, 20_000).await;
}

/// The same race on TiKV (`minitikv` in process, through `TikvKv`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_writers_and_raises_lose_no_notification_on_tikv() {
    let tikv = tikv_store().await;
    racing_writers_and_raises(tikv.kv.clone(), 10, 20_000).await;
}

/// The same race in TiKV's weather (three stores, regions split, merged and moved every
/// 10 ms through the namespace, busy servers, region errors, replies lost after apply): the
/// floor's CAS meets the retry hazard and scans cross moving region boundaries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_writers_and_raises_lose_no_notification_in_tikv_weather() {
    let tikv = tikv_weather_store(16).await;
    racing_writers_and_raises(tikv.kv.clone(), 10, 20_000).await;
}

/// The race on `kv`: writers go on until the floor was raised `raises_wanted` times (at least
/// 300 notifications each, at most `max_per_writer`).
async fn racing_writers_and_raises(kv: Arc<dyn RawKv>, raises_wanted: u32, max_per_writer: u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let raised = Arc::new(AtomicU32::new(0));
    // The raiser also plays the observers: it handles (deletes) most keys it finds.
    let raiser = {
        let client = client_on(kv.clone(), test_config());
        let (stop, raised) = (stop.clone(), raised.clone());
        tokio::spawn(async move {
            let mut raises = 0u32;
            let mut handled = BTreeSet::new();
            while !stop.load(Ordering::SeqCst) {
                let floor = client.notify_floor().await.unwrap();
                let range = client.codec().notify_from(floor);
                let page = scan_all(client.store().as_ref(), range, ScanOrder::Forward)
                    .await
                    .unwrap();
                let mut oldest: Option<u64> = None;
                // It leaves a tenth of a small pass, about two keys of a large one (a slow
                // store's passes are large: leaving a tenth would pin the floor for good).
                let leave = (2.0 / page.len().max(1) as f64).min(0.1);
                let mut done = Vec::new();
                for (key, _) in page {
                    let Ok(Key::Notify { bucket, cell, ts }) = client.codec().decode(&key) else {
                        continue;
                    };
                    if rand::thread_rng().gen_bool(leave) {
                        oldest = Some(oldest.map_or(bucket, |o| o.min(bucket)));
                    } else {
                        done.push(key);
                        handled.insert((cell, ts));
                    }
                }
                client.store().batch_delete(done).await.unwrap();
                let step = rand::thread_rng().gen_range(1..3);
                let to = oldest
                    .unwrap_or(u64::MAX)
                    .min(floor.max(wall_bucket()) + step);
                if client.raise_notify_floor(floor, to).await.unwrap().raised {
                    raises += 1;
                    raised.fetch_add(1, Ordering::SeqCst);
                }
                tokio::task::yield_now().await;
            }
            (raises, handled)
        })
    };
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let client = client_on(kv.clone(), test_config());
            let raised = raised.clone();
            tokio::spawn(async move {
                let mut written = BTreeSet::new();
                // At least 300 each, and on until the floor was raised `raises_wanted` times
                // meanwhile (or `max_per_writer`: writers that keep filling the floor's bucket
                // can hold it).
                for i in 0u64..max_per_writer {
                    if i >= 300 && raised.load(Ordering::SeqCst) >= raises_wanted {
                        break;
                    }
                    let cell = cell(&format!("w{w}-{i}"));
                    client
                        .put_notification(&cell, i, b"record".to_vec())
                        .await
                        .unwrap();
                    written.insert((cell, i));
                    if i % 16 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
                written
            })
        })
        .collect();
    let mut written = BTreeSet::new();
    for w in writers {
        written.extend(w.await.unwrap());
    }
    stop.store(true, Ordering::SeqCst);
    let (raises, handled) = raiser.await.unwrap();
    assert!(
        raises >= 5,
        "only {raises} raises: the race was not exercised"
    );
    let client = client_on(kv.clone(), test_config());
    let floor = client.notify_floor().await.unwrap();
    let keys = notify_keys(&client).await;
    let below: Vec<_> = keys.iter().filter(|(b, _, _)| *b < floor).collect();
    assert!(below.is_empty(), "keys below the floor {floor}: {below:?}");
    let mut found: BTreeSet<(Cell, u64)> = keys.into_iter().map(|(_, c, ts)| (c, ts)).collect();
    found.extend(handled);
    let lost: Vec<_> = written.difference(&found).collect();
    assert!(
        lost.is_empty(),
        "{} notifications lost: {lost:?}",
        lost.len()
    );
}
