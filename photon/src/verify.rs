//! `photon verify`: checks the joined output against the input logs.

use crate::event::{Click, Joined, Kind, Query};
use crate::load::log_files;
use crate::schema::{JOINED, OUTCOMES};
use hdrhistogram::Histogram;
use percolator::Client;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::BufRead;
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
}

impl Report {
    /// Whether the output is exactly-once with nothing lost.
    pub fn ok(&self) -> bool {
        self.duplicates == 0 && self.lost == 0 && self.unexpected == 0
    }
}

/// Errors of the verifier.
#[derive(Debug, thiserror::Error)]
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
}

/// The horizon recorded in an `expired` outcome (`expired:<seconds>`, or `expired` as
/// written by earlier versions): `None` for other outcomes, `Some(None)` if not recorded.
fn expired_horizon(outcome: &str) -> Option<Option<u64>> {
    match outcome.split_once(':') {
        None if outcome == "expired" => Some(None),
        Some(("expired", secs)) => Some(secs.parse().ok()),
        _ => None,
    }
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

/// Every joined event in the store, by click id (more than one means a duplicate).
pub async fn joined_events(
    client: &Client,
) -> Result<HashMap<String, Vec<Joined>>, percolator::TxnError> {
    let txn = client.begin().await?;
    let rows = txn.scan(JOINED.as_bytes(), b"", None).await?;
    let mut out: HashMap<String, Vec<Joined>> = HashMap::new();
    for (cell, value) in rows {
        if let Ok(j) = serde_json::from_slice::<Joined>(&value) {
            out.entry(String::from_utf8_lossy(&cell.row).into_owned())
                .or_default()
                .push(j);
        }
    }
    Ok(out)
}

/// Compares the store's output with the logs in `input`.
pub async fn verify(client: &Client, input: &Path) -> Result<Report, VerifyError> {
    let mut report = Report::default();
    let mut queries: HashSet<String> = HashSet::new();
    let mut clicks: HashMap<String, Click> = HashMap::new();
    for (path, kind) in log_files(input)? {
        let file = std::fs::File::open(&path).map_err(|source| VerifyError::Io {
            path: path.display().to_string(),
            source,
        })?;
        // Lines are read as bytes: one that is not UTF-8 counts as malformed (as the loader
        // rejected it).
        let mut reader = std::io::BufReader::new(file);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            let n = reader
                .read_until(b'\n', &mut buf)
                .map_err(|source| VerifyError::Io {
                    path: path.display().to_string(),
                    source,
                })?;
            if n == 0 {
                break;
            }
            let line = buf.trim_ascii();
            if line.is_empty() {
                continue;
            }
            let Ok(line) = std::str::from_utf8(line) else {
                report.malformed_lines += 1;
                continue;
            };
            match kind {
                Kind::Query => match serde_json::from_str::<Query>(line) {
                    Ok(q) => {
                        queries.insert(q.query_id);
                    }
                    Err(_) => report.malformed_lines += 1,
                },
                Kind::Click => match serde_json::from_str::<Click>(line) {
                    Ok(c) => {
                        clicks.insert(c.click_id.clone(), c);
                    }
                    Err(_) => report.malformed_lines += 1,
                },
            }
        }
    }
    let joined = joined_events(client).await?;
    let txn = client.begin().await?;
    let outcomes: HashMap<String, String> = txn
        .scan(OUTCOMES.as_bytes(), b"", None)
        .await?
        .into_iter()
        .map(|(cell, v)| {
            (
                String::from_utf8_lossy(&cell.row).into_owned(),
                String::from_utf8_lossy(&v).into_owned(),
            )
        })
        .collect();
    let mut latency = Histogram::<u64>::new(3).expect("histogram");
    report.clicks = clicks.len() as u64;
    for (id, click) in &clicks {
        let outcome = outcomes.get(id).map(String::as_str);
        let joins = joined.get(id).map_or(0, Vec::len);
        // Expired and never joined: its query arrived past the horizon (or never).
        let expired = joins == 0 && outcome.is_some_and(|o| expired_horizon(o).is_some());
        let joinable = queries.contains(&click.query_id)
            && outcome != Some("too_old")
            && outcome != Some("filtered")
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
            let reason = match outcome {
                Some(o) if expired => expired_reason(expired_horizon(o).flatten()),
                Some("too_old") => "too_old (older than the IdRegistry boundary)".to_string(),
                Some("waiting") => "query_missing (still waiting)".to_string(),
                Some("filtered") => "filtered by the adapter".to_string(),
                _ if !queries.contains(&click.query_id) => "query_missing".to_string(),
                _ => "unknown".to_string(),
            };
            *report.reasons.entry(reason).or_default() += 1;
        }
        for j in joined.get(id).into_iter().flatten() {
            let _ = latency.record(j.joined_at.saturating_sub(j.arrived_at).max(1));
        }
    }
    if !latency.is_empty() {
        report.p50_ms = latency.value_at_quantile(0.5) as f64;
        report.p90_ms = latency.value_at_quantile(0.9) as f64;
        report.p99_ms = latency.value_at_quantile(0.99) as f64;
    }
    Ok(report)
}
