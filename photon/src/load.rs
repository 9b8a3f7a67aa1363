//! `photon load`: loader jobs writing query and click logs into their tables. Each batch
//! commits together with the file's offset, so a loader killed at any moment and restarted
//! neither skips nor repeats input. A log is known by its first bytes, not its path
//! (`load/identity.rs`): renamed, rotated or moved, it is loaded once, and a renamed log is
//! followed to its end (`load/files.rs`).

mod backlog;
mod files;
mod frontier;
mod identity;
mod progress;
mod rejects;
pub mod status;

pub use backlog::Backlog;
pub use files::LogFile;
pub use frontier::Frontier;
pub use identity::file_key;
pub use progress::FINGERPRINT_WINDOW;
pub use rejects::ECHO_PREFIX;

use crate::event::{Click, Kind, Query};
use crate::schema::{
    click_cell, declare_columns, now_ms, offset_cell, query_cell, wake_check_cell, Stored,
};
use percolator::{Client, TxnError};
use progress::{fingerprint, loaded_tail, Record};
use rejects::Rejected;
use std::collections::HashSet;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Loader settings.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Lines per transaction.
    pub batch: usize,
    /// Where malformed lines are reported (`file:line: error: text`).
    pub rejects: PathBuf,
    /// Backpressure: before each batch, wait while more than this many notifications wait
    /// for the join (see [`Backlog`]); 0: no bound.
    pub max_backlog: usize,
}

/// The default of `--max-backlog`: at a few thousand joins a second, a queue of a few
/// seconds at most, and enough to keep every worker's batches full.
pub const DEFAULT_MAX_BACKLOG: usize = 10_000;

/// Loader counters.
#[derive(Debug, Default)]
pub struct LoadStats {
    /// Events written.
    pub loaded: AtomicU64,
    /// Malformed lines reported.
    pub rejected: AtomicU64,
    /// Transactions committed.
    pub batches: AtomicU64,
    /// Input lines behind the committed batches of this run (events, malformed and blank
    /// lines): the position [`crate::progress`] shows against [`lines_to_load`].
    pub lines: AtomicU64,
    /// Batches that waited for the notification backlog to fall below the bound.
    pub backlog_waits: AtomicU64,
    /// Times the backlog was counted in the store (each a scan of up to the bound).
    pub backlog_counts: AtomicU64,
    /// Files named like logs that could not be opened (each reported once).
    pub unreadable: AtomicU64,
    /// The reports of unreadable files made, not to repeat them while following.
    unreadable_seen: Mutex<HashSet<String>>,
}

impl LoadStats {
    /// The line `photon load` prints at the end: events, batches, time taken, and where the
    /// malformed lines went (the rejects file is only written when a line is rejected).
    pub fn summary(&self, elapsed: Duration, rejects: &Path) -> String {
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
        let loaded = self.loaded.load(Ordering::Relaxed);
        format!(
            "loaded {} events in {} batches in {:.1?} ({} events/s); {malformed}",
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
    /// A log or rejects file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A transaction failed for good.
    #[error("loading {path}: {source}")]
    Txn {
        /// The file being loaded.
        path: PathBuf,
        /// The error.
        source: TxnError,
    },
    /// The bytes of a log below its stored offset changed since they were loaded, though its
    /// first bytes (what identifies it) did not: the file was rewritten or truncated in
    /// place (logs may only be appended to).
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
    /// The stored offset of a file is not understood.
    #[error("{path}: stored loader offset {value:?} is corrupt")]
    CorruptOffset {
        /// The file.
        path: PathBuf,
        /// The stored value.
        value: String,
    },
}

/// Log files of `dir` (queries*.jsonl, clicks*.jsonl), in name order (what `photon verify`
/// reads; the loader also follows renamed logs, see `load/files.rs`).
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
    Ok(files::discover(client, dir).await?.0)
}

/// A parsed line ready to be written.
enum Parsed {
    Query(Query),
    Click(Click),
}

fn parse_line(kind: Kind, line: &str) -> Result<Parsed, String> {
    match kind {
        Kind::Query => serde_json::from_str::<Query>(line)
            .map(Parsed::Query)
            .map_err(|e| e.to_string()),
        Kind::Click => serde_json::from_str::<Click>(line)
            .map(Parsed::Click)
            .map_err(|e| e.to_string()),
    }
}

/// Replays logs at the rate they were written: a batch commits no earlier than its last
/// event's event time, counted from `event_origin_ms` (event time) = `started` (wall clock).
/// A generated log replayed this way offers the store a fixed rate of events, which is how
/// latency is measured below saturation (`photon demo --rate`); a loader that falls behind
/// the pace loads as fast as it can until it catches up.
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

    /// Waits until event time `event_time_ms` is due.
    async fn wait_for(&self, event_time_ms: u64) {
        let due = self.started
            + Duration::from_millis(event_time_ms.saturating_sub(self.event_origin_ms));
        tokio::time::sleep_until(due.into()).await;
    }
}

/// Loads `path` from its stored offset to its last complete line. Returns events loaded.
#[allow(clippy::too_many_arguments)]
pub async fn load_file(
    client: &Client,
    path: &Path,
    kind: Kind,
    options: &LoadOptions,
    stats: &LoadStats,
    rejects: &Mutex<Option<std::fs::File>>,
    align: Option<(&Frontier, usize)>,
    pace: Option<&Pace>,
    backlog: Option<&Backlog>,
) -> Result<u64, LoadError> {
    let result = load_file_aligned(
        client, path, kind, options, stats, rejects, align, pace, backlog,
    )
    .await;
    if let Some((frontier, me)) = align {
        frontier.finish(me);
    }
    result
}

#[allow(clippy::too_many_arguments)]
async fn load_file_aligned(
    client: &Client,
    path: &Path,
    kind: Kind,
    options: &LoadOptions,
    stats: &LoadStats,
    rejects: &Mutex<Option<std::fs::File>>,
    align: Option<(&Frontier, usize)>,
    pace: Option<&Pace>,
    backlog: Option<&Backlog>,
) -> Result<u64, LoadError> {
    // The events written here must notify the join observers, whoever built the client.
    declare_columns(client);
    let io = |source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let txn_error = |source| LoadError::Txn {
        path: path.to_path_buf(),
        source,
    };
    let mut loaded = 0;
    loop {
        // A file gone (or turned into something else) since it was listed is reported, and
        // the other files load on.
        let (mut file, head) = match identity::open(path) {
            Ok(opened) => opened,
            Err(e) => {
                rejects::unreadable(options, rejects, stats, path, &e)?;
                return Ok(loaded);
            }
        };
        // Where we are, as committed (another loader of the same file may have moved it).
        let found = retry_transient(path, || async {
            let txn = client.begin().await?;
            identity::lookup(&txn, path, &head).await
        })
        .await
        .map_err(txn_error)??;
        let progress = found
            .as_ref()
            .map(|f| f.record.progress)
            .unwrap_or_default();
        // The loaded bytes just before the offset, checked against the stored fingerprint;
        // extended with each line read, for the fingerprint committed with the batch.
        let mut tail = loaded_tail(&mut file, path, &progress)?;
        file.seek(SeekFrom::Start(progress.offset)).map_err(io)?;
        let mut reader = BufReader::new(file);
        let mut batch = Vec::new();
        let mut bad = Vec::new();
        let mut next = progress;
        // Lines are read as bytes: one that is not UTF-8 is rejected like any malformed line.
        let mut buf = Vec::new();
        while batch.len() < options.batch.max(1) {
            buf.clear();
            let n = reader.read_until(b'\n', &mut buf).map_err(io)?;
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
                Ok(text) => parse_line(kind, text),
                Err(e) => Err(format!("invalid UTF-8 at byte {}", e.valid_up_to())),
            };
            match parsed {
                Ok(p) => batch.push(p),
                Err(error) => bad.push(Rejected {
                    line: next.line,
                    error,
                    text: line.to_vec(),
                }),
            }
        }
        if next.offset == progress.offset {
            return Ok(loaded);
        }
        next.fingerprint = Some(fingerprint(&tail));
        // The key the record goes under now (it moves when a young log reaches the window,
        // or was found under another path).
        let key = identity::target_key(reader.get_mut(), path, &head, next.offset)?;
        let record = Record {
            progress: next,
            kind: Some(kind),
            hint: Some(identity::canonical(path)),
        }
        .encode();
        let event_times = batch.iter().map(|p| match p {
            Parsed::Query(q) => q.event_time,
            Parsed::Click(c) => c.event_time,
        });
        if let Some((frontier, me)) = align {
            if let Some(at) = event_times.clone().min() {
                frontier.wait_turn(me, at).await;
            }
        }
        if let (Some(pace), Some(last)) = (pace, event_times.max()) {
            pace.wait_for(last).await;
        }
        if let Some(backlog) = backlog {
            backlog.wait_below(&stats.backlog_waits).await;
        }
        // Rejects are reported before the batch commits: after a crash a malformed line may
        // be reported twice, never lost.
        rejects::lines(options, rejects, stats, path, &bad)?;
        let count = batch.len() as u64;
        let loaded_at = now_ms();
        let expected = progress;
        let result = retry_transient(path, || {
            client.run(|txn| {
                let (key, record, head, found) = (&key, &record, &head, &found);
                let batch = &batch;
                async move {
                    let current = identity::lookup(&txn, path, head)
                        .await?
                        .map_err(|e| TxnError::User(e.to_string()))?;
                    if current != *found {
                        // Another loader got here first: reload from the new offset.
                        return Ok(false);
                    }
                    if let Some(old) = found.as_ref().filter(|f| f.key != *key) {
                        txn.delete(offset_cell(&old.key));
                    }
                    for p in batch {
                        match p {
                            Parsed::Query(q) => txn.set(
                                query_cell(&q.query_id),
                                serde_json::to_vec(&Stored {
                                    event: q,
                                    loaded_at,
                                })
                                .unwrap_or_default(),
                            ),
                            Parsed::Click(c) => txn.set(
                                click_cell(&c.click_id),
                                serde_json::to_vec(&Stored {
                                    event: c,
                                    loaded_at,
                                })
                                .unwrap_or_default(),
                            ),
                        }
                    }
                    // The batch's queries, for the wake check that runs once it commits
                    // (`join::CheckWakes`): clicks may have parked on them meanwhile.
                    let queries: Vec<&str> = batch
                        .iter()
                        .filter_map(|p| match p {
                            Parsed::Query(q) => Some(q.query_id.as_str()),
                            Parsed::Click(_) => None,
                        })
                        .collect();
                    if !queries.is_empty() {
                        txn.set(
                            wake_check_cell(key, expected.offset),
                            serde_json::to_vec(&queries).unwrap_or_default(),
                        );
                    }
                    txn.set(offset_cell(key), record.as_bytes());
                    Ok(true)
                }
            })
        })
        .await
        .map_err(txn_error)?;
        if !result {
            continue;
        }
        if let Some(backlog) = backlog {
            backlog.loaded(count as usize).await;
        }
        stats.loaded.fetch_add(count, Ordering::Relaxed);
        stats.batches.fetch_add(1, Ordering::Relaxed);
        stats
            .lines
            .fetch_add(next.line - progress.line, Ordering::Relaxed);
        loaded += count;
    }
}

/// How long a loader keeps retrying a batch that fails with transient store or oracle errors
/// (busy or unreachable servers, lost replies, an unknown commit outcome) before it gives up.
/// Retrying is safe: each batch commits with its file's offset and rechecks it first, so a
/// batch that did commit is not written twice.
pub const TRANSIENT_RETRY_FOR: Duration = Duration::from_secs(120);

/// Runs `attempt` until it succeeds, fails with a non-transient error, or
/// [`TRANSIENT_RETRY_FOR`] has passed, with jittered exponential backoff (10 ms to 2 s).
async fn retry_transient<T, F, Fut>(path: &Path, mut attempt: F) -> Result<T, TxnError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, TxnError>>,
{
    let started = std::time::Instant::now();
    let mut backoff = Duration::from_millis(10);
    loop {
        match attempt().await {
            Err(e) if e.is_transient() && started.elapsed() < TRANSIENT_RETRY_FOR => {
                tracing::warn!(file = %path.display(), error = %e, "transient error; retrying the batch");
                let jitter = rand::random::<f64>() * 0.5 + 0.5;
                tokio::time::sleep(backoff.mul_f64(jitter)).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
            other => return other,
        }
    }
}

/// Lines of the log files of `dir` not loaded yet: complete lines in each file beyond its
/// stored offset (what a [`load_dir`] started now would read; the total of its progress).
/// Files that cannot be opened count nothing.
pub async fn lines_to_load(client: &Client, dir: &Path) -> Result<u64, LoadError> {
    let mut total = 0;
    let (files, _) = files::discover(client, dir).await?;
    for LogFile { path, .. } in files {
        let Some((file, loaded)) = status::committed(client, &path).await? else {
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

/// Event time a file may run ahead of the others in [`load_dir`].
pub const ALIGN_SLACK_MS: u64 = 1_000;

/// Loads every log file of `dir` once, files in parallel and in step by event time (see
/// [`Frontier`]), so queries and clicks interleave as they happened.
pub async fn load_dir(
    client: &Client,
    dir: &Path,
    options: &LoadOptions,
    stats: &LoadStats,
) -> Result<u64, LoadError> {
    load_dir_paced(client, dir, options, stats, None).await
}

/// [`load_dir`], each batch committed no earlier than `pace` says its events are due.
pub async fn load_dir_paced(
    client: &Client,
    dir: &Path,
    options: &LoadOptions,
    stats: &LoadStats,
    pace: Option<&Pace>,
) -> Result<u64, LoadError> {
    let rejects = Mutex::new(None);
    let (files, unreadable) = files::discover(client, dir).await?;
    for u in &unreadable {
        rejects::unreadable(options, &rejects, stats, &u.path, &u.error)?;
    }
    let frontier = Frontier::new(files.len(), ALIGN_SLACK_MS);
    let backlog =
        (options.max_backlog > 0).then(|| Backlog::new(client.clone(), options.max_backlog));
    let loads = files.iter().enumerate().map(|(i, LogFile { path, kind })| {
        load_file(
            client,
            path,
            *kind,
            options,
            stats,
            &rejects,
            Some((&frontier, i)),
            pace,
            backlog.as_ref(),
        )
    });
    let mut total = 0;
    let results = futures::future::join_all(loads).await;
    if let Some(backlog) = &backlog {
        stats
            .backlog_counts
            .fetch_add(backlog.counts(), Ordering::Relaxed);
    }
    for r in results {
        total += r?;
    }
    Ok(total)
}

/// Loads `input` again and again, every `poll`, picking up what was appended to its files and
/// new files, until `stop` resolves (`photon load --follow`).
pub async fn follow_dir(
    client: &Client,
    input: &Path,
    options: &LoadOptions,
    stats: &LoadStats,
    poll: Duration,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), LoadError> {
    tokio::pin!(stop);
    loop {
        load_dir(client, input, options, stats).await?;
        tokio::select! {
            _ = &mut stop => return Ok(()),
            _ = tokio::time::sleep(poll) => {}
        }
    }
}
