//! Helpers shared by the transaction test files.
#![allow(dead_code)]

use percolator::kv::{EmbeddedKv, MemoryKv, RawKv};
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

pub fn client_on(kv: Arc<dyn RawKv>, config: ClientConfig) -> Client {
    Client::with_config(kv, Arc::new(LocalClock::new()), config)
}

pub fn memory_client() -> Client {
    client_on(Arc::new(MemoryKv::new()), test_config())
}

pub fn embedded_client() -> (tempfile::TempDir, Client) {
    let dir = tempfile::tempdir().expect("temp dir");
    let kv = EmbeddedKv::open(dir.path()).expect("open embedded store");
    (dir, client_on(Arc::new(kv), test_config()))
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
