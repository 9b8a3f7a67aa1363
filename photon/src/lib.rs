//! Photon: joins ad clicks with the search queries that produced them, exactly once, over
//! Percolator transactions (DESIGN §6). Loaders write query and click logs into tables; join
//! observers register each click in the IdRegistry and write the joined event in one
//! transaction; redundant pipelines may run at once.

pub mod event;
pub mod gen;
pub mod join;
pub mod load;
pub mod metrics_http;
pub mod schema;
pub mod timeline;
pub mod verify;

use percolator::kv::StoreSpec;
use percolator::{Client, ClientConfig, TimestampSource};
use std::sync::Arc;

/// Opens the store and a timestamp source: the oracle service at `oracle` addresses if
/// given, else an in-process oracle persisted in the store (single process per store).
pub async fn open_client(
    store: &StoreSpec,
    namespace: &str,
    oracle: &[String],
) -> anyhow::Result<Client> {
    let kv = percolator_tikv::open_store(store)
        .await
        .map_err(|e| anyhow::anyhow!("opening store {store}: {e}"))?;
    if oracle.is_empty() {
        return open_client_on(kv, namespace).await;
    }
    let ts: Arc<dyn TimestampSource> = Arc::new(
        oracle::OracleClient::new(oracle.to_vec(), oracle::ClientConfig::default())
            .map_err(|e| anyhow::anyhow!("oracle client for {oracle:?}: {e}"))?,
    );
    Ok(Client::with_config(
        kv,
        ts,
        ClientConfig::with_namespace(namespace),
    ))
}

/// A client on an already-open store with the in-process oracle (tests, tools).
pub async fn open_client_on(
    kv: Arc<dyn percolator::RawKv>,
    namespace: &str,
) -> anyhow::Result<Client> {
    let options = oracle::WindowOptions {
        namespace: format!("{namespace}-oracle"),
        ..oracle::WindowOptions::default()
    };
    let ts = oracle::LocalOracle::open(kv.clone(), options)
        .await
        .map_err(|e| anyhow::anyhow!("starting the in-process oracle: {e}"))?;
    Ok(Client::with_config(
        kv,
        Arc::new(ts),
        ClientConfig::with_namespace(namespace),
    ))
}
