//! The line-file source: the files of a directory that a [`LineMapping`] tags, loaded line
//! by line, each batch committed with the file's offset in the loader table.
//!
//! - A file is known by its first bytes, not its path (module `identity`): renamed, rotated or
//!   moved, it is loaded once, and a file renamed to a name the mapping does not tag
//!   (`clicks.jsonl.1`, logrotate's default) is followed to its end (module `files`).
//! - Each batch stores the fingerprint of the bytes just before its offset (module `record`): a
//!   file rewritten or truncated in place ([`LoadError::Changed`], [`LoadError::Truncated`]),
//!   or a different log beginning with the same bytes as a loaded one
//!   ([`LoadError::SharedHead`]), is quarantined (reported, counted, skipped while the others
//!   load), not read from the middle of a line.
//! - Only regular files are opened, never blocking (a FIFO named like a log is reported);
//!   `*.gz` files are read decompressed, so a log gzipped at rotation is the same log (module
//!   `input`).
//! - A line that is not UTF-8 or that the mapping cannot parse is reported with `file:line`
//!   ([`crate::load::Rejects`]) and the rest loads; so is a line longer than
//!   [`LoadOptions::max_line_bytes`], skipped without being held. NUL bytes before a line
//!   (copytruncate's hole) are skipped and counted. A last line without its line break waits
//!   for it while following ([`LoadOptions::follow`]), and is loaded at the end of bounded
//!   input (module `reader`).
//! - Files of one directory load in parallel and in step by event time (when the mapping
//!   gives one, see [`crate::load::Frontier`]).

mod files;
mod identity;
mod input;
mod reader;
mod record;
mod status;
mod whole;

pub use files::LogFile;
pub use identity::file_key;
pub use input::open_regular;
pub use record::FINGERPRINT_WINDOW;
pub use status::FileStatus;
pub use whole::{LogLine, LogLines};

use crate::load::{
    load_source, retry_transient, Backlog, Batch, Context, Frontier, Injector, LoadError,
    LoadOptions, LoadStats, Opened, Pace, Reject, Rejects, Sink, Source,
};
use async_trait::async_trait;
use identity::{Found, Head};
use input::{resume, Input, Reader};
use observers::time::Column;
use percolator::{Cell, Client, Transaction};
use reader::{Item, LineReader};
use record::{fingerprint, Progress, Record};
use std::io::BufRead;
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

    /// The timed columns the mapping writes (`observers::time`): the loader publishes its
    /// watermark for each ([`crate::load::WatermarkOptions`]). Default: none.
    fn timed_columns(&self) -> Vec<Column> {
        Vec::new()
    }

    /// The cells of `record` in timed columns: marked pending at the record's
    /// [`LineMapping::event_time`] in the batch's transaction. Default: none.
    fn timed_cells(&self, record: &Self::Record) -> Vec<Cell> {
        let _ = record;
        Vec::new()
    }

    /// Whether the end of a bounded load is the end of all input, so the loader's watermark
    /// becomes `u64::MAX` (every event-time timer fires). `false` for input that later loads
    /// extend: the watermark then stays at the latest event time loaded minus the
    /// out-of-orderness. Default: `true`.
    fn final_at_end(&self) -> bool {
        true
    }

    /// How much further than [`ALIGN_SLACK_MS`] of event time files tagged `tag` may load
    /// ahead of the others in [`Lines::load_dir`] (default: 0). The files of events others
    /// depend on lead (Photon's queries, which clicks logged seconds later are joined with),
    /// and a file with a smaller lead commits a batch only once the leading files have moved
    /// past its last event (unpaced loads; at most the difference of the leads past its first; see
    /// [`crate::load::Frontier`]): the dependent events then find them loaded instead of
    /// waiting for them.
    fn lead_ms(&self, tag: &str) -> u64 {
        let _ = tag;
        0
    }

    /// Whether files tagged `tag` drive the loader's watermark (default: every file). A
    /// mapping whose timed column is written by some files only names those (Photon: the
    /// query logs', whose watermark decides expiry).
    fn drives_watermark(&self, tag: &str) -> bool {
        let _ = tag;
        true
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

/// A [`LineMapping`] as a [`Sink`]: what a batch of its records writes, whatever
/// [`Source`] the records come from (the line files of [`Lines`], or another source, as
/// the deterministic simulation loads photon's logs).
pub struct MappingSink<'a, M>(pub &'a M);

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

    fn marks(&self, records: &[M::Record]) -> Vec<(Cell, u64)> {
        let mut marks = Vec::new();
        for r in records {
            if let Some(e) = self.0.event_time(r) {
                marks.extend(self.0.timed_cells(r).into_iter().map(|c| (c, e)));
            }
        }
        marks
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
    /// Its watermark (named by the loader table), across loads of a `--follow`.
    injector: Arc<Injector>,
}

impl<M> Clone for Lines<M> {
    fn clone(&self) -> Self {
        Lines {
            mapping: self.mapping.clone(),
            table: self.table.clone(),
            injector: self.injector.clone(),
        }
    }
}

impl<M: LineMapping> Lines<M> {
    /// A loader of the files `mapping` tags, its offsets in [`LOADER_TABLE`].
    pub fn new(mapping: M) -> Self {
        let injector = Arc::new(Injector::new(
            LOADER_TABLE,
            mapping.timed_columns(),
            mapping.final_at_end(),
        ));
        Lines {
            mapping: Arc::new(mapping),
            table: LOADER_TABLE.to_string(),
            injector,
        }
    }

    /// The same loader with its offsets in `table` (two loaders of one namespace that load
    /// the same files into different tables need different loader tables).
    pub fn with_table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self.injector = Arc::new(Injector::new(
            &self.table,
            self.mapping.timed_columns(),
            self.mapping.final_at_end(),
        ));
        self
    }

    /// Its watermark (published for the mapping's timed columns).
    pub fn injector(&self) -> &Injector {
        &self.injector
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
            // One file alone says nothing of the loader's other files: the loader is only
            // registered as a source (so the columns wait for it).
            watermarks: None,
        };
        let register = retry_transient("watermark", || self.injector.register(client)).await;
        if let Err(e) = register {
            tracing::warn!(error = %e, "registering the loader's watermark failed");
        }
        let mut source = self.source(path, tag, options);
        load_source(client, &mut source, &MappingSink(&*self.mapping), &ctx).await
    }

    /// The source of one file.
    fn source(&self, path: &Path, tag: &str, options: &LoadOptions) -> LineFile<M> {
        LineFile {
            path: path.to_path_buf(),
            tag: tag.to_string(),
            mapping: self.mapping.clone(),
            table: self.table.clone(),
            max_line_bytes: options.max_line_bytes.max(1),
            follow: options.follow,
            file: None,
            head: None,
            resumed: None,
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
        let frontier = Frontier::with_leads(
            files.iter().map(|f| self.mapping.lead_ms(&f.tag)).collect(),
            ALIGN_SLACK_MS,
        );
        self.injector.found(
            files
                .iter()
                .filter(|f| self.mapping.drives_watermark(&f.tag))
                .map(|f| f.path.display().to_string()),
        );
        // Registered before any batch commits: the columns' watermarks wait for this
        // loader from its first batch (a first load of a namespace publishes 0).
        let register = retry_transient("watermark", || self.injector.register(client)).await;
        if let Err(e) = register {
            tracing::warn!(error = %e, "registering the loader's watermark failed");
        }
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
                watermarks: Some(&self.injector),
            };
            let (mut source, sink, frontier) = (self.source(path, tag, options), &sink, &frontier);
            async move {
                let result = load_source(client, &mut source, sink, &ctx).await;
                frontier.finish(i);
                result
            }
        });
        let results = futures::future::join_all(loads).await;
        if results.iter().all(Result::is_ok) {
            let publish = retry_transient("watermark", || {
                self.injector
                    .publish(client, &options.watermarks, options.follow, true)
            })
            .await;
            if let Err(e) = publish {
                tracing::warn!(error = %e, "publishing the loader's watermark failed; tried again after the next batch");
            }
        }
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
        let options = LoadOptions {
            follow: true,
            ..options.clone()
        };
        loop {
            self.load_dir(client, dir, &options, stats).await?;
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
            let Some((mut input, loaded)) = self.committed(client, &path).await? else {
                continue;
            };
            let io = |source| LoadError::Io {
                path: path.clone(),
                source,
            };
            if input.ends_at(loaded).map_err(io)? == Some(true) {
                continue;
            }
            let mut reader = input.reader_at(loaded).map_err(io)?;
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
    /// Longest line loaded ([`LoadOptions::max_line_bytes`]).
    max_line_bytes: usize,
    /// The input may still grow ([`LoadOptions::follow`]).
    follow: bool,
    /// The file, opened for the next batch.
    file: Option<Input>,
    /// Its head when opened (what identifies it).
    head: Option<Head>,
    /// A compressed file's reader where the last batch ended, and the progress there: the
    /// next batch goes on from it instead of decompressing the file from its start again.
    resumed: Option<(Progress, Reader, Vec<u8>)>,
}

impl<M> LineFile<M> {
    fn io(&self) -> impl Fn(std::io::Error) -> LoadError + '_ {
        |source| LoadError::Io {
            path: self.path.clone(),
            source,
        }
    }

    /// The true cause of a file whose loaded bytes are not what was loaded: if the record's
    /// log is another file, still at the path it was loaded from and still holding those
    /// bytes, the two are different logs that begin alike ([`LoadError::SharedHead`]).
    fn diagnose(&self, error: LoadError, found: &Option<Found>) -> LoadError {
        let (LoadError::Changed { offset, .. } | LoadError::Truncated { offset, .. }) = error
        else {
            return error;
        };
        let Some(other) = found.as_ref().and_then(|f| f.record.hint.clone()) else {
            return error;
        };
        if other == identity::canonical(&self.path) {
            return error;
        }
        let progress = found
            .as_ref()
            .map(|f| f.record.progress)
            .unwrap_or_default();
        let holds_it = identity::open(&other).is_ok_and(|(mut input, head)| {
            resume(&mut input, &other, &progress, head.skipped).is_ok()
        });
        if !holds_it {
            return error;
        }
        LoadError::SharedHead {
            path: self.path.clone(),
            other,
            offset,
            window: FINGERPRINT_WINDOW,
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
        let (Some(mut input), Some(head)) = (self.file.take(), self.head.clone()) else {
            return Ok(None);
        };
        let progress = from.as_ref().map(|f| f.record.progress).unwrap_or_default();
        // A compressed log loaded to the end its trailer records is not read again.
        if progress.offset > 0 && input.ends_at(progress.offset).map_err(self.io())? == Some(true) {
            return Ok(None);
        }
        // The reader at the offset, and the loaded bytes just before it, checked against the
        // stored fingerprint; extended with each line read, for the fingerprint committed
        // with the batch.
        let (reader, tail) = match self.resumed.take() {
            Some((at, reader, tail)) if at == progress => (reader, tail),
            _ => resume(&mut input, &self.path, &progress, head.skipped)
                .map_err(|e| self.diagnose(e, from))?,
        };
        let mut lines = LineReader::new(
            reader,
            progress.offset,
            head.skipped,
            tail,
            self.max_line_bytes,
            self.follow,
        );
        let mut records = Vec::new();
        let mut rejects = Vec::new();
        let mut next = progress;
        let (mut long_lines, mut nul_bytes) = (0, 0);
        // The offset inside a line: the rest of a line skipped for its length while being
        // written, or of a last line loaded before its line break was.
        if lines.mid_line() {
            let rest = lines.skip_rest().map_err(self.io())?;
            if rest > 0 {
                tracing::debug!(file = %self.path.display(), at = progress.offset, bytes = rest,
                    "skipped the rest of a line cut at the stored offset");
            }
        }
        // Lines are read as bytes: one that is not UTF-8 is rejected like any malformed line.
        let mut buf = Vec::new();
        let mut bytes = 0;
        while records.len() < max && bytes < super::MAX_BATCH_BYTES {
            let at = lines.pos();
            let item = lines.next(&mut buf).map_err(self.io())?;
            let nuls = match item {
                Item::End => break,
                Item::Line { nuls } | Item::TooLong { nuls, .. } => nuls,
            };
            next.line += 1;
            bytes += buf.len();
            if nuls > 0 {
                nul_bytes += nuls;
                tracing::warn!(
                    "{}: skipped {nuls} NUL bytes at offset {at}, before line {} (the hole a \
                     writer without O_APPEND leaves in a file truncated under it: copytruncate)",
                    self.path.display(),
                    next.line
                );
            }
            if let Item::TooLong { len, .. } = item {
                long_lines += 1;
                rejects.push(Reject {
                    line: next.line,
                    error: format!(
                        "a line of {len} bytes, longer than the limit of {} (max_line_bytes): \
                         skipped; its first {} bytes",
                        self.max_line_bytes,
                        buf.len()
                    ),
                    text: buf.clone(),
                });
                continue;
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
        next.offset = lines.pos();
        if next.offset == progress.offset {
            return Ok(None);
        }
        next.fingerprint = Some(fingerprint(lines.tail()));
        // The key the record goes under now (it moves when a young log reaches the window,
        // or was found under another path).
        let key = identity::target_key(&mut input, &self.path, &head, next.offset)?;
        if input.compressed() {
            if let Some((reader, tail)) = lines.into_parts() {
                self.resumed = Some((next, reader, tail));
            }
        }
        let times = records.iter().filter_map(|r| self.mapping.event_time(r));
        let event_times = times.clone().min().zip(times.max());
        Ok(Some(Batch {
            records,
            rejects,
            id: format!("{key}@{:020}", progress.offset),
            units: next.line - progress.line,
            event_times,
            long_lines,
            nul_bytes,
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
