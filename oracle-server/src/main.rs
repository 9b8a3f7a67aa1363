//! `oracle`: the timestamp oracle service and a small command-line client.

use anyhow::{Context, Result};
use oracle::{ClientConfig, OracleClient, ServerConfig, ServerHandle, SkewedClock, SystemClock};
use oracle_server::cli::{Cli, Command, GetArgs, ServeArgs};
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// mimalloc, not glibc's malloc, as in every binary of the workspace (see its Cargo.toml).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    // Flags over environment over the configuration file (`--config`, `--print-config`).
    let cli: Cli = percolator_cli::config::parse("oracle-server");
    percolator_cli::init_tracing("info");
    // Errors are printed once, without a backtrace (`percolator_cli::report`), with exit
    // status 1 as before.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")
    {
        Ok(runtime) => runtime,
        Err(e) => percolator_cli::report::exit_with(e.as_ref(), 1),
    };
    let outcome = runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => serve(args).await,
            Command::Get(args) => get(args).await,
        }
    });
    if let Err(e) = outcome {
        percolator_cli::report::exit_with(e.as_ref(), 1);
    }
}

async fn serve(args: ServeArgs) -> Result<()> {
    // The handlers first: a SIGTERM the instant readiness is printed must shut down
    // gracefully (releasing leadership), not kill the process.
    let shutdown = percolator_cli::shutdown_signal()?;
    // Embedded stores belong to this process alone (directory lock): no other oracle can be
    // serving on them, so the server takes over at once (memory stores are refused). On a shared store
    // (TiKV) it waits out the lease of a possibly live leader.
    let exclusive = !args.store.is_shared();
    let kv = percolator_cli::store::open_store(&args.store, args.durability)
        .await
        .with_context(|| format!("opening {}", args.store))?;
    let listener = TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let mut config = ServerConfig {
        heartbeat_interval: Duration::from_millis(args.heartbeat_ms.max(1)),
        lease_timeout: Duration::from_millis(args.lease_timeout_ms.max(1)),
        exclusive,
        advertise: args.advertise.clone(),
        ..ServerConfig::default()
    };
    config.window.namespace = args.namespace.clone();
    config.window.window = Duration::from_millis(args.window_ms.max(1));
    if args.clock_skew_ms != 0 {
        config.window.clock = Arc::new(SkewedClock::new(Arc::new(SystemClock), args.clock_skew_ms));
    }
    if args.heartbeat_ms >= args.lease_timeout_ms {
        tracing::warn!("--heartbeat-ms should be well below --lease-timeout-ms");
    }
    let server = ServerHandle::start(config, kv, listener)?;
    if let Some(addr) = args.metrics_addr {
        let metrics = percolator_metrics::Metrics::new();
        oracle_server::metrics::register(&metrics, &args.namespace, server.stats());
        percolator_metrics::spawn(addr, metrics.render())?;
    }
    tracing::info!(addr = %server.local_addr(), store = %args.store, "oracle listening");
    // Readiness line for scripts and tests.
    println!("listening on {}", server.local_addr());
    std::io::stdout().flush().ok();
    let signal = shutdown.await;
    tracing::info!(%signal, "shutting down");
    server.shutdown().await;
    Ok(())
}

/// Rounds over every address, each refusing the connection, after which `oracle get` fails.
const GIVE_UP_REFUSED: u32 = 3;

async fn get(args: GetArgs) -> Result<()> {
    let config = ClientConfig {
        request_timeout: Duration::from_millis(args.timeout_ms),
        // Nothing listening at any address is an answer: fail after a few rounds over them
        // (about 100 ms), not at the timeout.
        give_up_refused: Some(GIVE_UP_REFUSED),
        ..ClientConfig::default()
    };
    let client = OracleClient::new(args.oracle, config)?;
    let handles: Vec<_> = (0..args.count)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.get_timestamp().await })
        })
        .collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.context("a request task failed")??);
    }
    out.sort();
    for ts in out {
        println!("{ts}");
    }
    Ok(())
}
