//! JSON lines into cells: a [`LineMapping`] built from which files to load and a function
//! from a parsed line to the cells it writes.
//!
//! ```no_run
//! use app::load::json::JsonLines;
//! use app::load::lines::Lines;
//! use app::load::{LoadOptions, LoadStats};
//! use percolator::{Cell, Client};
//! # async fn demo(client: &Client) -> Result<(), app::load::LoadError> {
//! #[derive(serde::Deserialize)]
//! struct Doc { id: String, body: String }
//! // Every `docs*.jsonl` of the directory: a line `{"id":..,"body":..}` becomes docs/<id>/body.
//! let mapping = JsonLines::new(
//!     |path| path.file_name()?.to_str()?.starts_with("docs").then(|| "docs".to_string()),
//!     |_tag, doc: &Doc| vec![(Cell::new("docs", &doc.id, "body"), doc.body.clone().into_bytes())],
//! )
//! .observing("docs", "body");
//! let options = LoadOptions { batch: 500, rejects: "rejects.txt".into(), ..LoadOptions::default() };
//! let stats = LoadStats::default();
//! Lines::new(mapping).load_dir(client, "./input".as_ref(), &options, &stats).await?;
//! # Ok(()) }
//! ```

use super::lines::LineMapping;
use super::LoadError;
use observers::time::Column;
use percolator::{Cell, Client, Transaction};
use serde::de::DeserializeOwned;
use std::marker::PhantomData;
use std::path::Path;

/// Which files a [`JsonLines`] loads: the tag of a file, `None` to pass it over.
pub type Files = Box<dyn Fn(&Path) -> Option<String> + Send + Sync>;

/// The event time of a record, if it has one.
pub type EventTime<T> = Box<dyn Fn(&T) -> Option<u64> + Send + Sync>;

/// A mapping of JSON lines (each parsed as a `T`) to cells.
pub struct JsonLines<T, F> {
    files: Files,
    to_cells: F,
    observed: Vec<(String, String)>,
    timed: Vec<Column>,
    event_time: Option<EventTime<T>>,
    _t: PhantomData<fn() -> T>,
}

impl<T, F> JsonLines<T, F>
where
    T: DeserializeOwned + Send + Sync + 'static,
    F: Fn(&str, &T) -> Vec<(Cell, Vec<u8>)> + Send + Sync + 'static,
{
    /// Loads the files `files` tags; each line of a file tagged `tag` is parsed as a `T`
    /// (a line that does not parse is rejected) and `to_cells(tag, &record)` says what it
    /// writes.
    pub fn new(
        files: impl Fn(&Path) -> Option<String> + Send + Sync + 'static,
        to_cells: F,
    ) -> Self {
        JsonLines {
            files: Box::new(files),
            to_cells,
            observed: Vec::new(),
            timed: Vec::new(),
            event_time: None,
            _t: PhantomData,
        }
    }

    /// Declares `table`/`column` observed on every client the loader writes with (a column
    /// the mapping writes that an observer watches).
    pub fn observing(mut self, table: &str, column: &str) -> Self {
        self.observed.push((table.to_string(), column.to_string()));
        self
    }

    /// Declares `table`/`column` observed ([`JsonLines::observing`]) and timed: cells the
    /// mapping writes there are marked pending at their record's event time
    /// ([`JsonLines::with_event_time`]), and the loader publishes its watermark for the
    /// column (`observers::time`).
    pub fn timed(mut self, table: &str, column: &str) -> Self {
        self.timed.push(Column::new(table, column));
        self.observing(table, column)
    }

    /// Gives records an event time (files then load in step by it).
    pub fn with_event_time(
        mut self,
        event_time: impl Fn(&T) -> Option<u64> + Send + Sync + 'static,
    ) -> Self {
        self.event_time = Some(Box::new(event_time));
        self
    }
}

/// A parsed line and its file's tag.
pub struct Tagged<T> {
    /// The tag of the line's file.
    pub tag: String,
    /// The parsed line.
    pub value: T,
}

impl<T, F> LineMapping for JsonLines<T, F>
where
    T: DeserializeOwned + Send + Sync + 'static,
    F: Fn(&str, &T) -> Vec<(Cell, Vec<u8>)> + Send + Sync + 'static,
{
    type Record = Tagged<T>;

    fn tag(&self, path: &Path) -> Option<String> {
        (self.files)(path)
    }

    fn parse(&self, tag: &str, line: &str) -> Result<Tagged<T>, String> {
        serde_json::from_str(line)
            .map(|value| Tagged {
                tag: tag.to_string(),
                value,
            })
            .map_err(|e| e.to_string())
    }

    fn event_time(&self, record: &Tagged<T>) -> Option<u64> {
        self.event_time.as_ref().and_then(|f| f(&record.value))
    }

    fn declare(&self, client: &Client) {
        for (table, column) in &self.observed {
            client.observe_column(table, column);
        }
    }

    fn timed_columns(&self) -> Vec<Column> {
        self.timed.clone()
    }

    fn timed_cells(&self, record: &Tagged<T>) -> Vec<Cell> {
        if self.timed.is_empty() {
            return Vec::new();
        }
        (self.to_cells)(&record.tag, &record.value)
            .into_iter()
            .map(|(cell, _)| cell)
            .filter(|cell| {
                self.timed
                    .iter()
                    .any(|t| t.table == cell.table && t.column == cell.column)
            })
            .collect()
    }

    fn write(
        &self,
        txn: &Transaction,
        records: &[Tagged<T>],
        _batch: &str,
    ) -> Result<(), LoadError> {
        txn.set_many(
            records
                .iter()
                .flat_map(|r| (self.to_cells)(&r.tag, &r.value)),
        );
        Ok(())
    }
}
