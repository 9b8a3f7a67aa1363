//! The command line of `percolator-ctl` (public, so that tests parse command lines exactly as
//! the binary does).

use clap::{Args, Parser, Subcommand};
use percolator::kv::Durability;
use percolator_cli::StoreSpec;

// Doc comments on clap types become `--help` text; the command line itself is exempt from
// `missing_docs` where a doc comment would change the help.
#[allow(missing_docs)]
#[derive(Parser, Debug)]
#[command(
    name = "percolator-ctl",
    version,
    about = "Inspect and operate an observer application's store: workers, backlog, dead letters, locks, cells, GC, renotify"
)]
pub struct Cli {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Print one JSON document instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Where the store is, and where its timestamps come from (as for the other binaries).
#[derive(Args, Clone, Debug)]
pub struct StoreArgs {
    /// Store: embedded:PATH, memory, or tikv:PD_ADDR[,PD_ADDR...]. An embedded store is
    /// open in one process at a time: stop its workers first, or use a shared store.
    #[arg(long, global = true, default_value = "embedded:./photon-data")]
    pub store: StoreSpec,
    /// Key namespace of the application inside the store.
    #[arg(long, global = true, default_value = "photon")]
    pub namespace: String,
    /// Oracle service addresses (comma-separated); default: the in-process oracle persisted
    /// in the store (embedded and memory stores only). Required with a TiKV store.
    #[arg(long, global = true, value_delimiter = ',')]
    pub oracle: Vec<String>,
    /// Durability of an embedded store's writes: process (survives a crash of the process)
    /// or fsync (synced to disk before acknowledged: survives power loss too).
    #[arg(long, global = true, default_value_t = Durability::Process)]
    pub durability: Durability,
    /// Namespace of the oracle's record, for `status` (default: `default` with --oracle, as
    /// `oracle serve`; `<namespace>-oracle` for the in-process oracle).
    #[arg(long, global = true)]
    pub oracle_namespace: Option<String>,
    /// A worker counts as live this long after its last heartbeat, in milliseconds (three
    /// heartbeats of the default worker configuration).
    #[arg(long, global = true, default_value_t = 1500, value_parser = clap::value_parser!(u64).range(1..=MAX_SECS * 1000))]
    pub liveness_ms: u64,
}

impl StoreArgs {
    /// The namespace of the oracle record that serves this client.
    pub fn oracle_namespace(&self) -> String {
        match (&self.oracle_namespace, self.oracle.is_empty()) {
            (Some(ns), _) => ns.clone(),
            (None, false) => "default".to_string(),
            (None, true) => format!("{}-oracle", self.namespace),
        }
    }

    /// The liveness horizon of worker heartbeats.
    pub fn liveness(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.liveness_ms)
    }
}

/// The verbs.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Workers (heartbeat age, hash share), notification backlog per observed column, dead
    /// letters, oracle leader and window, GC safe point, locks older than their TTL.
    Status,
    /// Cells of a table with their commit_ts, lock and a value preview (raw: locks are
    /// shown, not resolved).
    Scan(ScanArgs),
    /// The notification backlog, oldest bucket first.
    Notifications {
        /// Notifications shown at most.
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
    /// Notifications whose observer failed too often: list, show, replay, drop.
    #[command(subcommand)]
    DeadLetters(DeadLetterCommand),
    /// Locks held on cells (a crashed writer's expire after their TTL).
    Locks {
        /// Resolve every lock: roll crashed writers forward or back, waiting for live ones.
        #[arg(long)]
        resolve: bool,
    },
    /// Queue a notification for every existing cell of TABLE/COLUMN that holds a value, so an
    /// observer added (or, with --force, changed) since they were written runs on them. Run
    /// it once every writer of the column declares it. In pages, resumable: a pass cut short
    /// (a crash, --pages) goes on where it stopped when run again; `status` shows it.
    Renotify(RenotifyArgs),
    /// Garbage-collect versions below the safe point the policy allows (the GC lag behind
    /// the oracle), and print what was removed.
    Gc,
    /// Wait until no notification is left and no observer run is in flight in any worker.
    /// Exit status 0 when drained, 3 when the timeout passed first.
    Wait {
        /// Give up after this many seconds (default: wait forever; at most ten years).
        #[arg(long, value_parser = timeout_secs)]
        timeout: Option<f64>,
        /// Pause between checks, in milliseconds.
        #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=MAX_SECS * 1000))]
        poll_ms: u64,
    },
    /// Serve the live dashboard: a web page (workers, backlog, throughput, dead letters with
    /// confirmed replay, locks, GC, oracle), `/api/status` (the JSON of `status --json`) and
    /// `/metrics` (Prometheus text). Reads only, except confirmed dead-letter actions.
    Serve(ServeArgs),
}

/// Arguments of `serve`.
#[derive(Args, Clone, Debug)]
pub struct ServeArgs {
    /// Address to listen on (port 0: any free port; the address is printed once listening).
    #[arg(long, default_value = "127.0.0.1:7780")]
    pub listen: std::net::SocketAddr,
    /// How often the charts' figures are read from the store, in milliseconds.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=MAX_SECS * 1000))]
    pub sample_ms: u64,
    /// Samples kept for the charts (the oldest are dropped).
    #[arg(long, default_value_t = 300)]
    pub history: usize,
    /// Also serve `/metrics` (only) on this address, for a Prometheus that scrapes every
    /// binary on its metrics port (the dashboard's own `/metrics` serves the same).
    #[arg(long)]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// A `Host` name (optionally with `:PORT`) the dashboard answers besides its listen
    /// address and localhost, e.g. the name of a proxy in front of it (repeat for more).
    /// Other names are refused (DNS rebinding).
    #[arg(long = "allow-host", value_name = "NAME")]
    pub allow_hosts: Vec<String>,
    /// Milliseconds a connection may take to send a request's headers before it is closed.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub header_timeout_ms: u64,
}

/// Arguments of `scan`.
#[derive(Args, Clone, Debug)]
pub struct ScanArgs {
    /// The table.
    pub table: String,
    /// Only rows starting with this prefix.
    #[arg(long, conflicts_with_all = ["from", "to"])]
    pub prefix: Option<String>,
    /// First row (inclusive).
    #[arg(long)]
    pub from: Option<String>,
    /// End row (exclusive).
    #[arg(long)]
    pub to: Option<String>,
    /// Read at this timestamp instead of the latest commit.
    #[arg(long)]
    pub at: Option<u64>,
    /// Every stored version of each cell, newest first.
    #[arg(long)]
    pub versions: bool,
    /// Cells shown at most.
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
}

/// Arguments of `renotify`.
#[derive(Args, Clone, Debug)]
pub struct RenotifyArgs {
    /// The table.
    pub table: String,
    /// The observed column.
    pub column: String,
    /// Only rows starting with this prefix (a pass of its own).
    #[arg(long)]
    pub prefix: Option<String>,
    /// Cells per page (one snapshot read, one put of notify keys, one progress write).
    #[arg(long, default_value_t = observers::renotify::DEFAULT_PAGE_SIZE)]
    pub page_size: usize,
    /// Stop after this many pages (run again to go on); default: to the end.
    #[arg(long)]
    pub pages: Option<usize>,
    /// Run strong observers again on cells they already handled (a changed observer); a
    /// pass in progress resumes only as it began.
    #[arg(long)]
    pub force: bool,
    /// Forget the pass in progress (of this table, column and prefix) instead: the
    /// notifications it already queued stay; the next run begins afresh.
    #[arg(long, conflicts_with_all = ["pages", "force"])]
    pub abandon: bool,
}

/// `dead-letters` subcommands.
#[derive(Subcommand, Debug)]
pub enum DeadLetterCommand {
    /// Every dead letter: id, cell, age, error.
    List,
    /// One dead letter in full.
    Show {
        /// Its id (or a unique prefix of it).
        id: String,
    },
    /// Put notifications back into the notify space, so workers run their observer again.
    Replay {
        /// The id (or a unique prefix) of the letter.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        id: Option<String>,
        /// Every dead letter.
        #[arg(long)]
        all: bool,
    },
    /// Delete dead letters for good: their notifications never run. Needs --yes.
    Drop {
        /// The id (or a unique prefix) of the letter.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        id: Option<String>,
        /// Every dead letter.
        #[arg(long)]
        all: bool,
        /// Confirm: without it nothing is deleted and the letters that would be are listed.
        #[arg(long)]
        yes: bool,
    },
}

/// The longest duration a flag takes, in seconds: ten years (longer ones are refused when the
/// command line is parsed).
pub const MAX_SECS: u64 = 10 * 365 * 86_400;

/// `wait --timeout`: seconds, a finite number from 0 to [`MAX_SECS`].
fn timeout_secs(text: &str) -> Result<f64, String> {
    let secs: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("`{text}`: expected a number of seconds"))?;
    if secs.is_finite() && (0.0..=MAX_SECS as f64).contains(&secs) {
        Ok(secs)
    } else {
        Err(format!("`{text}`: from 0 to {MAX_SECS} seconds"))
    }
}
