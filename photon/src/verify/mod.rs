//! `photon verify`: checks the joined output against the input logs.

mod joined;

use crate::event::line::EventLine;
use crate::event::{Joined, Kind};
use crate::load::{files_to_load, LogFile};
use crate::outcome::Outcome;
use crate::schema::{JOINED, OUTCOMES};
use hdrhistogram::Histogram;
use percolator::Client;
use percolator::FastMap;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// The verifier's findings.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    /// Distinct clicks in the input.
    pub clicks: u64,
    /// Clicks whose query is in the input (and was not rejected by the boundary).
    pub joinable: u64,
    /// Joinable clicks joined exactly once.
    pub joined: u64,
    /// Clicks joined more than once.
    pub duplicates: u64,
    /// Joinable clicks not joined.
    pub lost: u64,
    /// Joins of clicks that are not joinable (should be 0).
    pub unexpected: u64,
    /// Non-joinable clicks by reason (`query_missing`, `expired` with the horizon, `too_old`,
    /// ...). A click expired by the join (no query within `--horizon-secs` of its event
    /// time) and never joined counts here even if its query was loaded later.
    pub reasons: BTreeMap<String, u64>,
    /// Arrival (later of click and query load) to join commit, percentiles in ms.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Event time of the oldest joinable click not yet joined (ms since epoch), if any.
    pub low_watermark_ms: Option<u64>,
    /// Malformed input lines skipped.
    pub malformed_lines: u64,
    /// Log files (named like logs) that could not be read, with why: verify fails on them
    /// unless told to verify the rest ([`VerifyOptions::partial_input`]), and then they are
    /// listed here and printed as a warning.
    pub unread: Vec<String>,
}

impl Report {
    /// Whether the output is exactly-once with nothing lost.
    pub fn ok(&self) -> bool {
        self.duplicates == 0 && self.lost == 0 && self.unexpected == 0
    }

    /// What made the report fail, as the summary line says it (empty when it is OK).
    pub fn failures(&self) -> Vec<String> {
        let mut why = Vec::new();
        if self.duplicates > 0 {
            why.push(format!("{} clicks joined more than once", self.duplicates));
        }
        if self.unexpected > 0 {
            why.push(format!(
                "{} joins of clicks that are not joinable",
                self.unexpected
            ));
        }
        if self.lost > 0 {
            why.push(format!("{} joinable clicks not joined", self.lost));
        }
        why
    }
}

/// The summary `photon verify` (and the demo) print, one figure a line.
impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = self;
        writeln!(f, "clicks            {}", r.clicks)?;
        writeln!(f, "joinable          {}", r.joinable)?;
        writeln!(f, "joined once       {}", r.joined)?;
        writeln!(f, "duplicates        {}", r.duplicates)?;
        writeln!(f, "lost              {}", r.lost)?;
        writeln!(f, "unexpected        {}", r.unexpected)?;
        writeln!(f, "malformed lines   {}", r.malformed_lines)?;
        for unread in &r.unread {
            writeln!(f, "WARNING: not read (--partial-input): {unread}")?;
        }
        for (reason, n) in &r.reasons {
            writeln!(f, "not joinable      {n:>8}  {reason}")?;
        }
        writeln!(
            f,
            "latency (arrival to join) p50 {} ms, p90 {} ms, p99 {} ms",
            r.p50_ms, r.p90_ms, r.p99_ms
        )?;
        match r.low_watermark_ms {
            Some(w) => writeln!(f, "join low watermark {w} (oldest unjoined joinable click)")?,
            None => writeln!(f, "join low watermark: none (every joinable click joined)")?,
        }
        if r.ok() {
            writeln!(f, "OK: every joinable click joined exactly once")?;
        } else {
            writeln!(f, "FAILED: {}", r.failures().join(", "))?;
        }
        Ok(())
    }
}

/// Errors of [`export`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExportError {
    /// Reading the store failed.
    #[error(transparent)]
    Txn(#[from] percolator::TxnError),
    /// Writing the output failed.
    #[error("writing the export")]
    Write(#[source] std::io::Error),
}

/// Writes every joined event to `w` as one JSON line, streamed page by page (bounded
/// memory) in click id order; returns how many.
pub async fn export(client: &Client, w: &mut dyn std::io::Write) -> Result<u64, ExportError> {
    let mut n = 0u64;
    let mut failed: Option<std::io::Error> = None;
    for_each_cell(client, JOINED, |_cell, value| {
        if failed.is_some() {
            return;
        }
        match w.write_all(&value).and_then(|()| w.write_all(b"\n")) {
            Ok(()) => n += 1,
            Err(e) => failed = Some(e),
        }
    })
    .await?;
    if let Some(e) = failed {
        return Err(ExportError::Write(e));
    }
    w.flush().map_err(ExportError::Write)?;
    Ok(n)
}

/// Errors of the verifier.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// An input file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// Reading the store failed.
    #[error(transparent)]
    Txn(#[from] percolator::TxnError),
    /// Listing the input failed.
    #[error(transparent)]
    Load(#[from] crate::load::LoadError),
    /// Log files of the input could not be read (without [`VerifyOptions::partial_input`]).
    #[error(
        "{} log file(s) of the input could not be read, so the report would miss their \
         clicks: {} (--partial-input verifies the rest with a warning)",
        files.len(),
        files.join("; ")
    )]
    Unreadable {
        /// Each file with why.
        files: Vec<String>,
    },
    /// The input directory holds no log (without [`VerifyOptions::partial_input`]).
    #[error(
        "no queries*.jsonl or clicks*.jsonl in {dir}: nothing to verify against \
         (--partial-input accepts it with a warning)"
    )]
    NoLogs {
        /// The directory.
        dir: String,
    },
}

impl VerifyError {
    /// Whether the error is about the input logs (not the store).
    pub fn is_input(&self) -> bool {
        matches!(
            self,
            VerifyError::Io { .. }
                | VerifyError::Load(_)
                | VerifyError::Unreadable { .. }
                | VerifyError::NoLogs { .. }
        )
    }
}

/// How verify treats its input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerifyOptions {
    /// Verify what can be read: a log file that cannot be read, or a directory without logs,
    /// is a warning in the report ([`Report::unread`]) instead of an error.
    pub partial_input: bool,
    /// The loader's longest line ([`crate::load::LoadOptions::max_line_bytes`]): a longer
    /// line counts as malformed, as the loader rejected it (default: the loader's default).
    pub max_line_bytes: usize,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        VerifyOptions {
            partial_input: false,
            max_line_bytes: crate::load::DEFAULT_MAX_LINE_BYTES,
        }
    }
}

/// The logs of `input` verify reads, after checking that every file named like a log is
/// among them and that there is one at all; what is missing is an error, or with
/// `partial_input` a warning (returned).
async fn input_files(
    client: &Client,
    input: &Path,
    options: VerifyOptions,
) -> Result<(Vec<LogFile>, Vec<String>), VerifyError> {
    let files = files_to_load(client, input).await?;
    let mut unread = Vec::new();
    let entries = std::fs::read_dir(input).map_err(|source| VerifyError::Io {
        path: input.display().to_string(),
        source,
    })?;
    for entry in entries.flatten() {
        let path = entry.path();
        if Kind::of_file(&path).is_none() || files.iter().any(|f| f.path == path) {
            continue;
        }
        // Named like a log, left out by the listing: say why.
        // The loader's opener: never waits on a FIFO, names what a file that is not a
        // regular one is.
        let why = match app::load::lines::open_regular(&path) {
            Err(e) => e.to_string(),
            Ok(_) => "left out by the loader's listing".to_string(),
        };
        unread.push(format!("{}: {why}", path.display()));
    }
    unread.sort();
    if !unread.is_empty() && !options.partial_input {
        return Err(VerifyError::Unreadable { files: unread });
    }
    if files.is_empty() {
        if !options.partial_input {
            return Err(VerifyError::NoLogs {
                dir: input.display().to_string(),
            });
        }
        unread.push(format!(
            "{}: no queries*.jsonl or clicks*.jsonl",
            input.display()
        ));
    }
    for u in &unread {
        tracing::warn!(file = %u, "not read (--partial-input)");
    }
    Ok((files, unread))
}

/// The reason verify gives for clicks that expired.
fn expired_reason(horizon_secs: Option<u64>) -> String {
    match horizon_secs {
        Some(s) => {
            format!("expired (query arrived past the horizon, --horizon-secs {s}, or never)")
        }
        None => "expired (query arrived past the horizon, or never)".to_string(),
    }
}

/// Calls `each` with every cell of `table` that holds a value, in (row, column) order,
/// reading one snapshot page by page, so memory stays bounded however large the table is.
pub async fn for_each_cell(
    client: &Client,
    table: &str,
    mut each: impl FnMut(percolator::Cell, Vec<u8>),
) -> Result<(), percolator::TxnError> {
    let snapshot = client.snapshot().await?;
    let mut after: Option<percolator::Cell> = None;
    loop {
        let page = snapshot
            .scan_page(table.as_bytes(), b"", None, after.as_ref(), PAGE)
            .await?;
        let full = page.len() >= PAGE;
        for (cell, value) in page {
            after = Some(cell.clone());
            each(cell, value);
        }
        if !full {
            return Ok(());
        }
    }
}

/// Cells per page of [`for_each_cell`].
const PAGE: usize = 4096;

/// Every joined event in the store, by click id (more than one means a duplicate). Holds
/// them all in memory: for large outputs use [`for_each_cell`] over `JOINED`.
pub async fn joined_events(
    client: &Client,
) -> Result<HashMap<String, Vec<Joined>>, percolator::TxnError> {
    let mut out: HashMap<String, Vec<Joined>> = HashMap::new();
    for_each_cell(client, JOINED, |cell, value| {
        if let Ok(j) = serde_json::from_slice::<Joined>(&value) {
            out.entry(String::from_utf8_lossy(&cell.row).into_owned())
                .or_default()
                .push(j);
        }
    })
    .await?;
    Ok(out)
}

/// What verify keeps per input click: a few bytes besides its id.
#[derive(Clone, Copy, Debug, Default)]
struct ClickState {
    /// Index of its query id in the interned query ids.
    query: u32,
    event_time: u64,
    /// Joined events found for it.
    joins: u32,
    /// Its recorded outcome, if any (one it does not know counts as none).
    outcome: Option<Outcome>,
}

/// Compares the store's output with the logs in `input`. Memory: the input's click ids
/// and query ids with a few bytes each; the store's output is streamed page by page.
pub async fn verify(client: &Client, input: &Path) -> Result<Report, VerifyError> {
    verify_with(client, input, None).await
}

/// [`verify`], also counting every joined event in `minutes` (the run's timeline) in the
/// same pass over the output.
pub async fn verify_with(
    client: &Client,
    input: &Path,
    minutes: Option<&mut crate::timeline::Minutes>,
) -> Result<Report, VerifyError> {
    let options = VerifyOptions::default();
    let (files, unread) = input_files(client, input, options).await?;
    let mut report = Input::read(&files, options.max_line_bytes)?
        .check(client, minutes)
        .await?;
    report.unread = unread;
    Ok(report)
}

/// How often [`verify_until`] tries again.
pub const RETRY_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether waiting could still make `report` OK: only clicks not joined yet are missing
/// (duplicates and unexpected joins are never undone).
pub fn may_still_pass(report: &Report) -> bool {
    !report.ok() && report.duplicates == 0 && report.unexpected == 0
}

/// [`verify`] again and again (the logs read once) until the report is OK, cannot become
/// OK any more ([`may_still_pass`] is false), or `deadline` has passed; returns the last
/// report. Before each retry `on_retry` gets the report and the time left.
pub async fn verify_until(
    client: &Client,
    input: &Path,
    deadline: std::time::Instant,
    on_retry: impl FnMut(&Report, std::time::Duration),
) -> Result<Report, VerifyError> {
    verify_until_with(client, input, VerifyOptions::default(), deadline, on_retry).await
}

/// [`verify_until`] with `options` (a deadline already passed: one check).
pub async fn verify_until_with(
    client: &Client,
    input: &Path,
    options: VerifyOptions,
    deadline: std::time::Instant,
    mut on_retry: impl FnMut(&Report, std::time::Duration),
) -> Result<Report, VerifyError> {
    let (files, unread) = input_files(client, input, options).await?;
    let mut logs = Input::read(&files, options.max_line_bytes)?;
    loop {
        let mut report = logs.check(client, None).await?;
        report.unread = unread.clone();
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if !may_still_pass(&report) || left.is_zero() {
            return Ok(report);
        }
        on_retry(&report, left);
        tokio::time::sleep(RETRY_EVERY.min(left)).await;
    }
}

/// The line `photon verify --wait` prints before each retry: what is still missing.
pub fn retry_line(report: &Report, left: std::time::Duration) -> String {
    use crate::human::{count, duration};
    format!(
        "verify: {} of {} joinable clicks not joined yet; again in {} ({} left)",
        count(report.lost),
        count(report.joinable),
        duration(RETRY_EVERY.min(left)),
        duration(left)
    )
}

/// The input logs as verify keeps them: every click's query (interned) and event time, and
/// which queries are defined.
struct Input {
    clicks: FastMap<String, ClickState>,
    defined: Vec<bool>,
    malformed_lines: u64,
}

impl Input {
    /// The clicks and queries of `files`, lines over `max_line_bytes` counted malformed.
    fn read(files: &[LogFile], max_line_bytes: usize) -> Result<Input, VerifyError> {
        let mut malformed_lines = 0;
        // Query ids, interned: those seen in clicks or in the query logs; `defined[i]` says
        // whether query `i` is in the input.
        // A fast hash: these maps hold every click and query id of the input (SipHash was
        // a fifth of verification's CPU).
        let mut query_ids: FastMap<String, u32> = FastMap::default();
        let mut defined: Vec<bool> = Vec::new();
        fn intern(id: &str, query_ids: &mut FastMap<String, u32>, defined: &mut Vec<bool>) -> u32 {
            if let Some(&i) = query_ids.get(id) {
                return i;
            }
            let i = query_ids.len() as u32;
            query_ids.insert(id.to_owned(), i);
            defined.push(false);
            i
        }
        let mut clicks: FastMap<String, ClickState> = FastMap::default();
        for LogFile { path, kind } in files {
            // The lines the loader reads (`*.gz` decompressed, NULs before a line dropped,
            // lines over its limit counted malformed, as it rejects them), from a regular
            // file only: a FIFO named like a log would block a plain open.
            let io_error = |source| VerifyError::Io {
                path: path.display().to_string(),
                source,
            };
            let mut lines =
                app::load::lines::LogLines::open(path, max_line_bytes).map_err(io_error)?;
            while let Some(line) = lines.next_line().map_err(io_error)? {
                let line = match line {
                    app::load::lines::LogLine::Text(line) => line,
                    app::load::lines::LogLine::TooLong => {
                        malformed_lines += 1;
                        continue;
                    }
                };
                if line.is_empty() {
                    continue;
                }
                // One that is not UTF-8 counts as malformed (as the loader rejects it).
                let Ok(line) = std::str::from_utf8(line) else {
                    malformed_lines += 1;
                    continue;
                };
                match kind {
                    Kind::Query => match EventLine::parse(line, Kind::Query) {
                        Ok(q) => {
                            let i = intern(&q.query_id.0, &mut query_ids, &mut defined);
                            defined[i as usize] = true;
                        }
                        Err(_) => malformed_lines += 1,
                    },
                    // A click line parses with its click id (`EventLine::parse`).
                    Kind::Click => match EventLine::parse(line, Kind::Click) {
                        Ok(EventLine {
                            click_id: Some(click_id),
                            query_id,
                            event_time,
                        }) => {
                            let query = intern(&query_id.0, &mut query_ids, &mut defined);
                            clicks.insert(
                                click_id.0.into_owned(),
                                ClickState {
                                    query,
                                    event_time,
                                    ..ClickState::default()
                                },
                            );
                        }
                        _ => malformed_lines += 1,
                    },
                }
            }
        }
        drop(query_ids);
        Ok(Input {
            clicks,
            defined,
            malformed_lines,
        })
    }

    /// Checks the store's output against these logs (counts of an earlier check dropped).
    async fn check(
        &mut self,
        client: &Client,
        mut minutes: Option<&mut crate::timeline::Minutes>,
    ) -> Result<Report, VerifyError> {
        let mut report = Report {
            malformed_lines: self.malformed_lines,
            ..Report::default()
        };
        let (clicks, defined) = (&mut self.clicks, &self.defined);
        for state in clicks.values_mut() {
            state.joins = 0;
            state.outcome = None;
        }
        let mut latency = Histogram::<u64>::new(3).expect("histogram");
        for_each_cell(client, JOINED, |cell, value| {
            let Ok(j) = serde_json::from_slice::<joined::JoinedTimes>(&value) else {
                return;
            };
            if let Some(m) = minutes.as_deref_mut() {
                m.record(j.arrived_at, j.joined_at);
            }
            if let Some(state) = clicks.get_mut(String::from_utf8_lossy(&cell.row).as_ref()) {
                state.joins += 1;
                let _ = latency.record(j.joined_at.saturating_sub(j.arrived_at).max(1));
            }
        })
        .await?;
        for_each_cell(client, OUTCOMES, |cell, value| {
            if let Some(state) = clicks.get_mut(String::from_utf8_lossy(&cell.row).as_ref()) {
                state.outcome = Outcome::decode(&String::from_utf8_lossy(&value));
            }
        })
        .await?;
        report.clicks = clicks.len() as u64;
        for click in clicks.values() {
            let joins = click.joins;
            let query_known = defined[click.query as usize];
            // Expired and never joined: its query arrived past the horizon (or never).
            let expired = joins == 0 && matches!(click.outcome, Some(Outcome::Expired { .. }));
            let joinable = query_known
                && click.outcome != Some(Outcome::TooOld)
                && click.outcome != Some(Outcome::Filtered)
                && !expired;
            if joins > 1 {
                report.duplicates += 1;
            }
            if joinable {
                report.joinable += 1;
                if joins == 0 {
                    report.lost += 1;
                    report.low_watermark_ms = Some(
                        report
                            .low_watermark_ms
                            .map_or(click.event_time, |w| w.min(click.event_time)),
                    );
                } else if joins == 1 {
                    report.joined += 1;
                }
            } else {
                if joins > 0 {
                    report.unexpected += 1;
                }
                let reason = match click.outcome {
                    Some(Outcome::Expired { horizon_secs }) if expired => {
                        expired_reason(horizon_secs)
                    }
                    Some(Outcome::TooOld) => {
                        "too_old (older than the IdRegistry boundary)".to_string()
                    }
                    Some(Outcome::Waiting) => "query_missing (still waiting)".to_string(),
                    Some(Outcome::Filtered) => "filtered by the adapter".to_string(),
                    _ if !query_known => "query_missing".to_string(),
                    _ => "unknown".to_string(),
                };
                *report.reasons.entry(reason).or_default() += 1;
            }
        }
        if !latency.is_empty() {
            report.p50_ms = latency.value_at_quantile(0.5) as f64;
            report.p90_ms = latency.value_at_quantile(0.9) as f64;
            report.p99_ms = latency.value_at_quantile(0.99) as f64;
        }
        Ok(report)
    }
}
