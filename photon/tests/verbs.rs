//! Operator-facing behaviour of the `photon` verbs: progress lines when stderr is a pipe
//! (`load`, `demo`), rates as whole numbers, and `verify --wait` (retries until OK, exit
//! status 3 when clicks are still missing at the deadline).

use percolator::kv::MemoryKv;
use percolator::ts::LocalClock;
use percolator::Client;
use photon::gen::{generate, GenOptions};
use photon::load::{load_dir, LoadOptions, LoadStats};
use photon::pipeline::{Pipeline, PipelineSpec};
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn photon(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_photon"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("running photon")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn gen(dir: &Path, queries: u64) {
    let options = GenOptions {
        queries,
        ..GenOptions::default()
    };
    generate(dir, &options).unwrap();
}

/// Rates as photon prints them: `8,006/s` or `8,006 events/s`, digits and commas only.
fn assert_whole_rates(output: &str) {
    for (i, _) in output.match_indices("/s") {
        let mut words = output[..i]
            .rsplit(|c: char| c.is_whitespace() || c == '(')
            .filter(|w| !w.is_empty());
        // Skip unit words: `8,006 events/s`, `207 joined clicks/s`.
        let number = words
            .find(|w| !w.chars().all(|c| c.is_alphabetic()))
            .unwrap_or_default();
        assert!(
            !number.is_empty() && number.chars().all(|c| c.is_ascii_digit() || c == ','),
            "rate {number:?} is not a whole number in {output:?}"
        );
    }
}

/// The progress lines of `output` about `what` (`loaded`, `joined`): the counts they show.
fn progress_counts(output: &str, what: &str) -> Vec<u64> {
    output
        .lines()
        .filter(|l| l.starts_with('['))
        .filter_map(|l| {
            let rest = &l[l.find(&format!("{what} "))? + what.len() + 1..];
            let n: String = rest
                .chars()
                .take_while(|c| *c != '/' && *c != ' ')
                .filter(|c| *c != ',')
                .collect();
            n.parse().ok()
        })
        .collect()
}

#[test]
fn load_to_a_pipe_prints_progress_lines_with_whole_rates() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    gen(&logs, 6_000);
    let store = format!("embedded:{}", dir.path().join("store").display());
    let logs = logs.display().to_string();
    let out = photon(&[
        "load",
        "--store",
        &store,
        &logs,
        "--batch",
        "100",
        "--progress-ms",
        "1",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let counts = progress_counts(&stderr, "loaded");
    assert!(!counts.is_empty(), "no progress lines in {stderr:?}");
    assert!(counts.windows(2).all(|w| w[0] <= w[1]), "{counts:?}");
    // The total is the lines of the logs, all still to load.
    let total: u64 = std::fs::read_dir(&logs)
        .unwrap()
        .map(|e| {
            std::fs::read_to_string(e.unwrap().path())
                .unwrap()
                .lines()
                .count() as u64
        })
        .sum();
    assert!(
        stderr.contains(&format!("/{} lines", photon::human::count(total))),
        "{stderr}"
    );
    assert!(stdout.contains("events/s"), "{stdout}");
    assert_whole_rates(&stdout);
    assert_whole_rates(&stderr);
    // Loaded again: nothing left, the total says so.
    let again = photon(&["load", "--store", &store, &logs, "--progress-ms", "1"]);
    assert!(again.status.success());
    assert!(
        text(&again.stdout).starts_with("loaded 0 events"),
        "{}",
        text(&again.stdout)
    );
}

#[test]
fn demo_to_a_pipe_prints_progress_and_verify_wait_passes_on_its_output() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let out = photon(&["demo", "--clicks", "400", "--dir", &d, "--progress-ms", "1"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(!progress_counts(&stderr, "loaded").is_empty(), "{stderr}");
    assert!(!progress_counts(&stderr, "joined").is_empty(), "{stderr}");
    assert!(stdout.contains("joined clicks/s"), "{stdout}");
    assert_whole_rates(&stdout);
    assert_whole_rates(&stderr);
    let store = format!("embedded:{}", dir.path().join("store").display());
    let logs = dir.path().join("logs").display().to_string();
    let verified = photon(&["verify", "--store", &store, &logs, "--wait", "60"]);
    assert_eq!(
        verified.status.code(),
        Some(0),
        "{}",
        text(&verified.stdout)
    );
    assert!(text(&verified.stderr).is_empty(), "no retry expected");
}

#[test]
fn verify_wait_exits_3_when_clicks_are_still_missing_at_the_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    gen(&logs, 400);
    let store = format!("embedded:{}", dir.path().join("store").display());
    let logs = logs.display().to_string();
    assert!(photon(&["load", "--store", &store, &logs]).status.success());
    // No worker ever runs: nothing is joined.
    let out = photon(&["verify", "--store", &store, &logs, "--wait", "1"]);
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}\n{stderr}",
        text(&out.stdout)
    );
    assert!(
        stderr.contains("joinable clicks not joined yet"),
        "{stderr}"
    );
    assert!(text(&out.stdout).contains("FAILED"));
    // Without --wait, the same report: missing joins (3), not duplicates (1).
    let once = photon(&["verify", "--store", &store, &logs]);
    assert_eq!(once.status.code(), Some(3));
    assert!(
        text(&once.stdout).contains("joinable clicks not joined"),
        "{}",
        text(&once.stdout)
    );
}

/// `verify_until` keeps trying while clicks are missing and returns OK once a pipeline,
/// started only after its first failed try, has joined them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_until_retries_until_the_join_catches_up() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    gen(&logs, 600);
    let client = Client::with_config(
        Arc::new(MemoryKv::new()),
        Arc::new(LocalClock::new()),
        photon::schema::client_config("photon"),
    );
    let options = LoadOptions {
        batch: 100,
        rejects: dir.path().join("rejects.txt"),
        // Loaded before any worker runs.
        max_backlog: 0,
        ..LoadOptions::default()
    };
    load_dir(&client, &logs, &options, &LoadStats::default())
        .await
        .unwrap();
    let (first_retry, retried) = tokio::sync::oneshot::channel::<()>();
    let mut first_retry = Some(first_retry);
    let mut retries = 0;
    let verifying = {
        let (client, logs) = (client.clone(), logs.clone());
        tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(300);
            let report = photon::verify::verify_until(&client, &logs, deadline, |report, _| {
                assert!(report.lost > 0);
                retries += 1;
                if let Some(tx) = first_retry.take() {
                    let _ = tx.send(());
                }
            })
            .await
            .unwrap();
            (report, retries)
        })
    };
    retried.await.unwrap();
    let spec = PipelineSpec {
        worker: app::pipeline::WorkerSpec::named("main"),
        horizon: Duration::from_secs(3600),
    };
    let pipeline = Pipeline::start(&client, &spec).unwrap();
    let (report, retries) = verifying.await.unwrap();
    pipeline.worker.shutdown().await;
    assert!(report.ok(), "{report}");
    assert!(report.joined > 0);
    assert!(retries >= 1);
}
