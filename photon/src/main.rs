//! `photon`: generate, load, join, verify and demo the click–query join.

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use observers::{Registry, Worker, WorkerConfig};
use percolator::kv::StoreSpec;
use percolator::Client;
use photon::join::{self, JoinConfig, JoinStats};
use photon::load::{LoadOptions, LoadStats};
use photon::metrics_http::{counter, gauge, Render};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(
    name = "photon",
    version,
    about = "Exactly-once join of ad clicks with their search queries, over Percolator transactions"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Clone)]
struct StoreArgs {
    /// Store: embedded:PATH, memory, or tikv:PD_ADDR[,PD_ADDR...]
    #[arg(long, default_value = "embedded:./photon-data")]
    store: StoreSpec,
    /// Key namespace of the application inside the store.
    #[arg(long, default_value = "photon")]
    namespace: String,
    /// Oracle service addresses (comma-separated); default: an in-process oracle persisted in
    /// the store (one process per store: embedded and memory stores only). Required with a
    /// TiKV store, which several processes share.
    #[arg(long, value_delimiter = ',')]
    oracle: Vec<String>,
}

impl StoreArgs {
    /// Opens the store and a client on it. A shared (TiKV) store needs the shared oracle
    /// service: an in-process oracle there would hand out timestamps unrelated to the other
    /// processes' (their transactions could then see each other out of order).
    async fn client(&self) -> anyhow::Result<Client> {
        if matches!(self.store, StoreSpec::Tikv(_)) && self.oracle.is_empty() {
            anyhow::bail!(
                "--store {} is shared by several processes: give the shared oracle service \
                 with --oracle ADDR[,ADDR...] (`oracle serve --store {}`); the in-process \
                 oracle is only for embedded and memory stores",
                self.store,
                self.store
            );
        }
        photon::open_client(&self.store, &self.namespace, &self.oracle).await
    }
}

#[derive(Args, Clone)]
struct GenArgs {
    /// Output directory for queries-*.jsonl and clicks-*.jsonl.
    #[arg(long, default_value = "./photon-logs")]
    out: PathBuf,
    /// Number of queries.
    #[arg(long, default_value_t = 100_000)]
    queries: u64,
    /// Click-through rate (probability that a query gets a click).
    #[arg(long, default_value_t = 0.5)]
    ctr: f64,
    /// Mean click delay after its query, ms (exponentially distributed).
    #[arg(long, default_value_t = 2000.0)]
    click_delay_ms: f64,
    /// Fraction of clicks logged before their query.
    #[arg(long, default_value_t = 0.05)]
    early: f64,
    /// Fraction of clicks delivered twice (same click_id).
    #[arg(long, default_value_t = 0.02)]
    duplicates: f64,
    /// Fraction of clicks whose query never arrives.
    #[arg(long, default_value_t = 0.01)]
    orphans: f64,
    /// Fraction of malformed lines to insert.
    #[arg(long, default_value_t = 0.0)]
    malformed: f64,
    /// Events per second of event time.
    #[arg(long, default_value_t = 10_000.0)]
    rate: f64,
    /// Files per kind.
    #[arg(long, default_value_t = 2)]
    files: usize,
    /// Random seed (same seed, same logs).
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(Subcommand)]
enum Command {
    /// Generate synthetic query and click logs (seeded, reproducible).
    Gen(GenArgs),
    /// Load the logs of a directory into the store, in transactional batches with offsets.
    Load {
        #[command(flatten)]
        store: StoreArgs,
        /// Directory holding queries-*.jsonl and clicks-*.jsonl.
        input: PathBuf,
        /// Lines per transaction.
        #[arg(long, default_value_t = 500)]
        batch: usize,
        /// Where malformed lines are reported (file:line: error: text).
        #[arg(long, default_value = "./photon-rejects.txt")]
        rejects: PathBuf,
        /// Keep tailing growing files and pick up new ones until SIGINT/SIGTERM.
        #[arg(long)]
        follow: bool,
        /// Poll period of --follow, ms.
        #[arg(long, default_value_t = 200)]
        poll_ms: u64,
    },
    /// Run a join worker (click and query observers) until SIGINT/SIGTERM.
    Work {
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        work: WorkArgs,
        /// Serve counters in Prometheus text format on this address (e.g. 127.0.0.1:9100).
        #[arg(long)]
        metrics_addr: Option<std::net::SocketAddr>,
    },
    /// Check the joined output against the logs; non-zero exit on any duplicate or loss.
    Verify {
        #[command(flatten)]
        store: StoreArgs,
        /// Directory holding the logs that were loaded.
        input: PathBuf,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Write the joined events as JSON lines to stdout or a file.
    Export {
        #[command(flatten)]
        store: StoreArgs,
        /// Output file (default: stdout).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Drop IdRegistry days older than the retention, behind a boundary that never moves back.
    Gc {
        #[command(flatten)]
        store: StoreArgs,
        /// Days of IdRegistry entries to keep (counted back from today, UTC).
        #[arg(long, default_value_t = 3)]
        retention_days: u64,
    },
    /// Generate a workload, load it while two redundant pipelines join it, then verify.
    Demo {
        /// Clicks to generate (queries = clicks / ctr); about 100 s on 2 cores.
        #[arg(long, default_value_t = 200_000)]
        clicks: u64,
        /// Working directory (default: a fresh temporary directory).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Store (default: embedded in the working directory).
        #[arg(long)]
        store: Option<StoreSpec>,
        /// Redundant pipelines.
        #[arg(long, default_value_t = 2)]
        pipelines: usize,
        /// Print one JSON object instead of the summary.
        #[arg(long)]
        json: bool,
        /// Seed of the workload.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Offered load in clicks per second: the logs are replayed at the pace of their event
        /// times (queries at rate / 0.5), which measures latency below saturation. Without it
        /// the loader runs as fast as it can (throughput at saturation).
        #[arg(long)]
        rate: Option<f64>,
        /// With --rate: run this long (e.g. 90s, 30m, 1h; sets --clicks to rate x duration)
        /// and report throughput, latency and RSS per minute, so drift shows.
        #[arg(long, value_parser = parse_duration, requires = "rate")]
        duration: Option<Duration>,
    },
}

/// Parses `90`, `90s`, `30m` or `1h`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("`{text}`: expected a number with s, m or h"))?;
    let secs = match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => return Err(format!("`{text}`: unit must be s, m or h")),
    };
    Ok(Duration::from_secs(secs))
}

#[derive(Args, Clone)]
struct WorkArgs {
    /// Pipeline name; redundant pipelines run at once under different names.
    #[arg(long, default_value = "main")]
    pipeline: String,
    /// Worker name (default: host-process).
    #[arg(long)]
    worker: Option<String>,
    /// Clicks whose query has not arrived this long after their event time are reported as
    /// expired, not silently dropped (seconds).
    #[arg(long, default_value_t = 600)]
    horizon_secs: u64,
    /// Observer runs in flight at most.
    #[arg(long, default_value_t = 64)]
    max_in_flight: usize,
    /// Scanner tasks.
    #[arg(long, default_value_t = 2)]
    scanners: usize,
    /// Period of the durable sweep of waiting clicks, ms (the fallback for wake-ups lost to
    /// a crash, and for clicks whose query passed the horizon).
    #[arg(long, default_value_t = 5000)]
    sweep_ms: u64,
}

struct Pipeline {
    worker: Worker,
    stats: Arc<JoinStats>,
    name: String,
}

fn start_pipeline(client: &Client, args: &WorkArgs) -> anyhow::Result<Pipeline> {
    let stats = Arc::new(JoinStats::default());
    let worker_name = args
        .worker
        .clone()
        .unwrap_or_else(|| format!("{}-{}", args.pipeline, std::process::id()));
    let mut registry = Registry::new();
    join::register(
        &mut registry,
        JoinConfig {
            pipeline: args.pipeline.clone(),
            worker: worker_name.clone(),
            horizon: Duration::from_secs(args.horizon_secs),
            adapter: None,
        },
        stats.clone(),
    )?;
    let config = WorkerConfig {
        id: format!("{}-{:08x}", worker_name, rand::random::<u32>()),
        scanners: args.scanners,
        max_in_flight: args.max_in_flight,
        ..WorkerConfig::default()
    };
    let worker = Worker::start(client.clone(), Arc::new(registry), config);
    Ok(Pipeline {
        worker,
        stats,
        name: args.pipeline.clone(),
    })
}

fn render_metrics(pipelines: &[Pipeline]) -> String {
    let mut out = String::new();
    for p in pipelines {
        let l = format!("pipeline=\"{}\"", p.name);
        let m = p.worker.metrics().snapshot();
        counter(
            &mut out,
            "photon_notifications_found_total",
            "Notify keys found by scans or commit hints",
            &l,
            m.found,
        );
        counter(
            &mut out,
            "photon_notifications_hinted_total",
            "Notify keys dispatched from in-process commit hints",
            &l,
            m.hinted,
        );
        counter(
            &mut out,
            "photon_notify_keys_scanned_total",
            "Keys read by scans of the notify space",
            &l,
            m.scanned,
        );
        counter(
            &mut out,
            "photon_observer_runs_total",
            "Observer runs committed",
            &l,
            m.processed,
        );
        counter(
            &mut out,
            "photon_duplicate_runs_total",
            "Notifications already covered by the acknowledgment",
            &l,
            m.duplicates,
        );
        counter(
            &mut out,
            "photon_conflicts_total",
            "Observer transaction conflicts",
            &l,
            m.conflicts,
        );
        counter(
            &mut out,
            "photon_failures_total",
            "Observer failures",
            &l,
            m.failures,
        );
        counter(
            &mut out,
            "photon_dead_lettered_total",
            "Notifications dead-lettered",
            &l,
            m.dead_lettered,
        );
        gauge(
            &mut out,
            "photon_observer_latency_p50_seconds",
            "Observer run latency, median",
            &l,
            m.latency_p50.as_secs_f64(),
        );
        gauge(
            &mut out,
            "photon_observer_latency_p99_seconds",
            "Observer run latency, 99th percentile",
            &l,
            m.latency_p99.as_secs_f64(),
        );
        let s = &p.stats;
        counter(
            &mut out,
            "photon_joined_total",
            "Clicks joined (attempts)",
            &l,
            s.joined.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "photon_wasted_joins_total",
            "Runs that found the click already registered by a join of the same delivery",
            &l,
            s.wasted.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "photon_deduplicated_total",
            "Runs on a duplicate delivery of an already joined click (rejected by the IdRegistry)",
            &l,
            s.deduplicated.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "photon_parked_total",
            "Clicks parked waiting for their query",
            &l,
            s.parked.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "photon_expired_total",
            "Clicks past the horizon",
            &l,
            s.expired.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "photon_too_old_total",
            "Clicks older than the IdRegistry boundary",
            &l,
            s.too_old.load(Ordering::Relaxed),
        );
    }
    out
}

fn spawn_sweeper(
    client: Client,
    horizon: Duration,
    period: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(period).await;
            match join::sweep_pending(&client, horizon).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(n, "sweep woke waiting clicks"),
                Err(e) => tracing::warn!(error = %e, "pending sweep failed; will retry"),
            }
        }
    })
}

fn gen_options(args: &GenArgs) -> photon::gen::GenOptions {
    photon::gen::GenOptions {
        queries: args.queries,
        ctr: args.ctr,
        mean_click_delay_ms: args.click_delay_ms,
        early_clicks: args.early,
        duplicates: args.duplicates,
        orphans: args.orphans,
        malformed: args.malformed,
        rate: args.rate,
        files: args.files,
        seed: args.seed,
        ..photon::gen::GenOptions::default()
    }
}

async fn load_follow(
    client: &Client,
    input: &std::path::Path,
    options: &LoadOptions,
    stats: &LoadStats,
    poll: Duration,
) -> anyhow::Result<()> {
    let stop = percolator_cli::shutdown_signal()?;
    tokio::pin!(stop);
    loop {
        photon::load::load_dir(client, input, options, stats).await?;
        tokio::select! {
            _ = &mut stop => return Ok(()),
            _ = tokio::time::sleep(poll) => {}
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    percolator_cli::init_tracing("warn");
    let cli = Cli::parse();
    match cli.command {
        Command::Gen(args) => {
            let summary = photon::gen::generate(&args.out, &gen_options(&args))
                .with_context(|| format!("writing logs to {}", args.out.display()))?;
            println!(
                "wrote {} queries, {} clicks ({} duplicate lines, {} orphans, {} malformed) to {}",
                summary.queries,
                summary.clicks,
                summary.duplicate_lines,
                summary.orphans,
                summary.malformed,
                args.out.display()
            );
        }
        Command::Load {
            store,
            input,
            batch,
            rejects,
            follow,
            poll_ms,
        } => {
            let client = store.client().await?;
            let options = LoadOptions {
                batch,
                rejects: rejects.clone(),
            };
            let stats = LoadStats::default();
            let started = Instant::now();
            if follow {
                load_follow(
                    &client,
                    &input,
                    &options,
                    &stats,
                    Duration::from_millis(poll_ms),
                )
                .await?;
            } else {
                let bar = ProgressBar::new_spinner();
                bar.set_message("loading");
                bar.enable_steady_tick(Duration::from_millis(200));
                photon::load::load_dir(&client, &input, &options, &stats).await?;
                bar.finish_and_clear();
            }
            let rejected = stats.rejected.load(Ordering::Relaxed);
            // The rejects file is only written (created) when a line is rejected.
            let malformed = match rejected {
                0 => "no malformed lines".to_string(),
                1 => format!("1 malformed line reported to {}", rejects.display()),
                n => format!("{n} malformed lines reported to {}", rejects.display()),
            };
            println!(
                "loaded {} events in {} batches in {:.1?}; {malformed}",
                stats.loaded.load(Ordering::Relaxed),
                stats.batches.load(Ordering::Relaxed),
                started.elapsed(),
            );
        }
        Command::Work {
            store,
            work,
            metrics_addr,
        } => {
            // The handlers first: a SIGTERM the instant readiness is printed must shut the
            // worker down gracefully, not kill it.
            let shutdown = percolator_cli::shutdown_signal()?;
            let client = store.client().await?;
            let pipeline = start_pipeline(&client, &work)?;
            let sweeper = spawn_sweeper(
                client.clone(),
                Duration::from_secs(work.horizon_secs),
                Duration::from_millis(work.sweep_ms),
            );
            let pipelines = Arc::new(vec![pipeline]);
            if let Some(addr) = metrics_addr {
                let p = pipelines.clone();
                let render: Render = Arc::new(move || render_metrics(&p));
                tokio::spawn(async move {
                    if let Err(e) = photon::metrics_http::serve(addr, render).await {
                        tracing::error!(%addr, error = %e, "metrics endpoint failed");
                    }
                });
            }
            eprintln!(
                "photon worker running (pipeline {}); SIGINT/SIGTERM to stop",
                work.pipeline
            );
            pipelines[0]
                .worker
                .run_until(async {
                    let signal = shutdown.await;
                    tracing::info!(%signal, "shutting down");
                })
                .await;
            sweeper.abort();
        }
        Command::Verify { store, input, json } => {
            let client = store.client().await?;
            let report = photon::verify::verify(&client, &input).await?;
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print_report(&report);
            }
            if !report.ok() {
                std::process::exit(1);
            }
        }
        Command::Export { store, out } => {
            let client = store.client().await?;
            let mut w: Box<dyn std::io::Write> = match &out {
                Some(path) => Box::new(std::io::BufWriter::new(
                    std::fs::File::create(path)
                        .with_context(|| format!("creating {}", path.display()))?,
                )),
                None => Box::new(std::io::stdout().lock()),
            };
            // Streamed page by page (bounded memory), in click id order; each stored
            // event is one JSON line.
            let mut n = 0u64;
            let mut failed: Option<std::io::Error> = None;
            photon::verify::for_each_cell(&client, photon::schema::JOINED, |_cell, value| {
                if failed.is_some() {
                    return;
                }
                let written = w.write_all(&value).and_then(|()| w.write_all(b"\n"));
                match written {
                    Ok(()) => n += 1,
                    Err(e) => failed = Some(e),
                }
            })
            .await?;
            if let Some(e) = failed {
                return Err(e).context("writing the export");
            }
            w.flush()?;
            eprintln!("exported {n} joined events");
        }
        Command::Gc {
            store,
            retention_days,
        } => {
            let client = store.client().await?;
            let today = photon::event::day_of(photon::schema::now_ms());
            let (boundary, deleted) =
                join::gc_registry(&client, today.saturating_sub(retention_days)).await?;
            println!("IdRegistry boundary at day {boundary}; deleted {deleted} keys");
        }
        Command::Demo {
            clicks,
            dir,
            store,
            pipelines,
            json,
            seed,
            rate,
            duration,
        } => {
            let offered = rate.map(|per_sec| Offered { per_sec, duration });
            demo(clicks, dir, store, pipelines.max(1), json, seed, offered).await?;
        }
    }
    Ok(())
}

fn print_report(r: &photon::verify::Report) {
    println!("clicks            {}", r.clicks);
    println!("joinable          {}", r.joinable);
    println!("joined once       {}", r.joined);
    println!("duplicates        {}", r.duplicates);
    println!("lost              {}", r.lost);
    for (reason, n) in &r.reasons {
        println!("not joinable      {n:>8}  {reason}");
    }
    println!(
        "latency (arrival to join) p50 {} ms, p90 {} ms, p99 {} ms",
        r.p50_ms, r.p90_ms, r.p99_ms
    );
    match r.low_watermark_ms {
        Some(w) => println!("join low watermark {w} (oldest unjoined joinable click)"),
        None => println!("join low watermark: none (every joinable click joined)"),
    }
    println!(
        "{}",
        if r.ok() {
            "OK: every joinable click joined exactly once"
        } else {
            "FAILED"
        }
    );
}

/// The demo's offered load (`--rate`, `--duration`).
#[derive(Clone, Copy, Debug)]
struct Offered {
    /// Clicks per second.
    per_sec: f64,
    /// How long to offer it (otherwise `--clicks` decides).
    duration: Option<Duration>,
}

async fn demo(
    clicks: u64,
    dir: Option<PathBuf>,
    store: Option<StoreSpec>,
    pipelines: usize,
    json: bool,
    seed: u64,
    offered: Option<Offered>,
) -> anyhow::Result<()> {
    let temp = tempfile::tempdir()?;
    let dir = dir.unwrap_or_else(|| temp.path().to_path_buf());
    let logs = dir.join("logs");
    let ctr = 0.5;
    let clicks = match offered {
        Some(Offered {
            per_sec,
            duration: Some(d),
        }) => (per_sec * d.as_secs_f64()).round() as u64,
        _ => clicks,
    };
    let mut options = photon::gen::GenOptions {
        queries: (clicks as f64 / ctr) as u64,
        ctr,
        seed,
        ..photon::gen::GenOptions::default()
    };
    if let Some(o) = offered {
        anyhow::ensure!(
            o.per_sec.is_finite() && o.per_sec > 0.0,
            "--rate must be a positive number of clicks per second"
        );
        // The generator's rate is queries per second of event time; a query gets a click
        // with probability ctr.
        options.rate = o.per_sec / ctr;
    }
    let multi = MultiProgress::new();
    if json {
        multi.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let spinner = multi.add(ProgressBar::new_spinner());
    spinner.set_message(format!("generating {} queries", options.queries));
    let summary = photon::gen::generate(&logs, &options)?;
    spinner.finish_with_message(format!(
        "generated {} queries and {} clicks",
        summary.queries, summary.clicks
    ));
    let store = store.unwrap_or_else(|| StoreSpec::Embedded(dir.join("store")));
    let backend = match &store {
        StoreSpec::Embedded(_) => "embedded",
        StoreSpec::Memory => "memory",
        StoreSpec::Tikv(_) => "tikv",
    };
    let client = photon::open_client(&store, "photon", &[]).await?;
    let work = |name: &str| WorkArgs {
        pipeline: name.to_string(),
        worker: None,
        horizon_secs: 600,
        max_in_flight: 64,
        scanners: 2,
        sweep_ms: 5000,
    };
    let running: Vec<Pipeline> = (0..pipelines)
        .map(|i| start_pipeline(&client, &work(&format!("dc{}", i + 1))))
        .collect::<anyhow::Result<_>>()?;
    for p in &running {
        p.worker.wait_until_settled().await;
    }
    let sweeper = spawn_sweeper(
        client.clone(),
        Duration::from_secs(600),
        Duration::from_millis(5000),
    );
    let style = ProgressStyle::with_template("{msg:>10} [{bar:40}] {pos}/{len} ({per_sec})")
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    let total_events = summary.queries + summary.clicks + summary.duplicate_lines;
    let load_bar = multi.add(
        ProgressBar::new(total_events)
            .with_style(style.clone())
            .with_message("loaded"),
    );
    let join_bar = multi.add(
        ProgressBar::new(summary.clicks - summary.orphans)
            .with_style(style)
            .with_message("joined"),
    );
    let started = Instant::now();
    let started_ms = photon::schema::now_ms();
    let load_stats = Arc::new(LoadStats::default());
    // At an offered rate, batches span about 40 ms of event time (about 4 files share the
    // rate), so the pace is smooth; at saturation, 500 lines.
    let (batch, pace) = match offered {
        Some(o) => (
            ((o.per_sec * (1.0 + 1.0 / ctr)) / 100.0).clamp(1.0, 500.0) as usize,
            Some(photon::load::Pace::starting_now(options.start_ms)),
        ),
        None => (500, None),
    };
    let loader = {
        let (client, logs, stats) = (client.clone(), logs.clone(), load_stats.clone());
        let rejects = dir.join("rejects.txt");
        tokio::spawn(async move {
            let options = LoadOptions { batch, rejects };
            photon::load::load_dir_paced(&client, &logs, &options, &stats, pace.as_ref()).await
        })
    };
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
    let joined_now = |running: &[Pipeline]| -> u64 {
        running
            .iter()
            .map(|p| p.stats.joined.load(Ordering::Relaxed))
            .sum()
    };
    while !loader.is_finished() {
        load_bar.set_position(load_stats.loaded.load(Ordering::Relaxed));
        join_bar.set_position(joined_now(&running));
        sample_rss(&mut rss_by_minute);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    loader.await??;
    load_bar.set_position(load_stats.loaded.load(Ordering::Relaxed));
    load_bar.finish();
    // Drain: every notification handled, then one sweep for clicks parked while their query
    // was being loaded, and drain again.
    for _ in 0..3 {
        let drain = async {
            for p in &running {
                p.worker.wait_until_quiescent().await?;
            }
            Ok::<(), observers::WorkerError>(())
        };
        tokio::pin!(drain);
        loop {
            tokio::select! {
                r = &mut drain => { r?; break; }
                _ = tokio::time::sleep(Duration::from_millis(100)) => {
                    join_bar.set_position(joined_now(&running));
                    sample_rss(&mut rss_by_minute);
                }
            }
        }
        if join::sweep_pending(&client, Duration::from_secs(600)).await? == 0 {
            break;
        }
    }
    let elapsed = started.elapsed();
    join_bar.set_position(joined_now(&running));
    join_bar.finish();
    sweeper.abort();
    let peak_rss_join_mb = peak_rss_mb();
    let verify_started = Instant::now();
    let report = photon::verify::verify(&client, &logs).await?;
    let verify_seconds = verify_started.elapsed().as_secs_f64();
    let timeline = photon::timeline::by_minute(&client, started_ms).await?;
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
            sum
        });
    let wasted_ratio = wasted as f64 / report.joined.max(1) as f64;
    for p in &running {
        p.worker.shutdown().await;
    }
    if json {
        let out = serde_json::json!({
            "joined": report.joined,
            "duplicates": report.duplicates,
            "lost": report.lost,
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
            "parked": running.iter().map(|p| p.stats.parked.load(Ordering::Relaxed)).sum::<u64>(),
            "woken": running.iter().map(|p| p.stats.woken.load(Ordering::Relaxed)).sum::<u64>(),
            "deduplicated": running.iter().map(|p| p.stats.deduplicated.load(Ordering::Relaxed)).sum::<u64>(),
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
        });
        println!("{out}");
    } else {
        print_report(&report);
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
            .map(|o| format!(" at an offered {:.0} clicks/s", o.per_sec))
            .unwrap_or_default();
        println!(
            "{pipelines} pipelines, {:.1?}: {:.0} joined clicks/s{offered_note}, wasted joins {:.2}%",
            elapsed,
            per_sec,
            wasted_ratio * 100.0
        );
    }
    if !report.ok() {
        std::process::exit(1);
    }
    Ok(())
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
