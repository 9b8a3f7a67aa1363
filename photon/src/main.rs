//! `photon`: generate, load, join, verify and demo the click–query join. The work is in the
//! `photon` library; this dispatches the command line ([`photon::cli`]) and opens the store.

use anyhow::Context;
use app::run::{Outcome, RunOptions};
use percolator::Client;
use percolator_cli::store::open_client;
use percolator_cli::StoreSpec;
use photon::cli::{Cli, Command, RunArgs, StoreArgs};
use photon::demo::DemoOptions;
use photon::load::LoadStats;
use photon::maintenance::{spawn_gc, GcMetrics};
use photon::pipeline::{spawn_sweeper, Pipeline};
use photon::progress::{Counter, Display, Progress};
use photon::registry;
use photon::run::{Loaded, RunSpec};
use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// mimalloc, not glibc's malloc: see the workspace's Cargo.toml (a quarter of the demo's CPU
/// went to allocation).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Opens the store and a client on it (a shared TiKV store needs `--oracle`), creating an
/// embedded store where none is.
async fn client(store: &StoreArgs) -> anyhow::Result<Client> {
    client_of(store, false).await
}

/// [`client`] for a command that reads an existing store (`verify`, `export`, `gc`): an
/// embedded path that holds no store is refused, not created.
async fn existing_client(store: &StoreArgs) -> anyhow::Result<Client> {
    client_of(store, true).await
}

async fn client_of(store: &StoreArgs, existing: bool) -> anyhow::Result<Client> {
    if existing {
        percolator_cli::store::require_existing(&store.store)?;
    }
    let client = open_client(
        &store.store,
        &store.namespace,
        &store.oracle,
        store.durability,
        Some(&photon::schema::table_ids()),
    )
    .await?;
    photon::schema::declare_columns(&client);
    Ok(client)
}

/// `photon run`: the pipelines in this process while the directory loads.
async fn run(args: RunArgs) -> anyhow::Result<()> {
    // The handlers first, as for `photon work`.
    let shutdown = percolator_cli::shutdown_signal()?;
    let client = client(&args.store).await?;
    let follow = args.load.follow();
    let total = match follow {
        Some(_) => None,
        None => Some(photon::load::lines_to_load(&client, &args.input).await?),
    };
    let listener = args.work.hint_listener().await?;
    let specs: Vec<_> = (0..args.pipelines.max(1))
        .map(|i| {
            let mut spec = match i {
                0 => args.work.spec(),
                _ => args
                    .work
                    .spec_named(format!("{}{}", args.work.pipeline, i + 1)),
            };
            spec.worker.hint_listener = listener.clone();
            spec
        })
        .collect();
    // Workers of other processes listening for this process's commits get them at once (its
    // own workers get them as in-process hints, so its own listener is left out).
    let _relay = (!args.load.no_hint_relay).then(|| {
        observers::HintRelay::spawn_beside(
            &client,
            observers::relay::DEFAULT_REFRESH,
            listener.as_deref(),
        )
    });
    let metrics = app::metrics::Metrics::new();
    if let Some(listener) = &listener {
        let namespace = String::from_utf8_lossy(&client.codec().namespace()).into_owned();
        app::metrics::register_hint_listener(&metrics, &namespace, listener.clone());
    }
    let families = app::metrics::WorkerMetrics::registered(&metrics);
    let pipelines = photon::run::start_pipelines(&client, &specs, &families)?;
    let holder = pipelines[0].worker.id().to_string();
    let spec = RunSpec {
        run: RunOptions {
            load: args.load.options(),
            follow,
            until_drained: args.until_drained,
            // Other processes may load or join on a shared store.
            confirm_in_store: true,
            drain_rounds: 3,
            pace: None,
        },
        horizon: args.work.horizon(),
        sweep_period: args.work.sweep_period(),
        gc: args.work.gc(holder),
        metrics_addr: args.metrics_addr,
        metrics,
        progress: Display::for_stderr(Duration::from_millis(args.load.progress_ms)),
        loaded: Loaded::Lines(total),
        joinable: None,
    };
    eprintln!(
        "photon run: loading {} while {} pipeline(s) join it; SIGINT/SIGTERM to stop",
        args.input.display(),
        pipelines.len()
    );
    let stats = Arc::new(LoadStats::default());
    let started = Instant::now();
    let stop = async move {
        let signal = shutdown.await;
        tracing::info!(%signal, "shutting down");
    };
    let outcome =
        photon::run::run(&client, &args.input, &pipelines, &spec, &stats, || {}, stop).await;
    for p in &pipelines {
        p.worker.shutdown().await;
    }
    let joined: u64 = pipelines
        .iter()
        .map(|p| p.stats.joined.load(std::sync::atomic::Ordering::Relaxed))
        .sum();
    // A run that failed to start (its metrics endpoint) loaded nothing: no summary of it.
    if !matches!(&outcome, Err(e) if e.before_start()) {
        println!(
            "{}",
            stats.summary("events", started.elapsed(), &args.load.rejects)
        );
        println!("joined {} clicks", photon::human::count(joined));
    }
    match outcome.context("running the pipelines")? {
        Outcome::Drained => eprintln!("photon run: loaded and drained; exiting"),
        Outcome::Stopped => eprintln!("photon run: stopped"),
    }
    percolator_cli::store::leave_open(client)
        .await
        .context("syncing the store before exiting")?;
    Ok(())
}

#[tokio::main]
async fn main() {
    percolator_cli::init_tracing("warn");
    // Flags over environment over the configuration file (`--config`, `--print-config`);
    // a wrong command line exits with clap's status, `exit::USAGE`.
    let cli: Cli = percolator_cli::config::parse("photon");
    let code = match command(cli).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("Error: {}", percolator_cli::report::error_line(e.as_ref()));
            exit_code(&e)
        }
    };
    std::process::exit(code);
}

/// The exit status of a failed command (`percolator_cli::exit`): the store could not be
/// opened, the input could not be read, or anything else.
fn exit_code(e: &anyhow::Error) -> i32 {
    use percolator_cli::exit;
    for cause in e.chain() {
        if cause
            .downcast_ref::<percolator_cli::store::OpenError>()
            .is_some()
        {
            return exit::STORE_UNAVAILABLE;
        }
        if let Some(v) = cause.downcast_ref::<photon::verify::VerifyError>() {
            if v.is_input() {
                return exit::INPUT;
            }
        }
    }
    exit::FAILED
}

/// Runs the command; returns the exit status of a command that ran (a failed check, a
/// shutdown cut short), or the error that stopped it.
async fn command(cli: Cli) -> anyhow::Result<i32> {
    use percolator_cli::exit;
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
        Command::Load { store, input, load } => {
            let client = client(&store).await?;
            // Workers in other processes listening for this loader's commits get them at once.
            let relay = (!load.no_hint_relay)
                .then(|| observers::HintRelay::spawn(&client, observers::relay::DEFAULT_REFRESH));
            let options = load.options();
            let stats = Arc::new(LoadStats::default());
            let started = Instant::now();
            // The lines left to load are the total (unknown while following growing files).
            let total = match load.follow {
                true => None,
                false => Some(photon::load::lines_to_load(&client, &input).await?),
            };
            let lines = {
                let stats = stats.clone();
                move || stats.lines.load(std::sync::atomic::Ordering::Relaxed)
            };
            let progress = Progress::start(
                Display::for_stderr(Duration::from_millis(load.progress_ms)),
                vec![Counter::new("loaded", "lines", total, lines)],
            );
            if let Some(poll) = load.follow() {
                let stop = percolator_cli::shutdown_signal()?;
                let stop = async move {
                    stop.await;
                };
                photon::load::loader()
                    .follow_dir(&client, &input, &options, &stats, poll, stop)
                    .await?;
            } else {
                photon::load::load_dir(&client, &input, &options, &stats).await?;
            }
            progress.finish();
            if let Some(relay) = &relay {
                tracing::info!(
                    keys = relay.keys_relayed(),
                    datagrams = relay.datagrams_sent(),
                    failed = relay.sends_failed(),
                    lost = relay.hints_lost(),
                    workers = relay.targets().len(),
                    "hints relayed to listening workers"
                );
            }
            println!(
                "{}",
                stats.summary("events", started.elapsed(), &load.rejects)
            );
            drop(relay);
            percolator_cli::store::leave_open(client)
                .await
                .context("syncing the store before exiting")?;
        }
        Command::Run(args) => run(args).await?,
        Command::Work {
            store,
            work,
            until,
            metrics_addr,
        } => {
            // The handlers first: a SIGTERM the instant readiness is printed must shut the
            // worker down gracefully, not kill it.
            let shutdown = percolator_cli::shutdown_signal()?;
            let client = client(&store).await?;
            let metrics = app::metrics::Metrics::new();
            let families = app::metrics::WorkerMetrics::registered(&metrics);
            let mut spec = work.spec();
            spec.worker.hint_listener = work.hint_listener().await?;
            let pipeline = Pipeline::start_with_metrics(&client, &spec, families)?;
            let gc_metrics = Arc::new(GcMetrics::default());
            let namespace = String::from_utf8_lossy(&client.codec().namespace()).into_owned();
            if let Some(listener) = &spec.worker.hint_listener {
                app::metrics::register_hint_listener(&metrics, &namespace, listener.clone());
            }
            photon::metrics::register(
                &metrics,
                &namespace,
                &[(pipeline.name.clone(), pipeline.stats.clone())],
                Some(gc_metrics.clone()),
            );
            if let Some(addr) = metrics_addr {
                app::metrics::spawn(addr, metrics.render())?;
            }
            let sweeper = spawn_sweeper(client.clone(), work.horizon(), work.sweep_period());
            let holder = pipeline.worker.id().to_string();
            let gc = work
                .gc(holder)
                .map(|spec| spawn_gc(client.clone(), spec, gc_metrics.clone()));
            let pipelines = [pipeline];
            eprintln!(
                "photon worker running (pipeline {}); SIGINT/SIGTERM to stop",
                work.pipeline
            );
            // With --until-drained the worker also stops once the logs are loaded and the
            // join is drained; a failing check stops it with an error.
            let drained = async {
                if !until.until_drained {
                    return std::future::pending().await;
                }
                // Why not yet: the first answer, then at most every 10 s.
                photon::drained::until_drained(
                    &client,
                    until.input.as_deref(),
                    work.horizon(),
                    Duration::from_millis(500),
                    app::drain::say_every(Duration::from_secs(10), |why| {
                        eprintln!("photon worker: waiting for the drain: {why}")
                    }),
                )
                .await
            };
            let outcome = tokio::select! {
                signal = shutdown => {
                    tracing::info!(%signal, "shutting down");
                    None
                }
                result = drained => Some(result),
            };
            sweeper.abort();
            if let Some(gc) = gc {
                gc.abort();
            }
            // The shutdown is bounded (under Kubernetes' 30 s grace period by default): with
            // the store down it could wait on it for as long as the outage lasts.
            let bound = Duration::from_secs(until.shutdown_timeout_secs);
            let left =
                match tokio::time::timeout(bound, pipelines[0].worker.shutdown_checked()).await {
                    Ok(Ok(())) => None,
                    Ok(Err(e)) => Some(format!("leaving the worker registry failed: {e}")),
                    Err(_) => Some(format!(
                        "the shutdown did not finish within --shutdown-timeout-secs {}",
                        until.shutdown_timeout_secs
                    )),
                };
            if let Some(why) = left {
                eprintln!(
                    "photon worker: {why}; stopping anyway (other workers take its share once \
                     its heartbeat is stale)"
                );
                return Ok(exit::SHUTDOWN_INCOMPLETE);
            }
            match outcome {
                Some(Ok(())) => eprintln!("photon worker: loaded and drained; exiting"),
                Some(Err(e)) => return Err(e).context("checking for the drain"),
                None => {}
            }
        }
        Command::Verify {
            store,
            input,
            json,
            wait,
            partial_input,
            max_line_bytes,
        } => {
            let client = existing_client(&store).await?;
            let options = photon::verify::VerifyOptions {
                partial_input,
                max_line_bytes,
            };
            // Without --wait: one check (a deadline already passed).
            let deadline = Instant::now() + Duration::from_secs(wait.unwrap_or(0));
            let report = photon::verify::verify_until_with(
                &client,
                &input,
                options,
                deadline,
                |report, left| eprintln!("{}", photon::verify::retry_line(report, left)),
            )
            .await?;
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print!("{report}");
            }
            if report.ok() {
                return Ok(exit::OK);
            }
            // Duplicates and unexpected joins are never undone; only missing joins (still
            // missing at the deadline with --wait) may be in flight.
            return Ok(if photon::verify::may_still_pass(&report) {
                exit::INCOMPLETE
            } else {
                exit::CHECK_FAILED
            });
        }
        Command::Export { store, out } => {
            let client = existing_client(&store).await?;
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
            force,
        } => {
            let client = existing_client(&store).await?;
            // Today by the oracle, not by this host's clock (or the query logs' watermark's
            // day, when that is behind: a backfill).
            let now = client.oracle().get_timestamp().await?;
            let today = registry::retention_day(&client, now.physical_ms()).await?;
            let purge = registry::gc_registry(
                &client,
                today.day.saturating_sub(retention_days),
                force || today.by_watermark,
            )
            .await?;
            println!(
                "IdRegistry boundary at day {}; deleted {} keys",
                purge.boundary, purge.deleted
            );
            if purge.deferred > 0 {
                println!(
                    "kept {} entries below it whose transactions GC has not resolved yet \
                     (deleted by a later pass once version GC has run past them)",
                    purge.deferred
                );
            }
            if purge.rewritten > 0 {
                println!(
                    "deleted {} index cells below it alone: another run wrote their entries \
                     (filed under a day of their own), or none did",
                    purge.rewritten
                );
            }
        }
        Command::Demo {
            clicks,
            dir,
            store,
            durability,
            oracle,
            pipelines,
            json,
            seed,
            rate,
            duration,
            progress_ms,
            batch_size,
            max_backlog,
        } => {
            let temp = tempfile::tempdir()?;
            let dir = dir.unwrap_or_else(|| temp.path().to_path_buf());
            let store = store.unwrap_or_else(|| StoreSpec::Embedded(dir.join("store")));
            // A store in the temporary directory is held as itself too, to be closed without
            // freeing its memtables before the directory goes (`EmbeddedKv::close_for_removal`).
            let temporary = match &store {
                StoreSpec::Embedded(path) if path.starts_with(temp.path()) => Some(Arc::new(
                    percolator_cli::store::open_embedded(path, durability)
                        .with_context(|| format!("opening the store {store}"))?,
                )),
                _ => None,
            };
            // The store's calls are counted by method (printed per joined click).
            let kv: Arc<dyn percolator::kv::RawKv> = match &temporary {
                Some(embedded) => embedded.clone(),
                None => percolator_cli::store::open_store(&store, durability)
                    .await
                    .with_context(|| format!("opening the store {store}"))?,
            };
            let counted = Arc::new(percolator::kv::intercept::Intercepted::wrap(
                kv,
                percolator::kv::intercept::OpCounts::default(),
            ));
            let client = percolator_cli::store::client_for_store(
                counted.clone(),
                "photon",
                &oracle,
                Some(&photon::schema::table_ids()),
            )
            .await?;
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
                progress: match json {
                    true if std::io::stderr().is_terminal() => Display::Hidden,
                    _ => Display::for_stderr(Duration::from_millis(progress_ms)),
                },
                batch_size,
                max_backlog,
                store_calls: Some(counted),
            };
            let report = photon::demo::run(&client, &dir, &options).await?;
            if let Some(mut embedded) = temporary {
                // The temporary directory goes with the command: the store is closed (its
                // threads stopped) before it is removed. The client and the counting wrapper
                // go now; tasks that held the store (aborted runs, the commit heartbeat, the
                // oracle's window extension) let go of it as they wind down.
                drop((client, options));
                let deadline = Instant::now() + Duration::from_secs(5);
                loop {
                    match Arc::try_unwrap(embedded) {
                        Ok(kv) => {
                            kv.close_for_removal();
                            break;
                        }
                        Err(held) if Instant::now() < deadline => {
                            embedded = held;
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                        Err(held) => {
                            // Never remove a directory under a live store: keep it.
                            let kept = temp.keep();
                            tracing::warn!(
                                dir = %kept.display(),
                                "the demo's store was still in use at the end; its \
                                 temporary directory is left in place"
                            );
                            drop(held);
                            break;
                        }
                    }
                }
            } else {
                percolator_cli::store::leave_open(client)
                    .await
                    .context("syncing the store before exiting")?;
            }
            if !report.ok() {
                return Ok(exit::CHECK_FAILED);
            }
        }
    }
    Ok(exit::OK)
}
