//! Periodic GC (photon::maintenance): after a run, old `V` versions and IdRegistry days
//! behind the boundary are gone, every read still sees what it should, and GC passes racing
//! each other and a writer lose nothing.

mod common;
use percolator::codec::Space;
use percolator::kv::{scan_all, MemoryKv, RawKv, ScanOrder};
use percolator::{Cell, Client, TxnError};
use photon::maintenance::{gc_pass, spawn_gc, GcMetrics, GcSpec};
use photon::schema::{idregistry_cell, now_ms};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

fn client_on(kv: Arc<dyn RawKv>) -> Client {
    common::client_living(kv, Duration::from_millis(500), Duration::from_secs(1))
}

async fn keys(client: &Client, space: Space, table: &str) -> usize {
    let range = client
        .codec()
        .rows_range(space, table.as_bytes(), b"", None);
    scan_all(client.store().as_ref(), range, ScanOrder::Forward)
        .await
        .unwrap()
        .len()
}

async fn bump(client: &Client, cell: &Cell) -> u64 {
    client
        .run(|txn| async move {
            let n: u64 = txn
                .get(cell)
                .await?
                .map(|b| String::from_utf8_lossy(&b).parse().unwrap_or(0))
                .unwrap_or(0);
            txn.set(cell.clone(), (n + 1).to_string());
            Ok::<_, TxnError>(n + 1)
        })
        .await
        .unwrap()
}

fn spec(holder: &str) -> GcSpec {
    GcSpec {
        every: Duration::from_millis(50),
        lag: Duration::from_secs(1),
        retention_days: Some(3),
        holder: holder.to_string(),
    }
}

/// A cell rewritten 200 times (like a loader's offset) and IdRegistry entries of an old day
/// and of today; two workers' GC tasks run (one at a time, by the lease): afterwards the old
/// versions and the old day are gone, today's entries and the latest value stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn periodic_gc_drops_old_versions_and_registry_days() {
    let client = client_on(Arc::new(MemoryKv::new()));
    let counter = Cell::new("loader", "file-1", "offset");
    for _ in 0..200 {
        bump(&client, &counter).await;
    }
    let today = photon::event::day_of(now_ms());
    let t = client.begin().await.unwrap();
    for i in 0..50 {
        t.set(idregistry_cell(today - 10, &format!("old{i}")), "token");
        t.set(idregistry_cell(today, &format!("new{i}")), "token");
    }
    t.commit().await.unwrap();
    let before = keys(&client, Space::Version, "loader").await;
    assert!(before >= 150, "{before} versions");
    // Past the lag (a liveness wait: GC only collects what is older than it).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let metrics = Arc::new(GcMetrics::default());
    let tasks = [
        spawn_gc(client.clone(), spec("w1"), metrics.clone()),
        spawn_gc(client.clone(), spec("w2"), metrics.clone()),
    ];
    tokio::time::timeout(Duration::from_secs(30), async {
        while metrics.passes.load(Ordering::Relaxed) < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("GC passes run");
    for t in &tasks {
        t.abort();
    }
    assert_eq!(metrics.failures.load(Ordering::Relaxed), 0);
    assert!(metrics.versions_deleted.load(Ordering::Relaxed) >= 199);
    assert!(
        keys(&client, Space::Version, "loader").await <= 1,
        "old versions of the offset cell left"
    );
    // The old day's keys are gone, today's stay.
    let registry = client.codec().rows_range(
        Space::Head,
        b"idregistry",
        format!("{:08}", today - 10).as_bytes(),
        Some(format!("{:08}", today - 9).as_bytes()),
    );
    let old = scan_all(client.store().as_ref(), registry, ScanOrder::Forward)
        .await
        .unwrap();
    assert!(old.is_empty(), "{} old registry heads left", old.len());
    let t = client.begin().await.unwrap();
    assert_eq!(
        t.get(&counter).await.unwrap().as_deref(),
        Some(b"200".as_slice())
    );
    for i in 0..50 {
        let cell = idregistry_cell(today, &format!("new{i}"));
        assert!(t.get(&cell).await.unwrap().is_some(), "today's entry {i}");
    }
    assert_eq!(
        photon::join::boundary(&t).await.unwrap(),
        today - 3,
        "the boundary moved"
    );
}

/// GC passes racing each other (no lease) while a writer increments a counter and a reader
/// reads it: every read sees a value no lower than the previous one, the final value is
/// the number of increments, and old versions are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_gc_passes_lose_nothing() {
    let client = client_on(Arc::new(MemoryKv::new()));
    let counter = Cell::new("c", "n", "v");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (client, counter, stop) = (client.clone(), counter.clone(), stop.clone());
        tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n = bump(&client, &counter).await;
            }
            n
        })
    };
    let reader = {
        let (client, counter, stop) = (client.clone(), counter.clone(), stop.clone());
        tokio::spawn(async move {
            let mut last = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let t = client.begin().await.unwrap();
                let n = match t.get(&counter).await {
                    Ok(v) => v
                        .map(|b| String::from_utf8_lossy(&b).parse().unwrap())
                        .unwrap_or(0),
                    Err(TxnError::SnapshotTooOld { .. }) => continue,
                    Err(e) => panic!("read failed: {e}"),
                };
                assert!(n >= last, "read {n} after {last}");
                last = n;
            }
        })
    };
    let metrics = Arc::new(GcMetrics::default());
    let gcs: Vec<_> = (0..2)
        .map(|i| {
            let (client, metrics) = (client.clone(), metrics.clone());
            tokio::spawn(async move {
                let spec = GcSpec {
                    retention_days: None,
                    ..spec(&format!("g{i}"))
                };
                // Until the safe point passed some of the writer's versions (a liveness
                // bound: the lag is 2 s), and at least 15 passes each.
                let mut passes = 0;
                while passes < 15 || metrics.versions_deleted.load(Ordering::Relaxed) == 0 {
                    gc_pass(&client, &spec, &metrics).await.unwrap();
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    passes += 1;
                    assert!(passes < 300, "no version became collectable");
                }
            })
        })
        .collect();
    for g in gcs {
        g.await.unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let written = writer.await.unwrap();
    reader.await.unwrap();
    let t = client.begin().await.unwrap();
    let value = t.get(&counter).await.unwrap().unwrap();
    assert_eq!(String::from_utf8_lossy(&value), written.to_string());
    assert!(metrics.versions_deleted.load(Ordering::Relaxed) > 0);
    assert!(written > 10, "the writer ran");
}
