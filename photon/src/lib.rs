//! Photon: joins ad clicks with the search queries that produced them, exactly once, over
//! Percolator transactions (`photon::design::join`). Loaders write query and click logs
//! into tables; join observers register each click in the IdRegistry and write the joined
//! event in one transaction; redundant pipelines may run at once.

pub mod cli;
pub mod demo;
pub mod design;
pub mod drained;
pub mod event;
pub mod expiry;
pub mod gen;
pub mod join;
pub mod legacy;
pub mod load;
pub mod maintenance;
pub mod metrics;
pub mod outcome;
pub mod parked;
pub mod pipeline;
pub mod registry;
pub mod run;
pub mod schema;
pub mod timeline;
pub mod verify;

/// Numbers for people (from the application layer, `app::human`).
pub use app::human;
/// Progress bars and lines (from the application layer, `app::progress`).
pub use app::progress;
