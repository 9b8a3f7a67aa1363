//! The loader and the verifier against hostile or careless input: invalid UTF-8, logs
//! rewritten in place after loading, shared stores without the shared oracle, clicks whose
//! query arrived past the horizon, huge malformed lines; and what `photon load` reports.

mod common;
use observers::{Registry, Worker};
use percolator::kv::{MemoryKv, RawKv};
use percolator::ts::LocalClock;
use percolator::Client;
use photon::gen::{generate, GenOptions};
use photon::join::{self, JoinConfig, JoinStats};
use photon::legacy::LegacyEntries;
use photon::load::{load_dir, LoadOptions, LoadStats};
use photon::verify::verify;
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// The join horizon of the test pipeline.
const HORIZON: Duration = Duration::from_secs(3600);

fn client_on(kv: Arc<dyn RawKv>) -> Client {
    Client::with_config(
        kv,
        Arc::new(LocalClock::new()),
        photon::schema::client_config("photon"),
    )
}

fn pipeline(client: &Client) -> (Worker, Arc<JoinStats>) {
    let stats = Arc::new(JoinStats::default());
    let mut registry = Registry::new();
    join::register(
        &mut registry,
        JoinConfig {
            pipeline: "dc1".to_string(),
            worker: "dc1-w0".to_string(),
            process: JoinConfig::this_process(),
            horizon: HORIZON,
            expiry: Default::default(),
            adapter: None,
            legacy_entries: LegacyEntries::checked(client),
        },
        stats.clone(),
    )
    .unwrap();
    let config = common::fast_worker("dc1-0");
    (
        Worker::start(client.clone(), Arc::new(registry), config),
        stats,
    )
}

/// Waits until every notification is handled and no parked click has its query (a hang
/// guard of 120 s, not a timing assertion).
async fn drain(client: &Client, worker: &Worker) {
    tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            worker.wait_until_quiescent().await.unwrap();
            if join::sweep_pending(client, HORIZON).await.unwrap() == 0 {
                break;
            }
        }
    })
    .await
    .expect("join did not drain within 120 s");
}

fn options(dir: &Path) -> LoadOptions {
    LoadOptions {
        batch: 50,
        rejects: dir.join("rejects.txt"),
        max_backlog: 0,
        ..LoadOptions::default()
    }
}

/// Inserts `line` (without its line break) as line `at` (1-based) of `path`.
fn insert_line(path: &Path, at: usize, line: &[u8]) {
    let text = std::fs::read(path).unwrap();
    let mut out = Vec::new();
    for (i, l) in text.split_inclusive(|b| *b == b'\n').enumerate() {
        if i + 1 == at {
            out.extend_from_slice(line);
            out.push(b'\n');
        }
        out.extend_from_slice(l);
    }
    std::fs::write(path, out).unwrap();
}

/// Logs of 400 queries in one file per kind, generated from `seed`, whose every click is
/// joinable (no duplicates, no orphans).
fn every_click_joinable(logs: &Path, seed: u64) -> photon::gen::GenSummary {
    let gen = GenOptions {
        queries: 400,
        duplicates: 0.0,
        orphans: 0.0,
        files: 1,
        seed,
        ..GenOptions::default()
    };
    generate(logs, &gen).unwrap()
}

/// A line with invalid UTF-8 is rejected with file:line like any malformed line (also in
/// the rejects file, byte for byte); every other line loads exactly once, and verify counts
/// it as malformed instead of failing on the directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_utf8_line_is_rejected_with_its_line_and_the_rest_loads_once() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let summary = every_click_joinable(&logs, 5);
    let bad: &[u8] = b"{\"click_id\":\"c\xff\xfe\",\"query_id\":\"q\",\"event_time\":1}";
    insert_line(&logs.join("clicks-000.jsonl"), 7, bad);
    let client = client_on(Arc::new(MemoryKv::new()));
    let (worker, _) = pipeline(&client);
    let stats = LoadStats::default();
    load_dir(&client, &logs, &options(dir.path()), &stats)
        .await
        .expect("an invalid UTF-8 line must not stop the load");
    assert_eq!(
        stats.loaded.load(Ordering::Relaxed),
        summary.queries + summary.clicks
    );
    assert_eq!(stats.rejected.load(Ordering::Relaxed), 1);
    // A second run loads nothing again.
    let again = LoadStats::default();
    load_dir(&client, &logs, &options(dir.path()), &again)
        .await
        .unwrap();
    assert_eq!(again.loaded.load(Ordering::Relaxed), 0);
    assert_eq!(again.rejected.load(Ordering::Relaxed), 0);
    let rejects = std::fs::read(dir.path().join("rejects.txt")).unwrap();
    let text = String::from_utf8_lossy(&rejects);
    assert!(text.contains("clicks-000.jsonl:7:"), "{text}");
    // The whole line, escaped (issue 39, item 10): bytes that are not UTF-8 as `\xff`.
    assert!(
        text.contains(r#"{"click_id":"c\xff\xfe","query_id":"q","event_time":1}"#),
        "the rejects file keeps the line, escaped: {text}"
    );
    assert!(
        !rejects.windows(bad.len()).any(|w| w == bad),
        "no raw bytes: {text}"
    );
    drain(&client, &worker).await;
    let report = verify(&client, &logs)
        .await
        .expect("verify must not fail on the directory");
    assert_eq!(report.malformed_lines, 1, "{report:?}");
    assert!(report.ok(), "{report:?}");
    assert_eq!(report.joined, summary.clicks, "{report:?}");
    worker.shutdown().await;
}

/// A click line nested deeper than a stored event can be read back (its JSON parses, but
/// one level down, as it is stored and joined, it passes serde_json's recursion limit) is
/// rejected with file:line when it is loaded, instead of being stored for a join that
/// could never read it; the rest loads and joins, and verify counts it as malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_too_deep_to_be_read_back_is_rejected_and_the_rest_joins() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let summary = every_click_joinable(&logs, 6);
    let query_line = std::fs::read_to_string(logs.join("queries-000.jsonl")).unwrap();
    let query: serde_json::Value =
        serde_json::from_str(query_line.lines().next().unwrap()).unwrap();
    let nested = |levels: usize| {
        format!(
            r#"{{"click_id":"deep{levels}","query_id":{},"event_time":{},"x":{}{}}}"#,
            query["query_id"],
            query["event_time"],
            "[".repeat(levels - 1),
            "]".repeat(levels - 1)
        )
    };
    // 127 levels parse as a click; 126 are the most a stored click can hold.
    insert_line(&logs.join("clicks-000.jsonl"), 3, nested(127).as_bytes());
    insert_line(&logs.join("clicks-000.jsonl"), 5, nested(126).as_bytes());
    let client = client_on(Arc::new(MemoryKv::new()));
    let (worker, _) = pipeline(&client);
    let stats = LoadStats::default();
    load_dir(&client, &logs, &options(dir.path()), &stats)
        .await
        .unwrap();
    assert_eq!(
        stats.loaded.load(Ordering::Relaxed),
        summary.queries + summary.clicks + 1
    );
    assert_eq!(stats.rejected.load(Ordering::Relaxed), 1);
    let rejects = std::fs::read_to_string(dir.path().join("rejects.txt")).unwrap();
    assert!(
        rejects.contains("clicks-000.jsonl:3:") && rejects.contains("nested deeper"),
        "{rejects}"
    );
    drain(&client, &worker).await;
    let report = verify(&client, &logs).await.unwrap();
    assert_eq!(report.malformed_lines, 1, "{report:?}");
    assert!(report.ok(), "{report:?}");
    assert_eq!(report.joined, summary.clicks + 1, "{report:?}");
    worker.shutdown().await;
}

/// A log rewritten in place after it was loaded, its first bytes (what identifies it) kept,
/// is quarantined (not read from the middle of a line): reported with the file, the cause
/// and what to do (rejects file, counter), while the other logs load on; so is one cut short
/// below the stored offset, with that cause. Loading again (a restart) reports it again
/// instead of failing. Appending to a loaded log still loads, and a file with other first
/// bytes at the path (`photon gen` with another seed) is another log, loaded from its start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_rewritten_in_place_after_loading_is_quarantined_and_the_rest_loads() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let gen = |seed| GenOptions {
        queries: 300,
        files: 1,
        seed,
        ..GenOptions::default()
    };
    generate(&logs, &gen(1)).unwrap();
    let client = client_on(Arc::new(MemoryKv::new()));
    load_dir(&client, &logs, &options(dir.path()), &LoadStats::default())
        .await
        .unwrap();
    // Appending is what logs do: loads.
    let queries = logs.join("queries-000.jsonl");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&queries)
        .unwrap();
    writeln!(f, "{{\"query_id\":\"appended\",\"event_time\":1}}").unwrap();
    drop(f);
    let appended = LoadStats::default();
    load_dir(&client, &logs, &options(dir.path()), &appended)
        .await
        .unwrap();
    assert_eq!(appended.loaded.load(Ordering::Relaxed), 1);
    // Rewritten in place past its first bytes (a line near the end changed): quarantined,
    // and a line appended to the other log still loads.
    let loaded = std::fs::read(&queries).unwrap();
    assert!(loaded.len() > 2 * photon::load::FINGERPRINT_WINDOW);
    let mut rewritten = loaded.clone();
    let at = rewritten.len() - 10;
    rewritten[at] = if rewritten[at] == b'1' { b'2' } else { b'1' };
    std::fs::write(&queries, &rewritten).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(logs.join("clicks-000.jsonl"))
        .unwrap();
    writeln!(
        f,
        "{{\"click_id\":\"late\",\"query_id\":\"appended\",\"event_time\":2}}"
    )
    .unwrap();
    drop(f);
    for restart in 0..2 {
        let stats = LoadStats::default();
        load_dir(&client, &logs, &options(dir.path()), &stats)
            .await
            .expect("a rewritten log is quarantined, not a failure of the load");
        assert_eq!(stats.quarantined.load(Ordering::Relaxed), 1, "{restart}");
        assert_eq!(stats.rejected.load(Ordering::Relaxed), 0, "no fragments");
        assert_eq!(
            stats.loaded.load(Ordering::Relaxed),
            1 - restart,
            "the other log loads"
        );
        let summary = stats.summary("events", Duration::from_secs(1), Path::new("r.txt"));
        assert!(summary.contains("1 file quarantined"), "{summary}");
    }
    // Recorded in the store for operators (`percolator-ctl status`).
    let recorded = observers::admin::quarantined(&client).await.unwrap();
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert!(
        recorded[0].source.ends_with("queries-000.jsonl"),
        "{recorded:?}"
    );
    assert!(
        recorded[0].cause.contains("changed in place"),
        "{recorded:?}"
    );
    let rejects = std::fs::read_to_string(dir.path().join("rejects.txt")).unwrap();
    let entry = rejects
        .lines()
        .find(|l| l.contains("queries-000.jsonl: quarantined"))
        .expect("a rejects entry");
    assert!(
        entry.contains("changed in place"),
        "names the cause: {entry}"
    );
    assert!(
        entry.contains("new file") || entry.contains("fresh store"),
        "says what to do: {entry}"
    );
    // Cut short below the stored offset: quarantined with that cause.
    std::fs::write(&queries, &loaded[..loaded.len() / 2]).unwrap();
    let stats = LoadStats::default();
    load_dir(&client, &logs, &options(dir.path()), &stats)
        .await
        .expect("a truncated log is quarantined");
    assert_eq!(stats.quarantined.load(Ordering::Relaxed), 1);
    let rejects = std::fs::read_to_string(dir.path().join("rejects.txt")).unwrap();
    assert!(rejects.contains("cut short"), "{rejects}");
    // Other logs at the same paths: new logs.
    let summary = generate(&logs, &gen(2)).unwrap();
    let replaced = LoadStats::default();
    load_dir(&client, &logs, &options(dir.path()), &replaced)
        .await
        .unwrap();
    assert_eq!(
        replaced.loaded.load(Ordering::Relaxed),
        summary.queries + summary.clicks + summary.duplicate_lines
    );
    assert_eq!(replaced.quarantined.load(Ordering::Relaxed), 0);
    assert_eq!(
        observers::admin::quarantined(&client).await.unwrap(),
        vec![],
        "the new log at that path loads: the quarantine is over"
    );
}

/// Two different logs that begin with the same bytes (more than the window that identifies
/// a log) are taken for one log: the second is quarantined with that cause, naming the
/// first, and the first keeps loading; a restart does the same instead of failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_logs_sharing_their_first_bytes_quarantine_the_second() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let line = |id: &str| format!("{{\"query_id\":\"{id}\",\"event_time\":1}}\n");
    let common: String = (0..150).map(|i| line(&format!("common-{i:04}"))).collect();
    assert!(common.len() > photon::load::FINGERPRINT_WINDOW);
    let a = logs.join("queries-a.jsonl");
    std::fs::write(&a, format!("{common}{}", line("a-1"))).unwrap();
    let client = client_on(Arc::new(MemoryKv::new()));
    let stats = LoadStats::default();
    load_dir(&client, &logs, &options(dir.path()), &stats)
        .await
        .unwrap();
    assert_eq!(stats.loaded.load(Ordering::Relaxed), 151);
    let b = logs.join("queries-b.jsonl");
    std::fs::write(&b, format!("{common}{}{}", line("b-1"), line("b-2"))).unwrap();
    let mut f = std::fs::OpenOptions::new().append(true).open(&a).unwrap();
    f.write_all(line("a-2").as_bytes()).unwrap();
    drop(f);
    for restart in 0..2 {
        let stats = LoadStats::default();
        load_dir(&client, &logs, &options(dir.path()), &stats)
            .await
            .expect("the second log is quarantined, not a failure of the load");
        assert_eq!(stats.quarantined.load(Ordering::Relaxed), 1, "{restart}");
        assert_eq!(stats.loaded.load(Ordering::Relaxed), 1 - restart);
    }
    let rejects = std::fs::read_to_string(dir.path().join("rejects.txt")).unwrap();
    let entry = rejects
        .lines()
        .find(|l| l.contains("queries-b.jsonl: quarantined"))
        .expect("a rejects entry");
    assert!(
        entry.contains("queries-a.jsonl") && entry.contains("same"),
        "names the other log and the cause: {entry}"
    );
}

/// Following a growing file, a line longer than the limit that has no line break yet is
/// rejected with `file:line` as soon as it passes the limit, skipped as far as it goes (not
/// held, not read again), and its rest skipped once it comes, without a second report; the
/// lines after it load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_longer_than_the_limit_is_rejected_and_skipped_while_following() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let path = logs.join("queries-000.jsonl");
    let mut text = b"{\"query_id\":\"before\",\"event_time\":1}\n".to_vec();
    text.extend(std::iter::repeat_n(b'x', 50_000));
    std::fs::write(&path, &text).unwrap();
    let client = client_on(Arc::new(MemoryKv::new()));
    let options = LoadOptions {
        max_line_bytes: 1000,
        follow: true,
        ..options(dir.path())
    };
    let stats = LoadStats::default();
    load_dir(&client, &logs, &options, &stats).await.unwrap();
    assert_eq!(stats.loaded.load(Ordering::Relaxed), 1);
    assert_eq!(stats.rejected.load(Ordering::Relaxed), 1);
    assert_eq!(stats.long_lines.load(Ordering::Relaxed), 1);
    let status = photon::load::status::dir_status(&client, &logs)
        .await
        .unwrap();
    assert_eq!(
        status[0].loaded,
        text.len() as u64,
        "skipped as far as it goes"
    );
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    f.write_all(&[b'x'; 20_000]).unwrap();
    f.write_all(b"\n{\"query_id\":\"after\",\"event_time\":2}\n")
        .unwrap();
    drop(f);
    load_dir(&client, &logs, &options, &stats).await.unwrap();
    assert_eq!(
        stats.loaded.load(Ordering::Relaxed),
        2,
        "the line after it loads"
    );
    assert_eq!(stats.rejected.load(Ordering::Relaxed), 1, "reported once");
    let rejects = std::fs::read_to_string(dir.path().join("rejects.txt")).unwrap();
    assert!(
        rejects.contains("queries-000.jsonl:2:") && rejects.contains("longer than the limit"),
        "{rejects}"
    );
    assert!(rejects.len() < 4096, "only its first bytes are kept");
}

/// A click line longer than the loader's `max_line_bytes` is rejected by the loader; verify
/// given the same limit counts it malformed, as the loader did, instead of as a click (that
/// would be reported lost, never having been loaded). With the default limit it is a click.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_counts_a_line_over_the_loaders_limit_as_the_loader_did() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    std::fs::write(
        logs.join("queries-000.jsonl"),
        "{\"query_id\":\"q1\",\"event_time\":1}\n",
    )
    .unwrap();
    let pad = "p".repeat(2_000);
    std::fs::write(
        logs.join("clicks-000.jsonl"),
        format!(
            "{{\"click_id\":\"c1\",\"query_id\":\"q1\",\"event_time\":2}}\n\
             {{\"click_id\":\"c2\",\"query_id\":\"q1\",\"event_time\":3,\"pad\":\"{pad}\"}}\n"
        ),
    )
    .unwrap();
    let client = client_on(Arc::new(MemoryKv::new()));
    let options = LoadOptions {
        max_line_bytes: 1000,
        ..options(dir.path())
    };
    let stats = LoadStats::default();
    load_dir(&client, &logs, &options, &stats).await.unwrap();
    assert_eq!(stats.long_lines.load(Ordering::Relaxed), 1);
    let check = |max_line_bytes| {
        let client = client.clone();
        let logs = logs.clone();
        async move {
            let options = photon::verify::VerifyOptions {
                max_line_bytes,
                ..Default::default()
            };
            let passed = std::time::Instant::now();
            photon::verify::verify_until_with(&client, &logs, options, passed, |_, _| {})
                .await
                .unwrap()
        }
    };
    let same = check(1000).await;
    assert_eq!((same.clicks, same.malformed_lines), (1, 1), "{same:?}");
    let default = check(photon::load::DEFAULT_MAX_LINE_BYTES).await;
    assert_eq!(
        (default.clicks, default.malformed_lines),
        (2, 0),
        "{default:?}"
    );
}

/// A click whose query arrives after the horizon is reported by verify as expired past the
/// horizon (with the horizon), not as lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn click_whose_query_arrived_past_the_horizon_is_reported_expired() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let now = photon::schema::now_ms();
    let old = now - 2 * HORIZON.as_millis() as u64;
    std::fs::write(
        logs.join("clicks-000.jsonl"),
        format!(
            "{{\"click_id\":\"late\",\"query_id\":\"q-late\",\"event_time\":{old}}}\n\
             {{\"click_id\":\"fine\",\"query_id\":\"q-fine\",\"event_time\":{now}}}\n"
        ),
    )
    .unwrap();
    std::fs::write(
        logs.join("queries-000.jsonl"),
        format!("{{\"query_id\":\"q-fine\",\"event_time\":{now}}}\n"),
    )
    .unwrap();
    let client = client_on(Arc::new(MemoryKv::new()));
    let (worker, stats) = pipeline(&client);
    load_dir(&client, &logs, &options(dir.path()), &LoadStats::default())
        .await
        .unwrap();
    drain(&client, &worker).await;
    assert_eq!(stats.expired.load(Ordering::Relaxed), 1);
    // The query of the expired click arrives, past the horizon.
    std::fs::write(
        logs.join("queries-001.jsonl"),
        format!("{{\"query_id\":\"q-late\",\"event_time\":{old}}}\n"),
    )
    .unwrap();
    load_dir(&client, &logs, &options(dir.path()), &LoadStats::default())
        .await
        .unwrap();
    drain(&client, &worker).await;
    let report = verify(&client, &logs).await.unwrap();
    assert_eq!(report.lost, 0, "{report:?}");
    assert!(report.ok(), "{report:?}");
    assert_eq!(report.joined, 1, "{report:?}");
    let expired: Vec<_> = report
        .reasons
        .iter()
        .filter(|(reason, _)| reason.contains("past the horizon"))
        .collect();
    assert_eq!(expired.len(), 1, "{report:?}");
    assert_eq!(*expired[0].1, 1, "{report:?}");
    assert!(
        expired[0].0.contains("3600"),
        "names the horizon: {report:?}"
    );
    worker.shutdown().await;
}

/// `photon load` and `photon work` on a shared (TiKV) store without `--oracle` fail at once
/// (before connecting anywhere) instead of running a private oracle next to the shared one.
#[test]
fn shared_store_without_the_oracle_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    // Port 9 (discard): nothing answers there; the check must come first.
    let store = "tikv:127.0.0.1:9";
    for args in [
        vec!["load", "--store", store, dir.path().to_str().unwrap()],
        vec!["work", "--store", store],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_photon"))
            .args(&args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {stderr}");
        assert!(
            stderr.contains("--oracle") && stderr.contains("shared"),
            "{args:?}: the error names the missing flag: {stderr}"
        );
    }
}

/// `photon load` mentions a rejects file only when it wrote one; a huge malformed line is
/// echoed to stderr as a bounded prefix, and kept whole in the rejects file.
#[test]
fn load_reports_rejects_only_when_written_and_echoes_a_bounded_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let gen = GenOptions {
        queries: 100,
        files: 1,
        seed: 9,
        ..GenOptions::default()
    };
    generate(&logs, &gen).unwrap();
    let store = format!("embedded:{}", dir.path().join("store").display());
    let rejects = dir.path().join("rejects.txt");
    let load = || {
        Command::new(env!("CARGO_BIN_EXE_photon"))
            .args(["load", "--store", &store, "--rejects"])
            .arg(&rejects)
            .arg(&logs)
            .env_remove("RUST_LOG")
            .output()
            .unwrap()
    };
    let out = load();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(!rejects.exists());
    assert!(
        !stdout.contains("reported to"),
        "no rejects file was written: {stdout}"
    );
    // One malformed line of 512 KiB (below the line limit).
    let huge = format!("{{\"query_id\": {}", "x".repeat(1 << 19));
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(logs.join("queries-000.jsonl"))
        .unwrap();
    writeln!(f, "{huge}").unwrap();
    drop(f);
    let out = load();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("1 malformed line") && stdout.contains("rejects.txt"),
        "{stdout}"
    );
    assert!(stderr.contains("queries-000.jsonl:"), "{stderr}");
    assert!(
        stderr.len() < 4096,
        "stderr echoes a bounded prefix, not the whole line ({} bytes)",
        stderr.len()
    );
    let kept = std::fs::read_to_string(&rejects).unwrap();
    assert!(
        kept.contains(&huge),
        "the rejects file keeps the whole line"
    );
}
