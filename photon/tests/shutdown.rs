//! `photon work` stopped by SIGTERM while its store is down: the shutdown is bounded
//! (`--shutdown-timeout-secs`) and the process exits with its own status (7,
//! `percolator_cli::exit::SHUTDOWN_INCOMPLETE`) instead of waiting on the store for as long as
//! the outage lasts and then exiting 0 (issue 39, item 7).

use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

mod common;

/// Hang guard (not a timing assertion).
const PATIENCE: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_the_store_down_stops_within_the_bound_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let server = minitikv::start(minitikv::ServerConfig::embedded(dir.path().join("mt")))
        .await
        .unwrap();
    let (_oracle, store) = common::oracle_on(&server).await;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_photon"))
        .arg("work")
        .args(&store)
        .args(["--shutdown-timeout-secs", "2"])
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        let n = tokio::time::timeout(PATIENCE, stderr.read_line(&mut line))
            .await
            .expect("readiness")
            .unwrap();
        assert!(n > 0, "photon work exited before readiness:\n{seen}");
        seen.push_str(&line);
        if line.contains("photon worker running") {
            break;
        }
    }
    // The store goes down, then the signal comes.
    drop(server);
    let rest = tokio::spawn(async move {
        let mut rest = String::new();
        let _ = stderr.read_to_string(&mut rest).await;
        rest
    });
    percolator_cli::testkit::sigterm(child.id().unwrap()).unwrap();
    let status = tokio::time::timeout(PATIENCE, child.wait())
        .await
        .expect("photon work exits after SIGTERM")
        .unwrap();
    let rest = rest.await.unwrap();
    assert_eq!(
        status.code(),
        Some(percolator_cli::exit::SHUTDOWN_INCOMPLETE),
        "{rest}"
    );
    assert!(rest.contains("stopping anyway"), "{rest}");
}
