//! Opening the store (and a transaction client on it) that a binary's `--store` names.
//!
//! Only binaries (and their tests) open stores from a spec; libraries take an open
//! `Arc<dyn RawKv>` or [`Client`].

use crate::StoreSpec;
use percolator::codec::TableIds;
use percolator::kv::{Durability, EmbeddedOptions, KvError, MemoryKv, RawKv};
use percolator::txn::{declare_table_ids, stored_table_ids};
use percolator::{Client, ClientConfig, TimestampSource};
use percolator_tikv::{AtomicKeys, TikvConfig, TikvKv};
use std::sync::Arc;

/// Errors of [`open_client`] and [`open_client_on`]. Each message already includes its cause
/// (the messages the binaries have always printed), so the cause is not chained again.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The store could not be opened.
    #[error("opening store {spec}: {error}")]
    Store {
        /// The store.
        spec: StoreSpec,
        /// Why.
        error: KvError,
    },
    /// A shared (TiKV) store was given without the oracle service.
    #[error(
        "--store {spec} is shared by several processes: give the shared oracle service \
         with --oracle ADDR[,ADDR...] (`oracle serve --store {spec}`); the in-process \
         oracle is only for embedded and memory stores"
    )]
    SharedStoreNeedsOracle {
        /// The store.
        spec: StoreSpec,
    },
    /// The oracle client could not be set up.
    #[error("oracle client for {addrs:?}: {error}")]
    OracleClient {
        /// The oracle addresses.
        addrs: Vec<String>,
        /// Why.
        error: oracle::ClientError,
    },
    /// An environment variable of a client knob holds no valid value.
    #[error("environment variable {var}: {message}")]
    BadKnob {
        /// The variable.
        var: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The in-process oracle could not be started on the store.
    #[error("starting the in-process oracle: {0}")]
    LocalOracle(oracle::OracleError),
    /// A command that only uses an existing store (`percolator-ctl`, `photon verify`) was
    /// given an embedded store's path that holds none ([`open_existing_client`]): a mistyped
    /// path, which opening would have created.
    #[error(
        "no store at {}: the directory does not hold an embedded store (a mistyped path?); \
         this command reads an existing store and does not create one",
        path.display()
    )]
    NoStore {
        /// The path given.
        path: std::path::PathBuf,
    },
    /// The namespace's table ids could not be read, or refused the declared ones.
    #[error("namespace {namespace}: {error}")]
    TableIds {
        /// The namespace.
        namespace: String,
        /// Why.
        error: percolator::TxnError,
    },
}

/// Environment variable giving [`TikvConfig::cas_concurrency`] to every binary that opens a
/// TiKV store (default [`percolator_tikv::DEFAULT_CAS_CONCURRENCY`]): how many single CASes
/// of one batch are in flight at once. Raise it on a cluster with slow Raft commits, lower it
/// to spare a small test server.
pub const CAS_CONCURRENCY_ENV: &str = "PERCOLATOR_TIKV_CAS_CONCURRENCY";

/// The adapter settings binaries open `tikv:PD,...` with: the atomic keys derived from the key
/// codec ([`AtomicKeys::PercolatorLayout`]: heads, meta and write-once records of every namespace go
/// through the atomic client, versions, data and notify keys through the plain one) and
/// `cas_concurrency` from [`CAS_CONCURRENCY_ENV`] if set (a positive integer), else from the
/// configuration file's `[tikv]` table ([`crate::config::store_knobs`]).
pub fn binary_tikv_config(endpoints: Vec<String>) -> Result<TikvConfig, KvError> {
    let mut config = TikvConfig::new(endpoints);
    config.atomic_keys = AtomicKeys::PercolatorLayout;
    if let Some(n) = cas_concurrency_from(std::env::var_os(CAS_CONCURRENCY_ENV))? {
        config.cas_concurrency = n;
    } else if let Some(n) = crate::config::store_knobs().cas_concurrency {
        config.cas_concurrency = n;
    }
    tracing::debug!(cas_concurrency = config.cas_concurrency, atomic_keys = ?config.atomic_keys, "TiKV adapter settings");
    Ok(config)
}

/// Environment variable of the clients' budget of remembered commits, in MiB
/// (`percolator::ClientConfig::recent_writes_bytes`; 0: none), over the configuration
/// file's `[client] recent_writes_mb`.
pub const RECENT_WRITES_MB_ENV: &str = "PERCOLATOR_CLIENT_RECENT_WRITES_MB";

/// The clients' budget of remembered commits in bytes, from [`RECENT_WRITES_MB_ENV`], else
/// the configuration file's `[client] recent_writes_mb`, else `None` (the default).
fn recent_writes_bytes() -> Result<Option<u64>, OpenError> {
    recent_writes_from(
        std::env::var_os(RECENT_WRITES_MB_ENV),
        crate::config::store_knobs().recent_writes_mb,
    )
}

/// [`recent_writes_bytes`] from the variable's value `raw` and the file's `file_mb`.
fn recent_writes_from(
    raw: Option<std::ffi::OsString>,
    file_mb: Option<u64>,
) -> Result<Option<u64>, OpenError> {
    let mb = match raw {
        Some(raw) => Some(
            raw.to_str()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .ok_or_else(|| OpenError::BadKnob {
                    var: RECENT_WRITES_MB_ENV,
                    message: format!("{raw:?}: expected a whole number of MiB (0: none)"),
                })?,
        ),
        None => file_mb,
    };
    Ok(mb.map(|mb| mb.saturating_mul(1024 * 1024)))
}

/// The value of [`CAS_CONCURRENCY_ENV`], if set: a positive integer, else `InvalidArgument`.
fn cas_concurrency_from(raw: Option<std::ffi::OsString>) -> Result<Option<usize>, KvError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    raw.to_str()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .filter(|n| *n > 0)
        .map(Some)
        .ok_or_else(|| KvError::InvalidArgument {
            op: "open",
            message: format!("{CAS_CONCURRENCY_ENV}={raw:?}: expected a positive integer"),
        })
}

/// Opens any store named by a `--store` spec: an embedded store for transaction data
/// ([`percolator::txn::open_embedded`]: the layout's key split) acknowledging writes with
/// `durability` (the binaries' `--durability`) and its memory knobs from the environment
/// ([`EmbeddedOptions::from_env`]); a memory store (`durability` does not apply: nothing
/// survives the process); `tikv:PD,...` through [`TikvKv`] with the binaries'
/// settings ([`binary_tikv_config`]; `durability` does not apply: TiKV syncs its Raft log
/// itself).
pub async fn open_store(
    spec: &StoreSpec,
    durability: Durability,
) -> Result<Arc<dyn RawKv>, KvError> {
    open_store_with(spec, durability, |config| config).await
}

/// Like [`open_store`], with a hook that adjusts the TiKV configuration (timeouts, TLS,
/// atomic keys) before connecting; it is not called for local stores.
pub async fn open_store_with(
    spec: &StoreSpec,
    durability: Durability,
    configure: impl FnOnce(TikvConfig) -> TikvConfig,
) -> Result<Arc<dyn RawKv>, KvError> {
    match spec {
        StoreSpec::Tikv(endpoints) => {
            let config = configure(binary_tikv_config(endpoints.clone())?);
            Ok(Arc::new(TikvKv::connect(config).await?))
        }
        StoreSpec::Embedded(path) => Ok(Arc::new(open_embedded(path, durability)?)),
        StoreSpec::Memory => Ok(Arc::new(MemoryKv::new())),
    }
}

/// Opens the embedded store at `path` as every binary does ([`embedded_options`]), as
/// itself (for a caller that needs more than [`RawKv`], e.g. to close it its own way).
pub fn open_embedded(
    path: &std::path::Path,
    durability: Durability,
) -> Result<percolator::kv::EmbeddedKv, KvError> {
    percolator::txn::open_embedded(path, embedded_options(durability))
}

/// The embedded store's options: `durability`, and the memory knobs from the environment
/// ([`EmbeddedOptions::from_env`]), else from the configuration file's `[embedded]` table
/// ([`crate::config::store_knobs`]), else the defaults: what every binary opening an
/// embedded store uses (through [`open_store`], or directly, as minitikv's binary does).
pub fn embedded_options(durability: Durability) -> EmbeddedOptions {
    let mut options = EmbeddedOptions {
        durability,
        ..EmbeddedOptions::from_env()
    };
    let knobs = crate::config::store_knobs();
    let unset = |name: &str| std::env::var_os(name).is_none();
    if let (Some(mb), true) = (knobs.cache_mb, unset(percolator::kv::CACHE_MB_ENV)) {
        options.cache_bytes = mb * 1024 * 1024;
    }
    if let (Some(mb), true) = (
        knobs.write_buffer_mb,
        unset(percolator::kv::WRITE_BUFFER_MB_ENV),
    ) {
        options.write_buffer_bytes = mb * 1024 * 1024;
    }
    options
}

/// Opens the store (an embedded one with `durability`, see [`open_store`]) and a client on it
/// in `namespace`, with timestamps from the oracle service at `oracle_addrs` if given, else
/// from an in-process oracle persisted in the store ([`open_client_on`]). The client keys
/// tables by the namespace's table ids: `declared` ones, made the store's first
/// ([`percolator::txn::declare_table_ids`]: an application that declares its tables), or
/// else those the store holds (tools and other clients of the namespace).
///
/// A shared (TiKV) store needs the shared oracle service: an in-process oracle there would
/// hand out timestamps unrelated to the other processes' (their transactions could then see
/// each other out of order), so that is refused before anything is opened.
pub async fn open_client(
    spec: &StoreSpec,
    namespace: &str,
    oracle_addrs: &[String],
    durability: Durability,
    declared: Option<&TableIds>,
) -> Result<Client, OpenError> {
    if spec.is_shared() && oracle_addrs.is_empty() {
        return Err(OpenError::SharedStoreNeedsOracle { spec: spec.clone() });
    }
    let kv = open_store(spec, durability)
        .await
        .map_err(|error| OpenError::Store {
            spec: spec.clone(),
            error,
        })?;
    client_for_store(kv, namespace, oracle_addrs, declared).await
}

/// Ends a command's use of its store without tearing the store down, for a process about to
/// exit: syncs what the store acknowledged ([`RawKv::sync`]; an embedded store's teardown
/// would sync its journal too) and leaks `client`, so the store is never dropped. Dropping an
/// embedded store frees its memtables entry by entry, which the exit does at once: the end of
/// a 2,000,000-event `photon run` took 0.54 s after its summary line with the drop and 0.15 s
/// without. Nothing else is lost: every acknowledged write is in the journal already
/// (`percolator::design::kv`), and the directory's lock and the store's threads end with the
/// process. A failed sync is returned (the drop only logged it). Call it last, and never for
/// a store whose directory is removed before the exit (its threads may still write there);
/// any clone of `client` still in use keeps working until the exit.
pub async fn leave_open(client: Client) -> Result<(), KvError> {
    let synced = client.store().sync().await;
    std::mem::forget(client);
    synced
}

/// Refuses an embedded store's path that holds no store (a directory the embedded backend
/// opened holds its `fjall/` engine directory: `percolator::kv::EmbeddedKv`'s layout), so
/// that a command meant for an existing store does not create one at a mistyped path.
/// Memory and TiKV stores pass (a memory store is always new, TiKV's clusters exist apart).
pub fn require_existing(spec: &StoreSpec) -> Result<(), OpenError> {
    match spec {
        StoreSpec::Embedded(path) if !path.join("fjall").is_dir() => {
            Err(OpenError::NoStore { path: path.clone() })
        }
        _ => Ok(()),
    }
}

/// [`open_client`] for a command that reads or operates an existing store: refuses an
/// embedded path that holds no store ([`require_existing`]) instead of creating one.
pub async fn open_existing_client(
    spec: &StoreSpec,
    namespace: &str,
    oracle_addrs: &[String],
    durability: Durability,
    declared: Option<&TableIds>,
) -> Result<Client, OpenError> {
    require_existing(spec)?;
    open_client(spec, namespace, oracle_addrs, durability, declared).await
}

/// A client on an opened store `kv` (see [`open_client`]; a caller that wraps the store,
/// e.g. to count its calls, opens it with [`open_store`] and comes here).
pub async fn client_for_store(
    kv: Arc<dyn RawKv>,
    namespace: &str,
    oracle_addrs: &[String],
    declared: Option<&TableIds>,
) -> Result<Client, OpenError> {
    if oracle_addrs.is_empty() {
        return open_client_on(kv, namespace, declared).await;
    }
    let config = client_config(kv.as_ref(), namespace, declared).await?;
    let client = oracle::OracleClient::new(oracle_addrs.to_vec(), oracle::ClientConfig::default())
        .map_err(|error| OpenError::OracleClient {
            addrs: oracle_addrs.to_vec(),
            error,
        })?;
    let ts: Arc<dyn TimestampSource> = Arc::new(client);
    Ok(Client::with_config(kv, ts, config))
}

/// A client in `namespace` on an already-open store, with the in-process oracle persisted in
/// it (namespace `{namespace}-oracle`): one process per store. Table ids as in
/// [`open_client`].
pub async fn open_client_on(
    kv: Arc<dyn RawKv>,
    namespace: &str,
    declared: Option<&TableIds>,
) -> Result<Client, OpenError> {
    let config = client_config(kv.as_ref(), namespace, declared).await?;
    let options = oracle::WindowOptions {
        namespace: format!("{namespace}-oracle"),
        ..oracle::WindowOptions::default()
    };
    let ts = oracle::LocalOracle::open(kv.clone(), options)
        .await
        .map_err(OpenError::LocalOracle)?;
    Ok(Client::with_config(kv, Arc::new(ts), config))
}

/// The configuration of a client of `namespace` on `kv`: the `declared` table ids once the
/// store holds them, else the store's.
async fn client_config(
    kv: &dyn RawKv,
    namespace: &str,
    declared: Option<&TableIds>,
) -> Result<ClientConfig, OpenError> {
    let ids = match declared {
        Some(declared) => declare_table_ids(kv, namespace.as_bytes(), declared).await,
        None => stored_table_ids(kv, namespace.as_bytes()).await,
    };
    let table_ids = ids.map_err(|error| OpenError::TableIds {
        namespace: namespace.to_string(),
        error,
    })?;
    let defaults = ClientConfig::with_namespace(namespace);
    Ok(ClientConfig {
        table_ids,
        recent_writes_bytes: recent_writes_bytes()?.unwrap_or(defaults.recent_writes_bytes),
        ..defaults
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn local_specs_open_without_tikv() {
        let kv = open_store(&StoreSpec::Memory, Durability::Process)
            .await
            .expect("memory store");
        kv.put(b"k".to_vec(), b"v".to_vec()).await.expect("put");
        assert_eq!(kv.get(b"k").await.expect("get"), Some(b"v".to_vec()));
    }

    #[test]
    fn the_recent_writes_budget_comes_from_the_variable_then_the_file() {
        assert_eq!(recent_writes_from(None, None).expect("unset"), None);
        assert_eq!(
            recent_writes_from(None, Some(8)).expect("file"),
            Some(8 << 20)
        );
        assert_eq!(
            recent_writes_from(Some("0".into()), Some(8)).expect("variable"),
            Some(0)
        );
        assert!(matches!(
            recent_writes_from(Some("lots".into()), None),
            Err(OpenError::BadKnob { .. })
        ));
    }

    #[test]
    fn the_binaries_derive_atomic_keys_from_the_codec_and_read_the_cas_window() {
        let config = binary_tikv_config(vec!["127.0.0.1:1".into()]).expect("config");
        assert!(matches!(config.atomic_keys, AtomicKeys::PercolatorLayout));
        assert_eq!(cas_concurrency_from(None).expect("unset"), None);
        assert_eq!(
            cas_concurrency_from(Some("128".into())).expect("set"),
            Some(128)
        );
        for bad in ["0", "-1", "many", ""] {
            assert!(
                cas_concurrency_from(Some(bad.into())).is_err(),
                "{bad:?} accepted"
            );
        }
    }

    #[tokio::test]
    async fn an_existing_store_is_required_where_asked_and_not_created() {
        let dir = tempfile::tempdir().expect("dir");
        let typo = dir.path().join("photon-dta");
        let spec = StoreSpec::Embedded(typo.clone());
        match open_existing_client(&spec, "app", &[], Durability::Process, None).await {
            Err(OpenError::NoStore { path }) => assert_eq!(path, typo),
            Err(other) => panic!("expected NoStore, got {other}"),
            Ok(_) => panic!("expected NoStore, got a client"),
        }
        assert!(!typo.exists(), "nothing created at the mistyped path");
        let real = StoreSpec::Embedded(dir.path().join("store"));
        drop(
            open_store(&real, Durability::Process)
                .await
                .expect("created"),
        );
        require_existing(&real).expect("an existing store passes");
        require_existing(&StoreSpec::Memory).expect("memory passes");
    }

    #[tokio::test]
    async fn a_shared_store_without_the_oracle_service_is_refused() {
        let spec: StoreSpec = "tikv:127.0.0.1:1".parse().expect("spec");
        match open_client(&spec, "app", &[], Durability::Process, None).await {
            Err(OpenError::SharedStoreNeedsOracle { .. }) => {}
            Err(other) => panic!("expected SharedStoreNeedsOracle, got {other}"),
            Ok(_) => panic!("expected SharedStoreNeedsOracle, got a client"),
        }
    }
}
