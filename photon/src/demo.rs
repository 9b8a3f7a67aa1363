//! `photon demo`: generates a workload, loads it while redundant pipelines join it, drains
//! the join, verifies the output, and prints a summary (or one JSON object).

use crate::load::{LoadOptions, LoadStats};
use crate::pipeline::{PipelineError, PipelineSpec};
use crate::progress::Display;
use crate::run::{Loaded, RunSpec};
use crate::verify::{Report, VerifyError};
use app::pipeline::WorkerSpec;
use app::run::{RunError, RunOptions};
use percolator::kv::intercept::{Intercepted, OpCounts};
use percolator::Client;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The join horizon of the demo's pipelines.
const HORIZON: Duration = Duration::from_secs(600);

/// Errors of the demo.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DemoError {
    /// Writing the logs failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// Starting or draining a pipeline failed.
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    /// Loading or draining failed.
    #[error(transparent)]
    Run(#[from] RunError),
    /// Verifying the output failed.
    #[error(transparent)]
    Verify(#[from] VerifyError),
    /// The options make no sense.
    #[error("{0}")]
    Options(String),
}

/// What the demo runs.
#[derive(Clone, Debug)]
pub struct DemoOptions {
    /// Clicks to generate (queries = clicks / ctr).
    pub clicks: u64,
    /// Redundant pipelines (at least one).
    pub pipelines: usize,
    /// Print one JSON object instead of the summary.
    pub json: bool,
    /// Seed of the workload.
    pub seed: u64,
    /// An offered load (`--rate`, `--duration`); `None`: load as fast as possible.
    pub offered: Option<Offered>,
    /// The store's kind, for the summary (`embedded`, `memory`, `tikv`).
    pub backend: String,
    /// How progress is shown while loading and joining.
    pub progress: Display,
    /// Notifications of one observer per transaction (`--batch-size`); a burst grows runs
    /// to [`crate::join::max_batch_size`] of it.
    pub batch_size: usize,
    /// The loader's bound on the notification backlog (`--max-backlog`); 0: none.
    pub max_backlog: usize,
    /// The client's store, counting its calls by method: the summary reports them per
    /// joined click (`None`: not reported).
    pub store_calls: Option<Arc<Intercepted<OpCounts>>>,
}

/// The demo's offered load.
#[derive(Clone, Copy, Debug)]
pub struct Offered {
    /// Clicks per second.
    pub per_sec: f64,
    /// How long to offer it (sets the number of clicks); otherwise `clicks` decides.
    pub duration: Option<Duration>,
}

/// Runs the demo with its logs (and rejects file) in `dir`, on `client`'s store; prints the
/// summary and returns the verification report (the caller fails unless it is
/// [`Report::ok`]).
pub async fn run(client: &Client, dir: &Path, options: &DemoOptions) -> Result<Report, DemoError> {
    let DemoOptions {
        clicks,
        json,
        seed,
        offered,
        progress,
        batch_size,
        max_backlog,
        ..
    } = *options;
    let backend = options.backend.clone();
    let store_calls = options.store_calls.clone();
    let pipelines = options.pipelines.max(1);
    let logs = dir.join("logs");
    let ctr = 0.5;
    let clicks = match offered {
        Some(Offered {
            per_sec,
            duration: Some(d),
        }) => (per_sec * d.as_secs_f64()).round() as u64,
        _ => clicks,
    };
    let mut options = crate::gen::GenOptions {
        queries: (clicks as f64 / ctr) as u64,
        ctr,
        seed,
        ..crate::gen::GenOptions::default()
    };
    if let Some(o) = offered {
        if !(o.per_sec.is_finite() && o.per_sec > 0.0) {
            return Err(DemoError::Options(
                "--rate must be a positive number of clicks per second".into(),
            ));
        }
        // The generator's rate is queries per second of event time; a query gets a click
        // with probability ctr.
        options.rate = o.per_sec / ctr;
    }
    let summary = crate::gen::generate(&logs, &options)?;
    if progress != Display::Hidden {
        eprintln!(
            "generated {} queries and {} clicks",
            crate::human::count(summary.queries),
            crate::human::count(summary.clicks)
        );
    }
    let spec = |name: String| PipelineSpec {
        worker: WorkerSpec {
            batch_size,
            max_batch_size: crate::join::max_batch_size(batch_size),
            ..WorkerSpec::named(name)
        },
        horizon: HORIZON,
    };
    let specs: Vec<_> = (0..pipelines)
        .map(|i| spec(format!("dc{}", i + 1)))
        .collect();
    let metrics = app::metrics::Metrics::new();
    let families = app::metrics::WorkerMetrics::registered(&metrics);
    let running = crate::run::start_pipelines(client, &specs, &families)?;
    // Latency counts from the first load: the workers own their shares by then.
    crate::run::settle_all(&running).await;
    let total_events = summary.queries + summary.clicks + summary.duplicate_lines;
    // At an offered rate, batches span about 40 ms of event time (about 4 files share the
    // rate), so the pace is smooth (at most 500 lines); at saturation, the loader's default.
    let (batch, pace) = match offered {
        Some(o) => (
            ((o.per_sec * (1.0 + 1.0 / ctr)) / 100.0).clamp(1.0, 500.0) as usize,
            Some(crate::load::Pace::starting_now(options.start_ms)),
        ),
        None => (app::load::DEFAULT_BATCH, None),
    };
    let run_spec = RunSpec {
        run: RunOptions {
            load: LoadOptions {
                batch,
                rejects: dir.join("rejects.txt"),
                max_backlog,
                ..LoadOptions::default()
            },
            follow: None,
            until_drained: true,
            // Only this process's pipelines work on the demo's logs.
            confirm_in_store: false,
            drain_rounds: 3,
            pace,
        },
        horizon: HORIZON,
        sweep_period: Duration::from_millis(5000),
        // Long runs collect old versions as `photon work` does (its default period and lag).
        gc: offered
            .and_then(|o| o.duration)
            .map(|_| crate::maintenance::GcSpec {
                every: Duration::from_secs(600),
                lag: Duration::from_secs(600),
                retention_days: None,
                holder: format!("demo-{}", std::process::id()),
            }),
        metrics_addr: None,
        metrics,
        progress,
        loaded: Loaded::Events(Some(total_events)),
        joinable: Some(summary.clicks - summary.orphans),
    };
    let calls_before = store_calls_by_method(store_calls.as_deref());
    let batched_cas_keys_before = store_calls
        .as_ref()
        .map_or(0, |c| c.hooks().batched_cas_keys());
    let started = Instant::now();
    let started_ms = crate::schema::now_ms();
    let load_stats = Arc::new(LoadStats::default());
    // Peak RSS per minute of the run (drift in memory shows here).
    let mut rss_by_minute: Vec<u64> = Vec::new();
    let sample_rss = |rss_by_minute: &mut Vec<u64>| {
        let minute = (started.elapsed().as_secs() / 60) as usize;
        if let Some(rss) = rss_mb() {
            if rss_by_minute.len() <= minute {
                rss_by_minute.resize(minute + 1, 0);
            }
            rss_by_minute[minute] = rss_by_minute[minute].max(rss);
        }
    };
    crate::run::run(
        client,
        &logs,
        &running,
        &run_spec,
        &load_stats,
        || sample_rss(&mut rss_by_minute),
        std::future::pending(),
    )
    .await?;
    let elapsed = started.elapsed();
    // Store calls of the load and the join (not of the set-up nor of verify), per joined click.
    let calls: Vec<(&'static str, u64)> = store_calls_by_method(store_calls.as_deref())
        .into_iter()
        .zip(calls_before)
        .map(|((name, after), (_, before))| (name, after - before))
        .filter(|(_, n)| *n > 0)
        .collect();
    let peak_rss_join_mb = peak_rss_mb();
    let verify_started = Instant::now();
    let mut minutes = crate::timeline::Minutes::new(started_ms);
    let recent_reads = client.recent_write_reads();
    let report = crate::verify::verify_with(client, &logs, Some(&mut minutes)).await?;
    let verify_seconds = verify_started.elapsed().as_secs_f64();
    let timeline = minutes.timeline();
    let wasted: u64 = running
        .iter()
        .map(|p| p.stats.wasted.load(Ordering::Relaxed))
        .sum();
    let per_sec = report.joined as f64 / elapsed.as_secs_f64();
    // Worker counters summed over the pipelines (where the time went).
    let runs = running
        .iter()
        .fold(observers::MetricsSnapshot::default(), |mut sum, p| {
            let m = p.worker.metrics().snapshot();
            sum.processed += m.processed;
            sum.hinted += m.hinted;
            sum.found += m.found;
            sum.scanned += m.scanned;
            sum.conflicts += m.conflicts;
            sum.batches += m.batches;
            sum.splits += m.splits;
            sum
        });
    let wasted_ratio = wasted as f64 / report.joined.max(1) as f64;
    let per_joined = |n: u64| n as f64 / report.joined.max(1) as f64;
    let calls_per_joined: serde_json::Map<String, serde_json::Value> = calls
        .iter()
        .map(|(name, n)| (name.to_string(), serde_json::json!(round2(per_joined(*n)))))
        .collect();
    let calls_total = per_joined(calls.iter().map(|(_, n)| n).sum());
    let batched_cas_keys = per_joined(
        store_calls
            .as_ref()
            .map_or(0, |c| c.hooks().batched_cas_keys())
            .saturating_sub(batched_cas_keys_before),
    );
    for p in &running {
        p.worker.shutdown().await;
    }
    if json {
        let mut out = serde_json::json!({
            "joined": report.joined,
            "duplicates": report.duplicates,
            "lost": report.lost,
            "unexpected": report.unexpected,
            "per_sec": per_sec.round(),
            "p50_ms": report.p50_ms,
            "p90_ms": report.p90_ms,
            "p99_ms": report.p99_ms,
            "wasted_ratio": wasted_ratio,
            "clicks": report.clicks,
            "joinable": report.joinable,
            "pipelines": pipelines,
            "seconds": elapsed.as_secs_f64(),
            "observer_runs": runs.processed,
            "hinted": runs.hinted,
            "found": runs.found,
            "scanned": runs.scanned,
            "conflicts": runs.conflicts,
            "batches": runs.batches,
            "splits": runs.splits,
            "batch_size": batch_size,
            "max_backlog": max_backlog,
            "backlog_waits": load_stats.backlog_waits.load(Ordering::Relaxed),
            "backlog_counts": load_stats.backlog_counts.load(Ordering::Relaxed),
            "parked": running.iter().map(|p| p.stats.parked.load(Ordering::Relaxed)).sum::<u64>(),
            "woken": running.iter().map(|p| p.stats.woken.load(Ordering::Relaxed)).sum::<u64>(),
            "deduplicated": running.iter().map(|p| p.stats.deduplicated.load(Ordering::Relaxed)).sum::<u64>(),
            "settled_again": running.iter().map(|p| p.stats.settled.load(Ordering::Relaxed)).sum::<u64>(),
            "peak_rss_mb": peak_rss_mb(),
            "peak_rss_before_verify_mb": peak_rss_join_mb,
            "verify_seconds": verify_seconds,
            "backend": backend,
            "offered_per_sec": offered.map(|o| o.per_sec),
            "first_p90_ms": timeline.first_p90_ms,
            "last_p90_ms": timeline.last_p90_ms,
            "window_minutes": timeline.window_minutes,
            "minutes": timeline.minutes,
            "rss_mb_by_minute": rss_by_minute,
            "store_calls_per_joined": round2(calls_total),
            "store_calls_per_joined_by_method": calls_per_joined,
            "batched_cas_keys_per_joined": round2(batched_cas_keys),
        });
        // Notify keys this process put and removed (removals of a key already gone count).
        let notify_keys = client.notify_counts();
        out["notify_keys_put"] = notify_keys.put.into();
        out["notify_keys_removed"] = notify_keys.removed.into();
        // Reads of events the join answered from this process's commits in memory, and those
        // that went to the store (`photon::design::join`, "Events read from memory").
        out["events_read_from_memory"] = recent_reads.from_memory.into();
        out["events_read_from_store"] = recent_reads.from_store.into();
        println!("{out}");
    } else {
        print!("{report}");
        if offered.is_some_and(|o| o.duration.is_some()) {
            println!("minute   joined   p50 ms   p90 ms   p99 ms   peak RSS MB");
            for m in &timeline.minutes {
                let rss = rss_by_minute.get(m.minute as usize).copied().unwrap_or(0);
                println!(
                    "{:>6} {:>8} {:>8} {:>8} {:>8} {:>13}",
                    m.minute, m.joined, m.p50_ms, m.p90_ms, m.p99_ms, rss
                );
            }
            println!(
                "p90 of the first {w} minutes {} ms, of the last {w} minutes {} ms",
                timeline.first_p90_ms,
                timeline.last_p90_ms,
                w = timeline.window_minutes
            );
        }
        let offered_note = offered
            .map(|o| format!(" at an offered {} clicks/s", crate::human::whole(o.per_sec)))
            .unwrap_or_default();
        println!(
            "{pipelines} pipelines, {:.1?}: {} joined clicks/s{offered_note}, wasted joins {:.2}%",
            elapsed,
            crate::human::whole(per_sec),
            wasted_ratio * 100.0
        );
        if !calls.is_empty() {
            let by_method: Vec<String> = calls
                .iter()
                .map(|(name, n)| format!("{name} {:.2}", per_joined(*n)))
                .collect();
            println!(
                "store calls per joined click: {calls_total:.2} ({}); keys in batched CASes {batched_cas_keys:.2}",
                by_method.join(", ")
            );
        }
    }
    Ok(report)
}

/// The process's peak resident set so far, in MiB (Linux `VmHWM`; `None` elsewhere).
fn peak_rss_mb() -> Option<u64> {
    proc_status_mb("VmHWM:")
}

/// The process's resident set now, in MiB (Linux `VmRSS`; `None` elsewhere).
fn rss_mb() -> Option<u64> {
    proc_status_mb("VmRSS:")
}

fn proc_status_mb(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024)
}

/// (method, calls so far) of every kind of store call, in a fixed order (all zero without a
/// counting store).
fn store_calls_by_method(counted: Option<&Intercepted<OpCounts>>) -> Vec<(&'static str, u64)> {
    percolator::kv::intercept::Op::ALL
        .iter()
        .map(|op| (op.name(), counted.map_or(0, |c| c.hooks().get(*op))))
        .collect()
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}
