//! Design notes of Photon: the join, why it is exactly once, and how its spaces stay bounded.
//!
//! The click-query join of Google's Photon on observers: loaders write query and click events,
//! the click observer joins each click with its query exactly once, with the IdRegistry as a
//! transactional table (so output and registry change atomically: Photon's "registered but
//! never written" loss cannot happen). Tables, all in one namespace:
//!
//! | table / cell | what it holds |
//! |---|---|
//! | `queries/<query_id>/event` | a query (not observed; its row's `wake` cell is only notified) |
//! | `clicks/<click_id>/event` | a click (observed by the click join) |
//! | `wakechecks/<file>@<offset>/queries` | the query ids of one loaded batch (observed) |
//! | `idregistry/id/<click_id>/token`, `idregistry/day/<day:08>/<click_id>/entry` | the IdRegistry: one entry per click id, and its index by event day for GC |
//! | `joined/<click_id>/<token>` | the output |
//! | `pending/<query_id>/clicks` | clicks parked on a query that has not arrived |
//! | `parked/<bucket:012>/<query_id>/<click_id>` | the index of parked clicks by due second |
//! | per-click outcomes, loader offsets, `control/...` | `too_old`, `filtered`, `waiting`, `expired:<secs>`; one offset cell per log; the IdRegistry boundary, the sweep's cursor, the GC lease |
//!
//! The crate is a library with a thin binary (`photon/src/main.rs` only dispatches the command
//! line and opens the store through `percolator_cli::store`): [`crate::cli`] (the clap types,
//! parsed as they are by `tests/tests/docker_files.rs`), [`crate::gen`], [`crate::load`],
//! [`crate::join`] (the observers), [`crate::outcome`], [`crate::pipeline`] (start a pipeline's
//! worker, settle, drain, the periodic sweep: used by `photon work`, `demo` and the tests),
//! [`crate::metrics`] (Prometheus text and its endpoint), [`crate::parked`], [`crate::maintenance`]
//! (periodic GC and its lease), [`crate::verify`] (and `export`), [`crate::demo`],
//! [`crate::progress`] (bars on a terminal, otherwise a line every 5 s) and [`crate::human`].
//!
//! | page | what it holds |
//! |---|---|
//! | [`join`] | the loader, the click and wake observers, why no wake-up is lost, redundant pipelines, IdRegistry GC, verify and the drain |
//! | [`growth`] | spaces that grow with the history: the parked-click index and its safety argument, version GC, what else grows |

pub mod growth;
pub mod join;
