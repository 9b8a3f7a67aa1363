//! Benchmarks of percolator-rs; this library is empty (Cargo needs a target besides benches).
//!
//! - `cargo bench -p percolator-bench --bench kv`: raw store baselines (get, put,
//!   compare-and-swap) on each backend (`memory`, `embedded`, `tikv` through an in-process
//!   minitikv).
//! - `cargo bench -p percolator-bench --bench txn`: transactional throughput against the raw
//!   store it runs on (read and write ratios, ten-cell transactions, abort rate on a hot key,
//!   raw store calls per transaction).
//!
//! See each bench's module documentation for its environment variables and output.
