//! The event model: queries and clicks as JSON lines.

pub(crate) mod line;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A search query event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Query {
    /// Unique id (Photon-style ids such as `server:process:timestamp` work).
    pub query_id: String,
    /// Event time, milliseconds since the Unix epoch.
    pub event_time: u64,
    /// Any other fields, kept as given.
    #[serde(flatten)]
    pub fields: Map<String, Value>,
}

/// An ad click event, referring to the query that produced it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Click {
    /// Unique id of the click (a repeated click_id is the same click delivered twice).
    pub click_id: String,
    /// The query this click came from.
    pub query_id: String,
    /// Event time, milliseconds since the Unix epoch.
    pub event_time: u64,
    /// Any other fields, kept as given.
    #[serde(flatten)]
    pub fields: Map<String, Value>,
}

/// Which kind of events a log file holds (from its name: `queries*` or `clicks*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A query log.
    Query,
    /// A click log.
    Click,
}

impl Kind {
    /// The kind of a log file by its file name, if recognizable.
    pub fn of_file(path: &std::path::Path) -> Option<Kind> {
        let name = path.file_name()?.to_str()?;
        if !name.ends_with(".jsonl") {
            return None;
        }
        if name.starts_with("queries") {
            Some(Kind::Query)
        } else if name.starts_with("clicks") {
            Some(Kind::Click)
        } else {
            None
        }
    }
}

/// The event day (UTC days since the epoch) of an event time, the IdRegistry's partition.
pub fn day_of(event_time_ms: u64) -> u64 {
    event_time_ms / 86_400_000
}

/// A joined event: the click, its query, and who joined it when.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Joined {
    /// The click.
    pub click: Click,
    /// The query it came from.
    pub query: Query,
    /// The IdRegistry token of the join (pipeline, worker, process, the notification it ran
    /// for, its start_ts: `join::JoinToken`).
    pub token: String,
    /// Wall-clock time of the join transaction, ms since the epoch.
    pub joined_at: u64,
    /// When the later of click and query was loaded (the earliest the join was possible).
    pub arrived_at: u64,
}
