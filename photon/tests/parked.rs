//! The sweep of parked clicks (photon::parked): a pass reads what fell due since the last
//! one, not the history of every click ever parked; no parked click is missed by sweeps
//! racing parks, wake-ups and each other, with sweeps killed mid-pass; a store without the
//! index gets one full pass.

mod common;
use observers::Worker;
use percolator::codec::Space;
use percolator::kv::intercept::{Hooks, Intercepted};
use percolator::kv::{KeyRange, KvPair, MemoryKv, RawKv, ScanOrder};
use percolator::Client;
use photon::expiry::{Expiry, Horizon};
use photon::join::{self, JoinConfig, JoinStats};
use photon::legacy::LegacyEntries;
use photon::load::{load_dir, LoadOptions, LoadStats};
use photon::maintenance::{gc_pass, GcMetrics, GcSpec};
use photon::parked::{self, SweepStats, PARKED};
use photon::pipeline::Pipeline;
use photon::schema::{click_cell, now_ms, outcome_cell, pending_cell, Stored};
use rand::Rng;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Transactions live at most 1 s here, so index cells fall due 1 s after their park.
fn client_on(kv: Arc<dyn RawKv>) -> Client {
    common::client_living(kv, Duration::from_secs(1), Duration::from_secs(3))
}

fn pipeline(client: &Client, horizon: impl Into<Horizon>) -> (Worker, Arc<JoinStats>) {
    let horizon = horizon.into();
    let join = JoinConfig {
        pipeline: "dc1".to_string(),
        worker: "dc1-w0".to_string(),
        process: JoinConfig::this_process(),
        horizon: horizon.length,
        expiry: horizon.expiry,
        adapter: None,
        legacy_entries: LegacyEntries::checked(client),
    };
    let config = common::fast_worker("dc1-0");
    let p = Pipeline::start_with(client, join, config).unwrap();
    (p.worker, p.stats)
}

fn options(dir: &Path) -> LoadOptions {
    LoadOptions {
        batch: 100,
        rejects: dir.join("rejects.txt"),
        // These tests park clicks with no worker draining the notifications.
        max_backlog: 0,
        ..LoadOptions::default()
    }
}

fn clicks(ids: impl Iterator<Item = (String, String)>, event_time: u64) -> String {
    ids.map(|(c, q)| {
        format!("{{\"click_id\":\"{c}\",\"query_id\":\"{q}\",\"event_time\":{event_time}}}\n")
    })
    .collect()
}

fn queries(ids: impl Iterator<Item = String>, event_time: u64) -> String {
    ids.map(|q| format!("{{\"query_id\":\"{q}\",\"event_time\":{event_time}}}\n"))
        .collect()
}

/// Counts the pairs every scan returns.
#[derive(Default)]
struct ScanCount {
    pairs: AtomicU64,
}

#[async_trait::async_trait]
impl Hooks for ScanCount {
    fn scanned(&self, _: &KeyRange, _: usize, _: ScanOrder, pairs: &[KvPair]) {
        self.pairs.fetch_add(pairs.len() as u64, Ordering::Relaxed);
    }
}

fn add(total: &mut SweepStats, s: SweepStats) {
    total.visited += s.visited;
    total.stale += s.stale;
    total.notified += s.notified;
    total.refiled += s.refiled;
}

const LONG: Duration = Duration::from_secs(3600);

/// 1,000 clicks parked and woken (their pending rows deleted: heads that stay, like an LSM's
/// delete markers) and 10 still parked: once the history has fallen due and been looked at,
/// sweep passes read no key of it. The full-table sweep this replaces read every pending
/// row's head on every pass (1,000 pairs per pass here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_passes_read_what_fell_due_not_the_history() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let kv = Arc::new(Intercepted::wrap(
        Arc::new(MemoryKv::new()),
        ScanCount::default(),
    ));
    let client = client_on(kv.clone());
    // The first pass of a store sets the cursor.
    join::sweep_pending(&client, LONG).await.unwrap();
    let filed_ahead = |client: Client| async move {
        parked::filed_ahead(&client.snapshot().await.unwrap())
            .await
            .unwrap()
    };
    assert!(!filed_ahead(client.clone()).await, "nothing parked yet");
    let (worker, stats) = pipeline(&client, LONG);
    worker.wait_until_settled().await;
    let now = now_ms();
    std::fs::write(
        logs.join("clicks-000.jsonl"),
        clicks((0..1000).map(|i| (format!("c{i}"), format!("q{i}"))), now),
    )
    .unwrap();
    load_dir(&client, &logs, &options(dir.path()), &LoadStats::default())
        .await
        .unwrap();
    worker.wait_until_quiescent().await.unwrap();
    assert_eq!(stats.parked.load(Ordering::Relaxed), 1000);
    assert!(
        filed_ahead(client.clone()).await,
        "1000 clicks filed, none swept"
    );
    std::fs::write(
        logs.join("queries-000.jsonl"),
        queries((0..1000).map(|i| format!("q{i}")), now),
    )
    .unwrap();
    std::fs::write(
        logs.join("clicks-001.jsonl"),
        clicks((0..10).map(|i| (format!("o{i}"), format!("never{i}"))), now),
    )
    .unwrap();
    load_dir(&client, &logs, &options(dir.path()), &LoadStats::default())
        .await
        .unwrap();
    worker.wait_until_quiescent().await.unwrap();
    assert_eq!(stats.joined.load(Ordering::Relaxed), 1000);
    worker.shutdown().await;

    // Until every index cell has fallen due (a liveness bound: 1 s after its park).
    let mut total = SweepStats::default();
    tokio::time::timeout(Duration::from_secs(30), async {
        while total.visited < 1010 {
            add(&mut total, parked::sweep(&client, LONG).await.unwrap());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the index cells fall due");
    assert_eq!(total.visited, 1010, "{total:?}");
    assert_eq!(total.stale, 1000, "{total:?}");
    assert_eq!(
        total.refiled, 10,
        "the orphans wait for their horizon: {total:?}"
    );
    assert_eq!(total.notified, 0, "{total:?}");

    let before = kv.hooks().pairs.load(Ordering::Relaxed);
    let mut later = SweepStats::default();
    for _ in 0..20 {
        add(&mut later, parked::sweep(&client, LONG).await.unwrap());
    }
    let read = kv.hooks().pairs.load(Ordering::Relaxed) - before;
    assert_eq!(later, SweepStats::default(), "nothing fell due");
    assert!(read <= 20, "20 passes scanned {read} pairs");
    assert!(
        filed_ahead(client.clone()).await,
        "the orphans are filed again for their horizon, ahead of the cursor"
    );
    for i in 0..10 {
        let cell = pending_cell(&format!("never{i}"));
        let t = client.begin().await.unwrap();
        assert!(t.get(&cell).await.unwrap().is_some(), "o{i} still parked");
    }

    // GC's pass deletes the handled index cells (below the cursor and its safe point)
    // outright; the orphans' refiled cells, due at their horizon, stay and still wake them.
    // Parks put records; a refile that writes nothing else writes its cell's head (its
    // transaction's primary).
    let keys = |client: Client, space: Space| async move {
        let range = client
            .codec()
            .rows_range(space, PARKED.as_bytes(), b"", None);
        percolator::kv::scan_all(client.store().as_ref(), range, ScanOrder::Forward)
            .await
            .unwrap()
            .len()
    };
    let index = |client: Client| async move {
        keys(client.clone(), Space::Once).await + keys(client, Space::Head).await
    };
    assert_eq!(keys(client.clone(), Space::Once).await, 1010, "parked");
    assert_eq!(keys(client.clone(), Space::Head).await, 10, "refiled");
    assert_eq!(
        index(client.clone()).await,
        1020,
        "1010 handled, 10 refiled"
    );
    // Every handled cell's bucket is below the cursor, which is below now.
    let handled_by = now_ms();
    let lag = Duration::from_secs(1);
    // Until the safe point (lag + gc_lag + 1 s behind) passes every handled cell's bucket.
    let wait = (handled_by + (lag + client.config().gc_lag).as_millis() as u64 + 1000)
        .saturating_sub(now_ms());
    tokio::time::sleep(Duration::from_millis(wait)).await;
    let spec = GcSpec {
        every: Duration::from_secs(3600),
        lag,
        retention_days: None,
        holder: "test".into(),
    };
    let metrics = GcMetrics::default();
    gc_pass(&client, &spec, &metrics).await.unwrap();
    assert_eq!(
        index(client.clone()).await,
        10,
        "only the refiled cells stay"
    );
    assert_eq!(metrics.parked_keys_deleted.load(Ordering::Relaxed), 1010);
    add(&mut later, parked::sweep(&client, LONG).await.unwrap());
    for i in 0..10 {
        let cell = pending_cell(&format!("never{i}"));
        let t = client.begin().await.unwrap();
        assert!(t.get(&cell).await.unwrap().is_some(), "o{i} still parked");
    }
}

/// Orphan clicks (their query never comes) are expired only by the sweep: parked while
/// sweeps run back to back, another sweep killed at random moments mid-pass, and other
/// clicks parked and woken by their queries meanwhile, over a store with random delays.
/// Every orphan ends expired, every other click joined. A parked click an index read
/// missed would stay parked and fail the test (e.g. with cells filed at their start
/// second instead of their commit deadline).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_parked_click_is_missed_by_racing_and_crashing_sweeps() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let faults = percolator::kv::Faults {
        cas_hazard: 0.0,
        delay: 0.5,
        max_delay: Duration::from_millis(8),
        ..Default::default()
    };
    let kv = percolator::kv::FaultyKv::new(Arc::new(MemoryKv::new()), faults);
    let client = client_on(Arc::new(kv));
    // On the wall clock: orphans expire 3 s after their event time whatever the logs loaded
    // since (in event time the last rounds' orphans would wait for later logs).
    let horizon = Horizon {
        length: Duration::from_secs(3),
        expiry: Expiry::WallClock,
    };
    let (worker, stats) = pipeline(&client, horizon);
    worker.wait_until_settled().await;
    let steady = {
        let client = client.clone();
        tokio::spawn(async move {
            loop {
                if let Err(e) = parked::sweep(&client, horizon).await {
                    eprintln!("sweep failed: {e}");
                }
            }
        })
    };
    let crashing = {
        let client = client.clone();
        tokio::spawn(async move {
            loop {
                let client = client.clone();
                let pass = tokio::spawn(async move { parked::sweep(&client, horizon).await });
                let ms = rand::thread_rng().gen_range(1..30);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                pass.abort();
                let _ = pass.await;
            }
        })
    };
    let mut rng = rand::thread_rng();
    let (mut orphans, mut joinable) = (Vec::new(), Vec::new());
    for round in 0..8 {
        let now = now_ms();
        let mut lines = Vec::new();
        for i in 0..50 {
            let click = format!("c{round}-{i}");
            if rng.gen_bool(0.5) {
                lines.push((click.clone(), format!("never-{round}-{i}")));
                orphans.push(click);
            } else {
                lines.push((click.clone(), format!("q{round}-{i}")));
                joinable.push((click, format!("q{round}-{i}")));
            }
        }
        std::fs::write(
            logs.join(format!("clicks-{round:03}.jsonl")),
            clicks(lines.into_iter(), now),
        )
        .unwrap();
        load_dir(&client, &logs, &options(dir.path()), &LoadStats::default())
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..400))).await;
        let arrived = joinable
            .iter()
            .filter(|(c, _)| c.starts_with(&format!("c{round}-")))
            .map(|(_, q)| q.clone())
            .collect::<Vec<_>>();
        std::fs::write(
            logs.join(format!("queries-{round:03}.jsonl")),
            queries(arrived.into_iter(), now),
        )
        .unwrap();
        load_dir(&client, &logs, &options(dir.path()), &LoadStats::default())
            .await
            .unwrap();
    }
    // Liveness bound: each orphan's horizon is 3 s after its event time, plus at most two
    // index lookups 1 s apart.
    let all_done = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            worker.wait_until_quiescent().await.unwrap();
            let left = not_expired(&client, &orphans, "expired:3").await;
            if left == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    steady.abort();
    crashing.abort();
    assert!(all_done.is_ok(), "orphans left parked: {stats:?}");
    assert!(stats.parked.load(Ordering::Relaxed) >= orphans.len() as u64);
    assert_eq!(
        stats.joined.load(Ordering::Relaxed),
        joinable.len() as u64,
        "{stats:?}"
    );
    worker.shutdown().await;
}

/// A store with a parked click but no index cell and no cursor (written before the index
/// existed): the first sweep reads the whole pending table once and files the click.
#[tokio::test]
async fn a_store_without_the_index_gets_one_full_pass() {
    let client = client_on(Arc::new(MemoryKv::new()));
    let click = photon::event::Click {
        click_id: "c1".to_string(),
        query_id: "q1".to_string(),
        event_time: now_ms(),
        fields: Default::default(),
    };
    let t = client.begin().await.unwrap();
    let stored = Stored {
        event: click,
        loaded_at: now_ms(),
    };
    t.set(click_cell("c1"), serde_json::to_vec(&stored).unwrap());
    t.set(pending_cell("q1"), serde_json::to_vec(&["c1"]).unwrap());
    t.commit().await.unwrap();
    let first = parked::sweep(&client, LONG).await.unwrap();
    assert_eq!((first.legacy_rows, first.refiled), (1, 1), "{first:?}");
    let t = client.begin().await.unwrap();
    let cursor = t.get(&parked::cursor_cell()).await.unwrap();
    assert_eq!(cursor.as_deref(), Some(b"0".as_slice()));
    let index = t.scan(parked::PARKED.as_bytes(), b"", None).await.unwrap();
    assert_eq!(index.len(), 1, "{index:?}");
    assert_eq!(index[0].0.column, b"c1");
}

/// A backfill of week-old logs, in event time (the default): every click whose query is in
/// the input within the horizon joins, even one whose query comes after it; an orphan
/// expires once the loaded logs pass its horizon; an orphan within the last horizon of the
/// input waits (later logs may still bring its query). On the wall clock every one of these
/// clicks would be a week past its horizon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_expires_in_event_time() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let client = client_on(Arc::new(MemoryKv::new()));
    let horizon = Duration::from_secs(10);
    let (worker, stats) = pipeline(&client, horizon);
    let base = now_ms() - 7 * 86_400_000;
    let (mut queries, mut clicks) = (Vec::new(), Vec::new());
    for i in 0..60u64 {
        queries.push((base + i * 1_000, format!("q{i}")));
    }
    let mut joinable = Vec::new();
    for i in 0..50u64 {
        clicks.push((base + i * 1_000 + 500, format!("a{i}"), format!("q{i}")));
        joinable.push(format!("a{i}"));
    }
    // Its query comes 5 s after it, within the horizon.
    queries.push((base + 15_000, "q-after".to_string()));
    clicks.push((base + 10_000, "b".to_string(), "q-after".to_string()));
    joinable.push("b".to_string());
    let mut orphans = Vec::new();
    for i in 0..20u64 {
        clicks.push((
            base + i * 1_000 + 700,
            format!("o{i}"),
            format!("never-{i}"),
        ));
        orphans.push(format!("o{i}"));
    }
    clicks.push((base + 55_000, "waits".to_string(), "never-late".to_string()));
    queries.sort();
    clicks.sort();
    let q: String = queries
        .iter()
        .map(|(t, q)| format!("{{\"query_id\":\"{q}\",\"event_time\":{t}}}\n"))
        .collect();
    let c: String = clicks
        .iter()
        .map(|(t, c, q)| {
            format!("{{\"click_id\":\"{c}\",\"query_id\":\"{q}\",\"event_time\":{t}}}\n")
        })
        .collect();
    std::fs::write(logs.join("queries-000.jsonl"), q).unwrap();
    std::fs::write(logs.join("clicks-000.jsonl"), c).unwrap();
    let opts = LoadOptions {
        batch: 10,
        ..options(dir.path())
    };
    load_dir(&client, &logs, &opts, &LoadStats::default())
        .await
        .unwrap();
    let watermark = retrying(|| async {
        let t = client.begin().await?;
        observers::time::published(&t, &photon::expiry::queries_column()).await
    })
    .await;
    // The latest query loaded (base + 59 s) minus the out-of-orderness (5 s): the query
    // logs' alone, and not the end of time: later loads extend the logs.
    assert_eq!(watermark, Some(base + 54_000));
    let settled = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            worker.wait_until_quiescent().await.unwrap();
            // A pass or read past the 1 s lifetime on a busy machine is tried again.
            if let Err(e) = join::sweep_pending(&client, horizon).await {
                assert!(e.is_transient(), "sweep: {e}");
                continue;
            }
            let left = not_expired(&client, &orphans, "expired:10").await;
            // The counters count attempts (a retried join counts again): the store decides.
            if left == 0 && stats.joined.load(Ordering::Relaxed) >= joinable.len() as u64 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(settled.is_ok(), "not settled: {stats:?}");
    let report = photon::verify::verify(&client, &logs).await.unwrap();
    assert_eq!(report.joined, joinable.len() as u64, "{report:?}");
    assert_eq!((report.duplicates, report.lost), (0, 0), "{report:?}");
    let waiting =
        retrying(|| async { client.begin().await?.get(&outcome_cell("waits")).await }).await;
    assert_eq!(
        waiting.as_deref(),
        Some(b"waiting".as_slice()),
        "within the last horizon"
    );
    worker.shutdown().await;
}

/// `read` again after a transient error (a read past the 1 s lifetime on a busy machine).
async fn retrying<T, F, Fut>(mut read: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, percolator::TxnError>>,
{
    loop {
        match read().await {
            Ok(v) => return v,
            Err(e) if e.is_transient() => continue,
            Err(e) => panic!("read: {e}"),
        }
    }
}

/// How many of `clicks` have not the outcome `expired`, read in one batch (transactions
/// live 1 s here, and reads one by one over a delaying store outlive that on a busy
/// machine; a read past the lifetime is made again).
async fn not_expired(client: &Client, clicks: &[String], expired: &str) -> usize {
    let cells: Vec<_> = clicks.iter().map(|c| outcome_cell(c)).collect();
    let outcomes = retrying(|| async {
        let t = client.begin().await?;
        let outcomes = t.get_many(&cells).await;
        t.rollback();
        outcomes
    })
    .await;
    outcomes
        .iter()
        .filter(|o| o.as_deref() != Some(expired.as_bytes()))
        .count()
}
