//! minitikv: a stand-in for a TiKV cluster, for tests, demos and benchmarks.
//!
//! gRPC servers answer both the PD calls `tikv-client` 0.4.0 and `percolator-tikv` make
//! (`GetMembers`, the `Tso` stream, `GetRegion`, `GetPrevRegion`, `ScanRegions`,
//! `GetRegionByID`, `GetStore`, `GetAllStores`, GC safe point) and the TiKV raw-mode RPCs
//! (`RawGet`, `RawBatchGet`, `RawPut`, `RawBatchPut`, `RawDelete`, `RawBatchDelete`,
//! `RawScan` forward/reverse/key-only, `RawBatchScan`, `RawDeleteRange`,
//! `RawCompareAndSwap`). Data lives in one [`percolator::kv::RawKv`] store: the embedded
//! (fjall) store for `--data DIR`, memory otherwise.
//!
//! By default the cluster has one store and four regions
//! ([`ServerConfig::DEFAULT_SPLIT_KEYS`]), which split further as their data grows the way
//! TiKV's split checks split them ([`SplitPolicy`]; [`ServerConfig::single_region`] gives a
//! fresh TiKV cluster's one region instead). Raw CAS and atomic-mode writes take latches,
//! plain writes do not, so a plain write can slip under a CAS as on TiKV
//! ([`RunningServer::hold_cas`] makes that window deterministic for tests), and
//! [`RunningServer::write_kinds`] records which kinds of write each key received. [`ServerConfig`] adds the weather of a real
//! cluster: several stores on their own ports ([`ServerConfig::stores`]), regions split at
//! given keys ([`ServerConfig::split_keys`]), splits, merges and leader transfers at runtime
//! ([`RunningServer::split`], [`RunningServer::merge`], [`RunningServer::transfer_leader`],
//! or a seeded background task, [`Churn`]), and seeded fault injection ([`Faults`]:
//! `ServerIsBusy`, region errors, replies lost after the request applied, region errors
//! after a write applied, delays). Requests
//! naming a stale region, epoch, store or leader, or keys outside their region (for scans:
//! a seek key outside it, such as a reverse scan's empty upper bound beyond the first
//! region), get TiKV's region errors; TiKV's size limits ([`Limits`]: keys of 8 KiB, raft
//! entries of 8 MiB) hold. Calls are counted by method ([`RunningServer::rpc_counts`]).
//! Every other gRPC method answers `UNIMPLEMENTED`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), minitikv::ServerError> {
//! let server = minitikv::start(minitikv::ServerConfig::in_memory()).await?;
//! println!("PD and TiKV at {}", server.addr());
//! server.shutdown().await;
//! # Ok(()) }
//! ```

mod churn;
pub mod cli;
mod cluster;
pub mod design;
mod metrics;
mod service;

use percolator::kv::{Durability, EmbeddedOptions, KvError, MemoryKv, RawKv};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use cluster::{
    Churn, FaultCounts, Faults, LayoutError, RegionInfo, PEER_ID, REGION_ID, STORE_ID,
};
pub use service::{
    CasHold, Limits, RpcCounts, SplitChecks, SplitPolicy, WriteKinds, CLUSTER_ID,
    MAX_SPLITS_PER_CHECK,
};

/// Generated protobuf messages (prost) of the vendored TiKV protos, and the two gRPC
/// services minitikv implements (declared in `build.rs`).
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto {
    /// TiKV request/response messages.
    pub mod kvrpcpb {
        include!(concat!(env!("OUT_DIR"), "/kvrpcpb.rs"));
    }
    /// PD messages.
    pub mod pdpb {
        include!(concat!(env!("OUT_DIR"), "/pdpb.rs"));
    }
    /// Cluster metadata: regions, peers, stores.
    pub mod metapb {
        include!(concat!(env!("OUT_DIR"), "/metapb.rs"));
    }
    /// Region errors.
    pub mod errorpb {
        include!(concat!(env!("OUT_DIR"), "/errorpb.rs"));
    }
    /// Imported by kvrpcpb.
    pub mod deadlock {
        include!(concat!(env!("OUT_DIR"), "/deadlock.rs"));
    }
    /// Imported by kvrpcpb.
    pub mod tracepb {
        include!(concat!(env!("OUT_DIR"), "/tracepb.rs"));
    }
    /// Imported by kvrpcpb.
    pub mod resource_manager {
        include!(concat!(env!("OUT_DIR"), "/resource_manager.rs"));
    }
    /// Imported by pdpb.
    pub mod replication_modepb {
        include!(concat!(env!("OUT_DIR"), "/replication_modepb.rs"));
    }
    /// Imported by metapb.
    pub mod encryptionpb {
        include!(concat!(env!("OUT_DIR"), "/encryptionpb.rs"));
    }
    /// Imported by pdpb.
    pub mod raft_serverpb {
        include!(concat!(env!("OUT_DIR"), "/raft_serverpb.rs"));
    }
    /// Imported by raft_serverpb.
    pub mod disk_usage {
        include!(concat!(env!("OUT_DIR"), "/disk_usage.rs"));
    }
    /// Imported by pdpb.
    pub mod eraftpb {
        include!(concat!(env!("OUT_DIR"), "/eraftpb.rs"));
    }
    /// The PD service (`/pdpb.PD/...`), reduced to the methods minitikv serves.
    pub mod pd {
        include!(concat!(env!("OUT_DIR"), "/pdpb.PD.rs"));
        pub use p_d_client::PDClient as PdClient;
        pub use p_d_server::{PDServer as PdServer, PD as Pd};
    }
    /// The TiKV service (`/tikvpb.Tikv/...`), reduced to the raw-mode methods.
    pub mod tikv {
        include!(concat!(env!("OUT_DIR"), "/tikvpb.Tikv.rs"));
    }
}

/// Largest gRPC message minitikv accepts or sends (values up to tens of MiB pass).
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

/// Errors starting or running the server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The data store could not be opened.
    #[error("cannot open the data store: {0}")]
    Store(#[from] KvError),
    /// The gRPC server failed.
    #[error("gRPC server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
}

/// Where the data lives and where to listen.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Address to bind; port 0 picks a free port (see [`RunningServer::addr`]).
    pub listen: SocketAddr,
    /// Address clients are told to use (PD member URL and store address); defaults to the
    /// bound address, with an unspecified IP (0.0.0.0) replaced by 127.0.0.1.
    pub advertise: Option<String>,
    /// Data directory of the embedded store; `None` keeps data in memory.
    pub data: Option<PathBuf>,
    /// Durability of the embedded store's writes (with `data`): `Process` survives a crash of
    /// the server, `Fsync` power loss too (as a real TiKV, which syncs its Raft log).
    pub durability: Durability,
    /// The embedded store's other options (block cache, write buffer), with `data`; `None`:
    /// the defaults. Their `durability` is ignored for [`ServerConfig::durability`]. The
    /// binary fills them from the environment and the configuration file, as every binary
    /// does (`percolator_cli::store::embedded_options`).
    pub embedded_options: Option<EmbeddedOptions>,
    /// Keys at which the key space is split into regions at start (empty: one region).
    /// Default: [`ServerConfig::DEFAULT_SPLIT_KEYS`], four regions.
    pub split_keys: Vec<Vec<u8>>,
    /// How regions split as their data grows, as TiKV's split checks do (default:
    /// [`SplitPolicy::default`], the docker cluster's 8 MiB; `None`: never).
    pub split: Option<SplitPolicy>,
    /// Record, per key, the kinds of write it received ([`RunningServer::write_kinds`];
    /// default off: it keeps every key written in memory).
    pub record_writes: bool,
    /// Number of stores (default 1). Store 1 listens on `listen` beside PD; the others on
    /// ephemeral ports of the same IP, each serving the TiKV RPCs as its own store. Every
    /// region has a peer on every store; leaders start spread round-robin.
    pub stores: usize,
    /// Faults injected into TiKV RPCs (default: none).
    pub faults: Faults,
    /// Splits, merges and leader transfers at runtime (default: none).
    pub churn: Option<Churn>,
    /// TiKV's key and raft entry size limits (default: TiKV's defaults).
    pub limits: Limits,
}

impl ServerConfig {
    /// The split keys of a new server: four regions, so that a client meets a first, a
    /// last and middle regions from the start (namespaces starting with `a`-`e`, `f`-`l`,
    /// `m`-`r` and `s`-`z` land in different ones). A real cluster starts with one region
    /// and splits as data grows ([`ServerConfig::split`] does that too).
    pub const DEFAULT_SPLIT_KEYS: &'static [&'static [u8]] = &[b"f", b"m", b"s"];

    /// This configuration with one region over the whole key space at start (as a fresh
    /// TiKV cluster) and no splitting as data grows.
    pub fn single_region(self) -> Self {
        ServerConfig {
            split_keys: Vec::new(),
            split: None,
            ..self
        }
    }

    /// An in-memory server on 127.0.0.1 with an ephemeral port.
    pub fn in_memory() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            advertise: None,
            data: None,
            durability: Durability::Process,
            embedded_options: None,
            split_keys: Self::DEFAULT_SPLIT_KEYS
                .iter()
                .map(|k| k.to_vec())
                .collect(),
            split: Some(SplitPolicy::default()),
            record_writes: false,
            stores: 1,
            faults: Faults::none(),
            churn: None,
            limits: Limits::default(),
        }
    }

    /// `count - 1` split keys spreading keys that start with `prefix` over `count` regions:
    /// `prefix` followed by one or two bytes evenly spaced (plus the regions before and after
    /// the prefix).
    pub fn even_splits(prefix: &[u8], count: usize) -> Vec<Vec<u8>> {
        let count = count.max(1) as u64;
        (1..count)
            .map(|i| {
                let v = (i * 65_536 / count) as u16;
                let mut key = prefix.to_vec();
                key.extend_from_slice(&v.to_be_bytes());
                key
            })
            .collect()
    }

    /// A persistent server on 127.0.0.1 with an ephemeral port, storing data in `dir`.
    pub fn embedded(dir: impl Into<PathBuf>) -> Self {
        ServerConfig {
            data: Some(dir.into()),
            ..ServerConfig::in_memory()
        }
    }

    /// The tests' weather, in memory: three stores, regions split at `split_keys`, a split,
    /// merge or leader transfer every 10 ms keeping between `regions.start()` and
    /// `regions.end()` regions, and [`Faults::weather`]`(seed)`.
    pub fn weather(
        seed: u64,
        split_keys: Vec<Vec<u8>>,
        regions: std::ops::RangeInclusive<usize>,
    ) -> Self {
        ServerConfig {
            split_keys,
            stores: 3,
            faults: Faults::weather(seed),
            churn: Some(Churn {
                interval: Duration::from_millis(10),
                seed,
                min_regions: *regions.start(),
                max_regions: *regions.end(),
            }),
            ..ServerConfig::in_memory()
        }
    }
}

/// A server running on the current tokio runtime. Dropping it stops it (without waiting).
pub struct RunningServer {
    addr: SocketAddr,
    advertise: String,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<Result<(), tonic::transport::Error>>>,
    stores: Vec<JoinHandle<Result<(), tonic::transport::Error>>>,
    state: Arc<service::State>,
}

impl RunningServer {
    /// The regions, in key order.
    pub fn regions(&self) -> Vec<RegionInfo> {
        self.state.layout.all()
    }

    /// Splits the region holding `key` at `key` (clients with the old epoch get
    /// `EpochNotMatch`); returns the id of the new left region.
    pub fn split(&self, key: &[u8]) -> Result<u64, LayoutError> {
        self.state.layout.split(key)
    }

    /// Merges the region starting at `key` into its left neighbour (clients naming it get
    /// `RegionNotFound`, those naming the neighbour `EpochNotMatch`).
    pub fn merge(&self, key: &[u8]) -> Result<(), LayoutError> {
        self.state.layout.merge(key)
    }

    /// Moves region `id`'s leader to `store` (requests to the old leader get `NotLeader`).
    pub fn transfer_leader(&self, id: u64, store: u64) -> Result<(), LayoutError> {
        self.state.layout.transfer_leader(id, store)
    }

    /// Per key written since start, the kinds of write it received (empty unless
    /// [`ServerConfig::record_writes`]).
    pub fn write_kinds(&self) -> std::collections::BTreeMap<Vec<u8>, WriteKinds> {
        self.state.writes.snapshot()
    }

    /// Stops every CAS between its read and its write (its latch held) until the hold is
    /// dropped: for tests of what plain and atomic writes do meanwhile.
    pub fn hold_cas(&self) -> CasHold {
        self.state.latches.hold()
    }

    /// The RPCs served so far, by method, and the keys scans read.
    pub fn rpc_counts(&self) -> RpcCounts {
        self.state.rpc_counts()
    }

    /// How the split checks that came due went: counted by a scan, or skipped on the
    /// region's size bound.
    pub fn split_checks(&self) -> SplitChecks {
        self.state.split_checks()
    }

    /// How many faults were injected so far, by kind.
    pub fn fault_counts(&self) -> FaultCounts {
        self.state.fault_counts()
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address clients use, i.e. the PD endpoint to give `tikv-client`.
    pub fn endpoint(&self) -> String {
        self.advertise.clone()
    }

    /// Stops accepting connections, ends open streams and waits (up to 5 s) for the server
    /// task to finish; connections still open after that are abandoned.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        for store in self.stores.drain(..) {
            let abort = store.abort_handle();
            if tokio::time::timeout(Duration::from_secs(5), store)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
        if let Some(task) = self.task.take() {
            let abort = task.abort_handle();
            match tokio::time::timeout(Duration::from_secs(5), task).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => tracing::warn!(error = %e, "minitikv server ended with an error"),
                Ok(Err(e)) => tracing::warn!(error = %e, "minitikv server task failed"),
                Err(_) => {
                    tracing::warn!("minitikv server did not stop within 5 s; aborting it");
                    abort.abort();
                }
            }
        }
    }

    /// Waits until the server stops (it runs until shut down or a fatal error).
    pub async fn wait(mut self) -> Result<(), ServerError> {
        match self.task.take() {
            Some(task) => match task.await {
                Ok(result) => result.map_err(ServerError::Serve),
                Err(e) => {
                    tracing::error!(error = %e, "minitikv server task failed");
                    Ok(())
                }
            },
            None => Ok(()),
        }
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// Opens the store named by `config.data` and starts serving on the current tokio runtime.
pub async fn start(config: ServerConfig) -> Result<RunningServer, ServerError> {
    let store: Arc<dyn RawKv> = match &config.data {
        // Transaction data: the transaction layout's key split, as before it was injected.
        Some(dir) => Arc::new(percolator::txn::open_embedded(
            dir,
            EmbeddedOptions {
                durability: config.durability,
                ..config.embedded_options.clone().unwrap_or_default()
            },
        )?),
        None => Arc::new(MemoryKv::new()),
    };
    start_with_store(store, config).await
}

async fn bind(listen: SocketAddr) -> Result<(TcpListener, SocketAddr, String), ServerError> {
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|source| ServerError::Bind {
            addr: listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| ServerError::Bind {
        addr: listen,
        source,
    })?;
    let mut shown = addr;
    if shown.ip().is_unspecified() {
        shown.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    Ok((listener, addr, shown.to_string()))
}

/// Starts serving `store` as `config` says (its `data` is ignored) on the current runtime.
pub async fn start_with_store(
    store: Arc<dyn RawKv>,
    config: ServerConfig,
) -> Result<RunningServer, ServerError> {
    let (listener, addr, shown) = bind(config.listen).await?;
    let advertise = config.advertise.clone().unwrap_or(shown);
    let stores = config.stores.max(1) as u64;
    let mut extra = Vec::new();
    let mut addrs = vec![advertise.clone()];
    for _ in 1..stores {
        let listen = SocketAddr::new(config.listen.ip(), 0);
        let (listener, _, shown) = bind(listen).await?;
        addrs.push(shown);
        extra.push(listener);
    }
    let (stop, stopped) = watch::channel(false);
    let state = Arc::new(service::State::new(
        store,
        advertise.clone(),
        stopped.clone(),
        cluster::Layout::new(&config.split_keys, stores),
        service::StateOptions {
            faults: config.faults.clone(),
            limits: config.limits,
            split: config.split,
            record_writes: config.record_writes,
        },
    ));
    state.set_store_addrs(addrs);
    let mut store_tasks = Vec::new();
    for (i, listener) in extra.into_iter().enumerate() {
        let service = service::StoreService {
            state: state.clone(),
            id: i as u64 + 2,
        };
        store_tasks.push(tokio::spawn(serve(
            listener,
            None,
            service,
            stopped.clone(),
        )));
    }
    if let Some(churn) = config.churn.clone() {
        tokio::spawn(churn::churn_task(state.clone(), churn, stopped.clone()));
    }
    let pd = proto::pd::PdServer::new(state.clone())
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let first = service::StoreService {
        state: state.clone(),
        id: STORE_ID,
    };
    let server = serve(listener, Some(pd), first, stopped);
    tracing::info!(%addr, %advertise, stores, regions = state.layout.len(), faults = ?config.faults, "minitikv serving PD and TiKV raw RPCs");
    let task = tokio::spawn(server);
    Ok(RunningServer {
        addr,
        advertise,
        stop,
        task: Some(task),
        stores: store_tasks,
        state,
    })
}

/// Serves one store's TiKV RPCs (and PD's, on the first store) until `stopped`.
async fn serve(
    listener: TcpListener,
    pd: Option<proto::pd::PdServer<Arc<service::State>>>,
    store: service::StoreService,
    stopped: watch::Receiver<bool>,
) -> Result<(), tonic::transport::Error> {
    let tikv = proto::tikv::tikv_server::TikvServer::new(store)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let incoming = futures::stream::unfold(listener, |listener| async move {
        let conn = listener.accept().await.map(|(stream, _)| {
            let _ = stream.set_nodelay(true);
            stream
        });
        Some((conn, listener))
    });
    let mut stopped_signal = stopped;
    let shutdown = async move {
        while !*stopped_signal.borrow() {
            if stopped_signal.changed().await.is_err() {
                break;
            }
        }
    };
    tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .add_optional_service(pd)
        .add_service(tikv)
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}
