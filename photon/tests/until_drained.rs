//! `photon work --until-drained` as a process, on an in-process minitikv (over an embedded
//! store) with an oracle service:
//! - started before anything is loaded, a worker waits for the files of `--input` (it says
//!   so and keeps running), then exits 0 on its own once `photon load` has run and the join
//!   is drained;
//! - started after a load, a worker exits 0 only once the backlog is handled.
//!
//! Each time `photon verify`, run right after the exit, finds every joinable click
//! joined exactly once (nothing still in flight).

mod common;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const PHOTON: &str = env!("CARGO_BIN_EXE_photon");
/// Hang guard (not a timing assertion).
const PATIENCE: Duration = Duration::from_secs(240);

struct Env {
    dir: tempfile::TempDir,
    _server: minitikv::RunningServer,
    _oracle: oracle::ServerHandle,
    store: Vec<String>,
}

impl Env {
    async fn start() -> Env {
        let dir = tempfile::tempdir().expect("temp dir");
        let server = minitikv::start(minitikv::ServerConfig::embedded(dir.path().join("mt")))
            .await
            .expect("minitikv");
        let (oracle, store) = common::oracle_on(&server).await;
        Env {
            dir,
            _server: server,
            _oracle: oracle,
            store,
        }
    }

    async fn gen(&self, name: &str, seed: &str) -> PathBuf {
        let logs = self.dir.path().join(name);
        let gen = Command::new(PHOTON)
            .args(["gen", "--queries", "1500", "--seed", seed, "--out"])
            .arg(&logs)
            .status()
            .await
            .expect("photon gen");
        assert!(gen.success());
        logs
    }

    fn work(&self, namespace: &str, pipeline: &str, logs: &Path) -> Child {
        Command::new(PHOTON)
            .arg("work")
            .args(&self.store)
            .args(["--namespace", namespace, "--pipeline", pipeline])
            .args(["--until-drained", "--input"])
            .arg(logs)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("photon work")
    }

    async fn load(&self, namespace: &str, logs: &Path) {
        let load = Command::new(PHOTON)
            .arg("load")
            .args(&self.store)
            .args(["--namespace", namespace, "--rejects"])
            .arg(self.dir.path().join("rejects.txt"))
            .arg(logs)
            .output()
            .await
            .expect("photon load");
        assert!(
            load.status.success(),
            "photon load failed: {}",
            String::from_utf8_lossy(&load.stderr)
        );
    }

    async fn verify(&self, namespace: &str, logs: &Path) {
        let verify = Command::new(PHOTON)
            .arg("verify")
            .args(&self.store)
            .args(["--namespace", namespace])
            .arg(logs)
            .output()
            .await
            .expect("photon verify");
        assert!(
            verify.status.success(),
            "verify right after the drain failed:\n{}{}",
            String::from_utf8_lossy(&verify.stdout),
            String::from_utf8_lossy(&verify.stderr)
        );
    }
}

/// Reads the worker's stderr until a line containing `what`; returns the lines read.
async fn read_until(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStderr>>,
    what: &str,
) -> Vec<String> {
    let mut seen = Vec::new();
    let found = tokio::time::timeout(PATIENCE, async {
        while let Some(line) = lines.next_line().await.expect("stderr") {
            let hit = line.contains(what);
            seen.push(line);
            if hit {
                return true;
            }
        }
        false
    })
    .await
    .unwrap_or(false);
    assert!(
        found,
        "no line with {what:?} from photon work:\n{}",
        seen.join("\n")
    );
    seen
}

/// Waits for the worker to exit by itself; it must exit 0 after saying it drained.
async fn exits_drained(
    mut child: Child,
    mut lines: tokio::io::Lines<BufReader<tokio::process::ChildStderr>>,
) {
    read_until(&mut lines, "loaded and drained").await;
    let status = tokio::time::timeout(PATIENCE, child.wait())
        .await
        .expect("photon work --until-drained never exited")
        .expect("photon work");
    assert!(status.success(), "photon work --until-drained: {status}");
}

fn stderr_lines(child: &mut Child) -> tokio::io::Lines<BufReader<tokio::process::ChildStderr>> {
    BufReader::new(child.stderr.take().expect("stderr")).lines()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_started_before_the_load_waits_for_the_files_then_drains() {
    let env = Env::start().await;
    let logs = env.gen("logs", "1").await;
    let mut a = env.work("photon", "A", &logs);
    let mut lines = stderr_lines(&mut a);
    // Nothing is loaded: it says what it waits for and does not exit.
    let said = read_until(&mut lines, "waiting for the drain").await;
    assert!(
        said.last().is_some_and(|l| l.contains("loaded 0 of")),
        "{said:?}"
    );
    assert!(
        a.try_wait().expect("try_wait").is_none(),
        "exited before the load"
    );
    env.load("photon", &logs).await;
    exits_drained(a, lines).await;
    env.verify("photon", &logs).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_started_after_the_load_exit_only_once_the_backlog_is_handled() {
    let env = Env::start().await;
    let logs = env.gen("logs", "2").await;
    // Everything is loaded before any worker runs: the whole join is a backlog.
    env.load("later", &logs).await;
    let mut a = env.work("later", "A", &logs);
    let mut b = env.work("later", "B", &logs);
    let (la, lb) = (stderr_lines(&mut a), stderr_lines(&mut b));
    exits_drained(a, la).await;
    exits_drained(b, lb).await;
    env.verify("later", &logs).await;
}
