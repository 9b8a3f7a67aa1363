//! `photon work --until-drained` as a process: two workers (pipelines A and B) start before
//! anything is loaded, `photon load` runs beside them, and each worker must exit with status
//! 0 on its own, only once every click is handled: `photon verify` run right after both
//! exited finds every joinable click joined exactly once (nothing still in flight).
//! The store is an in-process minitikv over an embedded store, with an oracle service.

use std::process::Stdio;
use std::time::Duration;
use tokio::process::Command;

const PHOTON: &str = env!("CARGO_BIN_EXE_photon");
/// Hang guard (not a timing assertion).
const PATIENCE: Duration = Duration::from_secs(240);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_until_drained_exits_zero_once_loaded_and_joined() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = minitikv::start(minitikv::ServerConfig::embedded(dir.path().join("mt")))
        .await
        .expect("minitikv");
    let spec: percolator::kv::StoreSpec =
        format!("tikv:{}", server.endpoint()).parse().expect("spec");
    let kv = percolator_cli::store::open_store(&spec)
        .await
        .expect("store");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let oracle =
        oracle::ServerHandle::start(oracle::ServerConfig::default(), kv, listener).expect("oracle");
    let store = [
        "--store".to_string(),
        spec.to_string(),
        "--oracle".to_string(),
        oracle.local_addr().to_string(),
    ];
    let logs = dir.path().join("logs");

    let gen = Command::new(PHOTON)
        .args(["gen", "--queries", "1500", "--out"])
        .arg(&logs)
        .status()
        .await
        .expect("photon gen");
    assert!(gen.success());

    let work = |pipeline: &str| {
        Command::new(PHOTON)
            .arg("work")
            .args(&store)
            .args(["--pipeline", pipeline, "--until-drained", "--input"])
            .arg(&logs)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("photon work")
    };
    let a = work("A");
    let b = work("B");

    let load = Command::new(PHOTON)
        .arg("load")
        .args(&store)
        .arg("--rejects")
        .arg(dir.path().join("rejects.txt"))
        .arg(&logs)
        .output()
        .await
        .expect("photon load");
    assert!(
        load.status.success(),
        "photon load failed: {}",
        String::from_utf8_lossy(&load.stderr)
    );

    for (name, child) in [("A", a), ("B", b)] {
        let out = tokio::time::timeout(PATIENCE, child.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("photon work {name} --until-drained never exited"))
            .expect("photon work");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "photon work {name}: {stderr}");
        assert!(
            stderr.contains("loaded and drained"),
            "photon work {name}: {stderr}"
        );
    }

    let verify = Command::new(PHOTON)
        .arg("verify")
        .args(&store)
        .arg(&logs)
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
