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
