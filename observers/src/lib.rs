//! Observers: code that runs in its own transaction when a cell it watches changes.
//!
//! The author's guide, on strong and weak observers, side effects, chains, idempotent
//! exports, dead letters and testing: [`guide`] (`docs/observers.md` in the repository).
//! A test harness: [`testing::Harness`].
//!
//! A write to an observed column puts a notify key before the writer's commit point (so no
//! committed change can lose its notification). [`Worker`]s scan the notify space, find the
//! writer's fate through its primary, and run the observer in a fresh transaction that also
//! reads and writes the observer's acknowledgment column: at most one run commits per change.
//! An observer's dirty cells found together are handed to it in batches, one transaction per
//! batch ([`Observer::observe_batch`], [`WorkerConfig::batch_size`]); a strong observer's
//! carry an acknowledgment per cell, so the guarantee holds per cell.
//!
//! Operators: [`admin`] reads the state of an application from any process (workers,
//! backlog, dead letters, locks, cells, drain); [`renotify`] queues notifications for the
//! existing cells of a column, so an observer added after they were written processes them.
//!
//! ```no_run
//! use observers::{observer_fn, Registry, Worker, WorkerConfig};
//! use percolator::kv::MemoryKv;
//! use percolator::ts::LocalClock;
//! use percolator::{Cell, Client};
//! use std::sync::Arc;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let client = Client::new(Arc::new(MemoryKv::new()), Arc::new(LocalClock::new()));
//! let mut registry = Registry::new();
//! // Whenever docs/<row>/body changes, store its length in docs/<row>/len.
//! registry.strong("docs", "body", "length", observer_fn(|txn, cell: Cell| async move {
//!     let body = txn.get(&cell).await?.unwrap_or_default();
//!     txn.set(Cell::new("docs", &cell.row, "len"), body.len().to_string());
//!     Ok(())
//! }))?;
//! let worker = Worker::start(client.clone(), Arc::new(registry), WorkerConfig::default());
//!
//! let txn = client.begin().await?;
//! txn.set(Cell::new("docs", "a", "body"), "hello");
//! txn.commit().await?;
//! worker.wait_until_quiescent().await?;
//! worker.shutdown().await;
//! # Ok(()) }
//! ```

pub mod admin;
mod deadletter;
pub mod design;
mod error;
mod lane;
#[doc = include_str!("../../docs/observers.md")]
pub mod guide {}
mod metrics;
mod process;
mod registry;
pub mod relay;
pub mod renotify;
pub mod telemetry;
pub mod testing;
pub mod time;
mod worker;

pub use deadletter::DeadLetter;
pub use error::{ObserverError, WorkerError};
pub use metrics::{Metrics, MetricsSnapshot};
pub use registry::{observer_fn, observer_fn_with, Observer, ObserverKind, Registry};
pub use relay::{HintListener, HintRelay};
pub use worker::{Worker, WorkerConfig, BURST_RUNS, DEFAULT_FOLLOW_MS, QUIESCENCE_RETRY_FOR};
