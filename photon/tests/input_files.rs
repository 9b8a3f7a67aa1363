//! `photon load`, `photon run` and `photon verify` as processes against input files that are
//! not plain, finished logs: a last line without its line break (written by hand, by
//! `printf`, by exporters), and a FIFO named like a log.

mod common;
use common::photon;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Generated logs (one file each) in `dir/logs`, with one more query and a click on it
/// appended without a line break at the end of each file.
fn logs_ending_without_a_line_break(dir: &Path) -> std::path::PathBuf {
    let logs = dir.join("logs");
    let gen = photon(&[
        "gen",
        "--out",
        logs.to_str().unwrap(),
        "--queries",
        "100",
        "--files",
        "1",
        "--malformed",
        "0",
        "--orphans",
        "0",
        "--duplicates",
        "0",
    ]);
    assert!(gen.status.success(), "{gen:?}");
    let append = |name: &str, line: &str| {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(logs.join(name))
            .unwrap();
        f.write_all(line.as_bytes()).unwrap();
    };
    let now = 1_700_000_000_000u64;
    append(
        "queries-000.jsonl",
        &format!("{{\"query_id\":\"unterminated\",\"event_time\":{now}}}"),
    );
    append(
        "clicks-000.jsonl",
        &format!(
            "{{\"click_id\":\"unterminated-c\",\"query_id\":\"unterminated\",\"event_time\":{}}}",
            now + 10
        ),
    );
    logs
}

/// Runs the photon binary with `args`, failing the test if it has not exited within
/// `limit` (a hang guard, not a timing assertion: these commands take seconds).
fn photon_within(args: &[&str], limit: Duration) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_photon"))
        .args(args)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("photon runs");
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > limit {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!("photon {args:?} hung for {limit:?}: {}", text(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// `photon load` (bounded input) loads a last line that has no line break, and `photon
/// verify` then finds its click joined by `photon run --until-drained` on the same store;
/// `photon run --until-drained` on its own loads it too.
#[test]
fn last_line_without_a_line_break_is_loaded_by_load_and_run() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("a");
    std::fs::create_dir_all(&logs).unwrap();
    let logs = logs_ending_without_a_line_break(&logs);
    let logs_arg = logs.to_str().unwrap();
    let store = format!("embedded:{}", dir.path().join("store-a").display());
    let rejects = dir.path().join("rejects.txt");
    let load = photon(&[
        "load",
        "--store",
        &store,
        "--rejects",
        rejects.to_str().unwrap(),
        logs_arg,
    ]);
    assert!(load.status.success(), "{load:?}");
    let stdout = text(&load.stdout);
    let lines = |name: &str| {
        std::fs::read_to_string(logs.join(name))
            .unwrap()
            .split('\n')
            .filter(|l| !l.is_empty())
            .count()
    };
    let events = lines("queries-000.jsonl") + lines("clicks-000.jsonl");
    assert!(
        stdout.contains(&format!("loaded {events} events")),
        "every line, the last ones too ({events}): {stdout}"
    );
    // Both tools on a second store: run joins it, verify finds nothing lost.
    let other = dir.path().join("b");
    std::fs::create_dir_all(&other).unwrap();
    let logs = logs_ending_without_a_line_break(&other);
    let logs_arg = logs.to_str().unwrap();
    let store = format!("embedded:{}", dir.path().join("store-b").display());
    let run = photon_within(
        &[
            "run",
            "--store",
            &store,
            "--input",
            logs_arg,
            "--rejects",
            rejects.to_str().unwrap(),
            "--until-drained",
            "--sweep-ms",
            "500",
        ],
        Duration::from_secs(300),
    );
    assert!(run.status.success(), "{}", text(&run.stderr));
    let verify = photon(&["verify", "--store", &store, "--json", logs_arg]);
    let report: serde_json::Value = serde_json::from_slice(&verify.stdout).expect("json");
    assert!(verify.status.success(), "{report}");
    assert_eq!(report["lost"], 0, "{report}");
}

/// A FIFO named like a log (no writer ever opens it) is reported like a file that cannot be
/// opened, and `photon run --until-drained` loads and joins the other logs and exits, as
/// `photon verify` does, instead of waiting on the FIFO forever.
#[test]
fn fifo_named_like_a_log_is_reported_and_run_and_verify_finish() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let logs_arg = logs.to_str().unwrap();
    let gen = photon(&["gen", "--out", logs_arg, "--queries", "100", "--files", "1"]);
    assert!(gen.status.success(), "{gen:?}");
    let fifo = logs.join("clicks-fifo.jsonl");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let store = format!("embedded:{}", dir.path().join("store").display());
    let rejects = dir.path().join("rejects.txt");
    let run = photon_within(
        &[
            "run",
            "--store",
            &store,
            "--input",
            logs_arg,
            "--rejects",
            rejects.to_str().unwrap(),
            "--until-drained",
            "--sweep-ms",
            "500",
        ],
        Duration::from_secs(300),
    );
    let (stdout, stderr) = (text(&run.stdout), text(&run.stderr));
    assert!(run.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("1 file could not be opened"),
        "the summary says so: {stdout}"
    );
    let reported = std::fs::read_to_string(&rejects).unwrap();
    assert!(
        reported.contains("clicks-fifo.jsonl") && reported.contains("FIFO"),
        "{reported}"
    );
    // Verify does not wait on the FIFO either: it refuses input it could not read (exit 4),
    // and with `--partial-input` verifies the rest.
    let verify = photon_within(
        &["verify", "--store", &store, "--json", logs_arg],
        Duration::from_secs(300),
    );
    assert_eq!(verify.status.code(), Some(4), "{verify:?}");
    assert!(text(&verify.stderr).contains("FIFO"), "{verify:?}");
    let verify = photon_within(
        &[
            "verify",
            "--store",
            &store,
            "--json",
            "--partial-input",
            logs_arg,
        ],
        Duration::from_secs(300),
    );
    assert!(verify.status.success(), "{verify:?}");
    let report: serde_json::Value = serde_json::from_slice(&verify.stdout).expect("json");
    assert_eq!(report["lost"], 0, "{report}");
}
