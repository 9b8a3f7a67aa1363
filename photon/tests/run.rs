//! `photon run` as a process on the default embedded store: a directory of logs with hostile
//! lines (malformed JSON, invalid UTF-8, a 1 MB line) is loaded while the pipelines join
//! it; with `--until-drained` it exits 0 once loaded and drained, the rejects are reported
//! with `file:line`, and `photon verify` finds every joinable click joined exactly once. Run
//! again on the same directory, it loads nothing twice.

use std::io::Write;
use std::path::Path;
use std::process::Output;

mod common;
use common::photon;

/// `photon run --store STORE --input LOGS --rejects DIR/rejects.txt` and `more` arguments.
fn run(store: &str, logs: &Path, dir: &Path, more: &[&str]) -> Output {
    let rejects = dir.join("rejects.txt");
    let mut args = vec!["run", "--store", store, "--input"];
    args.extend([
        logs.to_str().unwrap(),
        "--rejects",
        rejects.to_str().unwrap(),
    ]);
    args.extend(more);
    photon(&args)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Appends `line` and a line break to `path`.
fn append(path: &Path, line: &[u8]) {
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(line).unwrap();
    f.write_all(b"\n").unwrap();
}

#[test]
fn run_until_drained_joins_hostile_logs_once_and_reports_the_rejects() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let logs_arg = logs.to_str().unwrap();
    let gen = photon(&[
        "gen",
        "--out",
        logs_arg,
        "--queries",
        "600",
        "--files",
        "1",
        "--malformed",
        "0.01",
        "--seed",
        "11",
    ]);
    assert!(gen.status.success(), "{gen:?}");
    let clicks = logs.join("clicks-000.jsonl");
    append(
        &clicks,
        b"{\"click_id\":\"c\xff\",\"query_id\":\"q\",\"event_time\":1}",
    );
    append(
        &clicks,
        format!("{{\"click_id\": \"{}", "x".repeat(1 << 20)).as_bytes(),
    );
    append(&logs.join("queries-000.jsonl"), b"[1, 2, 3]");
    let store = format!("embedded:{}", dir.path().join("store").display());
    let rejects = dir.path().join("rejects.txt");
    let until_drained = ["--until-drained", "--sweep-ms", "500"];
    let out = run(&store, &logs, dir.path(), &until_drained);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("loaded and drained"), "{stderr}");
    assert!(
        stdout.contains("malformed lines reported to") && stdout.contains("rejects.txt"),
        "{stdout}"
    );
    let reported = std::fs::read(&rejects).unwrap();
    let reported = String::from_utf8_lossy(&reported);
    let at = |file: &str| {
        reported
            .lines()
            .filter(|l| l.contains(&format!("{file}:")))
            .count()
    };
    assert!(
        at("clicks-000.jsonl") >= 2,
        "{}",
        &reported[..reported.len().min(2000)]
    );
    assert!(
        at("queries-000.jsonl") >= 1,
        "{}",
        &reported[..reported.len().min(2000)]
    );
    assert!(reported.contains("invalid UTF-8"));
    let verify = photon(&["verify", "--store", &store, "--json", logs_arg]);
    let report: serde_json::Value = serde_json::from_slice(&verify.stdout).expect("json");
    assert!(verify.status.success(), "{report}");
    assert_eq!(report["duplicates"], 0, "{report}");
    assert_eq!(report["lost"], 0, "{report}");
    assert!(report["joined"].as_u64().unwrap() > 200, "{report}");
    // Again on the same directory: nothing is loaded twice, and it drains at once.
    let again = run(&store, &logs, dir.path(), &until_drained);
    let stdout = text(&again.stdout);
    assert!(again.status.success(), "{again:?}");
    assert!(stdout.contains("loaded 0 events"), "{stdout}");
    let verify = photon(&["verify", "--store", &store, logs_arg]);
    assert!(verify.status.success(), "{}", text(&verify.stdout));
}

#[test]
fn run_follow_until_drained_exits_0_once_drained() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let logs_arg = logs.to_str().unwrap();
    let gen = photon(&["gen", "--out", logs_arg, "--queries", "200", "--files", "1"]);
    assert!(gen.status.success(), "{gen:?}");
    let store = format!("embedded:{}", dir.path().join("store").display());
    let out = run(&store, &logs, dir.path(), &["--follow", "--until-drained"]);
    assert!(out.status.success(), "{out:?}");
    let verify = photon(&["verify", "--store", &store, logs_arg]);
    assert!(verify.status.success(), "{}", text(&verify.stdout));
}

/// A run that cannot start (its metrics address is taken) prints its error, each cause
/// once and without a backtrace even with `RUST_BACKTRACE=1`, and no summary of a load
/// that never ran ("loaded 0 events").
#[test]
fn a_run_that_cannot_start_prints_no_summary_and_no_backtrace() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let gen = photon(&["gen", "--out", logs.to_str().unwrap(), "--queries", "20"]);
    assert!(gen.status.success(), "{gen:?}");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let store = format!("embedded:{}", dir.path().join("store").display());
    let rejects = dir.path().join("rejects.txt");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_photon"))
        .args(["run", "--store", &store, "--input"])
        .arg(&logs)
        .arg("--rejects")
        .arg(&rejects)
        .args(["--until-drained", "--metrics-addr", &addr])
        .env_remove("RUST_LOG")
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("photon runs");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert!(stderr.contains(&addr), "{stderr}");
    assert!(!stdout.contains("loaded"), "no summary: {stdout}");
    assert!(!stdout.contains("joined"), "no summary: {stdout}");
    assert!(!stderr.to_lowercase().contains("backtrace"), "{stderr}");
    let cause = std::io::Error::from(std::io::ErrorKind::AddrInUse).to_string();
    let error_line = stderr
        .lines()
        .find(|l| l.starts_with("Error: "))
        .expect("an error line");
    assert!(
        error_line.matches("in use").count() == 1,
        "the cause once ({cause}): {error_line}"
    );
    drop(taken);
}
