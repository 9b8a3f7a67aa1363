//! The command line of `photon` (public, so that tests parse command lines exactly as the
//! binary does).

use crate::pipeline::PipelineSpec;
use app::pipeline::WorkerSpec;
use clap::{Args, Parser, Subcommand};
use percolator::kv::Durability;
use percolator_cli::StoreSpec;
use std::path::PathBuf;
use std::time::Duration;

// Doc comments on clap types become `--help` text, so the few items whose help must stay as
// it is are exempt from `missing_docs`: the command line itself and flattened argument groups.
#[allow(missing_docs)]
#[derive(Parser, Debug)]
#[command(
    name = "photon",
    version,
    about = "Exactly-once join of ad clicks with their search queries, over Percolator transactions"
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Where the store is, and where its timestamps come from.
#[derive(Args, Clone, Debug)]
pub struct StoreArgs {
    /// Store: embedded:PATH, memory, or tikv:PD_ADDR[,PD_ADDR...]
    #[arg(long, default_value = "embedded:./photon-data")]
    pub store: StoreSpec,
    /// Key namespace of the application inside the store.
    #[arg(long, default_value = "photon")]
    pub namespace: String,
    /// Oracle service addresses (comma-separated); default: an in-process oracle persisted in
    /// the store (one process per store: embedded and memory stores only). Required with a
    /// TiKV store, which several processes share.
    #[arg(long, value_delimiter = ',')]
    pub oracle: Vec<String>,
    /// Durability of an embedded store's writes: process (a write survives a crash or kill
    /// of the process, not a power loss) or fsync (each write is synced to disk before it is
    /// acknowledged, shared by concurrent writers: survives power loss too). Not for memory
    /// or TiKV stores.
    #[arg(long, default_value_t = Durability::Process)]
    pub durability: Durability,
}

/// Arguments of `photon gen`.
#[derive(Args, Clone, Debug)]
pub struct GenArgs {
    /// Output directory for queries-*.jsonl and clicks-*.jsonl.
    #[arg(long, default_value = "./photon-logs")]
    pub out: PathBuf,
    /// Number of queries.
    #[arg(long, default_value_t = 100_000)]
    pub queries: u64,
    /// Click-through rate (probability that a query gets a click).
    #[arg(long, default_value_t = 0.5)]
    pub ctr: f64,
    /// Mean click delay after its query, ms (exponentially distributed).
    #[arg(long, default_value_t = 2000.0)]
    pub click_delay_ms: f64,
    /// Fraction of clicks logged before their query.
    #[arg(long, default_value_t = 0.05)]
    pub early: f64,
    /// Fraction of clicks delivered twice (same click_id).
    #[arg(long, default_value_t = 0.02)]
    pub duplicates: f64,
    /// Fraction of clicks whose query never arrives.
    #[arg(long, default_value_t = 0.01)]
    pub orphans: f64,
    /// Fraction of malformed lines to insert.
    #[arg(long, default_value_t = 0.0)]
    pub malformed: f64,
    /// Events per second of event time.
    #[arg(long, default_value_t = 10_000.0)]
    pub rate: f64,
    /// Files per kind.
    #[arg(long, default_value_t = 2)]
    pub files: usize,
    /// Random seed (same seed, same logs).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// The subcommands.
#[allow(missing_docs)] // flattened argument groups (`store`, `work`) carry no doc comment
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Generate synthetic query and click logs (seeded, reproducible).
    Gen(GenArgs),
    /// Load the logs of a directory into the store, in transactional batches with offsets.
    Load {
        #[command(flatten)]
        store: StoreArgs,
        /// Directory holding queries-*.jsonl and clicks-*.jsonl.
        input: PathBuf,
        #[command(flatten)]
        load: LoadArgs,
    },
    /// Load a directory of logs while the join runs in this process (one process on the
    /// default embedded store; beside other processes with --store tikv:...), until
    /// SIGINT/SIGTERM or, with --until-drained, until loaded and drained.
    Run(RunArgs),
    /// Run a join worker (click and query observers) until SIGINT/SIGTERM.
    Work {
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        work: WorkArgs,
        #[command(flatten)]
        until: UntilArgs,
        /// Serve the metrics (Prometheus, `GET /metrics`) on this address (e.g. 127.0.0.1:9101).
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
        /// Retry until the report is OK or this many seconds have passed (clicks still in
        /// flight count as lost until they are joined). Each try prints one line to stderr.
        /// Exit status: 0 OK, 1 duplicates or unexpected joins (waiting cannot fix those),
        /// 3 clicks still missing (at the deadline), 4 input that cannot be read, 5 a store
        /// that cannot be opened, 6 another failure (docs/operating.md).
        #[arg(long, value_name = "SECS", value_parser = secs(0))]
        wait: Option<u64>,
        /// Verify what can be read: a log file that cannot be opened, or a directory without
        /// logs, is a warning (listed in the report) instead of a failure (exit status 4).
        #[arg(long)]
        partial_input: bool,
        /// The loader's `--max-line-bytes`: a longer line counts as malformed, as the loader
        /// rejected it.
        #[arg(long, default_value_t = crate::load::DEFAULT_MAX_LINE_BYTES)]
        max_line_bytes: usize,
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
        /// Days of IdRegistry entries to keep (counted back from today by the oracle's clock,
        /// UTC).
        #[arg(long, default_value_t = 3, value_parser = days())]
        retention_days: u64,
        /// Move the boundary even by more than a day at once (e.g. after a shorter retention,
        /// or when no GC ran for days); without it such a move is refused, since a clock
        /// running ahead would close days still in use.
        #[arg(long)]
        force: bool,
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
        /// Durability of an embedded store's writes: process or fsync (as for the other
        /// commands).
        #[arg(long, default_value_t = Durability::Process)]
        durability: Durability,
        /// Oracle service addresses (comma-separated); required with a TiKV store, which
        /// several processes share (default: an in-process oracle persisted in the store).
        #[arg(long, value_delimiter = ',')]
        oracle: Vec<String>,
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
        duration: Option<std::time::Duration>,
        /// Period of the progress lines printed when stderr is not a terminal, ms.
        #[arg(long, default_value_t = 5000, hide = true, value_parser = millis(1))]
        progress_ms: u64,
        /// Clicks (of one pipeline) joined per transaction; a burst of more than eight
        /// batches' worth found together is run an eighth at a time, up to four times this.
        /// 1: one per transaction.
        #[arg(long, default_value_t = DEFAULT_BATCH_SIZE)]
        batch_size: usize,
        /// Backpressure: the loader waits while more notifications than this wait for the
        /// join; 0: no bound.
        #[arg(long, default_value_t = crate::load::DEFAULT_MAX_BACKLOG)]
        max_backlog: usize,
    },
}

/// The default of `--batch-size` (the worker's default, [`observers::WorkerConfig`]).
pub const DEFAULT_BATCH_SIZE: usize = 32;

/// The longest duration a flag takes, in seconds: ten years. Longer ones are refused when the
/// command line is parsed (they overflowed timestamp and clock arithmetic in background tasks,
/// which died while the process went on).
pub const MAX_SECS: u64 = 10 * 365 * 86_400;

/// A flag in seconds, from `min` to [`MAX_SECS`].
fn secs(min: u64) -> clap::builder::RangedU64ValueParser<u64> {
    clap::value_parser!(u64).range(min..=MAX_SECS)
}

/// A flag in milliseconds, from `min` to [`MAX_SECS`] in ms.
fn millis(min: u64) -> clap::builder::RangedU64ValueParser<u64> {
    clap::value_parser!(u64).range(min..=MAX_SECS * 1000)
}

/// A flag in days, up to [`MAX_SECS`] in days.
fn days() -> clap::builder::RangedU64ValueParser<u64> {
    clap::value_parser!(u64).range(0..=MAX_SECS / 86_400)
}

/// Parses `90`, `90s`, `30m` or `1h` (up to [`MAX_SECS`]).
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("`{text}`: expected a number with s, m or h"))?;
    let secs = match unit {
        "s" => Some(n),
        "m" => n.checked_mul(60),
        "h" => n.checked_mul(3600),
        _ => return Err(format!("`{text}`: unit must be s, m or h")),
    };
    match secs {
        Some(secs) if secs <= MAX_SECS => Ok(std::time::Duration::from_secs(secs)),
        _ => Err(format!("`{text}`: at most {MAX_SECS} s (ten years)")),
    }
}

/// `--hint-listen`: an address, or off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HintListen {
    /// Listen on this address.
    On(std::net::SocketAddr),
    /// No listener: commits of other processes are found by scanning.
    Off,
}

fn hint_listen(text: &str) -> Result<HintListen, String> {
    match text {
        "off" => Ok(HintListen::Off),
        _ => text
            .parse()
            .map(HintListen::On)
            .map_err(|e| format!("`{text}`: an address such as 127.0.0.1:0, or off ({e})")),
    }
}

/// Arguments of `photon work` that describe its pipeline.
#[derive(Args, Clone, Debug)]
pub struct WorkArgs {
    /// Pipeline name; redundant pipelines run at once under different names.
    #[arg(long, default_value = "main")]
    pub pipeline: String,
    /// Worker name (default: `<pipeline>-<process id>`).
    #[arg(long)]
    pub worker: Option<String>,
    /// Clicks whose query has not arrived this long after their event time are reported as
    /// expired, not silently dropped (seconds).
    #[arg(long, default_value_t = 600, value_parser = secs(0))]
    pub horizon_secs: u64,
    /// Observer runs in flight at most.
    #[arg(long, default_value_t = 64)]
    pub max_in_flight: usize,
    /// Scanner tasks.
    #[arg(long, default_value_t = 2)]
    pub scanners: usize,
    /// Clicks joined per transaction (a batch of the worker's notifications); a burst of
    /// more than eight batches' worth found together (a loader's batch at saturation) is run
    /// an eighth at a time, up to four times this. 1: one per transaction.
    #[arg(long, default_value_t = DEFAULT_BATCH_SIZE)]
    pub batch_size: usize,
    /// How often an idle scanner reads the store's shared count of notify keys put, to
    /// follow what loaders in other processes commit, ms; 0: off (an idle scanner then
    /// waits out its idle period, up to 1 s). Each read is one point read: through TiKV
    /// about 1000/N `RawGet` a second per idle scanner.
    #[arg(long, default_value_t = observers::DEFAULT_FOLLOW_MS, value_parser = millis(0))]
    pub follow_ms: u64,
    /// Where the worker takes the notify keys that `photon load` in other processes relays
    /// to it (UDP), so it runs their commits at once instead of finding them by scanning;
    /// `off`: scanning only. Port 0: any free port. The address is published in the worker
    /// registry (see --hint-advertise).
    #[arg(long, default_value = "127.0.0.1:0", value_parser = hint_listen)]
    pub hint_listen: HintListen,
    /// The address (`host:port`) loaders on other hosts reach --hint-listen at; needed when
    /// it listens on every interface (`0.0.0.0:PORT`). Default: the address bound.
    #[arg(long)]
    pub hint_advertise: Option<String>,
    /// Period of the durable sweep of waiting clicks, ms (the fallback for wake-ups lost to
    /// a crash, and for clicks whose query passed the horizon).
    #[arg(long, default_value_t = 5000, value_parser = millis(1))]
    pub sweep_ms: u64,
    /// Period of version GC (and of IdRegistry GC with --registry-retention-days), seconds;
    /// 0: off. One worker of the namespace runs a pass at a time (a lease).
    #[arg(long, default_value_t = 600, value_parser = secs(0))]
    pub gc_every_secs: u64,
    /// How far GC's safe point lags the oracle, seconds (at least the client's GC lag, 600 s:
    /// no snapshot that old can still be read).
    #[arg(long, default_value_t = 600, value_parser = secs(1))]
    pub gc_lag_secs: u64,
    /// With it, periodic GC also drops IdRegistry days older than this many days (as
    /// `photon gc --retention-days`); clicks of those days are then reported too old.
    #[arg(long, value_parser = days())]
    pub registry_retention_days: Option<u64>,
}

/// How the loader reads a directory (`photon load`, `photon run`).
#[derive(Args, Clone, Debug)]
pub struct LoadArgs {
    /// Lines per transaction, at most (a batch takes what the input has, up to this).
    #[arg(long, default_value_t = app::load::DEFAULT_BATCH)]
    pub batch: usize,
    /// Where malformed lines are reported (file:line: error: text).
    #[arg(long, default_value = "./photon-rejects.txt")]
    pub rejects: PathBuf,
    /// Keep tailing growing files and pick up new ones until SIGINT/SIGTERM.
    #[arg(long)]
    pub follow: bool,
    /// Do not relay the loaded batches' notifications to workers of other processes that
    /// listen for them (they then find them by scanning; see `photon work --hint-listen`).
    #[arg(long)]
    pub no_hint_relay: bool,
    /// Poll period of --follow, ms.
    #[arg(long, default_value_t = 200, value_parser = millis(1))]
    pub poll_ms: u64,
    /// Period of the progress lines printed when stderr is not a terminal, ms.
    #[arg(long, default_value_t = 5000, hide = true, value_parser = millis(1))]
    pub progress_ms: u64,
    /// Backpressure: before each batch, wait while more notifications than this wait
    /// for the join (counted in the store, so it works with workers in other
    /// processes); 0: no bound.
    #[arg(long, default_value_t = crate::load::DEFAULT_MAX_BACKLOG)]
    pub max_backlog: usize,
    /// Longest line loaded, bytes: a longer line is rejected (file:line, its first bytes in
    /// the rejects file) and skipped without being held in memory.
    #[arg(long, default_value_t = crate::load::DEFAULT_MAX_LINE_BYTES)]
    pub max_line_bytes: usize,
    /// The loaded logs' event-time watermark (what `--horizon-secs` is measured on) is the
    /// latest event time loaded minus this, seconds.
    #[arg(long, default_value_t = 5, value_parser = secs(0))]
    pub out_of_orderness_secs: u64,
    /// While following, a log with no new line for this long no longer holds the watermark
    /// back, seconds (0: never).
    #[arg(long, default_value_t = 60, value_parser = secs(0))]
    pub idle_timeout_secs: u64,
}

impl LoadArgs {
    /// The loader's options.
    pub fn options(&self) -> crate::load::LoadOptions {
        crate::load::LoadOptions {
            batch: self.batch,
            rejects: self.rejects.clone(),
            max_backlog: self.max_backlog,
            max_line_bytes: self.max_line_bytes,
            follow: self.follow,
            watermarks: app::load::WatermarkOptions {
                out_of_orderness: Duration::from_secs(self.out_of_orderness_secs),
                idle_timeout: (self.idle_timeout_secs > 0)
                    .then(|| Duration::from_secs(self.idle_timeout_secs)),
            },
        }
    }

    /// `--poll-ms` if following.
    pub fn follow(&self) -> Option<Duration> {
        self.follow.then(|| Duration::from_millis(self.poll_ms))
    }
}

/// When `photon work` exits by itself.
#[derive(Args, Clone, Debug)]
pub struct UntilArgs {
    /// Exit (status 0) once the logs are loaded and the join is drained: every log file of
    /// --input (or, without it, every file the loader has started on that this host can
    /// read) loaded to its last complete line, no notification left and no observer run in
    /// flight in any worker.
    #[arg(long)]
    pub until_drained: bool,
    /// With --until-drained: the directory of the logs being loaded (queries*.jsonl,
    /// clicks*.jsonl); waits until every one of them is loaded.
    #[arg(long, requires = "until_drained")]
    pub input: Option<PathBuf>,
    /// The longest the shutdown may take after SIGTERM/SIGINT (or the drain), seconds: the
    /// runs in flight finish and the worker leaves the registry, or the process exits with
    /// status 7 (the store is down, say). Under Kubernetes' default 30 s grace period.
    #[arg(long, default_value_t = 20, value_parser = secs(1))]
    pub shutdown_timeout_secs: u64,
}

/// Arguments of `photon run`.
#[allow(missing_docs)] // flattened argument groups carry no doc comment
#[derive(Args, Clone, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Directory holding the logs (queries*.jsonl, clicks*.jsonl).
    #[arg(long)]
    pub input: PathBuf,
    #[command(flatten)]
    pub load: LoadArgs,
    #[command(flatten)]
    pub work: WorkArgs,
    /// Redundant pipelines in this process (named after --pipeline, numbered from the
    /// second).
    #[arg(long, default_value_t = 1)]
    pub pipelines: usize,
    /// Exit (status 0) once the directory is loaded and the join is drained (with
    /// --follow: once every file is loaded to its last complete line and drained).
    #[arg(long)]
    pub until_drained: bool,
    /// Serve the metrics (Prometheus, `GET /metrics`) on this address (e.g. 127.0.0.1:9101).
    #[arg(long)]
    pub metrics_addr: Option<std::net::SocketAddr>,
}

impl GenArgs {
    /// The generator's options.
    pub fn options(&self) -> crate::gen::GenOptions {
        crate::gen::GenOptions {
            queries: self.queries,
            ctr: self.ctr,
            mean_click_delay_ms: self.click_delay_ms,
            early_clicks: self.early,
            duplicates: self.duplicates,
            orphans: self.orphans,
            malformed: self.malformed,
            rate: self.rate,
            files: self.files,
            seed: self.seed,
            ..crate::gen::GenOptions::default()
        }
    }
}

impl WorkArgs {
    /// The pipeline these arguments describe.
    pub fn spec(&self) -> PipelineSpec {
        self.spec_named(self.pipeline.clone())
    }

    /// The pipeline these arguments describe, named `name`.
    pub fn spec_named(&self, name: String) -> PipelineSpec {
        PipelineSpec {
            worker: WorkerSpec {
                pipeline: name,
                worker: self.worker.clone(),
                max_in_flight: self.max_in_flight,
                scanners: self.scanners,
                batch_size: self.batch_size,
                max_batch_size: crate::join::max_batch_size(self.batch_size),
                follow_shared_counts: self.follow_shared_counts(),
                hint_listener: None,
            },
            horizon: self.horizon(),
        }
    }

    /// Binds `--hint-listen` (`None`: off), to be shared by the process's workers
    /// ([`WorkerSpec::hint_listener`]).
    pub async fn hint_listener(
        &self,
    ) -> Result<Option<std::sync::Arc<observers::HintListener>>, observers::WorkerError> {
        match self.hint_listen {
            HintListen::Off => Ok(None),
            HintListen::On(addr) => {
                observers::HintListener::bind(addr, self.hint_advertise.clone())
                    .await
                    .map(Some)
            }
        }
    }

    /// `--follow-ms` (`None`: 0, off).
    pub fn follow_shared_counts(&self) -> Option<Duration> {
        (self.follow_ms > 0).then(|| Duration::from_millis(self.follow_ms))
    }

    /// `--horizon-secs`.
    pub fn horizon(&self) -> Duration {
        Duration::from_secs(self.horizon_secs)
    }

    /// The periodic GC these arguments ask for (`None`: `--gc-every-secs 0`); `holder`
    /// names this process in the GC lease.
    pub fn gc(&self, holder: String) -> Option<crate::maintenance::GcSpec> {
        (self.gc_every_secs > 0).then(|| crate::maintenance::GcSpec {
            every: Duration::from_secs(self.gc_every_secs),
            lag: Duration::from_secs(self.gc_lag_secs),
            retention_days: self.registry_retention_days,
            holder,
        })
    }

    /// `--sweep-ms`.
    pub fn sweep_period(&self) -> Duration {
        Duration::from_millis(self.sweep_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pipeline spec `photon work ARGS` runs.
    fn work_spec(args: &[&str]) -> PipelineSpec {
        let argv = ["photon", "work"].iter().chain(args).copied();
        match Cli::try_parse_from(argv).expect("parses").command {
            Command::Work { work, .. } => work.spec(),
            other => panic!("not work: {other:?}"),
        }
    }

    #[test]
    fn follow_ms_sets_the_workers_follow_period_and_zero_turns_it_off() {
        assert_eq!(
            work_spec(&[]).worker.follow_shared_counts,
            observers::WorkerConfig::default().follow_shared_counts
        );
        assert_eq!(
            work_spec(&["--follow-ms", "200"])
                .worker
                .follow_shared_counts,
            Some(Duration::from_millis(200))
        );
        assert_eq!(
            work_spec(&["--follow-ms", "0"]).worker.follow_shared_counts,
            None
        );
        assert_eq!(
            work_spec(&["--follow-ms", "0"])
                .worker
                .config()
                .follow_shared_counts,
            None
        );
    }
}
