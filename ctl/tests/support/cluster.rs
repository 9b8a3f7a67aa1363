//! The store the ctl tests run the binary against: a minitikv over an embedded store and an
//! oracle service in the test process, a client of them, and the binary's base command.

use percolator::kv::Durability;
use percolator::Client;
use percolator_cli::StoreSpec;

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
}
