//! `photon`: generate, load, join, verify and demo the click–query join. The work is in the
//! `photon` library; this dispatches the command line ([`photon::cli`]) and opens the store.

use anyhow::Context;
use clap::Parser;
use indicatif::ProgressBar;
use percolator::kv::StoreSpec;
use percolator::Client;
use percolator_cli::store::open_client;
use photon::cli::{Cli, Command, StoreArgs};
use photon::demo::DemoOptions;
use photon::join;
use photon::load::{LoadOptions, LoadStats};
use photon::maintenance::{spawn_gc, GcMetrics};
use photon::metrics::{self, Render};
use photon::pipeline::{spawn_sweeper, Pipeline};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Opens the store and a client on it (a shared TiKV store needs `--oracle`).
async fn client(store: &StoreArgs) -> anyhow::Result<Client> {
    Ok(open_client(&store.store, &store.namespace, &store.oracle).await?)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    percolator_cli::init_tracing("warn");
    let cli = Cli::parse();
    match cli.command {
        Command::Gen(args) => {
            let summary = photon::gen::generate(&args.out, &args.options())
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
            let client = client(&store).await?;
            let options = LoadOptions {
                batch,
                rejects: rejects.clone(),
            };
            let stats = LoadStats::default();
            let started = Instant::now();
            if follow {
                let stop = percolator_cli::shutdown_signal()?;
                let poll = Duration::from_millis(poll_ms);
                let stop = async move {
                    stop.await;
                };
                photon::load::follow_dir(&client, &input, &options, &stats, poll, stop).await?;
            } else {
                let bar = ProgressBar::new_spinner();
                bar.set_message("loading");
                bar.enable_steady_tick(Duration::from_millis(200));
                photon::load::load_dir(&client, &input, &options, &stats).await?;
                bar.finish_and_clear();
            }
            println!("{}", stats.summary(started.elapsed(), &rejects));
        }
        Command::Work {
            store,
            work,
            metrics_addr,
        } => {
            // The handlers first: a SIGTERM the instant readiness is printed must shut the
            // worker down gracefully, not kill it.
            let shutdown = percolator_cli::shutdown_signal()?;
            let client = client(&store).await?;
            let pipeline = Pipeline::start(&client, &work.spec())?;
            let sweeper = spawn_sweeper(client.clone(), work.horizon(), work.sweep_period());
            let gc_metrics = Arc::new(GcMetrics::default());
            let holder = pipeline.worker.id().to_string();
            let gc = work
                .gc(holder)
                .map(|spec| spawn_gc(client.clone(), spec, gc_metrics.clone()));
            let pipelines = Arc::new(vec![pipeline]);
            if let Some(addr) = metrics_addr {
                let p = pipelines.clone();
                let g = gc_metrics.clone();
                let render: Render = Arc::new(move || {
                    let mut out = metrics::render(&p);
                    photon::maintenance::render(&g, &mut out);
                    out
                });
                tokio::spawn(async move {
                    if let Err(e) = metrics::serve(addr, render).await {
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
            if let Some(gc) = gc {
                gc.abort();
            }
        }
        Command::Verify { store, input, json } => {
            let client = client(&store).await?;
            let report = photon::verify::verify(&client, &input).await?;
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print!("{report}");
            }
            if !report.ok() {
                std::process::exit(1);
            }
        }
        Command::Export { store, out } => {
            let client = client(&store).await?;
            let mut w: Box<dyn std::io::Write> = match &out {
                Some(path) => Box::new(std::io::BufWriter::new(
                    std::fs::File::create(path)
                        .with_context(|| format!("creating {}", path.display()))?,
                )),
                None => Box::new(std::io::stdout().lock()),
            };
            let n = photon::verify::export(&client, &mut *w).await?;
            eprintln!("exported {n} joined events");
        }
        Command::Gc {
            store,
            retention_days,
        } => {
            let client = client(&store).await?;
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
            let temp = tempfile::tempdir()?;
            let dir = dir.unwrap_or_else(|| temp.path().to_path_buf());
            let store = store.unwrap_or_else(|| StoreSpec::Embedded(dir.join("store")));
            let client = open_client(&store, "photon", &[]).await?;
            let backend = match &store {
                StoreSpec::Embedded(_) => "embedded",
                StoreSpec::Memory => "memory",
                StoreSpec::Tikv(_) => "tikv",
            };
            let options = DemoOptions {
                clicks,
                pipelines,
                json,
                seed,
                offered: rate.map(|per_sec| photon::demo::Offered { per_sec, duration }),
                backend: backend.to_string(),
            };
            if !photon::demo::run(&client, &dir, &options).await?.ok() {
                std::process::exit(1);
            }
        }
    }
    Ok(())
}
