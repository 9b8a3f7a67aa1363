//! The command line of `oracle`: `oracle serve` and `oracle get`.

use clap::{Parser, Subcommand};
use percolator::kv::Durability;
use percolator_cli::StoreSpec;

/// Timestamp oracle: strictly increasing timestamps (physical ms << 18 | logical), never
/// reused across restarts or takeovers.
#[derive(Parser, Debug)]
#[command(name = "oracle", version)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Serve timestamps. Several servers may share one store: one leads, the others stand
    /// by and take over when it dies.
    Serve(ServeArgs),
    /// Fetch timestamps from running oracles and print them, one per line.
    Get(GetArgs),
}

/// Arguments of `oracle serve`.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Store holding the oracle record: embedded:PATH or tikv:PD_ADDR[,PD_ADDR...] (not
    /// memory: the record must outlive the process, or a restart could re-issue timestamps).
    #[arg(long, value_parser = oracle_store)]
    pub store: StoreSpec,
    /// Durability of an embedded store's writes: process (survives a crash of the process)
    /// or fsync (also power loss). Either way the record is synced to disk before a window
    /// of timestamps is used, so timestamps are never re-issued after a power loss.
    #[arg(long, default_value_t = Durability::Process)]
    pub durability: Durability,
    /// Address to listen on (loopback by default).
    #[arg(long, default_value = "127.0.0.1:7707")]
    pub listen: String,
    /// Address clients should use for this server (written into the record as the leader
    /// hint); defaults to the bound address.
    #[arg(long)]
    pub advertise: Option<String>,
    /// Key namespace of the oracle record.
    #[arg(long, default_value = "default")]
    pub namespace: String,
    /// Physical time reserved ahead by each window write, in milliseconds.
    #[arg(long, default_value_t = 3000)]
    pub window_ms: u64,
    /// Leader heartbeat (record rewrite) interval, in milliseconds.
    #[arg(long, default_value_t = 500)]
    pub heartbeat_ms: u64,
    /// A standby takes over after the record has not changed for this long, in milliseconds.
    #[arg(long, default_value_t = 3000)]
    pub lease_timeout_ms: u64,
    /// Serve the metrics (Prometheus, `GET /metrics`) on this address (e.g. 127.0.0.1:9107).
    #[arg(long)]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Testing aid: shift this process's wall clock by this many milliseconds.
    #[arg(long, default_value_t = 0, hide = true, allow_hyphen_values = true)]
    pub clock_skew_ms: i64,
}

/// Arguments of `oracle get`.
#[derive(clap::Args, Debug)]
pub struct GetArgs {
    /// Oracle addresses, comma-separated (leader and standbys in any order).
    #[arg(long, default_value = "127.0.0.1:7707", value_delimiter = ',')]
    pub oracle: Vec<String>,
    /// How many timestamps to fetch (concurrently, so they share round trips).
    #[arg(short = 'n', long, default_value_t = 1)]
    pub count: usize,
    /// Give up after this many milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub timeout_ms: u64,
}

/// Parses `oracle serve --store`, refusing `memory`: the record (window end, epoch) would
/// die with the process, and a restarted oracle could hand out timestamps already used.
pub fn oracle_store(text: &str) -> Result<StoreSpec, String> {
    match text.parse::<StoreSpec>().map_err(|e| e.to_string())? {
        StoreSpec::Memory => Err(
            "the oracle's record must outlive the process (a restarted oracle on a fresh \
             memory store could re-issue timestamps already used): use embedded:PATH or \
             tikv:PD_ADDR[,PD_ADDR...]"
                .to_string(),
        ),
        spec => Ok(spec),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serve_refuses_a_memory_store() {
        let err = Cli::try_parse_from(["oracle", "serve", "--store", "memory"])
            .expect_err("--store memory accepted");
        let text = err.to_string();
        assert!(text.contains("must outlive the process"), "{text}");
        let ok = Cli::try_parse_from([
            "oracle",
            "serve",
            "--store",
            "embedded:/tmp/o",
            "--durability",
            "fsync",
        ])
        .expect("embedded store");
        let Command::Serve(args) = ok.command else {
            panic!("not serve");
        };
        assert_eq!(args.durability, Durability::Fsync);
    }
}
