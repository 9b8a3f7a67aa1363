//! minitikv: a single-node stand-in for a TiKV cluster, for tests, demos and benchmarks.
//!
//! One gRPC server answers both the PD calls `tikv-client` 0.4.0 makes (`GetMembers`, the
//! `Tso` stream, `GetRegion`, `GetRegionByID`, `GetStore`, `GetAllStores`, GC safe point) and
//! the TiKV raw-mode RPCs (`RawGet`, `RawBatchGet`, `RawPut`, `RawBatchPut`, `RawDelete`,
//! `RawBatchDelete`, `RawScan` forward/reverse/key-only, `RawBatchScan`, `RawDeleteRange`,
//! `RawCompareAndSwap`). Data lives in a [`percolator::kv::RawKv`] store: the embedded
//! (fjall) store for `--data DIR`, memory otherwise.
//!
//! The cluster has exactly one region covering the whole key space (empty start and end
//! keys), as a fresh TiKV cluster does, so client behaviour at "the last region" is exercised
//! rather than hidden. Requests naming another region, epoch or store get TiKV's region
//! errors. Every other gRPC method answers `UNIMPLEMENTED`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), minitikv::ServerError> {
//! let server = minitikv::start(minitikv::ServerConfig::in_memory()).await?;
//! println!("PD and TiKV at {}", server.addr());
//! server.shutdown().await;
//! # Ok(()) }
//! ```

mod service;

use percolator::kv::{EmbeddedKv, KvError, MemoryKv, RawKv};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use service::{CLUSTER_ID, PEER_ID, REGION_ID, STORE_ID};

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
}

impl ServerConfig {
    /// An in-memory server on 127.0.0.1 with an ephemeral port.
    pub fn in_memory() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            advertise: None,
            data: None,
        }
    }

    /// A persistent server on 127.0.0.1 with an ephemeral port, storing data in `dir`.
    pub fn embedded(dir: impl Into<PathBuf>) -> Self {
        ServerConfig {
            data: Some(dir.into()),
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
}

impl RunningServer {
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
        Some(dir) => Arc::new(EmbeddedKv::open(dir)?),
        None => Arc::new(MemoryKv::new()),
    };
    start_with_store(store, config.listen, config.advertise).await
}

/// Starts serving `store` on `listen` (port 0: an ephemeral port) on the current runtime.
pub async fn start_with_store(
    store: Arc<dyn RawKv>,
    listen: SocketAddr,
    advertise: Option<String>,
) -> Result<RunningServer, ServerError> {
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
    let advertise = advertise.unwrap_or_else(|| {
        let mut shown = addr;
        if shown.ip().is_unspecified() {
            shown.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        shown.to_string()
    });
    let (stop, stopped) = watch::channel(false);
    let state = Arc::new(service::State::new(
        store,
        advertise.clone(),
        stopped.clone(),
    ));
    let pd = proto::pd::PdServer::new(state.clone())
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let tikv = proto::tikv::tikv_server::TikvServer::new(state)
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
    let server = tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .add_service(pd)
        .add_service(tikv)
        .serve_with_incoming_shutdown(incoming, shutdown);
    tracing::info!(%addr, %advertise, "minitikv serving PD and TiKV raw RPCs");
    let task = tokio::spawn(server);
    Ok(RunningServer {
        addr,
        advertise,
        stop,
        task: Some(task),
    })
}
