//! `oracle`: the timestamp oracle service and a small command-line client.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use oracle::{ClientConfig, OracleClient, ServerConfig, ServerHandle, SkewedClock, SystemClock};
use percolator::kv::StoreSpec;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// Timestamp oracle: strictly increasing timestamps (physical ms << 18 | logical), never
/// reused across restarts or takeovers.
#[derive(Parser, Debug)]
#[command(name = "oracle", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve timestamps. Several servers may share one store: one leads, the others stand
    /// by and take over when it dies.
    Serve(ServeArgs),
    /// Fetch timestamps from running oracles and print them, one per line.
    Get(GetArgs),
}

#[derive(clap::Args, Debug)]
struct ServeArgs {
    /// Store holding the oracle record: embedded:PATH, memory, or tikv:PD_ADDR[,PD_ADDR...].
    #[arg(long)]
    store: StoreSpec,
    /// Address to listen on (loopback by default).
    #[arg(long, default_value = "127.0.0.1:7707")]
    listen: String,
    /// Address clients should use for this server (written into the record as the leader
    /// hint); defaults to the bound address.
    #[arg(long)]
    advertise: Option<String>,
    /// Key namespace of the oracle record.
    #[arg(long, default_value = "default")]
    namespace: String,
    /// Physical time reserved ahead by each window write, in milliseconds.
    #[arg(long, default_value_t = 3000)]
    window_ms: u64,
    /// Leader heartbeat (record rewrite) interval, in milliseconds.
    #[arg(long, default_value_t = 500)]
    heartbeat_ms: u64,
    /// A standby takes over after the record has not changed for this long, in milliseconds.
    #[arg(long, default_value_t = 3000)]
    lease_timeout_ms: u64,
    /// Testing aid: shift this process's wall clock by this many milliseconds.
    #[arg(long, default_value_t = 0, hide = true, allow_hyphen_values = true)]
    clock_skew_ms: i64,
}

#[derive(clap::Args, Debug)]
struct GetArgs {
    /// Oracle addresses, comma-separated (leader and standbys in any order).
    #[arg(long, default_value = "127.0.0.1:7707", value_delimiter = ',')]
    oracle: Vec<String>,
    /// How many timestamps to fetch (concurrently, so they share round trips).
    #[arg(short = 'n', long, default_value_t = 1)]
    count: usize,
    /// Give up after this many milliseconds.
    #[arg(long, default_value_t = 10_000)]
    timeout_ms: u64,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    percolator_cli::init_tracing("info");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => serve(args).await,
            Command::Get(args) => get(args).await,
        }
    })
}

async fn serve(args: ServeArgs) -> Result<()> {
    // The handlers first: a SIGTERM the instant readiness is printed must shut down
    // gracefully (releasing leadership), not kill the process.
    let shutdown = percolator_cli::shutdown_signal()?;
    // Embedded and memory stores belong to this process alone (directory lock): no other
    // oracle can be serving on them, so the server takes over at once. On a shared store
    // (TiKV) it waits out the lease of a possibly live leader.
    let exclusive = !matches!(args.store, StoreSpec::Tikv(_));
    let kv = percolator_tikv::open_store(&args.store)
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
    tracing::info!(addr = %server.local_addr(), store = %args.store, "oracle listening");
    // Readiness line for scripts and tests.
    println!("listening on {}", server.local_addr());
    std::io::stdout().flush().ok();
    let signal = shutdown.await;
    tracing::info!(%signal, "shutting down");
    server.shutdown().await;
    Ok(())
}

async fn get(args: GetArgs) -> Result<()> {
    let config = ClientConfig {
        request_timeout: Duration::from_millis(args.timeout_ms),
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
