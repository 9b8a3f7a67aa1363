//! Helpers shared by the transaction test files, and the bodies of the transaction suites
//! that run on more than one backend (memory, embedded, faulty, TiKV through minitikv).
#![allow(dead_code, unused_macros)]

#[macro_use]
pub mod anomalies;
pub mod bank;
pub mod clocks;
pub mod model;
#[macro_use]
pub mod protocol;

use percolator::kv::{MemoryKv, RawKv};
use percolator::ts::LocalClock;
use percolator::txn::{Client, ClientConfig};
use percolator::Cell;
use std::sync::Arc;
use std::time::Duration;

/// Short TTLs so that crashed transactions are resolved within a test's time budget.
pub fn test_config() -> ClientConfig {
    ClientConfig {
        namespace: b"test".to_vec(),
        lock_ttl: Duration::from_millis(300),
        max_lifetime: Duration::from_secs(10),
        gc_lag: Duration::from_secs(11),
        ..ClientConfig::default()
    }
}

/// Worker periods short enough for tests: idle scans every 20-200 ms, 100 ms heartbeats.
pub fn quick() -> observers::WorkerConfig {
    observers::WorkerConfig {
        idle_interval: Duration::from_millis(20),
        max_idle_interval: Duration::from_millis(200),
        retry_backoff: Duration::from_millis(5),
        heartbeat: Duration::from_millis(100),
        ..observers::WorkerConfig::default()
    }
}

/// A registry of one strong observer named `name` on `table`/`column`.
pub fn strong_registry(
    table: &str,
    column: &str,
    name: &str,
    observer: Arc<dyn observers::Observer>,
) -> Arc<observers::Registry> {
    let mut registry = observers::Registry::new();
    registry
        .strong(table, column, name, observer)
        .expect("one observer per column");
    Arc::new(registry)
}

/// Waits until every one of `workers` is quiescent (a 60 s hang guard, not a timing claim).
pub async fn quiesce<'a>(workers: impl IntoIterator<Item = &'a observers::Worker>) {
    tokio::time::timeout(Duration::from_secs(60), async {
        for w in workers {
            w.wait_until_quiescent().await.unwrap();
        }
    })
    .await
    .expect("workers did not quiesce in 60 s");
}

pub fn client_on(kv: Arc<dyn RawKv>, config: ClientConfig) -> Client {
    Client::with_config(kv, Arc::new(LocalClock::new()), config)
}

pub fn memory_client() -> Client {
    client_on(Arc::new(MemoryKv::new()), test_config())
}

pub fn embedded_client() -> (tempfile::TempDir, Client) {
    let dir = tempfile::tempdir().expect("temp dir");
    let kv = percolator::txn::open_embedded(dir.path(), Default::default())
        .expect("open embedded store");
    (dir, client_on(Arc::new(kv), test_config()))
}

/// A `TikvKv` connected to an in-process `minitikv` server; the server lives as long as this
/// guard (dropping it stops the server).
pub struct TikvStore {
    pub kv: Arc<dyn RawKv>,
    pub tikv: Arc<percolator_tikv::TikvKv>,
    pub server: minitikv::RunningServer,
    _dir: Option<tempfile::TempDir>,
}

impl TikvStore {
    /// Prints the faults the server injected and the adapter's retries by cause (shown with
    /// `--no-capture`), and returns the retries.
    pub fn report(&self, what: &str) -> percolator_tikv::RetryCounts {
        let retries = self.tikv.retry_counts();
        eprintln!(
            "{what}: injected {:?}; regions {}; adapter retries {retries:?}; reverse-scan fallbacks {}",
            self.server.fault_counts(),
            self.server.regions().len(),
            self.tikv.reverse_scan_fallbacks()
        );
        retries
    }
}

/// A transaction client on a [`TikvStore`].
pub struct TikvClient {
    pub client: Client,
    pub store: TikvStore,
}

/// Adapter settings of the TiKV tests: the defaults (`AtomicKeys::All`, as `open_store` uses)
/// with a call deadline long enough for a loaded 2-core machine.
pub fn tikv_config(endpoint: String) -> percolator_tikv::TikvConfig {
    let mut config = percolator_tikv::TikvConfig::new(vec![endpoint]);
    config.op_timeout = Duration::from_secs(30);
    config
}

/// Starts a `minitikv` server (in memory) and connects a `TikvKv` to it. Needs a
/// multi-threaded tokio runtime (the server runs on it).
pub async fn tikv_store() -> TikvStore {
    tikv_store_with(minitikv::ServerConfig::in_memory(), None, |c| c).await
}

/// Like [`tikv_store`], the server keeping its data in an embedded store on disk.
pub async fn tikv_embedded_store() -> TikvStore {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = minitikv::ServerConfig::embedded(dir.path());
    tikv_store_with(config, Some(dir), |c| c).await
}

/// Like [`tikv_store`], with only the CASed spaces of the test namespace (heads and meta
/// records, `AtomicKeys::percolator_spaces`) on the atomic client: versions, data and notify
/// keys are written and deleted by the plain client, as a tuned deployment would do.
pub async fn tikv_store_split_keys() -> TikvStore {
    let codec = percolator::KeyCodec::new(test_config().namespace);
    tikv_store_with(minitikv::ServerConfig::in_memory(), None, |mut c| {
        c.atomic_keys = percolator_tikv::AtomicKeys::percolator_spaces(&codec);
        c
    })
    .await
}

/// A `minitikv` server with `server`, and a `TikvKv` configured by `configure`.
pub async fn tikv_store_with(
    server: minitikv::ServerConfig,
    dir: Option<tempfile::TempDir>,
    configure: impl FnOnce(percolator_tikv::TikvConfig) -> percolator_tikv::TikvConfig,
) -> TikvStore {
    let server = minitikv::start(server).await.expect("start minitikv");
    let kv = percolator_tikv::TikvKv::connect(configure(tikv_config(server.endpoint())))
        .await
        .expect("connect to minitikv");
    let tikv = Arc::new(kv);
    TikvStore {
        kv: tikv.clone(),
        tikv,
        server,
        _dir: dir,
    }
}

/// Split keys through the test namespace's key space: the start of each space, and the
/// head, version and data keys of some of the cells the suites use (bank accounts, `t`
/// rows, model keys), so that transactions span regions.
pub fn weather_split_keys() -> Vec<Vec<u8>> {
    use percolator::codec::Space;
    let codec = percolator::KeyCodec::new(test_config().namespace);
    let mut keys = Vec::new();
    for space in [
        Space::Data,
        Space::Head,
        Space::Meta,
        Space::Notify,
        Space::Once,
        Space::Version,
    ] {
        keys.push(codec.space_range(space).start);
    }
    let mut cells: Vec<Cell> = (0..100)
        .step_by(7)
        .map(|i| Cell::new("bank", format!("acct{i:03}"), "balance"))
        .collect();
    cells.extend(["a", "ab", "b", "c", "k", "x", "y"].map(cell));
    cells.extend(
        (0..40)
            .step_by(5)
            .map(|i| Cell::new("m", format!("k{i}"), "v")),
    );
    for c in &cells {
        keys.push(codec.head(c));
        keys.push(codec.version(c, u64::MAX / 2));
        keys.push(codec.data(c, u64::MAX / 2));
    }
    keys
}

/// A `minitikv` with three stores, regions split by [`weather_split_keys`], a split, merge
/// or leader transfer every 10 ms, and `Faults::weather(seed)` (0.1% ServerIsBusy, 1%
/// region errors, 0.5% replies lost after apply, 1% delays up to 5 ms).
pub fn weather_server(seed: u64) -> minitikv::ServerConfig {
    minitikv::ServerConfig::weather(seed, weather_split_keys(), 40..=300)
}

/// Like [`weather_server`] with ten times the fault rates (1% ServerIsBusy, 10% region
/// errors, 5% replies lost after apply, 10% delays), so that short checks meet faults too.
pub fn storm_server(seed: u64) -> minitikv::ServerConfig {
    let mut config = weather_server(seed);
    let f = &mut config.faults;
    f.server_busy *= 10.0;
    f.region_error *= 10.0;
    f.lost_reply *= 10.0;
    f.delay *= 10.0;
    config
}

/// A `TikvKv` (default settings) on a [`storm_server`].
pub async fn tikv_storm_store(seed: u64) -> TikvStore {
    tikv_store_with(storm_server(seed), None, |c| c).await
}

/// A `TikvKv` (default settings) on a [`weather_server`].
pub async fn tikv_weather_store(seed: u64) -> TikvStore {
    tikv_store_with(weather_server(seed), None, |c| c).await
}

/// A transaction client with [`test_config`] on a fresh in-memory `minitikv`.
pub async fn tikv_client() -> TikvClient {
    let store = tikv_store().await;
    TikvClient {
        client: client_on(store.kv.clone(), test_config()),
        store,
    }
}

pub fn cell(row: &str) -> Cell {
    Cell::new("t", row, "v")
}

pub fn num(v: Option<Vec<u8>>) -> Option<i64> {
    v.map(|b| String::from_utf8(b).expect("utf8").parse().expect("number"))
}

/// Writes initial values in one committed transaction.
pub async fn setup(client: &Client, values: &[(&str, i64)]) {
    let txn = client.begin().await.unwrap();
    for (row, v) in values {
        txn.set(cell(row), v.to_string());
    }
    txn.commit().await.unwrap();
}

/// Counts the locks left in the client's namespace.
pub async fn count_locks(client: &Client) -> usize {
    use percolator::codec::Space;
    use percolator::kv::{scan_all, ScanOrder};
    use percolator::record::Head;
    let heads = scan_all(
        client.store().as_ref(),
        client.codec().space_range(Space::Head),
        ScanOrder::Forward,
    )
    .await
    .unwrap();
    heads
        .iter()
        .filter(|(_, raw)| Head::decode(raw).unwrap().lock.is_some())
        .count()
}
