//! Loader jobs: input written into tables in transactions, each batch committed together
//! with the source's offset, so a loader killed at any moment and restarted (or run twice
//! at once) writes each record once. Apache Fluo's `LoaderExecutor` is the model; on top of
//! it this layer paces the loader on the notification backlog ([`Backlog`]), reports
//! rejected input (`file:line`, [`Rejects`]), retries transient store errors within a
//! deadline ([`TRANSIENT_RETRY_FOR`]), counts progress ([`LoadStats`], shown by
//! [`crate::progress`]) and follows growing input ([`lines::Lines::follow_dir`]).
//!
//! - A [`Source`] yields batches of records, each with the offset after it; the offset is
//!   read back and compared inside the batch's transaction, and written in it.
//! - A [`Sink`] writes a batch's records as cells (and declares the observed columns it
//!   writes, so that observers hear of them).
//! - [`load_source`] runs one source to its end.
//! - [`lines`] is the source most loaders need: directories of line files (JSON lines with
//!   [`json::JsonLines`]), known by their content so that renamed, rotated or moved files
//!   are loaded once, and refused when rewritten in place.

mod backlog;
mod frontier;
pub mod json;
pub mod lines;
mod rejects;
mod watermarks;

pub use backlog::Backlog;
pub use frontier::Frontier;
pub use rejects::{Reject, Rejects, ECHO_PREFIX, WARN_REJECTS};
pub use watermarks::{Injector, WatermarkOptions, MAX_AHEAD, PUBLISH_EVERY};

use async_trait::async_trait;
use percolator::txn::RunError;
use percolator::{Cell, Client, Transaction, TxnError};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Loader settings.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Records (lines) per transaction.
    pub batch: usize,
    /// Where rejected input is reported (`file:line: error: text`).
    pub rejects: PathBuf,
    /// Backpressure: before each batch, wait while more than this many notifications wait
    /// for the observers (see [`Backlog`]); 0: no bound.
    pub max_backlog: usize,
    /// Longest line loaded, in bytes: a longer one is rejected (`file:line`, its first
    /// bytes kept) and skipped up to its line break without being held in memory (as
    /// Filebeat's `max_bytes`, Vector's `max_line_bytes`).
    pub max_line_bytes: usize,
    /// The input may still grow (`--follow`): a last line without its line break waits
    /// for it. Otherwise the input is bounded and such a line is loaded at its end.
    pub follow: bool,
    /// How the loader's watermark is derived, for mappings that declare timed columns
    /// ([`lines::LineMapping::timed_columns`]; module `watermarks`).
    pub watermarks: WatermarkOptions,
}

impl Default for LoadOptions {
    /// Batches of [`DEFAULT_BATCH`] lines, rejects to `rejects.txt`, [`DEFAULT_MAX_BACKLOG`],
    /// [`DEFAULT_MAX_LINE_BYTES`], bounded input.
    fn default() -> Self {
        LoadOptions {
            batch: DEFAULT_BATCH,
            rejects: PathBuf::from("rejects.txt"),
            max_backlog: DEFAULT_MAX_BACKLOG,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            follow: false,
            watermarks: WatermarkOptions::default(),
        }
    }
}

/// The default of [`LoadOptions::batch`]: 2,000 lines per transaction. A batch takes what the
/// input has up to this many lines, so a followed log at a modest rate still commits what
/// arrived without waiting for more; the bound matters only when input is waiting. Larger
/// batches cost fewer transactions per line (the offset's head, the primary, the wake
/// check) and, on a store of many regions, fewer requests per line (a batch's records go
/// to each region they fall in in requests per region, not per line): against 500 lines,
/// `photon demo` took about 7 % less CPU per joined click embedded and 10 % fewer RPCs per
/// joined click through a minitikv of about 570 regions (`docs/perf/photon.md`). Beyond 2,000 the
/// embedded gain levels off (5,000: about 2 % more).
pub const DEFAULT_BATCH: usize = 2_000;

/// A batch of lines also ends once its lines reach this many bytes (the line that reaches it
/// included), whatever [`LoadOptions::batch`] allows: a transaction stays a few MiB however
/// long the lines are, and so does any cell a sink writes per batch (photon's wake check
/// lists a batch's query ids), far below a TiKV raft entry's 8 MiB.
pub const MAX_BATCH_BYTES: usize = 4 << 20;

/// The lines per batch `options` allow: [`LoadOptions::batch`], and at most half of a
/// backlog bound, so that one batch committed at the bound overshoots it by half at most.
pub fn batch_lines(options: &LoadOptions) -> usize {
    let batch = options.batch.max(1);
    match options.max_backlog {
        0 => batch,
        bound => batch.min((bound / 2).max(1)),
    }
}

/// The default of [`LoadOptions::max_line_bytes`]: 1 MiB, a hundred times Photon's longest
/// event and far below what would strain a loader's memory.
pub const DEFAULT_MAX_LINE_BYTES: usize = 1 << 20;

/// The default bound on the notification backlog: at a few thousand observer runs a second,
/// a queue of a few seconds at most, and enough to keep every worker's batches full.
pub const DEFAULT_MAX_BACKLOG: usize = 10_000;

/// Loader counters.
#[derive(Debug, Default)]
pub struct LoadStats {
    /// Records written.
    pub loaded: AtomicU64,
    /// Rejected records (malformed lines) reported.
    pub rejected: AtomicU64,
    /// Transactions committed.
    pub batches: AtomicU64,
    /// Input units (lines) behind the committed batches of this run, records, rejected and
    /// blank lines alike: the position progress shows against [`lines::Lines::lines_to_load`].
    pub lines: AtomicU64,
    /// Batches that waited for the notification backlog to fall below the bound.
    pub backlog_waits: AtomicU64,
    /// Times the backlog was counted in the store (each a scan of up to the bound).
    pub backlog_counts: AtomicU64,
    /// Sources (files) that could not be opened (each reported once).
    pub unreadable: AtomicU64,
    /// Sources (files) quarantined: a file whose loaded bytes changed, cut short, or
    /// taken for another log, or that failed to read; skipped (each reported once) while
    /// the others load.
    pub quarantined: AtomicU64,
    /// Lines rejected for being longer than [`LoadOptions::max_line_bytes`] (also counted
    /// in `rejected`).
    pub long_lines: AtomicU64,
    /// NUL bytes skipped at the start of lines: the holes a writer without `O_APPEND`
    /// leaves in a file truncated under it (copytruncate).
    pub nul_bytes: AtomicU64,
    /// The reports of unreadable and quarantined sources made, not to repeat them while
    /// following.
    unreadable_seen: Mutex<HashSet<String>>,
}

impl LoadStats {
    /// The line a loader prints at the end: records (called `noun`), batches, time taken,
    /// how often it waited for the observers, and where rejected input went (the rejects
    /// file is only written when something is rejected).
    pub fn summary(&self, noun: &str, elapsed: Duration, rejects: &Path) -> String {
        let malformed = match self.rejected.load(Ordering::Relaxed) {
            0 => "no malformed lines".to_string(),
            1 => format!("1 malformed line reported to {}", rejects.display()),
            n => format!("{n} malformed lines reported to {}", rejects.display()),
        };
        let malformed = match self.unreadable.load(Ordering::Relaxed) {
            0 => malformed,
            1 => format!(
                "{malformed}; 1 file could not be opened ({})",
                rejects.display()
            ),
            n => format!(
                "{malformed}; {n} files could not be opened ({})",
                rejects.display()
            ),
        };
        let malformed = match self.long_lines.load(Ordering::Relaxed) {
            0 => malformed,
            n => format!("{malformed} ({n} longer than the line limit)"),
        };
        let malformed = match self.quarantined.load(Ordering::Relaxed) {
            0 => malformed,
            1 => format!(
                "{malformed}; 1 file quarantined, not loaded to its end ({})",
                rejects.display()
            ),
            n => format!(
                "{malformed}; {n} files quarantined, not loaded to their end ({})",
                rejects.display()
            ),
        };
        let malformed = match self.nul_bytes.load(Ordering::Relaxed) {
            0 => malformed,
            n => format!("{malformed}; skipped {n} NUL bytes (holes of copytruncate)"),
        };
        let loaded = self.loaded.load(Ordering::Relaxed);
        let waited = match self.backlog_waits.load(Ordering::Relaxed) {
            0 => String::new(),
            waits => format!(
                "; waited for the observers {} times ({} counts of the notification backlog)",
                crate::human::count(waits),
                crate::human::count(self.backlog_counts.load(Ordering::Relaxed)),
            ),
        };
        format!(
            "loaded {} {noun} in {} batches in {:.1?} ({} {noun}/s); {malformed}{waited}",
            crate::human::count(loaded),
            crate::human::count(self.batches.load(Ordering::Relaxed)),
            elapsed,
            crate::human::whole(crate::human::per_sec(loaded, elapsed)),
        )
    }
}

/// Errors of the loader.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// An input or rejects file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A transaction failed (inside a batch; [`LoadError::In`] once it names the source).
    #[error(transparent)]
    Txn(#[from] TxnError),
    /// A transaction of the loader of `source` failed for good.
    #[error("loading {name}: {source}")]
    In {
        /// The source (a file's path).
        name: String,
        /// The error.
        source: TxnError,
    },
    /// The bytes of a file below its stored offset changed since they were loaded, though
    /// its first bytes (what identifies it) did not: the file was rewritten or truncated in
    /// place (input files may only be appended to).
    #[error(
        "{path}: the log changed in place: its first {offset} bytes were already loaded and \
         are no longer what was loaded (rewritten or truncated?); refusing to load it from the \
         stored offset, which would cut lines in the middle. Logs may only be appended to: \
         write new events to a new file (another name or directory), or load the rewritten \
         logs into a fresh store or another --namespace"
    )]
    Changed {
        /// The file.
        path: PathBuf,
        /// The stored offset (bytes loaded).
        offset: u64,
    },
    /// A file holds fewer bytes than were loaded from it: it was cut short in place
    /// (`truncate`, a partial copytruncate) after it was loaded.
    #[error(
        "{path}: the log was cut short in place: it holds {len} bytes, but its first {offset} \
         bytes were already loaded (truncated after loading?); it is quarantined: nothing more \
         is loaded from it. Logs may only be appended to: write new events to a new file"
    )]
    Truncated {
        /// The file.
        path: PathBuf,
        /// The stored offset (bytes loaded).
        offset: u64,
        /// Its length now.
        len: u64,
    },
    /// Two different logs begin with the same bytes (the window that identifies a log,
    /// [`lines::FINGERPRINT_WINDOW`]): the loader took `path` for `other`, which it has
    /// loaded to `offset`, and whose loaded bytes `path` does not hold.
    #[error(
        "{path}: a different log from {other}, but both begin with the same {window} bytes \
         (what identifies a log), and the loader has loaded {other} to byte {offset}; \
         {path} is quarantined: not loaded. Give each log a distinct beginning (e.g. a header \
         line naming its host), or load it into another --namespace"
    )]
    SharedHead {
        /// The file quarantined.
        path: PathBuf,
        /// The log it was taken for.
        other: PathBuf,
        /// The bytes loaded from `other`.
        offset: u64,
        /// The identifying window's length.
        window: usize,
    },
    /// The stored offset of a source is not understood.
    #[error("{path}: stored loader offset {value:?} is corrupt")]
    CorruptOffset {
        /// The file.
        path: PathBuf,
        /// The stored value.
        value: String,
    },
    /// The mapping could not turn a record into cells.
    #[error("{0}")]
    Mapping(String),
}

impl RunError for LoadError {
    fn as_txn_error(&self) -> Option<&TxnError> {
        match self {
            LoadError::Txn(e) | LoadError::In { source: e, .. } => Some(e),
            _ => None,
        }
    }
}

impl LoadError {
    /// Whether the error is a fault of one source's input (its bytes changed or cut short,
    /// taken for another log, unreadable): the loader quarantines that source and goes on
    /// with the others, rather than stopping.
    pub fn is_input_fault(&self) -> bool {
        matches!(
            self,
            LoadError::Io { .. }
                | LoadError::Changed { .. }
                | LoadError::Truncated { .. }
                | LoadError::SharedHead { .. }
                | LoadError::CorruptOffset { .. }
        )
    }

    /// Names the source of a transaction error.
    pub(crate) fn within(self, name: &str) -> LoadError {
        match self {
            LoadError::Txn(source) => LoadError::In {
                name: name.to_string(),
                source,
            },
            other => other,
        }
    }
}

/// What a source is ready to do after [`Source::open`].
#[derive(Debug)]
pub enum Opened {
    /// Ready to read.
    Ready,
    /// The source cannot be read (a file gone or not a regular file): it is reported to
    /// the rejects file and the loader goes on with the others.
    Unreadable(std::io::Error),
}

/// One batch of a [`Source`]: records, the input rejected among them, and the offset
/// after them.
#[derive(Debug)]
pub struct Batch<R, O> {
    /// The records, in input order.
    pub records: Vec<R>,
    /// Input that could not be parsed, reported before the batch commits (after a crash a
    /// reject may be reported twice, never lost).
    pub rejects: Vec<Reject>,
    /// The offset after the batch, written in the batch's transaction.
    pub offset: O,
    /// A stable name of the batch (the same for every attempt at it, e.g. `<source>@<start
    /// offset>`), for cells a sink writes once per batch.
    pub id: String,
    /// Input units (lines) the batch covers, rejects and blank lines included.
    pub units: u64,
    /// The earliest and the latest event time of its records, if they have them (the
    /// earliest keeps several sources in step and paces a replay, the latest is what a
    /// dependent source waits for the leading ones to pass: [`Frontier`], [`Pace`]).
    pub event_times: Option<(u64, u64)>,
    /// Lines among its rejects skipped for their length
    /// ([`LoadOptions::max_line_bytes`]), counted in [`LoadStats::long_lines`] once it
    /// commits.
    pub long_lines: u64,
    /// NUL bytes it skipped before lines (see [`LoadStats::nul_bytes`]).
    pub nul_bytes: u64,
}

/// Input that is loaded in batches, each committed with the offset after it.
///
/// The contract: [`Source::committed`] reads, in a transaction, where the source stands;
/// [`Source::next_batch`] reads the records after that offset; the loader then re-reads
/// `committed` in the batch's transaction and commits only if it is unchanged (another
/// loader of the same input did not get there first), with the batch's cells and
/// [`Source::write_offset`]. So each record is written once, however often a loader is
/// restarted or duplicated.
#[async_trait]
pub trait Source: Send + Sync {
    /// A parsed record.
    type Record: Send + Sync;
    /// Where the source stands, as stored (opaque to the loader; compared for equality).
    type Offset: Clone + PartialEq + Send + Sync;

    /// The source's name in reports (`file:line`) and errors.
    fn name(&self) -> String;

    /// Called before each batch: (re)opens the input. Default: ready.
    async fn open(&mut self) -> Result<Opened, LoadError> {
        Ok(Opened::Ready)
    }

    /// Where the source stands, read in `txn`.
    async fn committed(&self, txn: &Transaction) -> Result<Self::Offset, LoadError>;

    /// The next batch after `from`, of at most `max` records; `None` when nothing is left
    /// for now.
    async fn next_batch(
        &mut self,
        from: &Self::Offset,
        max: usize,
    ) -> Result<Option<Batch<Self::Record, Self::Offset>>, LoadError>;

    /// Writes offset `to` in `txn`, in place of `from` (the batch's transaction).
    fn write_offset(
        &self,
        txn: &Transaction,
        from: &Self::Offset,
        to: &Self::Offset,
    ) -> Result<(), LoadError>;
}

/// Writes records as cells: the application's mapping.
pub trait Sink<R>: Send + Sync {
    /// Declares the observed columns the sink writes on `client` (see
    /// `observers::Registry::declare`), so that its writes put notify keys even where no
    /// worker runs.
    fn declare(&self, client: &Client) {
        let _ = client;
    }

    /// Writes `records` in `txn`; `batch` is the batch's stable name ([`Batch::id`]).
    fn write(&self, txn: &Transaction, records: &[R], batch: &str) -> Result<(), LoadError>;

    /// The cells of `records` that carry an event time, with it: the loader marks them
    /// pending in the batch's transaction (`observers::time::mark`), so their columns' low
    /// watermarks wait for their observers. Default: none.
    fn marks(&self, records: &[R]) -> Vec<(Cell, u64)> {
        let _ = records;
        Vec::new()
    }
}

/// Replays input at the rate it was written: a batch commits no earlier than its earliest
/// record's event time, counted from `event_origin_ms` (event time) = `started` (wall
/// clock). Input replayed this way offers a fixed rate, which is how latency is measured
/// below saturation; a loader that falls behind loads as fast as it can until it catches up.
///
/// The earliest, not the latest: logs are out of order by seconds (a click logged before
/// its query carries its own later time), and a batch held for its latest record held
/// every record before it, and every file loading in step with it ([`Frontier`]), for
/// those seconds: the replay came in bursts instead of at the rate (measured on `photon
/// demo --rate 4000`: the loader idle for 2-8 s, then 2 cores busy for a second; p50 / p99
/// latency 211 / 924 ms, 6 / 25 ms since). A batch spans a few tens of ms of event time, so
/// its later records commit at most that early.
#[derive(Clone, Copy, Debug)]
pub struct Pace {
    /// Event time that maps to `started`, ms since the epoch.
    pub event_origin_ms: u64,
    /// Wall-clock instant of `event_origin_ms`.
    pub started: std::time::Instant,
}

impl Pace {
    /// A pace whose event time `event_origin_ms` is now.
    pub fn starting_now(event_origin_ms: u64) -> Self {
        Pace {
            event_origin_ms,
            started: std::time::Instant::now(),
        }
    }

    /// When a batch whose records' event times span `(earliest, latest)` is due: when its
    /// earliest record is (see the type's doc).
    fn batch_due(&self, (earliest, _latest): (u64, u64)) -> std::time::Instant {
        self.started + Duration::from_millis(earliest.saturating_sub(self.event_origin_ms))
    }

    /// Waits until a batch whose records' event times span `event_times` is due.
    async fn wait_for(&self, event_times: (u64, u64)) {
        tokio::time::sleep_until(self.batch_due(event_times).into()).await;
    }
}

/// What one [`load_source`] call shares with the other sources of its load.
pub struct Context<'a> {
    /// Settings.
    pub options: &'a LoadOptions,
    /// Counters.
    pub stats: &'a LoadStats,
    /// The rejects report.
    pub rejects: &'a Rejects,
    /// Backpressure, if any.
    pub backlog: Option<&'a Backlog>,
    /// Loading in step with other sources by event time: the frontier and this source's
    /// index in it.
    pub align: Option<(&'a Frontier, usize)>,
    /// Replaying at the pace of event time.
    pub pace: Option<&'a Pace>,
    /// The loader's watermark, told of each committed batch and of the source's end.
    pub watermarks: Option<&'a Injector>,
}

/// Loads `source` from its committed offset to its end, writing through `sink`. Returns
/// the records loaded.
pub async fn load_source<S: Source, K: Sink<S::Record>>(
    client: &Client,
    source: &mut S,
    sink: &K,
    ctx: &Context<'_>,
) -> Result<u64, LoadError> {
    // The records written here must notify the observers, whoever built the client.
    sink.declare(client);
    let name = source.name();
    // Retry jitter from the client's random source (a simulation's seed).
    let random = client.config().random.as_ref();
    let mut loaded = 0;
    let mut cleared = false;
    loop {
        if let Opened::Unreadable(e) = source.open().await? {
            ctx.rejects.unreadable(ctx.stats, &name, &e)?;
            if let Some(injector) = ctx.watermarks {
                injector.faulted(&name);
            }
            return Ok(loaded);
        }
        // Where we are, as committed (another loader of the same input may have moved it).
        let found = retry_transient_with(random, &name, || async {
            let txn = client.begin().await?;
            source.committed(&txn).await
        })
        .await
        .map_err(|e| e.within(&name))?;
        // A fault of this source's input (its loaded bytes changed, cut short, or taken
        // for another log; a read error) quarantines it: reported, counted, and the other
        // sources load on (a restart reports it again rather than failing).
        let batch = match source.next_batch(&found, batch_lines(ctx.options)).await {
            Ok(Some(batch)) => {
                if let Some(injector) = ctx.watermarks {
                    injector.reading(&name);
                }
                batch
            }
            Ok(None) => {
                if let Some(injector) = ctx.watermarks {
                    injector.at_end(&name);
                }
                return Ok(loaded);
            }
            Err(e) if e.is_input_fault() => {
                ctx.rejects.quarantined(ctx.stats, &name, &e)?;
                if let Some(injector) = ctx.watermarks {
                    injector.faulted(&name);
                }
                // Durably too, for operators in other processes (`percolator-ctl status`).
                let cause = e.to_string();
                retry_transient_with(random, &name, || async {
                    observers::admin::record_quarantine(client, &name, &cause)
                        .await
                        .map_err(LoadError::Txn)
                })
                .await
                .map_err(|e| e.within(&name))?;
                return Ok(loaded);
            }
            Err(e) => return Err(e),
        };
        if !cleared {
            // The source loads: a quarantine recorded for it before is over.
            retry_transient_with(random, &name, || async {
                observers::admin::clear_quarantine(client, &name)
                    .await
                    .map_err(LoadError::Txn)
            })
            .await
            .map_err(|e| e.within(&name))?;
            cleared = true;
        }
        if let (Some((frontier, me)), Some((first, last))) = (ctx.align, batch.event_times) {
            // A paced replay is due at its first event: waiting for the leading files to pass
            // its last would wait for the wall clock (up to the lead for a batch holding an
            // early click line), then release what piled up behind it in a burst.
            let last = ctx.pace.is_none().then_some(last);
            frontier.wait_turn(me, first, last).await;
        }
        if let (Some(pace), Some(event_times)) = (ctx.pace, batch.event_times) {
            pace.wait_for(event_times).await;
        }
        if let Some(backlog) = ctx.backlog {
            backlog.wait_below(&ctx.stats.backlog_waits).await;
        }
        // Rejects are reported before the batch commits: after a crash a malformed line may
        // be reported twice, never lost.
        ctx.rejects.lines(ctx.stats, &name, &batch.rejects)?;
        let count = batch.records.len() as u64;
        let marks = sink.marks(&batch.records);
        let source = &*source;
        let committed = retry_transient_with(random, &name, || {
            client.run(|txn| {
                let (found, batch, marks) = (&found, &batch, &marks);
                async move {
                    if source.committed(&txn).await? != *found {
                        // Another loader got here first: reload from the new offset.
                        return Ok(false);
                    }
                    sink.write(&txn, &batch.records, &batch.id)?;
                    observers::time::mark_many(&txn, marks).await?;
                    source.write_offset(&txn, found, &batch.offset)?;
                    Ok::<_, LoadError>(true)
                }
            })
        })
        .await
        .map_err(|e| e.within(&name))?;
        if !committed {
            continue;
        }
        ctx.stats.loaded.fetch_add(count, Ordering::Relaxed);
        ctx.stats.batches.fetch_add(1, Ordering::Relaxed);
        ctx.stats.lines.fetch_add(batch.units, Ordering::Relaxed);
        ctx.stats
            .long_lines
            .fetch_add(batch.long_lines, Ordering::Relaxed);
        ctx.stats
            .nul_bytes
            .fetch_add(batch.nul_bytes, Ordering::Relaxed);
        loaded += count;
        if let (Some(injector), Some((_, latest))) = (ctx.watermarks, batch.event_times) {
            injector.loaded(&name, latest);
            // The batch is loaded whatever happens to the publication: a failed one is
            // reported and made again after the next batch.
            let options = &ctx.options;
            if let Err(e) = injector
                .publish(client, &options.watermarks, options.follow, false)
                .await
            {
                tracing::warn!(source = %name, error = %e, "publishing the loader's watermark failed; tried again after the next batch");
            }
        }
    }
}

/// How long a loader keeps retrying a batch that fails with transient store or oracle errors
/// (busy or unreachable servers, lost replies, an unknown commit outcome) before it gives up.
/// Retrying is safe: each batch commits with its source's offset and rechecks it first, so
/// a batch that did commit is not written twice.
pub const TRANSIENT_RETRY_FOR: Duration = Duration::from_secs(120);

/// Runs `attempt` until it succeeds, fails with a non-transient error, or
/// [`TRANSIENT_RETRY_FOR`] has passed, with jittered exponential backoff (10 ms to 2 s),
/// the jitter drawn from the thread's generator. [`load_source`] uses
/// [`retry_transient_with`] and its client's random source.
pub async fn retry_transient<T, E, F, Fut>(name: &str, attempt: F) -> Result<T, E>
where
    E: RunError + std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    retry_transient_with(&percolator::random::ThreadRandom, name, attempt).await
}

/// [`retry_transient`] with the jitter drawn from `random` (a client's
/// [`percolator::ClientConfig::random`], which a deterministic simulation draws from its
/// seed). The time spent is measured on `tokio::time::Instant` (the monotonic clock; paused
/// time in tests and simulations).
pub async fn retry_transient_with<T, E, F, Fut>(
    random: &dyn percolator::random::RandomSource,
    name: &str,
    mut attempt: F,
) -> Result<T, E>
where
    E: RunError + std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let started = tokio::time::Instant::now();
    let mut backoff = Duration::from_millis(10);
    loop {
        match attempt().await {
            Err(e)
                if e.as_txn_error().is_some_and(TxnError::is_transient)
                    && started.elapsed() < TRANSIENT_RETRY_FOR =>
            {
                tracing::warn!(source = name, error = %e, "transient error; retrying the batch");
                let jitter = random.range_f64(0.5, 1.0);
                tokio::time::sleep(backoff.mul_f64(jitter)).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch is due when its earliest record is: one record seconds ahead of the others (a
    /// click logged before its query) does not hold the batch, nor the files in step with it.
    #[test]
    fn a_batch_is_due_at_its_earliest_record() {
        let pace = Pace::starting_now(1_000_000);
        let due = pace.batch_due((1_000_040, 1_008_000));
        assert_eq!(due - pace.started, Duration::from_millis(40));
        // Records before the origin are due at once.
        assert_eq!(pace.batch_due((999_000, 1_000_010)), pace.started);
    }
}
