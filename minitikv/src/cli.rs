//! The command line of `minitikv` (public, so that tests parse command lines exactly as the
//! binary does).

use crate::ServerConfig;
use clap::{Parser, Subcommand};
use percolator::kv::Durability;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// A stand-in for a TiKV cluster: one gRPC port answers the PD calls and the TiKV raw-mode
/// RPCs that tikv-client 0.4.0 makes; optional extra stores on their own ports, regions
/// split at given keys, runtime churn and seeded fault injection.
#[derive(Parser, Debug)]
#[command(name = "minitikv", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Serve PD and TiKV on one address until interrupted (Ctrl-C / SIGTERM).
    ///
    /// Prints `minitikv listening on ADDR` on stdout once ready; give ADDR to clients as the
    /// PD endpoint (e.g. `--store tikv:ADDR`).
    Serve {
        /// Data directory (embedded fjall store); data is kept in memory when absent.
        #[arg(long, value_name = "DIR")]
        data: Option<PathBuf>,
        /// Durability of the data directory's writes: process (survives a crash of the
        /// server) or fsync (synced before acknowledged: survives power loss too).
        #[arg(long, default_value_t = Durability::Process)]
        durability: Durability,
        /// Address to listen on; port 0 picks a free port (the real one is printed).
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:2379")]
        listen: SocketAddr,
        /// Address announced to clients as PD member URL and store address
        /// (default: the bound address, 0.0.0.0 replaced by 127.0.0.1).
        #[arg(long, value_name = "HOST:PORT")]
        advertise: Option<String>,
        /// Serve the metrics (Prometheus, `GET /metrics`) on this address.
        #[arg(long, value_name = "ADDR")]
        metrics_addr: Option<SocketAddr>,
        #[allow(missing_docs)] // a flattened argument group: a doc comment would be help text
        #[command(flatten)]
        cluster: ClusterArgs,
    },
}

/// Layout and weather of the emulated cluster. Every option can also be set by its
/// `MINITIKV_*` environment variable (e.g. for a test that starts `minitikv serve` itself).
#[derive(clap::Args, Debug)]
pub struct ClusterArgs {
    /// Split the key space at these keys at start (comma-separated, UTF-8; repeatable;
    /// default: `f,m,s`, four regions).
    #[arg(
        long,
        env = "MINITIKV_SPLIT_KEYS",
        value_name = "KEY,...",
        value_delimiter = ','
    )]
    pub split_keys: Vec<String>,
    /// Split the keys under `--split-prefix` evenly into this many regions at start, by the
    /// two bytes after the prefix. Keys whose two bytes after the prefix are equal land in one
    /// region: all of a percolator namespace's keys start `<name>\x00\x01`, so with
    /// `--split-prefix <name>` they start in one. A small `--region-split-size` spreads data
    /// over regions as it grows instead.
    #[arg(long, env = "MINITIKV_REGIONS", value_name = "N", default_value_t = 0)]
    pub regions: usize,
    /// Prefix of the keys `--regions` spreads (default: the whole key space).
    #[arg(
        long,
        env = "MINITIKV_SPLIT_PREFIX",
        value_name = "PREFIX",
        default_value = ""
    )]
    pub split_prefix: String,
    /// Start with one region over the whole key space (as a fresh TiKV cluster), ignoring
    /// the default split keys.
    #[arg(long, env = "MINITIKV_SINGLE_REGION")]
    pub single_region: bool,
    /// TiKV's `region-split-size` in bytes: a region over 1.5 times this, or over 1.5 x
    /// 10,000 keys per MiB of it, splits into pieces of this size (0: regions never split
    /// as data grows).
    #[arg(
        long,
        env = "MINITIKV_REGION_SPLIT_SIZE",
        value_name = "BYTES",
        default_value_t = 8 * 1024 * 1024
    )]
    pub region_split_size: u64,
    /// Number of stores, each on its own port (store 1 on `--listen`, beside PD).
    #[arg(long, env = "MINITIKV_STORES", value_name = "N", default_value_t = 1)]
    pub stores: usize,
    /// Seed of the injected faults and of the churn.
    #[arg(long, env = "MINITIKV_SEED", value_name = "N", default_value_t = 0)]
    pub seed: u64,
    /// Rate of `ServerIsBusy` answers per request (e.g. 0.001).
    #[arg(
        long,
        env = "MINITIKV_BUSY_RATE",
        value_name = "RATE",
        default_value_t = 0.0
    )]
    pub busy_rate: f64,
    /// Rate of injected region errors (NotLeader, EpochNotMatch, RegionNotFound) per request.
    #[arg(
        long,
        env = "MINITIKV_REGION_ERROR_RATE",
        value_name = "RATE",
        default_value_t = 0.0
    )]
    pub region_error_rate: f64,
    /// Rate of replies dropped after the request was applied.
    #[arg(
        long,
        env = "MINITIKV_LOST_REPLY_RATE",
        value_name = "RATE",
        default_value_t = 0.0
    )]
    pub lost_reply_rate: f64,
    /// Rate of writes applied and then answered with a region error (a leader change after
    /// apply).
    #[arg(
        long,
        env = "MINITIKV_APPLIED_REGION_ERROR_RATE",
        value_name = "RATE",
        default_value_t = 0.0
    )]
    pub applied_region_error_rate: f64,
    /// Rate of delayed requests.
    #[arg(
        long,
        env = "MINITIKV_DELAY_RATE",
        value_name = "RATE",
        default_value_t = 0.0
    )]
    pub delay_rate: f64,
    /// Longest injected delay, in milliseconds.
    #[arg(
        long,
        env = "MINITIKV_MAX_DELAY_MS",
        value_name = "MS",
        default_value_t = 0
    )]
    pub max_delay_ms: u64,
    /// Split, merge or move a leader every this many milliseconds (0: never).
    #[arg(
        long,
        env = "MINITIKV_CHURN_MS",
        value_name = "MS",
        default_value_t = 0
    )]
    pub churn_ms: u64,
    /// Upper bound of the region count under churn.
    #[arg(
        long,
        env = "MINITIKV_CHURN_MAX_REGIONS",
        value_name = "N",
        default_value_t = 64
    )]
    pub churn_max_regions: usize,
}

impl ClusterArgs {
    /// Applies these settings to `config`.
    pub fn apply(self, mut config: ServerConfig) -> ServerConfig {
        if self.single_region {
            config.split_keys.clear();
        }
        if !self.split_keys.is_empty() || self.regions > 1 {
            config.split_keys = self
                .split_keys
                .into_iter()
                .map(String::into_bytes)
                .collect();
        }
        config.split = (self.region_split_size > 0)
            .then(|| crate::SplitPolicy::from_split_size(self.region_split_size));
        if self.regions > 1 {
            config.split_keys.extend(ServerConfig::even_splits(
                self.split_prefix.as_bytes(),
                self.regions,
            ));
        }
        config.stores = self.stores.max(1);
        config.faults = crate::Faults {
            seed: self.seed,
            server_busy: self.busy_rate,
            region_error: self.region_error_rate,
            lost_reply: self.lost_reply_rate,
            applied_region_error: self.applied_region_error_rate,
            delay: self.delay_rate,
            max_delay: Duration::from_millis(self.max_delay_ms),
        };
        if self.churn_ms > 0 {
            config.churn = Some(crate::Churn {
                interval: Duration::from_millis(self.churn_ms),
                seed: self.seed,
                min_regions: 1,
                max_regions: self.churn_max_regions.max(1),
            });
        }
        config
    }
}
