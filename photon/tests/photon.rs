//! Photon end to end: exactly once with two pipelines and crashing workers; early clicks,
//! duplicates, missing queries and the IdRegistry boundary; a loader killed with SIGKILL;
//! malformed lines.

mod common;
use observers::Worker;
use percolator::codec::Space;
use percolator::kv::{scan_all, MemoryKv, RawKv, ScanOrder};
use percolator::Client;
use photon::gen::{generate, GenOptions};
use photon::join::{self, JoinConfig, JoinStats};
use photon::legacy::LegacyEntries;
use photon::load::{load_dir, LoadOptions, LoadStats};
use photon::pipeline::{self, Pipeline};
use photon::verify::verify;
use rand::Rng;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

fn client_on(kv: Arc<dyn RawKv>) -> Client {
    common::client_living(kv, Duration::from_secs(2), Duration::from_secs(3))
}

fn pipeline(client: &Client, name: &str, n: usize) -> (Worker, Arc<JoinStats>) {
    let join = JoinConfig {
        pipeline: name.to_string(),
        worker: format!("{name}-w{n}"),
        process: JoinConfig::this_process(),
        horizon: Duration::from_secs(3600),
        expiry: Default::default(),
        adapter: None,
        legacy_entries: LegacyEntries::checked(client),
    };
    let config = common::fast_worker(format!("{name}-{n}"));
    let p = Pipeline::start_with(client, join, config).unwrap();
    (p.worker, p.stats)
}

async fn drain(client: &Client, workers: &[Worker]) {
    let workers: Vec<&Worker> = workers.iter().collect();
    let horizon = Duration::from_secs(3600);
    let drained = pipeline::drain(client, &workers, horizon, usize::MAX, || {});
    tokio::time::timeout(Duration::from_secs(120), drained)
        .await
        .expect("join did not drain within 120 s")
        .unwrap();
}

fn options(dir: &Path) -> LoadOptions {
    LoadOptions {
        batch: 100,
        rejects: dir.join("rejects.txt"),
        max_backlog: 0,
        ..LoadOptions::default()
    }
}

/// Two pipelines with workers killed (aborted mid-join) and restarted at random moments,
/// while the logs load: every joinable click joined exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pipelines_with_crashing_workers_join_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let gen = GenOptions {
        queries: 3000,
        early_clicks: 0.2,
        duplicates: 0.1,
        orphans: 0.02,
        seed: 7,
        ..GenOptions::default()
    };
    generate(&logs, &gen).unwrap();
    let client = client_on(Arc::new(MemoryKv::new()));
    let mut workers: Vec<(String, Worker)> = Vec::new();
    for (name, n) in [("dc1", 0), ("dc1", 1), ("dc2", 0), ("dc2", 1)] {
        workers.push((name.to_string(), pipeline(&client, name, n).0));
    }
    let loader = {
        let (client, logs, dir) = (client.clone(), logs.clone(), dir.path().to_path_buf());
        tokio::spawn(async move {
            load_dir(&client, &logs, &options(&dir), &LoadStats::default())
                .await
                .unwrap();
        })
    };
    let mut rng = rand::thread_rng();
    let mut kills = 0;
    let mut generation = 10;
    while !loader.is_finished() || kills < 6 {
        tokio::time::sleep(Duration::from_millis(rng.gen_range(50..250))).await;
        let i = rng.gen_range(0..workers.len());
        workers[i].1.kill();
        kills += 1;
        generation += 1;
        let name = workers[i].0.clone();
        workers[i].1 = pipeline(&client, &name, generation).0;
        if kills > 40 {
            break;
        }
    }
    loader.await.unwrap();
    let running: Vec<Worker> = workers.into_iter().map(|(_, w)| w).collect();
    drain(&client, &running).await;
    let report = verify(&client, &logs).await.unwrap();
    assert_eq!(report.duplicates, 0, "{report:?}");
    assert_eq!(report.lost, 0, "{report:?}");
    assert_eq!(report.unexpected, 0, "{report:?}");
    assert!(report.joined > 1000, "{report:?}");
    assert!(
        report
            .reasons
            .keys()
            .any(|r| r.starts_with("query_missing")),
        "{report:?}"
    );
    // The loader and the pipelines share the client: the join read events this process
    // loaded from memory (`photon::design::join`, "Events read from memory"), and still
    // joined every click exactly once.
    let reads = client.recent_write_reads();
    assert!(reads.from_memory > 1000, "{reads:?}");
    for w in &running {
        w.shutdown().await;
    }
}

/// Clicks before their queries, duplicate clicks, queries that never arrive, and clicks
/// older than the IdRegistry boundary each get the right outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_duplicate_missing_and_too_old_clicks() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let now = photon::schema::now_ms();
    let old = now - 10 * 86_400_000;
    // Click before query, a duplicate click, a click whose query never comes, an old click.
    std::fs::write(
        logs.join("clicks-000.jsonl"),
        format!(
            "{{\"click_id\":\"c1\",\"query_id\":\"q1\",\"event_time\":{now}}}\n\
             {{\"click_id\":\"c2\",\"query_id\":\"q2\",\"event_time\":{now}}}\n\
             {{\"click_id\":\"c2\",\"query_id\":\"q2\",\"event_time\":{now}}}\n\
             {{\"click_id\":\"c3\",\"query_id\":\"q-never\",\"event_time\":{now}}}\n\
             {{\"click_id\":\"c4\",\"query_id\":\"q4\",\"event_time\":{old}}}\n"
        ),
    )
    .unwrap();
    let client = client_on(Arc::new(MemoryKv::new()));
    let (worker, stats) = pipeline(&client, "dc1", 0);
    // The boundary closes days older than 3 days ago (c4's day).
    photon::registry::gc_registry(&client, photon::event::day_of(now) - 3, false)
        .await
        .unwrap();
    load_dir(&client, &logs, &options(dir.path()), &LoadStats::default())
        .await
        .unwrap();
    drain(&client, std::slice::from_ref(&worker)).await;
    // Queries arrive late; q1 wakes c1.
    std::fs::write(
        logs.join("queries-000.jsonl"),
        format!(
            "{{\"query_id\":\"q1\",\"event_time\":{now}}}\n\
             {{\"query_id\":\"q2\",\"event_time\":{now}}}\n\
             {{\"query_id\":\"q4\",\"event_time\":{old}}}\n"
        ),
    )
    .unwrap();
    load_dir(&client, &logs, &options(dir.path()), &LoadStats::default())
        .await
        .unwrap();
    drain(&client, std::slice::from_ref(&worker)).await;
    let report = verify(&client, &logs).await.unwrap();
    assert!(report.ok(), "{report:?}");
    assert_eq!(report.joined, 2, "c1 (woken) and c2 (once): {report:?}");
    assert_eq!(
        report.reasons.get("query_missing (still waiting)"),
        Some(&1),
        "{report:?}"
    );
    assert_eq!(
        report
            .reasons
            .get("too_old (older than the IdRegistry boundary)"),
        Some(&1),
        "{report:?}"
    );
    assert!(stats.too_old.load(std::sync::atomic::Ordering::Relaxed) >= 1);
    assert!(stats.woken.load(std::sync::atomic::Ordering::Relaxed) >= 1);
    worker.shutdown().await;
}

/// A click joined before the boundary passed its day and delivered again afterwards keeps
/// its joined outcome (the IdRegistry's very case): the late duplicate is not marked too old,
/// and verify passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joined_click_delivered_again_below_the_boundary_stays_joined() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let now = photon::schema::now_ms();
    let old = now - 5 * 86_400_000;
    let client = client_on(Arc::new(MemoryKv::new()));
    let (worker, stats) = pipeline(&client, "dc1", 0);
    // The query first (a click loaded before it would be older than the horizon: expired).
    std::fs::write(
        logs.join("queries-000.jsonl"),
        format!("{{\"query_id\":\"q1\",\"event_time\":{old}}}\n"),
    )
    .unwrap();
    load_dir(&client, &logs, &options(dir.path()), &LoadStats::default())
        .await
        .unwrap();
    let click = format!("{{\"click_id\":\"c1\",\"query_id\":\"q1\",\"event_time\":{old}}}\n");
    std::fs::write(logs.join("clicks-000.jsonl"), &click).unwrap();
    load_dir(&client, &logs, &options(dir.path()), &LoadStats::default())
        .await
        .unwrap();
    drain(&client, std::slice::from_ref(&worker)).await;
    assert_eq!(verify(&client, &logs).await.unwrap().joined, 1);
    // The boundary passes the click's day; then the click is delivered again.
    photon::registry::gc_registry(&client, photon::event::day_of(now) - 3, false)
        .await
        .unwrap();
    std::fs::write(logs.join("clicks-000.jsonl"), format!("{click}{click}")).unwrap();
    load_dir(&client, &logs, &options(dir.path()), &LoadStats::default())
        .await
        .unwrap();
    drain(&client, std::slice::from_ref(&worker)).await;
    let t = client.begin().await.unwrap();
    let outcome = t
        .get(&photon::schema::outcome_cell("c1"))
        .await
        .unwrap()
        .map(|b| String::from_utf8_lossy(&b).into_owned());
    assert_eq!(outcome, None, "the joined click got an outcome");
    let report = verify(&client, &logs).await.unwrap();
    assert!(report.ok(), "{report:?}");
    assert_eq!((report.joined, report.unexpected), (1, 0), "{report:?}");
    assert!(
        stats
            .deduplicated
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1
    );
    worker.shutdown().await;
}

/// A click registered by a build of the earlier IdRegistry layout (an entry keyed by its
/// event day, still in the store after the upgrade) is not joined again: the join reads such
/// entries while any may exist (`photon::legacy`). Without that read, c1 is joined a second
/// time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_click_registered_in_the_earlier_layout_is_not_joined_again() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let now = photon::schema::now_ms();
    let client = client_on(Arc::new(MemoryKv::new()));
    photon::schema::declare_columns(&client);
    let day = photon::event::day_of(now);
    let t = client.begin().await.unwrap();
    t.set(
        photon::schema::legacy_idregistry_cell(day, "c1"),
        "dc1/old-build/1/12",
    );
    t.commit().await.unwrap();
    let (worker, stats) = pipeline(&client, "dc1", 0);
    std::fs::write(
        logs.join("queries-000.jsonl"),
        format!(
            "{{\"query_id\":\"q1\",\"event_time\":{now}}}\n\
             {{\"query_id\":\"q2\",\"event_time\":{now}}}\n"
        ),
    )
    .unwrap();
    std::fs::write(
        logs.join("clicks-000.jsonl"),
        format!(
            "{{\"click_id\":\"c1\",\"query_id\":\"q1\",\"event_time\":{now}}}\n\
             {{\"click_id\":\"c2\",\"query_id\":\"q2\",\"event_time\":{now}}}\n"
        ),
    )
    .unwrap();
    load_dir(&client, &logs, &options(dir.path()), &LoadStats::default())
        .await
        .unwrap();
    drain(&client, std::slice::from_ref(&worker)).await;
    let t = client.begin().await.unwrap();
    let (c1, c2) = (
        photon::schema::idregistry_cell("c1"),
        photon::schema::idregistry_cell("c2"),
    );
    assert!(t.get(&c1).await.unwrap().is_none(), "c1 joined again");
    assert!(t.get(&c2).await.unwrap().is_some(), "c2 not joined");
    assert_eq!(stats.joined.load(std::sync::atomic::Ordering::Relaxed), 1);
    worker.shutdown().await;
}

/// Malformed lines are reported with file and line number; the rest is joined.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_lines_are_reported_and_the_rest_joined() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let gen = GenOptions {
        queries: 500,
        malformed: 0.05,
        orphans: 0.0,
        seed: 3,
        ..GenOptions::default()
    };
    let summary = generate(&logs, &gen).unwrap();
    assert!(summary.malformed > 5);
    let client = client_on(Arc::new(MemoryKv::new()));
    let (worker, _) = pipeline(&client, "dc1", 0);
    let stats = LoadStats::default();
    load_dir(&client, &logs, &options(dir.path()), &stats)
        .await
        .unwrap();
    drain(&client, std::slice::from_ref(&worker)).await;
    let rejects = std::fs::read_to_string(dir.path().join("rejects.txt")).unwrap();
    assert_eq!(rejects.lines().count() as u64, summary.malformed);
    let first = rejects.lines().next().unwrap();
    assert!(
        first.contains("clicks-00") && first.contains(".jsonl:"),
        "{first}"
    );
    let report = verify(&client, &logs).await.unwrap();
    assert!(report.ok(), "{report:?}");
    assert_eq!(report.malformed_lines, summary.malformed);
    assert_eq!(report.joined, summary.clicks);
    worker.shutdown().await;
}

/// A loader process killed with SIGKILL at random moments and restarted: every event is
/// loaded, none twice (each cell holds exactly one committed version).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loader_killed_with_sigkill_neither_skips_nor_repeats() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let gen = GenOptions {
        queries: 20_000,
        duplicates: 0.0,
        orphans: 0.0,
        files: 1,
        seed: 11,
        ..GenOptions::default()
    };
    let summary = generate(&logs, &gen).unwrap();
    let store = dir.path().join("store");
    let mut rng = rand::thread_rng();
    for round in 0..6 {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_photon"))
            // No join runs here: no backpressure (it would hold the loader at the bound).
            .args(["load", "--max-backlog", "0", "--batch", "50", "--store"])
            .arg(format!("embedded:{}", store.display()))
            .arg("--rejects")
            .arg(dir.path().join("rejects.txt"))
            .arg(&logs)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        if round < 5 {
            std::thread::sleep(Duration::from_millis(rng.gen_range(200..900)));
            let _ = child.kill();
            child.wait().unwrap();
        } else {
            assert!(
                child.wait().unwrap().success(),
                "the last, unkilled loader failed"
            );
        }
    }
    let kv: Arc<dyn RawKv> =
        Arc::new(percolator::txn::open_embedded(&store, Default::default()).unwrap());
    // The loaders' own oracle (persisted in the store): its timestamps may run ahead of the
    // wall clock, so a reader on another clock could miss their last commits.
    let client = percolator_cli::store::open_client_on(kv.clone(), "photon", None)
        .await
        .unwrap();
    let txn = client.begin().await.unwrap();
    let queries = txn.scan(b"queries", b"", None).await.unwrap().len() as u64;
    let clicks = txn.scan(b"clicks", b"", None).await.unwrap().len() as u64;
    assert_eq!(queries, summary.queries, "every query loaded");
    assert_eq!(clicks, summary.clicks, "every click loaded");
    // No event written twice: a second write of a cell would have pushed a version into V.
    let versions = scan_all(
        kv.as_ref(),
        client
            .codec()
            .rows_range(Space::Version, b"queries", b"", None),
        ScanOrder::Forward,
    )
    .await
    .unwrap();
    let click_versions = scan_all(
        kv.as_ref(),
        client
            .codec()
            .rows_range(Space::Version, b"clicks", b"", None),
        ScanOrder::Forward,
    )
    .await
    .unwrap();
    assert!(
        versions.is_empty() && click_versions.is_empty(),
        "events were loaded twice"
    );
    let offset = txn
        .get(&photon::schema::offset_cell(
            &photon::load::file_key(&logs.join("queries-000.jsonl"))
                .unwrap()
                .unwrap(),
        ))
        .await
        .unwrap()
        .unwrap();
    let size = std::fs::metadata(logs.join("queries-000.jsonl"))
        .unwrap()
        .len();
    assert!(String::from_utf8(offset)
        .unwrap()
        .starts_with(&format!("{size},")));
}

/// Clicks that park because their query is still loading are woken by the wake observer
/// (run after each park, which notifies the query's wake cell, and after the wake check of
/// the batch that loaded the query), with no pending sweep at all: the logs load side by
/// side, each at its own pace (not in step, as `load_dir` keeps them: there the click
/// batches wait for their queries and hardly park), so clicks park before and while their
/// queries commit (the click log, with fewer lines, pulls ahead: most parks come long
/// before their query, the rest race its commit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_clicks_are_woken_without_the_sweep() {
    // The lost wake-up needs a park and its query's wake run to overlap: run a few rounds.
    for seed in 11..14 {
        parked_clicks_woken_without_sweep(seed).await;
    }
}

async fn parked_clicks_woken_without_sweep(seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let gen = GenOptions {
        queries: 3_000,
        ctr: 0.8,
        mean_click_delay_ms: 20.0,
        early_clicks: 0.5,
        duplicates: 0.0,
        orphans: 0.0,
        rate: 2_000.0,
        seed,
        ..GenOptions::default()
    };
    let summary = generate(&logs, &gen).unwrap();
    // Random delays on store calls widen the window in which a park and its query's wake
    // run overlap.
    let faults = percolator::kv::Faults {
        cas_hazard: 0.0,
        delay: 0.3,
        max_delay: Duration::from_millis(2),
        ..Default::default()
    };
    let kv = percolator::kv::FaultyKv::new(Arc::new(MemoryKv::new()), faults);
    let client = client_on(Arc::new(kv));
    let (worker, stats) = pipeline(&client, "dc1", 0);
    worker.wait_until_settled().await;
    let options = LoadOptions {
        batch: 10,
        rejects: dir.path().join("rejects.txt"),
        max_backlog: 0,
        ..LoadOptions::default()
    };
    let load_stats = LoadStats::default();
    let files = photon::load::files_to_load(&client, &logs).await.unwrap();
    futures::future::try_join_all(
        files
            .iter()
            .map(|f| photon::load::load_file(&client, &f.path, f.kind, &options, &load_stats)),
    )
    .await
    .unwrap();
    // Quiescent without sweeping: nothing may be left parked with its query present.
    let joined_all = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            worker.wait_until_quiescent().await.unwrap();
            let report = verify(&client, &logs).await.unwrap();
            if report.joined == report.joinable {
                break;
            }
            // Quiescent with clicks still parked: a wake-up was lost (polling again only
            // gives a late notification its chance before the timeout fails the test).
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(joined_all.is_ok(), "clicks left parked: {stats:?}");
    let report = verify(&client, &logs).await.unwrap();
    assert!(report.ok(), "{report:?}");
    assert_eq!(report.joined, summary.clicks, "{report:?}");
    let parked = stats.parked.load(std::sync::atomic::Ordering::Relaxed);
    assert!(parked > 0, "no click parked: the race was not exercised");
    eprintln!(
        "parked {parked}, woken by the wake observer {}",
        stats.woken.load(std::sync::atomic::Ordering::Relaxed)
    );
    worker.shutdown().await;
}

/// A store that fails 0.2% of calls as unreachable (half of them after applying the call, as
/// a lost reply would): the loader and the workers retry instead of dying, and every
/// joinable click is still joined exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loader_and_workers_ride_out_transient_store_errors() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let gen = GenOptions {
        queries: 600,
        seed: 11,
        ..GenOptions::default()
    };
    generate(&logs, &gen).unwrap();
    let store: Arc<dyn RawKv> = Arc::new(MemoryKv::new());
    let faults = percolator::kv::Faults {
        cas_hazard: 0.05,
        delay: 0.0,
        unavailable: 0.002,
        ..Default::default()
    };
    let faulty = Arc::new(percolator::kv::FaultyKv::new(store.clone(), faults));
    let weather = client_on(faulty.clone());
    let clean = client_on(store);
    let (worker, _) = pipeline(&weather, "dc1", 0);
    worker.wait_until_settled().await;
    load_dir(&weather, &logs, &options(dir.path()), &LoadStats::default())
        .await
        .expect("the loader retries transient errors");
    tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            if worker.wait_until_quiescent().await.is_err() {
                continue; // The quiescence scan itself met an injected error.
            }
            let woken = join::sweep_pending(&clean, Duration::from_secs(3600))
                .await
                .unwrap();
            if woken == 0 {
                break;
            }
        }
    })
    .await
    .expect("join drains");
    let report = verify(&clean, &logs).await.unwrap();
    assert_eq!(report.duplicates, 0, "{report:?}");
    assert_eq!(report.lost, 0, "{report:?}");
    assert!(report.joined > 250, "{report:?}");
    assert_eq!(worker.metrics().snapshot().dead_lettered, 0);
    worker.shutdown().await;
}

/// Backpressure: with no join running, the loader stops once the notification backlog
/// reaches its bound (give or take one batch per file), and goes on once a pipeline drains
/// it; every joinable click is joined exactly once. (The bound is on notifications, not on
/// lines: clicks notify, queries do not, and each batch of queries puts one wake check.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loader_waits_while_the_backlog_is_above_its_bound() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let gen = GenOptions {
        queries: 1500,
        files: 2,
        seed: 11,
        ..GenOptions::default()
    };
    let summary = generate(&logs, &gen).unwrap();
    let total = summary.queries + summary.clicks + summary.duplicate_lines;
    let client = client_on(Arc::new(MemoryKv::new()));
    let (bound, batch, files) = (200u64, 50u64, 4u64);
    let stats = Arc::new(LoadStats::default());
    let loader = {
        let (client, logs, stats) = (client.clone(), logs.clone(), stats.clone());
        let options = LoadOptions {
            batch: batch as usize,
            rejects: dir.path().join("rejects.txt"),
            max_backlog: bound as usize,
            ..LoadOptions::default()
        };
        tokio::spawn(async move { load_dir(&client, &logs, &options, &stats).await })
    };
    let notifications = || async {
        scan_all(
            client.store().as_ref(),
            client.codec().space_range(Space::Notify),
            ScanOrder::Forward,
        )
        .await
        .unwrap()
        .len() as u64
    };
    // A liveness bound, not a timing claim: the backlog reaches the bound.
    tokio::time::timeout(Duration::from_secs(60), async {
        while notifications().await < bound {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the backlog reached its bound");
    // Time for a loader that ignored the bound to show it (it would load on, to thousands of
    // events); one that keeps it only finishes the batches it had begun.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let backlog = notifications().await;
    let loaded = stats.loaded.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        backlog <= bound + files * (batch + 1),
        "{backlog} notifications ({loaded} events loaded) with no join running and a backlog bound of {bound}"
    );
    assert!(
        stats
            .backlog_waits
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
    );
    assert!(total > 3 * (bound + files * batch), "{total} events");
    assert!(!loader.is_finished(), "the loader went on without the join");
    let (worker, _) = pipeline(&client, "dc1", 0);
    tokio::time::timeout(Duration::from_secs(120), loader)
        .await
        .expect("the loader finished once the join ran")
        .unwrap()
        .unwrap();
    assert_eq!(
        stats.loaded.load(std::sync::atomic::Ordering::Relaxed),
        total
    );
    let running = [worker];
    drain(&client, &running).await;
    let report = verify(&client, &logs).await.unwrap();
    assert_eq!(report.duplicates, 0, "{report:?}");
    assert_eq!(report.lost, 0, "{report:?}");
    for w in &running {
        w.shutdown().await;
    }
}
