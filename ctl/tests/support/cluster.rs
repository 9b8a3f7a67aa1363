//! The store the ctl tests run the binary against: a minitikv over an embedded store and an
//! oracle service in the test process, a client of them, and the binary's base command.

use observers::{observer_fn, ObserverError, Registry, WorkerConfig};
use percolator::kv::Durability;
use percolator::{Cell, Client};
use percolator_cli::StoreSpec;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A minitikv, an oracle service and a client of both; everything stops when dropped.
pub struct Env {
    _dir: tempfile::TempDir,
    _server: minitikv::RunningServer,
    _oracle: oracle::ServerHandle,
    pub spec: StoreSpec,
    pub oracle_addr: String,
    pub namespace: String,
    pub client: Client,
}

impl Env {
    /// Starts the store and the oracle, and a client of them in `namespace`.
    pub async fn start(namespace: &str) -> Env {
        let dir = tempfile::tempdir().expect("temp dir");
        let server = minitikv::start(minitikv::ServerConfig::embedded(dir.path().join("mt")))
            .await
            .expect("minitikv");
        let spec: StoreSpec = format!("tikv:{}", server.endpoint()).parse().expect("spec");
        let kv = percolator_cli::store::open_store(&spec, Durability::Process)
            .await
            .expect("store");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let oracle = oracle::ServerHandle::start(oracle::ServerConfig::default(), kv, listener)
            .expect("oracle");
        let oracle_addr = oracle.local_addr().to_string();
        let client = percolator_cli::store::open_client(
            &spec,
            namespace,
            std::slice::from_ref(&oracle_addr),
            Durability::Process,
            None,
        )
        .await
        .expect("client");
        Env {
            _dir: dir,
            _server: server,
            _oracle: oracle,
            spec,
            oracle_addr,
            namespace: namespace.to_string(),
            client,
        }
    }

    /// `percolator-ctl --store … --oracle … --namespace …`, to add a verb to.
    pub fn command(&self) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_percolator-ctl"));
        command
            .arg("--store")
            .arg(self.spec.to_string())
            .arg("--oracle")
            .arg(&self.oracle_addr)
            .arg("--namespace")
            .arg(&self.namespace);
        command
    }

    /// Writes `value` at `cell` in a transaction of its own; returns its commit timestamp.
    pub async fn write(&self, cell: &Cell, value: &str) -> u64 {
        let txn = self.client.begin().await.expect("begin");
        txn.set(cell.clone(), value);
        txn.commit().await.expect("commit").0
    }

    /// The value at `cell` (as text), read in a transaction of its own.
    pub async fn read(&self, cell: &Cell) -> Option<String> {
        let txn = self.client.begin().await.expect("begin");
        let v = txn.get(cell).await.expect("get");
        txn.commit().await.expect("commit");
        v.map(|v| String::from_utf8_lossy(&v).into_owned())
    }
}

/// Registers the observer `length` of `docs/body`, writing the body's length to `docs/len`;
/// it fails on purpose while `broken` is set.
pub fn breakable_length(registry: &mut Registry, broken: Arc<AtomicBool>) {
    registry
        .strong(
            "docs",
            "body",
            "length",
            observer_fn(move |txn, cell: Cell| {
                let broken = broken.clone();
                async move {
                    if broken.load(Ordering::SeqCst) {
                        return Err(ObserverError::failed("broken on purpose"));
                    }
                    let body = txn.get(&cell).await?.unwrap_or_default();
                    txn.set(Cell::new("docs", &cell.row, "len"), body.len().to_string());
                    Ok(())
                }
            }),
        )
        .expect("register");
}

/// Workers that give up on a cell after two failures, retrying quickly.
pub fn worker_config() -> WorkerConfig {
    WorkerConfig {
        max_failures: 2,
        retry_backoff: Duration::from_millis(5),
        ..WorkerConfig::default()
    }
}

/// Polls `check` until it holds; panics after `patience` (a hang guard, not a timing
/// assertion).
pub async fn poll<F, Fut>(patience: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < patience, "gave up waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
