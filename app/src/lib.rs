//! The application layer over [`observers`]: what every observer application needs besides
//! its observers, so that a second application is an observer registry plus a mapping of
//! its input to cells, not a copy of Photon.
//!
//! - [`load`]: loader jobs for any table: a [`load::Source`] of batches with opaque offsets,
//!   each committed with the batch's cells (a restarted or duplicated loader writes each
//!   record once), backpressure on the notification backlog, a rejects report, transient
//!   error retry, and the line-file source ([`load::lines`], JSON lines in [`load::json`]).
//! - [`pipeline`]: a pipeline's worker, periodic tasks beside it.
//! - [`drain`]: waiting until the input is loaded and the observers are done (`--until-drained`).
//! - [`run`]: a directory loaded while this process's workers run, until a signal or drained.
//! - [`gc`]: version GC on a schedule, one process at a time (a lease).
//! - [`metrics`]: the Prometheus registry, endpoint and loader and GC families; [`progress`] and [`human`]: what a person
//!   watching sees.
//!
//! Dependencies point down: this crate depends on `percolator`, `observers` and
//! `percolator-metrics` only.

pub mod drain;
pub mod gc;
pub mod human;
pub mod load;
pub mod metrics;
pub mod pipeline;
pub mod progress;
pub mod run;
