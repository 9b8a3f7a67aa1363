//! Photon as separate OS processes (issue 7): one `minitikv` server, two `oracle serve`
//! processes on it, one `photon load` and four `photon work` processes in two redundant
//! pipelines. A seeded chaos loop SIGKILLs a random worker every 1–2 s and restarts it, and
//! at least twice SIGKILLs the leading oracle and restarts it, while the logs load. Then the
//! join drains and `photon verify` must find every joinable click joined exactly once. The
//! run is repeated on a weathered minitikv (several stores and regions, churn, injected
//! faults).
//!
//! The `oracle` and `minitikv` binaries are taken from the directory of the `photon` binary
//! (`cargo nextest run --workspace` and `cargo test --workspace` build them); if they are
//! missing (e.g. `cargo test -p percolator-photon` on a fresh target directory) the test builds them
//! with cargo first. `PHOTON_CHAOS_SEED=N` replays another chaos schedule.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Default chaos seed (override with `PHOTON_CHAOS_SEED`).
const DEFAULT_SEED: u64 = 0x7007;
/// Queries generated (about half get a click).
const QUERIES: u64 = 4000;
/// Oracle lease knobs: a takeover after a SIGKILL takes about the lease.
const ORACLE_KNOBS: [&str; 2] = ["--heartbeat-ms=250", "--lease-timeout-ms=1500"];
/// Hang guard for the whole test (not a timing assertion).
const DEADLINE: Duration = Duration::from_secs(240);
/// The drain fails if the joined count stays unchanged this long.
const STALL: Duration = Duration::from_secs(60);

/// The path of a workspace binary built next to `photon`, building it if it is missing.
fn sibling_binary(name: &str) -> PathBuf {
    let photon = Path::new(env!("CARGO_BIN_EXE_photon"));
    let path = photon.with_file_name(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    if !path.exists() {
        // Same profile as this test's build; the target directory comes from the same
        // environment and configuration, so cargo resolves the same one.
        let profile = photon
            .parent()
            .and_then(Path::file_name)
            .and_then(|p| p.to_str())
            .unwrap_or("debug");
        let profile = if profile == "debug" { "dev" } else { profile };
        eprintln!("{} is missing: building it with cargo", path.display());
        // The package of each binary (`oracle` is built by `percolator-oracle-server`).
        let package = match name {
            "oracle" => "percolator-oracle-server".to_string(),
            other => format!("percolator-{other}"),
        };
        let status = Command::new(env!("CARGO"))
            .args(["build", "--bin", name, "-p", &package, "--profile", profile])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("running cargo build");
        assert!(status.success(), "cargo build of {name} failed");
    }
    assert!(
        path.exists(),
        "{} not found next to the photon binary: build the workspace binaries first \
         (`cargo build --workspace --bins`, or run `cargo nextest run --workspace`)",
        path.display()
    );
    path
}

/// Child processes of the test, by slot name; every one is SIGKILLed when the test ends,
/// and if it fails the tails of their logs are printed.
struct Cluster {
    dir: Option<tempfile::TempDir>,
    children: BTreeMap<String, (Child, PathBuf)>,
    logs: Vec<PathBuf>,
    incarnation: u32,
    started: Instant,
}

impl Cluster {
    fn new() -> Cluster {
        Cluster {
            dir: Some(tempfile::tempdir().expect("temp dir")),
            children: BTreeMap::new(),
            logs: Vec::new(),
            incarnation: 0,
            started: Instant::now(),
        }
    }

    fn path(&self) -> &Path {
        self.dir.as_ref().expect("temp dir").path()
    }

    fn say(&self, what: impl std::fmt::Display) {
        eprintln!("[{:6.1}s] {what}", self.started.elapsed().as_secs_f64());
    }

    /// Starts `program args` in `slot` (which must be free), stdout and stderr to files.
    /// Returns the stdout file.
    fn spawn(&mut self, slot: &str, program: &Path, args: &[String], log: &str) -> PathBuf {
        assert!(!self.children.contains_key(slot), "{slot} is running");
        self.incarnation += 1;
        let base = format!("{:03}-{slot}", self.incarnation);
        let out = self.path().join(format!("{base}.out"));
        let err = self.path().join(format!("{base}.err"));
        let child = Command::new(program)
            .args(args)
            .env("RUST_LOG", log)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).expect("stdout file"))
            .stderr(std::fs::File::create(&err).expect("stderr file"))
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {}: {e}", program.display()));
        self.say(format_args!("started {slot} (pid {})", child.id()));
        self.logs.push(out.clone());
        self.logs.push(err);
        self.children.insert(slot.to_string(), (child, out.clone()));
        out
    }

    /// SIGKILLs the process in `slot` and reaps it.
    fn kill(&mut self, slot: &str) {
        let (mut child, _) = self.children.remove(slot).expect("slot is running");
        let pid = child.id();
        let _ = child.kill();
        let _ = child.wait();
        self.say(format_args!("SIGKILLed {slot} (pid {pid})"));
    }

    /// Panics if a process other than those in `may_exit` has exited by itself.
    fn check_alive(&mut self, may_exit: &[&str]) {
        for (slot, (child, _)) in self.children.iter_mut() {
            if may_exit.contains(&slot.as_str()) {
                continue;
            }
            if let Some(status) = child.try_wait().expect("try_wait") {
                panic!("{slot} exited by itself ({status}); see its log below");
            }
        }
    }

    /// Lines of the logs so far that contain `needle`, per log file (diagnostics).
    fn count_in_logs(&self, needle: &str) -> Vec<(String, usize)> {
        self.logs
            .iter()
            .filter_map(|log| {
                let n = std::fs::read_to_string(log)
                    .unwrap_or_default()
                    .lines()
                    .filter(|l| l.contains(needle))
                    .count();
                let name = log.file_name()?.to_string_lossy().into_owned();
                (n > 0).then_some((name, n))
            })
            .collect()
    }

    /// Waits until the stdout of `slot` has a line starting with `prefix` and returns the
    /// rest of that line. `None` if the process exited first.
    fn wait_line(&mut self, slot: &str, prefix: &str, limit: Duration) -> Option<String> {
        let start = Instant::now();
        loop {
            let (child, out) = self.children.get_mut(slot).expect("slot is running");
            let text = std::fs::read_to_string(&*out).unwrap_or_default();
            if let Some(line) = text.lines().find(|l| l.starts_with(prefix)) {
                return Some(line[prefix.len()..].trim().to_string());
            }
            if child.try_wait().expect("try_wait").is_some() {
                self.children.remove(slot);
                return None;
            }
            assert!(
                start.elapsed() < limit,
                "{slot} printed no {prefix:?} line within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for (_, (mut child, _)) in std::mem::take(&mut self.children) {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            for log in &self.logs {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                if lines.is_empty() {
                    continue;
                }
                eprintln!("----- {} (last 40 lines) -----", log.display());
                for line in &lines[lines.len().saturating_sub(40)..] {
                    eprintln!("{line}");
                }
            }
            if let Some(dir) = self.dir.take() {
                eprintln!("logs and data kept in {}", dir.keep().display());
            }
        }
    }
}

/// Whether the oracle at `addr` answers a request with timestamps (it is the leader).
fn serves(addr: &str) -> bool {
    use oracle::proto::{decode_reply, encode_request, hello, GetRequest, Reply};
    let Ok(sock) = addr.parse() else {
        return false;
    };
    let Ok(mut s) = TcpStream::connect_timeout(&sock, Duration::from_millis(500)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
    let mut out = hello(oracle::proto::VERSION).to_vec();
    encode_request(
        GetRequest {
            req_id: 1,
            count: 1,
        },
        &mut out,
    );
    if s.write_all(&out).is_err() {
        return false;
    }
    let mut their_hello = [0u8; oracle::proto::HELLO_LEN];
    if s.read_exact(&mut their_hello).is_err() {
        return false;
    }
    let mut buf = Vec::new();
    let mut chunk = [0u8; 256];
    loop {
        match decode_reply(&buf) {
            Ok(Some((reply, _))) => return matches!(reply, Reply::Timestamps { .. }),
            Ok(None) => {}
            Err(_) => return false,
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The photon verifier's JSON report (the fields the test reads).
#[derive(Debug, serde::Deserialize)]
struct Report {
    clicks: u64,
    joinable: u64,
    joined: u64,
    duplicates: u64,
    lost: u64,
    unexpected: u64,
}

struct Setup {
    photon: PathBuf,
    oracle: PathBuf,
    store: String,
    oracles: Vec<String>,
    logs: PathBuf,
}

impl Setup {
    /// `--store` and `--oracle` of every photon command.
    fn store_args(&self) -> Vec<String> {
        vec![
            "--store".into(),
            self.store.clone(),
            "--oracle".into(),
            self.oracles.join(","),
        ]
    }

    fn start_oracle(&self, cluster: &mut Cluster, i: usize, listen: &str) -> Option<String> {
        let slot = format!("oracle{i}");
        let mut args: Vec<String> = ["serve", "--store", &self.store, "--listen", listen]
            .map(String::from)
            .to_vec();
        args.extend(ORACLE_KNOBS.map(String::from));
        cluster.spawn(&slot, &self.oracle, &args, "info");
        cluster.wait_line(&slot, "listening on ", Duration::from_secs(30))
    }

    /// Restarts oracle `i` on its old address (retrying while the port is not yet free).
    fn restart_oracle(&self, cluster: &mut Cluster, i: usize) {
        let addr = self.oracles[i].clone();
        for _ in 0..50 {
            if let Some(bound) = self.start_oracle(cluster, i, &addr) {
                assert_eq!(bound, addr);
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("oracle{i} could not be restarted on {addr}");
    }

    fn start_worker(&self, cluster: &mut Cluster, slot: &str, pipeline: &str) {
        let mut args = vec!["work".to_string()];
        args.extend(self.store_args());
        args.extend(
            ["--pipeline", pipeline, "--sweep-ms", "500"]
                .into_iter()
                .map(String::from),
        );
        cluster.spawn(slot, &self.photon, &args, "warn,photon=info");
    }

    /// The index of the oracle that serves timestamps now (waits for a leader).
    fn leader(&self, limit: Duration) -> usize {
        let start = Instant::now();
        loop {
            if let Some(i) = self.oracles.iter().position(|a| serves(a)) {
                return i;
            }
            assert!(start.elapsed() < limit, "no oracle served within {limit:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Runs `photon verify --json`: the report and whether it exited successfully.
    fn verify(&self) -> (Report, bool) {
        let mut args = vec!["verify".to_string()];
        args.extend(self.store_args());
        args.push("--json".into());
        let out = Command::new(&self.photon)
            .args(&args)
            .arg(&self.logs)
            .env("RUST_LOG", "warn")
            .stderr(Stdio::inherit())
            .output()
            .expect("running photon verify");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let report: Report = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
            panic!(
                "photon verify printed no report ({e}; {}): {stdout}",
                out.status
            )
        });
        (report, out.status.success())
    }
}

/// The numbers of `photon gen`'s summary line: "wrote Q queries, C clicks (D duplicate
/// lines, O orphans, M malformed) to DIR".
fn gen_summary(line: &str) -> (u64, u64) {
    let numbers: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .take(4)
        .map(|w| w.parse().unwrap())
        .collect();
    assert_eq!(numbers.len(), 4, "unexpected gen summary {line:?}");
    (numbers[1], numbers[3])
}

#[test]
fn separate_processes_with_sigkilled_workers_and_oracle_join_exactly_once() {
    join_exactly_once(&[]);
}

/// The same run in a real cluster's weather (issue 12): minitikv with three stores, 64
/// regions, a split, merge or leader move every 50 ms, regions split at 64 KiB as they grow
/// (the 64 even ones split the key space by its first two bytes, so the namespace's keys,
/// which share a long prefix, begin in one region: the size splits spread them as a large
/// cluster's regions follow its data), 0.1% ServerIsBusy, 1% region errors and 0.5% replies
/// lost after apply. Loader, workers, oracles and verifier ride it out.
#[test]
fn join_exactly_once_in_the_weather() {
    join_exactly_once(&[
        "--stores=3",
        "--regions=64",
        "--churn-ms=50",
        "--churn-max-regions=300",
        "--region-split-size=65536",
        "--seed=12",
        "--busy-rate=0.001",
        "--region-error-rate=0.01",
        "--lost-reply-rate=0.005",
    ]);
}

/// The chaos run; `weather` are extra `minitikv serve` options.
fn join_exactly_once(weather: &[&str]) {
    let seed = std::env::var("PHOTON_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_SEED);
    let mut rng = StdRng::seed_from_u64(seed);
    let photon = PathBuf::from(env!("CARGO_BIN_EXE_photon"));
    let minitikv = sibling_binary("minitikv");
    let oracle = sibling_binary("oracle");
    let mut cluster = Cluster::new();
    cluster.say(format_args!("chaos seed {seed} (PHOTON_CHAOS_SEED)"));

    // The workload: early, duplicate and orphan clicks.
    let logs = cluster.path().join("logs");
    let gen = Command::new(&photon)
        .args(["gen", "--out"])
        .arg(&logs)
        .args(["--queries", &QUERIES.to_string()])
        .args([
            "--early",
            "0.15",
            "--duplicates",
            "0.1",
            "--orphans",
            "0.02",
        ])
        .args(["--seed", &seed.to_string()])
        .output()
        .expect("running photon gen");
    assert!(gen.status.success(), "photon gen failed: {gen:?}");
    let (clicks, orphans) = gen_summary(&String::from_utf8_lossy(&gen.stdout));
    let joinable = clicks - orphans;
    cluster.say(format_args!(
        "generated {clicks} clicks, {joinable} joinable"
    ));

    // The store server.
    let data = cluster.path().join("minitikv-data");
    let mut args: Vec<String> = vec![
        "serve".into(),
        "--data".into(),
        data.display().to_string(),
        "--listen".into(),
        "127.0.0.1:0".into(),
    ];
    args.extend(weather.iter().map(|a| a.to_string()));
    cluster.spawn("minitikv", &minitikv, &args, "warn");
    let pd = cluster
        .wait_line(
            "minitikv",
            "minitikv listening on ",
            Duration::from_secs(30),
        )
        .expect("minitikv exited at start");
    let mut setup = Setup {
        photon: photon.clone(),
        oracle,
        store: format!("tikv:{pd}"),
        oracles: Vec::new(),
        logs: logs.clone(),
    };

    // Two oracles: the first leads, the second stands by.
    for i in 0..2 {
        let addr = setup
            .start_oracle(&mut cluster, i, "127.0.0.1:0")
            .expect("oracle exited at start");
        setup.oracles.push(addr);
        if i == 0 {
            setup.leader(Duration::from_secs(30));
        }
    }

    // Four workers in two pipelines, then the loader.
    let workers = [
        ("workA0", "A"),
        ("workA1", "A"),
        ("workB0", "B"),
        ("workB1", "B"),
    ];
    for (slot, pipeline) in workers {
        setup.start_worker(&mut cluster, slot, pipeline);
    }
    let mut args = vec!["load".to_string()];
    args.extend(setup.store_args());
    args.extend([
        "--batch".to_string(),
        "50".to_string(),
        "--rejects".to_string(),
    ]);
    args.push(cluster.path().join("rejects.txt").display().to_string());
    args.push(logs.display().to_string());
    cluster.spawn("loader", &photon, &args, "warn");

    // Chaos while the logs load: a worker every 1–2 s, the leading oracle at least twice.
    let (mut worker_kills, mut oracle_kills) = (0, 0);
    let chaos_start = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(rng.gen_range(1000..2000)));
        cluster.check_alive(&["loader"]);
        let loaded = match cluster.children.get_mut("loader") {
            Some((child, out)) => match child.try_wait().expect("try_wait") {
                Some(status) => {
                    assert!(status.success(), "photon load failed ({status})");
                    let summary = std::fs::read_to_string(&*out).unwrap_or_default();
                    cluster.children.remove("loader");
                    cluster.say(format_args!("loader: {}", summary.trim()));
                    true
                }
                None => false,
            },
            None => true,
        };
        if loaded && oracle_kills >= 2 && worker_kills >= 6 {
            break;
        }
        assert!(
            cluster.started.elapsed() < DEADLINE,
            "chaos phase did not end"
        );
        let oracle_due = oracle_kills < 2 && (loaded || chaos_start.elapsed().as_secs() >= 12);
        if oracle_due || (oracle_kills < 4 && rng.gen_bool(0.2)) {
            let leader = setup.leader(Duration::from_secs(30));
            cluster.say(format_args!(
                "killing the leading oracle{leader} ({})",
                setup.oracles[leader]
            ));
            cluster.kill(&format!("oracle{leader}"));
            setup.restart_oracle(&mut cluster, leader);
            oracle_kills += 1;
        } else {
            let (slot, pipeline) = workers[rng.gen_range(0..workers.len())];
            cluster.kill(slot);
            setup.start_worker(&mut cluster, slot, pipeline);
            worker_kills += 1;
        }
    }
    cluster.say(format_args!(
        "chaos over: {worker_kills} workers and {oracle_kills} leading oracles SIGKILLed"
    ));

    // Drain: wait until every joinable click is joined (the workers' sweep wakes parked
    // clicks whose query came later).
    let mut last: Option<Report> = None;
    let mut progress_at = Instant::now();
    loop {
        cluster.check_alive(&[]);
        let (report, _) = setup.verify();
        if last.as_ref().map(|r| r.joined) != Some(report.joined) {
            cluster.say(format_args!("{report:?}"));
            progress_at = Instant::now();
        }
        let done = report.lost == 0 && report.joined == joinable;
        last = Some(report);
        if done {
            break;
        }
        assert!(
            cluster.started.elapsed() < DEADLINE && progress_at.elapsed() < STALL,
            "join did not complete: {last:?}"
        );
        std::thread::sleep(Duration::from_millis(1000));
    }

    // Stop everything that writes, then the final verdict.
    for (slot, _) in workers {
        cluster.kill(slot);
    }
    let (report, ok) = setup.verify();
    cluster.say(format_args!("final: {report:?}"));
    cluster.say(format_args!(
        "warnings logged (file, lines): {:?}",
        cluster.count_in_logs("WARN")
    ));
    assert!(ok, "photon verify failed: {report:?}");
    assert_eq!(report.clicks, clicks, "{report:?}");
    assert_eq!(report.joinable, joinable, "{report:?}");
    assert_eq!(report.joined, joinable, "{report:?}");
    assert_eq!(report.duplicates, 0, "{report:?}");
    assert_eq!(report.lost, 0, "{report:?}");
    assert_eq!(report.unexpected, 0, "{report:?}");
    assert!(worker_kills >= 6 && oracle_kills >= 2);
}
