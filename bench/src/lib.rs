//! Benchmarks of percolator-rs; this library holds what the benches share.
//!
//! - `cargo bench -p percolator-bench --bench kv`: raw store baselines (get, put,
//!   compare-and-swap) on each backend (`memory`, `embedded`, `tikv` through an in-process
//!   minitikv).
//! - `cargo bench -p percolator-bench --bench txn`: transactional throughput against the raw
//!   store it runs on (read and write ratios, ten-cell transactions, abort rate on a hot key,
//!   raw store calls per transaction).
//!
//! See each bench's module documentation for its environment variables and output.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The seconds each measured cell runs: the environment variable `var`, else 1.
pub fn secs_from_env(var: &str) -> f64 {
    std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0)
}

/// The clients' runtime: a worker thread per core.
pub fn client_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("client runtime")
}

/// Sets `stop` after `secs` seconds, timed on a plain thread: busy tasks cannot delay it.
pub fn stop_after(secs: f64, stop: &Arc<AtomicBool>) {
    let stop = stop.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs_f64(secs));
        stop.store(true, Ordering::Relaxed);
    });
}

/// Starts a minitikv on an embedded store in `dir`, on its own runtime (its own worker
/// threads), as a separate process would be. Keep the runtime as long as the server runs.
pub fn start_minitikv(dir: &std::path::Path) -> (tokio::runtime::Runtime, minitikv::RunningServer) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("server runtime");
    let server = runtime
        .block_on(minitikv::start(minitikv::ServerConfig::embedded(dir)))
        .expect("start minitikv");
    (runtime, server)
}
