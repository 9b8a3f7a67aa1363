//! `photon load`: query and click logs loaded into their tables by the line-file loader of
//! [`app::load::lines`] (each batch committed with its file's offset, files known by their
//! content, rejects reported with `file:line`), with Photon's mapping ([`PhotonLogs`]):
//! which files are logs, how a line parses, its event time, and the cells a batch writes
//! (the events, and the batch's wake check).

pub use app::load::lines::{FileStatus, ALIGN_SLACK_MS, FINGERPRINT_WINDOW};
pub use app::load::{
    Backlog, Frontier, LoadError, LoadOptions, LoadStats, Pace, DEFAULT_MAX_BACKLOG,
    DEFAULT_MAX_LINE_BYTES, ECHO_PREFIX, TRANSIENT_RETRY_FOR,
};

use crate::event::line::EventLine;
use crate::event::{Click, Kind, Query};
use crate::schema::{
    click_cell, declare_columns, query_cell, stored_text, wake_check_cell, LOADER,
};
use app::load::lines::{LineMapping, Lines};
use percolator::{Client, Transaction};
use std::path::{Path, PathBuf};

/// A line the loader accepted, ready to be written: its kind, its event's id and time, and
/// the line's text as given (carriage returns between tokens made spaces), which is stored
/// as it is ([`crate::schema::stored_text`]): the line is checked by `event::line::EventLine`, which
/// accepts the lines [`Query`] and [`Click`] accept but those nested too deep to read back
/// once stored (126 levels: `event::line::MAX_DEPTH`), and its other fields are not parsed into
/// a map to be serialized again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parsed {
    kind: Kind,
    id: String,
    event_time: u64,
    text: String,
}

impl Parsed {
    /// `line` of a log of `kind`, if the loader accepts it (else the parse error's text).
    pub fn line(line: &str, kind: Kind) -> Result<Parsed, String> {
        let event = EventLine::parse(line, kind).map_err(|e| e.to_string())?;
        let id = match (kind, event.click_id) {
            (Kind::Click, Some(click_id)) => click_id.0.into_owned(),
            _ => event.query_id.0.into_owned(),
        };
        // A carriage return can only be whitespace between tokens here (a string holding
        // one raw is refused): a space instead keeps the stored text, and the joined output
        // and export lines holding it, free of line ends.
        let text = if line.contains('\r') {
            line.replace('\r', " ")
        } else {
            line.to_owned()
        };
        Ok(Parsed {
            kind,
            id,
            event_time: event.event_time,
            text,
        })
    }

    /// A query as the line its serialization would be.
    pub fn query(query: &Query) -> Parsed {
        Parsed::of_event(Kind::Query, &query.query_id, query.event_time, query)
    }

    /// A click as the line its serialization would be.
    pub fn click(click: &Click) -> Parsed {
        Parsed::of_event(Kind::Click, &click.click_id, click.event_time, click)
    }

    /// An event built in code, as its serialization's line (serializing an event cannot
    /// fail: its map's keys are strings).
    fn of_event(kind: Kind, id: &str, event_time: u64, event: &impl serde::Serialize) -> Parsed {
        Parsed {
            kind,
            id: id.to_owned(),
            event_time,
            text: serde_json::to_string(event).unwrap_or_default(),
        }
    }

    /// The event's kind.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The query's id, or the click's.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The event time, ms since the epoch.
    pub fn event_time(&self) -> u64 {
        self.event_time
    }

    /// The line's text, as stored.
    pub fn text(&self) -> &str {
        &self.text
    }
}

/// Photon's logs as a [`LineMapping`]: `queries*.jsonl` (tag `q`) and `clicks*.jsonl` (tag
/// `c`), parsed as [`Query`] and [`Click`], written to `queries/<id>/event` and
/// `clicks/<id>/event` with the batch's wake check.
pub struct PhotonLogs;

/// How much further than `ALIGN_SLACK_MS` of event time the query logs load ahead of the
/// click logs in one directory load (`LineMapping::lead_ms`): clicks come seconds after
/// their query (and early click lines, logged before their query, carry those seconds), so
/// with the logs in step a click whose query was logged less than a batch earlier parked
/// and had to be woken (11-12 % of the clicks through TiKV, where the two loaders run at
/// the same pace). Queries loaded ahead cost nothing: they wait to be joined anyway. Click
/// batches of unpaced loads also wait for the query logs to pass their last click (at most
/// this lead past their first): through TiKV only the clicks without a query park now.
pub const QUERY_LEAD_MS: u64 = 3_000;

impl Kind {
    /// The tag of the kind in the loader's offset records.
    pub fn tag(self) -> &'static str {
        match self {
            Kind::Query => "q",
            Kind::Click => "c",
        }
    }

    /// The kind of a tag.
    pub fn of_tag(tag: &str) -> Option<Kind> {
        match tag {
            "q" => Some(Kind::Query),
            "c" => Some(Kind::Click),
            _ => None,
        }
    }
}

impl LineMapping for PhotonLogs {
    type Record = Parsed;

    fn tag(&self, path: &Path) -> Option<String> {
        Kind::of_file(path).map(|k| k.tag().to_string())
    }

    fn parse(&self, tag: &str, line: &str) -> Result<Parsed, String> {
        match Kind::of_tag(tag) {
            Some(kind) => Parsed::line(line, kind),
            None => Err(format!("a file of unknown kind {tag:?}")),
        }
    }

    /// The query logs' watermark decides expiry in event time ([`crate::expiry`]); no cell
    /// is marked pending (the join reads queries as soon as they commit).
    fn timed_columns(&self) -> Vec<observers::time::Column> {
        vec![crate::expiry::queries_column()]
    }

    /// Logs grow and later loads extend them: the end of one load is not the end of time.
    fn final_at_end(&self) -> bool {
        false
    }

    /// The query logs alone: their watermark is what a click waits on (click logs running
    /// ahead of the query logs must not expire clicks whose queries are still to come).
    fn drives_watermark(&self, tag: &str) -> bool {
        Kind::of_tag(tag) == Some(Kind::Query)
    }

    fn lead_ms(&self, tag: &str) -> u64 {
        if Kind::of_tag(tag) == Some(Kind::Query) {
            QUERY_LEAD_MS
        } else {
            0
        }
    }

    fn event_time(&self, record: &Parsed) -> Option<u64> {
        Some(record.event_time)
    }

    fn declare(&self, client: &Client) {
        // The events written here must notify the join observers, whoever built the client.
        declare_columns(client);
    }

    fn write(&self, txn: &Transaction, batch: &[Parsed], id: &str) -> Result<(), LoadError> {
        // The client's wall clock (`percolator::ClientConfig::wall_clock`).
        let loaded_at = txn.wall_ms();
        let json =
            |r: serde_json::Result<Vec<u8>>| r.map_err(|e| LoadError::Mapping(e.to_string()));
        let mut queries: Vec<&str> = Vec::new();
        let mut writes = Vec::with_capacity(batch.len());
        for p in batch {
            let value = stored_text(&p.text, loaded_at);
            match p.kind {
                Kind::Query => {
                    writes.push((query_cell(&p.id), value));
                    queries.push(&p.id);
                }
                Kind::Click => writes.push((click_cell(&p.id), value)),
            }
        }
        txn.set_many(writes);
        // The batch's queries, for the wake check that runs once it commits
        // (`join::CheckWakes`): clicks may have parked on them meanwhile.
        if !queries.is_empty() {
            txn.set(wake_check_cell(id), json(serde_json::to_vec(&queries))?);
        }
        Ok(())
    }
}

/// Photon's loader: [`PhotonLogs`] with its offsets in the `loader` table.
pub fn loader() -> Lines<PhotonLogs> {
    Lines::new(PhotonLogs).with_table(LOADER)
}

/// A log file to load and the kind of its events.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct LogFile {
    /// The file.
    pub path: PathBuf,
    /// Its events' kind.
    pub kind: Kind,
}

/// Log files of `dir` (queries*.jsonl, clicks*.jsonl), in name order (the loader also
/// follows renamed logs, see [`files_to_load`]).
pub fn log_files(dir: &Path) -> Result<Vec<(PathBuf, Kind)>, LoadError> {
    let io = |source| LoadError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut files: Vec<(PathBuf, Kind)> = std::fs::read_dir(dir)
        .map_err(io)?
        .filter_map(|e| e.ok())
        .filter_map(|e| Kind::of_file(&e.path()).map(|k| (e.path(), k)))
        .collect();
    files.sort();
    Ok(files)
}

/// The files [`load_dir`] loads from `dir`, in name order: its logs, then the logs the
/// loader started on there that were renamed to names it does not match (`clicks.jsonl.1`).
/// Files named like logs that cannot be opened are left out.
pub async fn files_to_load(client: &Client, dir: &Path) -> Result<Vec<LogFile>, LoadError> {
    Ok(loader()
        .files_to_load(client, dir)
        .await?
        .into_iter()
        .filter_map(|f| Kind::of_tag(&f.tag).map(|kind| LogFile { path: f.path, kind }))
        .collect())
}

/// Loads `path` (a log of `kind`) from its stored offset to its last complete line.
/// Returns events loaded.
pub async fn load_file(
    client: &Client,
    path: &Path,
    kind: Kind,
    options: &LoadOptions,
    stats: &LoadStats,
) -> Result<u64, LoadError> {
    loader()
        .load_file(client, path, kind.tag(), options, stats)
        .await
}

/// Loads every log file of `dir` once, files in parallel and in step by event time (see
/// [`Frontier`]), so queries and clicks interleave as they happened.
pub async fn load_dir(
    client: &Client,
    dir: &Path,
    options: &LoadOptions,
    stats: &LoadStats,
) -> Result<u64, LoadError> {
    loader().load_dir(client, dir, options, stats).await
}

/// Lines of the log files of `dir` not loaded yet (the total of a load's progress).
pub async fn lines_to_load(client: &Client, dir: &Path) -> Result<u64, LoadError> {
    loader().lines_to_load(client, dir).await
}

/// The key of the record of the log at `path` (what a batch loading it now would commit
/// under; `None` while its first line is incomplete).
pub fn file_key(path: &Path) -> std::io::Result<Option<String>> {
    app::load::lines::file_key(path)
}

/// How far the loader is, read from the store (used by `--until-drained`).
pub mod status {
    pub use app::load::lines::FileStatus;
    use app::load::LoadError;
    use percolator::Client;
    use std::path::Path;

    /// The progress of every log file of `dir` (renamed logs included).
    pub async fn dir_status(client: &Client, dir: &Path) -> Result<Vec<FileStatus>, LoadError> {
        super::loader().dir_status(client, dir).await
    }

    /// The progress of every file the loader has committed an offset for in the directories
    /// this host can read.
    pub async fn started_status(client: &Client) -> Result<Vec<FileStatus>, LoadError> {
        super::loader().started_status(client).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Stored;

    /// A line is accepted as it is parsed by [`Query`] or [`Click`] (and its stored form
    /// reads back), with the same id and time, and its stored text reads back as the stored
    /// event parsed from the line. Fails if the check accepts a line the events refuse, or
    /// if the stored text is not the line (`{"event":` and the line, nothing lost or added).
    #[test]
    fn a_line_is_stored_as_the_event_it_parses_to() {
        use crate::event::line::tests::lines;
        let mut accepted = 0;
        for line in lines() {
            accepted += usize::from(stored_as_parsed(&line, Kind::Query, |q: &Query| {
                (q.query_id.as_str(), q.event_time)
            }));
            accepted += usize::from(stored_as_parsed(&line, Kind::Click, |c: &Click| {
                (c.click_id.as_str(), c.event_time)
            }));
        }
        assert!(accepted > 10, "{accepted}");
    }

    /// Whether `line` is accepted as a `kind` event `T` (whose id and time `ids` gives); if
    /// so, that it is parsed as `T` parses it, and stored as its text, reading back as the
    /// stored `T`; if not, that `T` refuses it or its stored form does not read back.
    fn stored_as_parsed<T>(line: &str, kind: Kind, ids: impl Fn(&T) -> (&str, u64)) -> bool
    where
        T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
    {
        use crate::event::line::tests::readable;
        let loaded_at = 1_700_000_000_123;
        let parsed = Parsed::line(line, kind);
        match serde_json::from_str::<T>(line).map(|event| (readable(&event), event)) {
            Ok((true, event)) => {
                let parsed = parsed.unwrap_or_else(|e| panic!("{line}: {e}"));
                let (id, event_time) = ids(&event);
                assert_eq!(
                    (
                        parsed.kind(),
                        parsed.id(),
                        parsed.event_time(),
                        parsed.text()
                    ),
                    (kind, id, event_time, line.replace('\r', " ").as_str()),
                    "{line}"
                );
                let stored: Stored<T> =
                    serde_json::from_slice(&stored_text(parsed.text(), loaded_at)).unwrap();
                assert_eq!(
                    (stored.event, stored.loaded_at),
                    (event, loaded_at),
                    "{line}"
                );
                true
            }
            _ => {
                assert!(parsed.is_err(), "{kind:?} line {line}");
                false
            }
        }
    }

    /// An event built in code is stored as its serialization would be.
    #[test]
    fn an_event_built_in_code_is_stored_as_itself() {
        let query: Query =
            serde_json::from_str(r#"{"query_id":"q\"1","event_time":5,"terms":["a",{"b":1.5}]}"#)
                .unwrap();
        let stored: Stored<Query> =
            serde_json::from_slice(&stored_text(Parsed::query(&query).text(), 9)).unwrap();
        assert_eq!(stored.event, query);
        let click: Click =
            serde_json::from_str(r#"{"click_id":"c","query_id":"q\"1","event_time":7}"#).unwrap();
        let parsed = Parsed::click(&click);
        assert_eq!((parsed.kind(), parsed.id()), (Kind::Click, "c"));
        let stored: Stored<Click> = serde_json::from_slice(&stored_text(parsed.text(), 9)).unwrap();
        assert_eq!(stored.event, click);
    }
}
