//! A deterministic simulation of the whole system (issue 40): one seed drives one run of
//! several client processes (each a `percolator::Client` and an `observers::Worker` with
//! its workload) on one in-memory store behind a seeded fault layer and a simulated oracle
//! with takeovers and skewed host clocks, on one current-thread Tokio runtime with paused
//! time. Processes crash at any await point and restart with empty memory; checkers look
//! for snapshot-isolation violations, lost or repeated observer runs, dead letters and lost
//! writes. A failing seed replays exactly (`percolator-sim replay SEED`).
//!
//! Why a hand-rolled harness on real Tokio rather than madsim or turmoil: the system's
//! seams are in-process traits (`RawKv`, `TimestampSource`, the wall clock, the random
//! source), so there is no network to simulate; madsim would swap the whole dependency
//! graph under a cfg, turmoil's value is its TCP simulation. See `docs/testing.md`.
//!
//! Modules, one concern each: [`rng`] (the seed's generator), [`trace`] (the run's hash),
//! [`faults`], [`store`] (the fault layer), [`clock`], [`oracle`], [`schema`] and [`app`]
//! (the simulated application), [`workload`] (its actors), [`revisions`] (write-once
//! cells written again and again), [`timed`] (event time),
//! [`photon`] (photon's join, its loaders, maintenance and check), [`drain`] (the drain
//! check asked while the liveness phase drains), [`model`] (what the harness knows), [`world`] (one seed), [`check`] (final checks), [`report`], [`runner`] (many
//! seeds), [`planted`] (the planted bugs' search).

pub mod app;
pub mod check;
pub mod clock;
pub mod drain;
pub mod error;
pub mod faults;
pub mod model;
pub mod network;
pub mod oracle;
pub mod photon;
#[cfg(feature = "planted")]
pub mod planted;
pub mod report;
pub mod revisions;
pub mod rng;
pub mod runner;
pub mod schema;
pub mod store;
pub mod timed;
pub mod trace;
pub mod workload;
pub mod world;

pub use error::SimError;
pub use report::{SeedReport, Stats};
pub use world::{run_seed, RunOptions};
