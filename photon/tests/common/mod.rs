//! Set-up shared by photon's test binaries: a client on a raw store with short
//! transaction lifetimes, and a worker configuration that finds work quickly.
#![allow(dead_code)] // each test binary uses its own subset

use observers::WorkerConfig;
use percolator::kv::RawKv;
use percolator::ts::LocalClock;
use percolator::{Client, ClientConfig};
use std::sync::Arc;
use std::time::Duration;

/// A client of namespace `photon` on `kv` with a local clock, a 300 ms lock TTL, and the
/// given transaction lifetime and GC lag.
pub fn client_living(kv: Arc<dyn RawKv>, max_lifetime: Duration, gc_lag: Duration) -> Client {
    let config = ClientConfig {
        lock_ttl: Duration::from_millis(300),
        max_lifetime,
        gc_lag,
        ..ClientConfig::with_namespace("photon")
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
