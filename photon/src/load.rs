//! `photon load`: loader jobs writing query and click logs into their tables. Each batch
//! commits together with the file's offset, so a loader killed at any moment and restarted
//! neither skips nor repeats input.

mod backlog;
mod frontier;
mod progress;
pub mod status;

pub use backlog::Backlog;
pub use frontier::Frontier;
pub use progress::FINGERPRINT_WINDOW;

use crate::event::{Click, Kind, Query};
use crate::schema::{
    click_cell, declare_observed, now_ms, offset_cell, query_cell, wake_check_cell, Stored,
};
use percolator::{Client, TxnError};
use progress::{fingerprint, loaded_tail, parse_progress};
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
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
    /// The bytes of a log below its stored offset changed since they were loaded: the file
    /// was rewritten or truncated in place (logs may only be appended to).
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

/// The identity of a log file in the loader table: its canonical path.
pub fn file_key(path: &Path) -> String {
    std::fs::canonicalize(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string()
}

/// Log files of `dir` (queries*.jsonl, clicks*.jsonl), in name order.
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

/// A malformed line: its number, what is wrong, and the line as it was (maybe not UTF-8).
struct Rejected {
    line: u64,
    error: String,
    text: Vec<u8>,
}

/// Bytes of a rejected line echoed to the log (the rejects file keeps the whole line).
pub const ECHO_PREFIX: usize = 200;

/// The first [`ECHO_PREFIX`] bytes of `text`, printable: control characters and bytes that
/// are not UTF-8 escaped (`\n`, `\xff`), with the length of the rest if cut.
fn echo(text: &[u8]) -> String {
    let shown = &text[..text.len().min(ECHO_PREFIX)];
    let mut out = String::new();
    for chunk in shown.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c.is_control() {
                out.extend(c.escape_default());
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    if text.len() > shown.len() {
        out.push_str(&format!("... ({} more bytes)", text.len() - shown.len()));
    }
    out
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
    declare_observed(client);
    let key = file_key(path);
    let io = |source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut loaded = 0;
    loop {
        // Where we are, as committed (another loader of the same file may have moved it).
        let progress = {
            let v = retry_transient(path, || async {
                let txn = client.begin().await?;
                txn.get(&offset_cell(&key)).await
            })
            .await
            .map_err(|source| LoadError::Txn {
                path: path.to_path_buf(),
                source,
            })?;
            parse_progress(path, v)?
        };
        let mut file = std::fs::File::open(path).map_err(io)?;
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
        if !bad.is_empty() {
            let mut guard = rejects.lock().unwrap_or_else(|p| p.into_inner());
            if guard.is_none() {
                let f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&options.rejects)
                    .map_err(|source| LoadError::Io {
                        path: options.rejects.clone(),
                        source,
                    })?;
                *guard = Some(f);
            }
            if let Some(f) = guard.as_mut() {
                for r in &bad {
                    let at = format!("{}:{}: {}", path.display(), r.line, r.error);
                    // The log gets a bounded, escaped prefix; the rejects file the whole line.
                    tracing::warn!("rejected {at}: {}", echo(&r.text));
                    let mut entry = format!("{at}: ").into_bytes();
                    entry.extend_from_slice(&r.text);
                    entry.push(b'\n');
                    f.write_all(&entry).map_err(|source| LoadError::Io {
                        path: options.rejects.clone(),
                        source,
                    })?;
                }
            }
            stats
                .rejected
                .fetch_add(bad.len() as u64, Ordering::Relaxed);
        }
        let count = batch.len() as u64;
        let loaded_at = now_ms();
        let expected = progress;
        let result = retry_transient(path, || {
            client.run(|txn| {
                let key = key.clone();
                let batch = &batch;
                async move {
                    let current =
                        parse_progress(Path::new(&key), txn.get(&offset_cell(&key)).await?)
                            .map_err(|e| TxnError::User(e.to_string()))?;
                    if current != expected {
                        // Another loader got here first: reload from the new offset.
                        return Ok(false);
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
                            wake_check_cell(&key, expected.offset),
                            serde_json::to_vec(&queries).unwrap_or_default(),
                        );
                    }
                    txn.set(offset_cell(&key), next.encode());
                    Ok(true)
                }
            })
        })
        .await
        .map_err(|source| LoadError::Txn {
            path: path.to_path_buf(),
            source,
        })?;
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
pub async fn lines_to_load(client: &Client, dir: &Path) -> Result<u64, LoadError> {
    let mut total = 0;
    for (path, _) in log_files(dir)? {
        let key = file_key(&path);
        let stored = retry_transient(&path, || async {
            let txn = client.begin().await?;
            txn.get(&offset_cell(&key)).await
        })
        .await
        .map_err(|source| LoadError::Txn {
            path: path.clone(),
            source,
        })?;
        let loaded = parse_progress(&path, stored)?;
        let io = |source| LoadError::Io {
            path: path.clone(),
            source,
        };
        let mut file = std::fs::File::open(&path).map_err(io)?;
        file.seek(SeekFrom::Start(loaded.offset)).map_err(io)?;
        let mut reader = BufReader::with_capacity(1 << 16, file);
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
    let files = log_files(dir)?;
    let frontier = Frontier::new(files.len(), ALIGN_SLACK_MS);
    let backlog =
        (options.max_backlog > 0).then(|| Backlog::new(client.clone(), options.max_backlog));
    let loads = files.iter().enumerate().map(|(i, (path, kind))| {
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
