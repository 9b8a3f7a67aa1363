//! The line-file source: the files of a directory that a [`LineMapping`] tags, loaded line
//! by line, each batch committed with the file's offset in the loader table.
//!
//! - A file is known by its first bytes, not its path (module `identity`): renamed, rotated or
//!   moved, it is loaded once, and a file renamed to a name the mapping does not tag
//!   (`clicks.jsonl.1`, logrotate's default) is followed to its end (module `files`).
//! - Each batch stores the fingerprint of the bytes just before its offset (module `record`): a
//!   file rewritten or truncated in place is refused ([`LoadError::Changed`]), not read from
//!   the middle of a line.
//! - A line that is not UTF-8 or that the mapping cannot parse is reported with `file:line`
//!   ([`crate::load::Rejects`]) and the rest loads; a line still being written (no newline
//!   yet) waits for the next pass.
//! - Files of one directory load in parallel and in step by event time (when the mapping
//!   gives one, see [`crate::load::Frontier`]).

mod files;
mod identity;
mod record;
mod status;

pub use files::LogFile;
pub use identity::file_key;
pub use record::FINGERPRINT_WINDOW;
pub use status::FileStatus;

use crate::load::{
    load_source, Backlog, Batch, Context, Frontier, LoadError, LoadOptions, LoadStats, Opened,
    Pace, Reject, Rejects, Sink, Source,
};
use async_trait::async_trait;
use identity::{Found, Head};
use percolator::{Cell, Client, Transaction};
use record::{fingerprint, loaded_tail, Record};
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// What a line-file loader loads and how its lines become cells: the application's part.
pub trait LineMapping: Send + Sync + 'static {
    /// A parsed line.
    type Record: Send + Sync;

    /// Whether the file at `path` is input, and its tag if so (handed back to
    /// [`LineMapping::parse`], and stored with the file's offset so that a file renamed to
    /// a name this does not tag is still parsed as what it was). A short word: commas are
    /// replaced.
    fn tag(&self, path: &Path) -> Option<String>;

    /// Parses one line (without its line break) of a file tagged `tag`; an error rejects the
    /// line (reported with its file and line) and the load goes on.
    fn parse(&self, tag: &str, line: &str) -> Result<Self::Record, String>;

    /// The record's event time (ms since the epoch), if it has one: files then load in step
    /// by event time, and can be replayed at its pace ([`Pace`]).
    fn event_time(&self, record: &Self::Record) -> Option<u64> {
        let _ = record;
        None
    }

    /// Declares the observed columns the mapping writes on `client` (as
    /// `observers::Registry::declare` does).
    fn declare(&self, client: &Client) {
        let _ = client;
    }

    /// Writes a batch's records in `txn`; `batch` is its stable name (`<file key>@<start
    /// offset>`), for a cell written once per batch.
    fn write(
        &self,
        txn: &Transaction,
        records: &[Self::Record],
        batch: &str,
    ) -> Result<(), LoadError>;
}

/// A [`LineMapping`] as a [`Sink`].
struct MappingSink<'a, M>(&'a M);

impl<M: LineMapping> Sink<M::Record> for MappingSink<'_, M> {
    fn declare(&self, client: &Client) {
        self.0.declare(client);
    }

    fn write(
        &self,
        txn: &Transaction,
        records: &[M::Record],
        batch: &str,
    ) -> Result<(), LoadError> {
        self.0.write(txn, records, batch)
    }
}

/// The default loader table: `loader/<file key>/offset`.
pub const LOADER_TABLE: &str = "loader";

/// The cell of the offset record keyed `key` in loader table `table`.
pub fn offset_cell(table: &str, key: &str) -> Cell {
    Cell::new(table, key, "offset")
}

/// Event time a file may run ahead of the others in [`Lines::load_dir`] (see
/// [`crate::load::Frontier`]): about one batch of a busy log. Events that depend on others
/// logged up to seconds earlier (Photon's clicks on their queries) arrive before them, and
/// wait for them, once a file runs further ahead. Measured with `photon demo --clicks
/// 200000` (clicks 2 s after their query on average): at 1,000 ms 22 % of the clicks parked,
/// at 100 ms 1.5 %, and the join ran 1.5x as fast embedded and 1.8x through minitikv.
pub const ALIGN_SLACK_MS: u64 = 100;

/// A line-file loader: a mapping and the table its offsets go to.
pub struct Lines<M> {
    mapping: Arc<M>,
    table: String,
}

impl<M> Clone for Lines<M> {
    fn clone(&self) -> Self {
        Lines {
            mapping: self.mapping.clone(),
            table: self.table.clone(),
        }
    }
}

impl<M: LineMapping> Lines<M> {
    /// A loader of the files `mapping` tags, its offsets in [`LOADER_TABLE`].
    pub fn new(mapping: M) -> Self {
        Lines {
            mapping: Arc::new(mapping),
            table: LOADER_TABLE.to_string(),
        }
    }

    /// The same loader with its offsets in `table` (two loaders of one namespace that load
    /// the same files into different tables need different loader tables).
    pub fn with_table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// The mapping.
    pub fn mapping(&self) -> &M {
        &self.mapping
    }

    /// The loader table.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The mapping's tags, commas replaced.
    fn tagger(&self) -> impl Fn(&Path) -> Option<String> + '_ {
        |path| self.mapping.tag(path).map(|t| t.replace(',', "_"))
    }

    /// The files [`Lines::load_dir`] loads from `dir`, in name order: its files, then the
    /// files the loader started on there that were renamed to names the mapping does not
    /// tag. Files that cannot be opened are left out.
    pub async fn files_to_load(
        &self,
        client: &Client,
        dir: &Path,
    ) -> Result<Vec<LogFile>, LoadError> {
        Ok(files::discover(client, &self.table, &self.tagger(), dir)
            .await?
            .0)
    }

    /// Loads `path` (tagged `tag`) from its stored offset to its last complete line.
    /// Returns the records loaded.
    pub async fn load_file(
        &self,
        client: &Client,
        path: &Path,
        tag: &str,
        options: &LoadOptions,
        stats: &LoadStats,
    ) -> Result<u64, LoadError> {
        let rejects = Rejects::new(&options.rejects);
        let ctx = Context {
            options,
            stats,
            rejects: &rejects,
            backlog: None,
            align: None,
            pace: None,
        };
        let mut source = self.source(path, tag);
        load_source(client, &mut source, &MappingSink(&*self.mapping), &ctx).await
    }

    /// The source of one file.
    fn source(&self, path: &Path, tag: &str) -> LineFile<M> {
        LineFile {
            path: path.to_path_buf(),
            tag: tag.to_string(),
            mapping: self.mapping.clone(),
            table: self.table.clone(),
            file: None,
            head: None,
        }
    }

    /// Loads every file of `dir` once, files in parallel and in step by event time (see
    /// [`Frontier`]).
    pub async fn load_dir(
        &self,
        client: &Client,
        dir: &Path,
        options: &LoadOptions,
        stats: &LoadStats,
    ) -> Result<u64, LoadError> {
        self.load_dir_paced(client, dir, options, stats, None).await
    }

    /// [`Lines::load_dir`], each batch committed no earlier than `pace` says its records are
    /// due.
    pub async fn load_dir_paced(
        &self,
        client: &Client,
        dir: &Path,
        options: &LoadOptions,
        stats: &LoadStats,
        pace: Option<&Pace>,
    ) -> Result<u64, LoadError> {
        let rejects = Rejects::new(&options.rejects);
        let (files, unreadable) = files::discover(client, &self.table, &self.tagger(), dir).await?;
        for u in &unreadable {
            rejects.unreadable(stats, &u.path.display().to_string(), &u.error)?;
        }
        let frontier = Frontier::new(files.len(), ALIGN_SLACK_MS);
        let backlog =
            (options.max_backlog > 0).then(|| Backlog::new(client.clone(), options.max_backlog));
        let sink = MappingSink(&*self.mapping);
        let loads = files.iter().enumerate().map(|(i, LogFile { path, tag })| {
            let ctx = Context {
                options,
                stats,
                rejects: &rejects,
                backlog: backlog.as_ref(),
                align: Some((&frontier, i)),
                pace,
            };
            let (mut source, sink, frontier) = (self.source(path, tag), &sink, &frontier);
            async move {
                let result = load_source(client, &mut source, sink, &ctx).await;
                frontier.finish(i);
                result
            }
        });
        let results = futures::future::join_all(loads).await;
        if let Some(backlog) = &backlog {
            stats
                .backlog_counts
                .fetch_add(backlog.counts(), Ordering::Relaxed);
        }
        let mut total = 0;
        for r in results {
            total += r?;
        }
        Ok(total)
    }

    /// Loads `dir` again and again, every `poll`, picking up what was appended to its files
    /// and new files, until `stop` resolves (`--follow`).
    pub async fn follow_dir(
        &self,
        client: &Client,
        dir: &Path,
        options: &LoadOptions,
        stats: &LoadStats,
        poll: Duration,
        stop: impl std::future::Future<Output = ()>,
    ) -> Result<(), LoadError> {
        tokio::pin!(stop);
        loop {
            self.load_dir(client, dir, options, stats).await?;
            tokio::select! {
                _ = &mut stop => return Ok(()),
                _ = tokio::time::sleep(poll) => {}
            }
        }
    }

    /// Lines of the files of `dir` not loaded yet: complete lines in each file beyond its
    /// stored offset (what a [`Lines::load_dir`] started now would read; the total of its
    /// progress). Files that cannot be opened count nothing.
    pub async fn lines_to_load(&self, client: &Client, dir: &Path) -> Result<u64, LoadError> {
        let mut total = 0;
        for LogFile { path, .. } in self.files_to_load(client, dir).await? {
            let Some((file, loaded)) = self.committed(client, &path).await? else {
                continue;
            };
            let io = |source| LoadError::Io {
                path: path.clone(),
                source,
            };
            let mut reader = BufReader::with_capacity(1 << 16, file);
            reader.seek(SeekFrom::Start(loaded)).map_err(io)?;
            loop {
                let buf = reader.fill_buf().map_err(io)?;
                if buf.is_empty() {
                    break;
                }
                total += buf.iter().filter(|b| **b == b'\n').count() as u64;
                let n = buf.len();
                reader.consume(n);
            }
        }
        Ok(total)
    }
}

/// One file as a [`Source`]. Its offset is the stored record found for it (`None`: not
/// started), read through the file's identity.
struct LineFile<M> {
    path: PathBuf,
    tag: String,
    mapping: Arc<M>,
    table: String,
    /// The file, opened for the next batch.
    file: Option<std::fs::File>,
    /// Its head when opened (what identifies it).
    head: Option<Head>,
}

impl<M> LineFile<M> {
    fn io(&self) -> impl Fn(std::io::Error) -> LoadError + '_ {
        |source| LoadError::Io {
            path: self.path.clone(),
            source,
        }
    }
}

#[async_trait]
impl<M: LineMapping> Source for LineFile<M> {
    type Record = M::Record;
    type Offset = Option<Found>;

    fn name(&self) -> String {
        self.path.display().to_string()
    }

    async fn open(&mut self) -> Result<Opened, LoadError> {
        // A file gone (or turned into something else) since it was listed is reported, and
        // the other files load on.
        match identity::open(&self.path) {
            Ok((file, head)) => {
                self.file = Some(file);
                self.head = Some(head);
                Ok(Opened::Ready)
            }
            Err(e) => Ok(Opened::Unreadable(e)),
        }
    }

    async fn committed(&self, txn: &Transaction) -> Result<Option<Found>, LoadError> {
        let Some(head) = &self.head else {
            return Ok(None);
        };
        identity::lookup(txn, &self.table, &self.path, head).await
    }

    async fn next_batch(
        &mut self,
        from: &Option<Found>,
        max: usize,
    ) -> Result<Option<Batch<M::Record, Option<Found>>>, LoadError> {
        let (Some(mut file), Some(head)) = (self.file.take(), self.head.as_ref()) else {
            return Ok(None);
        };
        let progress = from.as_ref().map(|f| f.record.progress).unwrap_or_default();
        // The loaded bytes just before the offset, checked against the stored fingerprint;
        // extended with each line read, for the fingerprint committed with the batch.
        let mut tail = loaded_tail(&mut file, &self.path, &progress)?;
        file.seek(SeekFrom::Start(progress.offset))
            .map_err(self.io())?;
        let mut reader = BufReader::new(file);
        let mut records = Vec::new();
        let mut rejects = Vec::new();
        let mut next = progress;
        // Lines are read as bytes: one that is not UTF-8 is rejected like any malformed line.
        let mut buf = Vec::new();
        while records.len() < max {
            buf.clear();
            let n = reader.read_until(b'\n', &mut buf).map_err(self.io())?;
            if n == 0 || !buf.ends_with(b"\n") {
                break; // EOF, or a line still being written (--follow).
            }
            next.offset += n as u64;
            next.line += 1;
            tail.extend_from_slice(&buf);
            if tail.len() > 2 * FINGERPRINT_WINDOW {
                tail.drain(..tail.len() - FINGERPRINT_WINDOW);
            }
            let line = buf.trim_ascii_end();
            if line.is_empty() {
                continue;
            }
            let parsed = match std::str::from_utf8(line) {
                Ok(text) => self.mapping.parse(&self.tag, text),
                Err(e) => Err(format!("invalid UTF-8 at byte {}", e.valid_up_to())),
            };
            match parsed {
                Ok(r) => records.push(r),
                Err(error) => rejects.push(Reject {
                    line: next.line,
                    error,
                    text: line.to_vec(),
                }),
            }
        }
        if next.offset == progress.offset {
            return Ok(None);
        }
        next.fingerprint = Some(fingerprint(&tail));
        // The key the record goes under now (it moves when a young log reaches the window,
        // or was found under another path).
        let key = identity::target_key(reader.get_mut(), &self.path, head, next.offset)?;
        let times = records.iter().filter_map(|r| self.mapping.event_time(r));
        let event_times = times.clone().min().zip(times.max());
        Ok(Some(Batch {
            records,
            rejects,
            id: format!("{key}@{:020}", progress.offset),
            units: next.line - progress.line,
            event_times,
            offset: Some(Found {
                key,
                record: Record {
                    progress: next,
                    tag: Some(self.tag.clone()),
                    hint: Some(identity::canonical(&self.path)),
                },
            }),
        }))
    }

    fn write_offset(
        &self,
        txn: &Transaction,
        from: &Option<Found>,
        to: &Option<Found>,
    ) -> Result<(), LoadError> {
        let Some(to) = to else { return Ok(()) };
        if let Some(old) = from.as_ref().filter(|f| f.key != to.key) {
            txn.delete(offset_cell(&self.table, &old.key));
        }
        txn.set(offset_cell(&self.table, &to.key), to.record.encode());
        Ok(())
    }
}
