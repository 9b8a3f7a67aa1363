//! Photon keys its tables by ids recorded in the store: the binaries write the map on first
//! open and key every cell by it; a client that takes the store's map sees the cells and one
//! keyed by names does not; and a store whose tables were written by name (a build before
//! table ids) is refused with a clear error, not misread.

use percolator::kv::RawKv;
use percolator::{Cell, Client, ClientConfig};
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod common;
use common::photon;

/// `photon gen --queries QUERIES` into `DIR/logs`; returns the logs' directory, the store's
/// path `DIR/store` and its `--store` spec.
fn logs_and_store(dir: &Path, queries: &str) -> (PathBuf, PathBuf, String) {
    let logs = dir.join("logs");
    let store = dir.join("store");
    let spec = format!("embedded:{}", store.display());
    let gen = photon(&["gen", "--out", logs.to_str().unwrap(), "--queries", queries]);
    assert!(gen.status.success(), "{gen:?}");
    (logs, store, spec)
}

fn open(path: &Path) -> Arc<dyn RawKv> {
    Arc::new(percolator::txn::open_embedded(path, Default::default()).expect("store"))
}

#[tokio::test]
async fn photon_keys_its_tables_by_the_stores_ids() {
    let dir = tempfile::tempdir().unwrap();
    let (logs, store, spec) = logs_and_store(dir.path(), "200");
    let load = photon(&["load", "--store", &spec, logs.to_str().unwrap()]);
    assert!(load.status.success(), "{load:?}");

    let kv = open(&store);
    let stored = percolator::txn::stored_table_ids(kv.as_ref(), b"photon")
        .await
        .expect("read");
    assert_eq!(
        stored,
        photon::schema::table_ids(),
        "the binary wrote its map"
    );
    let with_ids = percolator_cli::store::open_client_on(kv.clone(), "photon", None)
        .await
        .expect("client");
    let by_name = Client::with_config(
        kv.clone(),
        with_ids.oracle().clone(),
        ClientConfig::with_namespace("photon"),
    );
    let txn = with_ids.begin().await.expect("begin");
    let queries = txn.scan(b"queries", b"", None).await.expect("scan");
    assert!(queries.len() > 150, "{} queries", queries.len());
    let txn = by_name.begin().await.expect("begin");
    let queries = txn.scan(b"queries", b"", None).await.expect("scan");
    assert!(queries.is_empty(), "no query is keyed by the table's name");
}

/// Runs `body` on a runtime of its own, dropped before returning: the tasks it spawned (a
/// commit's heartbeat, the oracle's) let go of the store with it.
fn on_own_runtime<F: std::future::Future>(body: F) -> F::Output {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(body)
}

#[test]
fn a_store_written_by_name_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let (logs, store, spec) = logs_and_store(dir.path(), "20");
    on_own_runtime(async {
        // A build before table ids: clicks keyed by their table's name.
        let client = Client::with_config(
            open(&store),
            Arc::new(percolator::ts::LocalClock::new()),
            ClientConfig::with_namespace("photon"),
        );
        let txn = client.begin().await.expect("begin");
        txn.set(Cell::new("clicks", "c1", "event"), b"{}".to_vec());
        txn.commit().await.expect("commit");
    });
    for verb in ["verify", "load"] {
        let out = photon(&[verb, "--store", &spec, logs.to_str().unwrap()]);
        assert!(!out.status.success(), "{verb} on a store written by name");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("table clicks holds cells keyed by its name"),
            "{verb}: {stderr}"
        );
    }
    let stored = on_own_runtime(async {
        percolator::txn::stored_table_ids(open(&store).as_ref(), b"photon").await
    });
    assert!(stored.expect("read").is_empty(), "nothing was written");
}
