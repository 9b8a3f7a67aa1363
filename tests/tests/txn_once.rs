//! Write-once records (`percolator::design::once`): readers meeting records of writers that
//! crashed at every step (records put, primary locked, committed), rolled back or lost a
//! conflict; GC meeting unresolved records; scans merging heads and records; and a
//! randomized history of loaders with crash injection whose invariant is checked afterwards:
//! an event is visible exactly when the batch that wrote it moved the shared offset.

mod common;

use common::test_config;
use percolator::kv::{MemoryKv, RawKv};
use percolator::record::OnceRecord;
use percolator::ts::{LocalClock, Timestamp};
use percolator::txn::{Client, ClientConfig, CrashPoint, TxnError};
use percolator::Cell;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::time::Duration;

const EVENTS: &str = "events";

fn event(id: u64) -> Cell {
    Cell::new(EVENTS, format!("e{id:06}"), "body")
}

fn offset() -> Cell {
    Cell::new("loader", "file", "offset")
}

/// The one oracle of a test's clients (each `LocalClock` counts on its own, so clients of
/// one store must share it).
fn clock() -> Arc<LocalClock> {
    static CLOCK: std::sync::OnceLock<Arc<LocalClock>> = std::sync::OnceLock::new();
    CLOCK.get_or_init(|| Arc::new(LocalClock::new())).clone()
}

/// A client on `kv` that declares `events/body` write-once.
fn declared(kv: Arc<dyn RawKv>, config: ClientConfig) -> Client {
    let client = Client::with_config(kv, clock(), config);
    client.write_once_column(EVENTS, "body");
    client
}

fn clients() -> (Arc<dyn RawKv>, Client) {
    let kv: Arc<dyn RawKv> = Arc::new(MemoryKv::new());
    (kv.clone(), declared(kv, test_config()))
}

/// Keys of the `W` space (records), as raw (key, value).
async fn records(client: &Client, kv: &Arc<dyn RawKv>) -> Vec<(Vec<u8>, OnceRecord)> {
    let range = client.codec().space_range(percolator::codec::Space::Once);
    kv.scan(range, 10_000, percolator::ScanOrder::Forward)
        .await
        .unwrap()
        .into_iter()
        .map(|(k, v)| (k, OnceRecord::decode(&v).unwrap()))
        .collect()
}

/// Loads events `ids` with the offset moved to `to`, the way a loader does.
async fn load(client: &Client, ids: &[u64], to: u64) -> Result<Timestamp, TxnError> {
    let txn = client.begin().await?;
    txn.get(&offset()).await?;
    for id in ids {
        txn.set(event(*id), format!("event {id}"));
    }
    txn.set(offset(), to.to_string());
    txn.commit().await
}

#[tokio::test]
async fn a_committed_record_is_visible_from_its_commit_on_and_costs_no_head() {
    let (kv, client) = clients();
    let before = client.begin().await.unwrap();
    let commit_ts = load(&client, &[1, 2], 2).await.unwrap();
    let after = client.begin().await.unwrap();
    assert_eq!(
        before.get(&event(1)).await.unwrap(),
        None,
        "a snapshot before the commit"
    );
    assert_eq!(
        after
            .get_many_versioned(&[event(1), event(2), event(3)])
            .await
            .unwrap(),
        vec![
            (Some(b"event 1".to_vec()), Some(commit_ts.0)),
            (Some(b"event 2".to_vec()), Some(commit_ts.0)),
            (None, None)
        ]
    );
    // The events have records and no heads; the offset (the primary) has a head.
    let heads = kv
        .scan(
            client.codec().space_range(percolator::codec::Space::Head),
            100,
            percolator::ScanOrder::Forward,
        )
        .await
        .unwrap();
    assert_eq!(heads.len(), 1, "only the offset has a head");
    assert_eq!(records(&client, &kv).await.len(), 2);
    // A client that did not declare the column does not see them (documented contract).
    let undeclared = Client::with_config(kv.clone(), clock(), test_config());
    let txn = undeclared.begin().await.unwrap();
    assert_eq!(txn.get(&event(1)).await.unwrap(), None);
}

#[tokio::test]
async fn a_transaction_of_write_once_cells_only_commits_its_first_through_a_head() {
    let (_kv, client) = clients();
    let txn = client.begin().await.unwrap();
    txn.set(event(1), "a");
    txn.set(event(2), "b");
    txn.commit().await.unwrap();
    let read = client.begin().await.unwrap();
    assert_eq!(
        read.get_many(&[event(1), event(2)]).await.unwrap(),
        vec![Some(b"a".to_vec()), Some(b"b".to_vec())]
    );
    let scan = read.scan(EVENTS.as_bytes(), b"", None).await.unwrap();
    assert_eq!(scan.len(), 2, "scans merge heads and records: {scan:?}");
}

#[tokio::test]
async fn a_read_value_cannot_be_written_again() {
    let (_kv, client) = clients();
    load(&client, &[1], 1).await.unwrap();
    let txn = client.begin().await.unwrap();
    assert!(txn.get(&event(1)).await.unwrap().is_some());
    txn.set(event(1), "again");
    txn.set(offset(), "9");
    match txn.commit().await {
        Err(TxnError::WrittenOnce { cell }) => assert_eq!(cell, event(1)),
        other => panic!("expected WrittenOnce, got {other:?}"),
    }
    // A delete of it is allowed (an application's own retention).
    let txn = client.begin().await.unwrap();
    txn.get(&event(1)).await.unwrap();
    txn.delete(event(1));
    txn.set(offset(), "10");
    txn.commit().await.unwrap();
    let read = client.begin().await.unwrap();
    assert_eq!(read.get(&event(1)).await.unwrap(), None);
}

#[tokio::test]
async fn duplicated_loaders_write_each_event_once() {
    // Two loaders read the same offset and write the same events; the offset conflicts,
    // one commits, and the loser's records are never visible.
    let (kv, client) = clients();
    let other = declared(kv.clone(), test_config());
    let (a, b) = (client.begin().await.unwrap(), other.begin().await.unwrap());
    for txn in [&a, &b] {
        txn.get(&offset()).await.unwrap();
        for id in 0..5 {
            txn.set(event(id), format!("by {}", txn.start_ts().0));
        }
        txn.set(offset(), "5");
    }
    let (ra, rb) = tokio::join!(a.commit(), b.commit());
    let winner = match (&ra, &rb) {
        (Ok(_), Err(e)) if e.is_retryable() => a.start_ts(),
        (Err(e), Ok(_)) if e.is_retryable() => b.start_ts(),
        other => panic!("exactly one loader must commit: {other:?}"),
    };
    let read = client.begin().await.unwrap();
    for id in 0..5 {
        assert_eq!(
            read.get(&event(id)).await.unwrap(),
            Some(format!("by {}", winner.0).into_bytes())
        );
    }
    // The loser deleted its records on abort.
    assert_eq!(records(&client, &kv).await.len(), 5);
}

/// A loader that crashes at `point`, leaving what it wrote; returns its start_ts.
async fn crash_at(client: &Client, point: CrashPoint) -> Timestamp {
    let txn = client.begin().await.unwrap();
    txn.get(&offset()).await.unwrap();
    txn.set(event(7), "crashed");
    txn.set(offset(), "1");
    txn.set_crash_hook(Arc::new(move |p| p == point));
    match txn.commit().await {
        Err(TxnError::InjectedCrash(p)) => assert_eq!(p, point),
        other => panic!("expected a crash at {point:?}, got {other:?}"),
    }
    txn.start_ts()
}

#[tokio::test]
async fn readers_decide_records_left_by_a_crash_at_every_step() {
    for (point, visible) in [
        (CrashPoint::RecordsWritten, false),
        (CrashPoint::AllPrewritten, false),
        (CrashPoint::Committed, true),
    ] {
        let (kv, client) = clients();
        let writer = declared(kv.clone(), test_config());
        crash_at(&writer, point).await;
        assert_eq!(records(&client, &kv).await.len(), 1, "{point:?}");
        // The reader waits out the writer's lease (or finds its commit), then decides.
        let read = client.begin().await.unwrap();
        let got = read.get(&event(7)).await.unwrap();
        assert_eq!(got.is_some(), visible, "{point:?}: {got:?}");
        // Every later reader agrees, and a new loader can redo the batch when it rolled back.
        let offset_now = read.get(&offset()).await.unwrap();
        assert_eq!(offset_now.is_some(), visible, "{point:?}");
        if !visible {
            load(&client, &[7], 1).await.unwrap();
            let read = client.begin().await.unwrap();
            assert_eq!(
                read.get(&event(7)).await.unwrap(),
                Some(b"event 7".to_vec())
            );
        }
    }
}

#[tokio::test]
async fn gc_resolves_records_left_by_crashes_before_deleting_evidence() {
    let kv: Arc<dyn RawKv> = Arc::new(MemoryKv::new());
    let gc_config = ClientConfig {
        max_lifetime: Duration::from_millis(20),
        gc_lag: Duration::from_millis(30),
        lock_ttl: Duration::from_millis(10),
        ..test_config()
    };
    let client = declared(kv.clone(), gc_config);
    // A committed writer whose records were never resolved, and one that never locked.
    let committed = {
        let txn = client.begin().await.unwrap();
        txn.set(event(1), "kept");
        txn.set(offset(), "1");
        txn.set_crash_hook(Arc::new(|p| p == CrashPoint::Committed));
        assert!(matches!(
            txn.commit().await,
            Err(TxnError::InjectedCrash(_))
        ));
        txn.start_ts()
    };
    {
        let txn = client.begin().await.unwrap();
        txn.set(event(2), "lost");
        txn.set(Cell::new("loader", "other", "offset"), "1");
        txn.set_crash_hook(Arc::new(|p| p == CrashPoint::RecordsWritten));
        assert!(matches!(
            txn.commit().await,
            Err(TxnError::InjectedCrash(_))
        ));
    };
    // The offset moves on several times, so GC may drop the version that proves the commit.
    for to in 2..8 {
        let txn = client.begin().await.unwrap();
        txn.get(&offset()).await.unwrap();
        txn.set(offset(), to.to_string());
        txn.commit().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(60)).await;
    let safe_point = clock_now(&client).await;
    let stats = loop {
        match client.gc(safe_point).await {
            Ok(stats) => break stats,
            Err(TxnError::InvalidArgument(_)) => tokio::time::sleep(Duration::from_millis(5)).await,
            Err(e) => panic!("gc failed: {e}"),
        }
    };
    assert_eq!(stats.records_resolved, 2, "{stats:?}");
    let left = records(&client, &kv).await;
    assert_eq!(left.len(), 1, "the rolled-back record is deleted: {left:?}");
    assert!(
        matches!(left[0].1, OnceRecord::Committed { .. }),
        "the committed one is rewritten: {left:?}"
    );
    let read = client.begin().await.unwrap();
    assert_eq!(read.get(&event(1)).await.unwrap(), Some(b"kept".to_vec()));
    assert_eq!(read.get(&event(2)).await.unwrap(), None);
    assert!(committed < safe_point);
}

async fn clock_now(client: &Client) -> Timestamp {
    let txn = client.begin().await.unwrap();
    let ts = txn.start_ts();
    txn.rollback();
    ts
}

#[tokio::test]
async fn gc_deletes_records_hidden_below_the_safe_point() {
    let kv: Arc<dyn RawKv> = Arc::new(MemoryKv::new());
    let config = ClientConfig {
        max_lifetime: Duration::from_millis(20),
        gc_lag: Duration::from_millis(30),
        ..test_config()
    };
    let client = declared(kv.clone(), config);
    load(&client, &[1, 2], 2).await.unwrap();
    // Event 1 is deleted (an application's retention); event 2 stays.
    let txn = client.begin().await.unwrap();
    txn.delete(event(1));
    txn.set(offset(), "3");
    txn.commit().await.unwrap();
    assert_eq!(records(&client, &kv).await.len(), 3);
    tokio::time::sleep(Duration::from_millis(60)).await;
    let sp = clock_now(&client).await;
    let stats = loop {
        match client.gc(sp).await {
            Ok(stats) => break stats,
            Err(TxnError::InvalidArgument(_)) => tokio::time::sleep(Duration::from_millis(5)).await,
            Err(e) => panic!("gc failed: {e}"),
        }
    };
    // Event 1's put goes; its delete stays as a tombstone (a cell with no record was never
    // written).
    assert_eq!(stats.records_deleted, 1, "{stats:?}");
    let left = records(&client, &kv).await;
    assert_eq!(left.len(), 2, "{left:?}");
    let read = client.begin().await.unwrap();
    assert_eq!(
        read.scan(EVENTS.as_bytes(), b"", None).await.unwrap(),
        vec![(event(2), b"event 2".to_vec())]
    );
}

/// A reader whose snapshot GC passed (a stalled start_ts) must not answer from the records
/// GC left: event 1 was written, then deleted after the reader's snapshot, and GC removed
/// the put below the delete. Without the safe point check the reader would see nothing.
#[tokio::test]
async fn a_snapshot_gc_passed_is_refused_not_answered_from_what_gc_left() {
    let kv: Arc<dyn RawKv> = Arc::new(MemoryKv::new());
    let reader = declared(
        kv.clone(),
        ClientConfig {
            max_lifetime: Duration::from_secs(600),
            gc_lag: Duration::from_secs(601),
            ..test_config()
        },
    );
    let gc = declared(
        kv.clone(),
        ClientConfig {
            max_lifetime: Duration::from_millis(20),
            gc_lag: Duration::from_millis(30),
            ..test_config()
        },
    );
    load(&gc, &[1], 1).await.unwrap();
    let stalled = reader.begin().await.unwrap();
    let txn = gc.begin().await.unwrap();
    txn.delete(event(1));
    txn.set(offset(), "2");
    txn.commit().await.unwrap();
    tokio::time::sleep(Duration::from_millis(60)).await;
    let sp = clock_now(&gc).await;
    loop {
        match gc.gc(sp).await {
            Ok(stats) => {
                assert_eq!(stats.records_deleted, 1, "{stats:?}");
                break;
            }
            Err(TxnError::InvalidArgument(_)) => tokio::time::sleep(Duration::from_millis(5)).await,
            Err(e) => panic!("gc failed: {e}"),
        }
    }
    match stalled.get(&event(1)).await {
        Err(TxnError::SnapshotTooOld { .. }) => {}
        other => panic!("expected SnapshotTooOld, got {other:?}"),
    }
    let scan = reader.snapshot_at(stalled.start_ts()).await;
    assert!(
        scan.is_err(),
        "snapshot_at refuses a timestamp below the safe point"
    );
}

#[tokio::test]
async fn scan_pages_merge_heads_and_records_in_order() {
    let (_kv, client) = clients();
    // Rows 0..40: even ones written once (records), odd ones through an undeclared column
    // of the same table (heads).
    let txn = client.begin().await.unwrap();
    for i in 0..40u64 {
        if i % 2 == 0 {
            txn.set(event(i), i.to_string());
        } else {
            txn.set(Cell::new(EVENTS, format!("e{i:06}"), "meta"), i.to_string());
        }
    }
    txn.commit().await.unwrap();
    let snap = client.snapshot_at(clock_now(&client).await).await.unwrap();
    let mut all = Vec::new();
    let mut after: Option<Cell> = None;
    loop {
        let page = snap
            .scan_page(EVENTS.as_bytes(), b"", None, after.as_ref(), 7)
            .await
            .unwrap();
        if page.is_empty() {
            break;
        }
        after = page.last().map(|(c, _)| c.clone());
        all.extend(page);
    }
    let values: Vec<String> = all
        .iter()
        .map(|(_, v)| String::from_utf8(v.clone()).unwrap())
        .collect();
    let expected: Vec<String> = (0..40).map(|i: u64| i.to_string()).collect();
    assert_eq!(values, expected);
}

/// Randomized loaders over one store with crashes injected at random protocol points: an
/// event is visible exactly when the batch that wrote it is below the committed offset,
/// each at most once, whatever crashed where.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn randomized_loaders_with_crashes_load_each_event_exactly_once() {
    randomized_loaders(Arc::new(MemoryKv::new()), 40).await;
}

/// The same on TiKV (minitikv through `TikvKv`) in the weather: regions split, merge and
/// move under the scans of records, servers are busy, replies are lost after apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn randomized_loaders_with_crashes_on_tikv_in_the_weather() {
    let store = common::tikv_weather_store(rand::thread_rng().gen()).await;
    randomized_loaders(store.kv.clone(), 12).await;
    store.report("write-once loaders");
}

async fn randomized_loaders(kv: Arc<dyn RawKv>, batches: usize) {
    let seed: u64 = rand::thread_rng().gen();
    eprintln!("seed {seed}");
    let config = ClientConfig {
        lock_ttl: Duration::from_millis(50),
        ..test_config()
    };
    let loaders: Vec<Client> = (0..3)
        .map(|_| declared(kv.clone(), config.clone()))
        .collect();
    let tasks = loaders.into_iter().enumerate().map(|(n, client)| {
        tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ n as u64);
            let mut crashes = 0;
            for _ in 0..batches {
                let txn = client.begin().await.unwrap();
                let at: u64 = match txn.get(&offset()).await {
                    Ok(v) => v.map_or(0, |v| String::from_utf8(v).unwrap().parse().unwrap()),
                    Err(e) if e.is_transient() => continue,
                    Err(e) => panic!("{e}"),
                };
                let batch = rng.gen_range(1..6u64);
                for id in at..at + batch {
                    txn.set(event(id), format!("event {id}"));
                }
                txn.set(offset(), (at + batch).to_string());
                let point = match rng.gen_range(0..8) {
                    0 => Some(CrashPoint::RecordsWritten),
                    1 => Some(CrashPoint::AllPrewritten),
                    2 => Some(CrashPoint::Committed),
                    _ => None,
                };
                if let Some(point) = point {
                    txn.set_crash_hook(Arc::new(move |p| p == point));
                }
                match txn.commit().await {
                    Ok(_) => {}
                    Err(TxnError::InjectedCrash(_)) => crashes += 1,
                    Err(e) if e.is_transient() => {}
                    Err(e) => panic!("{e}"),
                }
            }
            crashes
        })
    });
    let crashes: usize = futures::future::join_all(tasks)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .sum();
    let reader = declared(kv.clone(), config);
    let read = reader.begin().await.unwrap();
    let loaded: u64 = read
        .get(&offset())
        .await
        .unwrap()
        .map_or(0, |v| String::from_utf8(v).unwrap().parse().unwrap());
    let events = read.scan(EVENTS.as_bytes(), b"", None).await.unwrap();
    let ids: Vec<u64> = events
        .iter()
        .map(|(cell, value)| {
            let id: u64 = String::from_utf8(cell.row[1..].to_vec())
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(value, &format!("event {id}").into_bytes());
            id
        })
        .collect();
    assert_eq!(
        ids,
        (0..loaded).collect::<Vec<_>>(),
        "seed {seed}, {crashes} crashes"
    );
    assert!(loaded > 0, "seed {seed}");
}
