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

impl Joined {
    /// The bytes of the joined output of `click` and `query` given as their JSON texts (as
    /// stored: `crate::schema::StoredEvent`): what serializing the [`Joined`] of the events
    /// parsed from them gives, up to the events' formatting and field order, without parsing
    /// their fields. The texts must be JSON objects (as a stored event's is, once read).
    pub fn text(
        click: &[u8],
        query: &[u8],
        token: &str,
        joined_at: u64,
        arrived_at: u64,
    ) -> serde_json::Result<Vec<u8>> {
        use std::io::Write;
        let mut out = Vec::with_capacity(click.len() + query.len() + token.len() + 96);
        out.extend_from_slice(b"{\"click\":");
        out.extend_from_slice(click);
        out.extend_from_slice(b",\"query\":");
        out.extend_from_slice(query);
        out.extend_from_slice(b",\"token\":");
        serde_json::to_writer(&mut out, token)?;
        write!(
            out,
            ",\"joined_at\":{joined_at},\"arrived_at\":{arrived_at}}}"
        )
        .map_err(serde_json::Error::io)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::line::tests::lines;
    use crate::load::Parsed;
    use crate::schema::{stored_text, StoredEvent};

    /// Every click line the loader accepts, joined with a query line as the join writes it
    /// from their stored texts, reads back as the [`Joined`] of the events parsed from the
    /// lines. Fails if the text drops, doubles or misplaces a part.
    #[test]
    fn a_joined_text_reads_back_as_the_joined_events() {
        let query_line = r#"{"query_id":"q\"1","event_time":5,"terms":["a",{"b":1.5}]}"#;
        let query = StoredEvent::read(stored_text(query_line, 40), Kind::Query).unwrap();
        let mut joined = 0;
        for line in lines() {
            let Ok(parsed) = Parsed::line(&line, Kind::Click) else {
                continue;
            };
            let click = StoredEvent::read(stored_text(parsed.text(), 30), Kind::Click).unwrap();
            assert_eq!(click.click_id.as_deref(), Some(parsed.id()), "{line}");
            let text = Joined::text(click.text(), query.text(), "A/w/1/n/7", 1_000, 40).unwrap();
            let read: Joined = serde_json::from_slice(&text).unwrap();
            let expected = Joined {
                click: serde_json::from_str(&line).unwrap(),
                query: serde_json::from_str(query_line).unwrap(),
                token: "A/w/1/n/7".to_string(),
                joined_at: 1_000,
                arrived_at: 40,
            };
            assert_eq!(read, expected, "{line}");
            joined += 1;
        }
        assert!(joined > 5, "{joined}");
    }
}
