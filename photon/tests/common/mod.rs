//! Set-up shared by photon's test binaries: a client on a raw store with short
//! transaction lifetimes, a worker configuration that finds work quickly, and an oracle
//! service on a minitikv for the tests of processes.
#![allow(dead_code)] // each test binary uses its own subset

use observers::WorkerConfig;
use percolator::kv::RawKv;
use percolator::ts::LocalClock;
use percolator::{Client, ClientConfig};
use std::sync::Arc;
use std::time::Duration;

/// Runs the photon binary with `args` (no `RUST_LOG` from the caller); waits for it.
pub fn photon(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_photon"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("photon runs")
}

/// A client of namespace `photon` on `kv` with a local clock, a 300 ms lock TTL, and the
/// given transaction lifetime and GC lag.
pub fn client_living(kv: Arc<dyn RawKv>, max_lifetime: Duration, gc_lag: Duration) -> Client {
    let config = ClientConfig {
        lock_ttl: Duration::from_millis(300),
        max_lifetime,
        gc_lag,
        ..photon::schema::client_config("photon")
    };
    let client = Client::with_config(kv, Arc::new(LocalClock::new()), config);
    photon::schema::declare_columns(&client);
    client
}

/// A worker `id` that scans every 20-200 ms, heartbeats every 100 ms and retries after 5 ms.
pub fn fast_worker(id: impl Into<String>) -> WorkerConfig {
    WorkerConfig {
        id: id.into(),
        idle_interval: Duration::from_millis(20),
        max_idle_interval: Duration::from_millis(200),
        heartbeat: Duration::from_millis(100),
        retry_backoff: Duration::from_millis(5),
        ..WorkerConfig::default()
    }
}

/// An oracle service on the store of `server` (a running minitikv), and the `--store` and
/// `--oracle` arguments of a photon process using both.
pub async fn oracle_on(server: &minitikv::RunningServer) -> (oracle::ServerHandle, Vec<String>) {
    let spec: percolator_cli::StoreSpec =
        format!("tikv:{}", server.endpoint()).parse().expect("spec");
    let kv = percolator_cli::store::open_store(&spec, percolator::kv::Durability::Process)
        .await
        .expect("store");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let oracle =
        oracle::ServerHandle::start(oracle::ServerConfig::default(), kv, listener).expect("oracle");
    let store = vec![
        "--store".to_string(),
        spec.to_string(),
        "--oracle".to_string(),
        oracle.local_addr().to_string(),
    ];
    (oracle, store)
}

/// Text of a process's output, lossily decoded.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `photon run --until-drained` over `logs` on `store`, rejects to `rejects`; it must succeed.
pub fn run_until_drained(store: &str, logs: &std::path::Path, rejects: &std::path::Path) {
    let out = photon(&[
        "run",
        "--store",
        store,
        "--input",
        logs.to_str().unwrap(),
        "--rejects",
        rejects.to_str().unwrap(),
        "--until-drained",
        "--sweep-ms",
        "200",
    ]);
    assert!(
        out.status.success(),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}
