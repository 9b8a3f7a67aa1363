//! `percolator-sim`: runs the deterministic simulation (`run`), replays one seed
//! (`replay`), and searches for the planted bugs (`planted`). See `docs/testing.md`.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use percolator_sim::runner::run_seeds;
use percolator_sim::{run_seed, RunOptions, SeedReport};
use std::io::Write;

#[derive(Parser, Debug)]
#[command(
    name = "percolator-sim",
    about = "Deterministic simulation of the whole system"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Runs seeds FROM..FROM+N; exits 0 when every one passes.
    Run {
        /// How many seeds.
        #[arg(long, default_value_t = 100)]
        seeds: u64,
        /// The first seed.
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// Simulated seconds of chaos per seed.
        #[arg(long, default_value_t = 60)]
        sim_secs: u64,
        /// Threads (each runs whole seeds; results do not depend on it).
        #[arg(long)]
        threads: Option<usize>,
        /// End with one JSON object of the totals.
        #[arg(long)]
        json: bool,
    },
    /// Replays one seed and prints the hash of its trace.
    Replay {
        /// The seed.
        seed: u64,
        /// Writes the trace (every store call and timestamp, in order) to this file.
        #[arg(long)]
        trace: Option<std::path::PathBuf>,
        /// Simulated seconds of chaos.
        #[arg(long, default_value_t = 60)]
        sim_secs: u64,
        /// Plants this bug (a name from `planted`).
        #[arg(long)]
        planted: Option<String>,
    },
    /// Runs the simulation against each planted bug until a seed fails.
    Planted {
        /// Seeds tried per bug.
        #[arg(long, default_value_t = percolator_sim::planted::DEFAULT_BUDGET)]
        budget: u64,
        /// The first seed.
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// Only this bug.
        #[arg(long)]
        only: Option<String>,
        /// One JSON object per bug, then one with the totals.
        #[arg(long)]
        json: bool,
    },
}

fn print_failure(r: &SeedReport) {
    eprintln!(
        "seed {} FAILED ({} violations; replay: percolator-sim replay {})",
        r.seed,
        r.violations.len(),
        r.seed
    );
    for v in r.violations.iter().take(10) {
        eprintln!("  {v}");
    }
}

fn threads(given: Option<usize>) -> usize {
    given.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    })
}

fn planted_bug(name: &str) -> Result<percolator::planted::Bug> {
    percolator_sim::planted::BUGS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, b)| *b)
        .with_context(|| format!("no planted bug named {name:?}"))
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off")),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Run {
            seeds,
            from,
            sim_secs,
            threads: t,
            json,
        } => {
            let options = RunOptions {
                sim_secs,
                ..RunOptions::default()
            };
            let summary = run_seeds(from, seeds, threads(t), &options, &|r| {
                if r.passed() {
                    if !json {
                        println!(
                            "seed {} ok ({:.0} sim s, {:.2} wall s, {} txns, {} runs, \
                             owners overlapped {} ms)",
                            r.seed,
                            r.stats.sim_seconds,
                            r.stats.wall_seconds,
                            r.stats.transactions,
                            r.stats.observer_runs,
                            r.stats.split_overlap_ms_max
                        );
                    }
                } else {
                    print_failure(r);
                }
            })?;
            if json {
                println!("{}", serde_json::to_string(&summary)?);
            } else {
                println!(
                    "{} seeds, {} failed {:?}, {:.0} sim s in {:.1} wall s ({:.0} seeds/min)",
                    summary.seeds,
                    summary.failures,
                    summary.failed_seeds,
                    summary.stats.sim_seconds,
                    summary.stats.wall_seconds,
                    summary.seeds as f64 * 60.0 / summary.stats.wall_seconds.max(1e-9)
                );
            }
            if summary.failures > 0 {
                std::process::exit(1);
            }
        }
        Command::Replay {
            seed,
            trace,
            sim_secs,
            planted,
        } => {
            let options = RunOptions {
                sim_secs,
                keep_trace: trace.is_some(),
                planted: planted.as_deref().map(planted_bug).transpose()?,
            };
            let report = run_seed(seed, &options)?;
            if let Some(path) = trace {
                let mut f = std::io::BufWriter::new(
                    std::fs::File::create(&path)
                        .with_context(|| format!("creating {}", path.display()))?,
                );
                for line in &report.trace_lines {
                    writeln!(f, "{line}")?;
                }
                f.flush()?;
            }
            println!(
                "seed {} trace {:016x} ({} events) {}",
                seed,
                report.trace_hash,
                report.stats.trace_events,
                if report.passed() { "passed" } else { "FAILED" }
            );
            println!("{}", serde_json::to_string(&report.stats)?);
            if !report.passed() {
                print_failure(&report);
                std::process::exit(1);
            }
        }
        Command::Planted {
            budget,
            from,
            only,
            json,
        } => {
            let mut found = 0;
            let mut total = 0;
            for (name, bug) in percolator_sim::planted::BUGS {
                if only.as_deref().is_some_and(|o| o != *name) {
                    continue;
                }
                total += 1;
                let f = percolator_sim::planted::search(name, *bug, from, budget)?;
                found += usize::from(f.found);
                if json {
                    println!("{}", serde_json::to_string(&f)?);
                } else {
                    println!(
                        "{:<36} {} seed {:?} after {:.0} sim s ({} seeds){}",
                        f.name,
                        if f.found { "FOUND" } else { "not found" },
                        f.seed,
                        f.sim_seconds_to_find,
                        f.seeds_run,
                        f.violation.map(|v| format!(": {v}")).unwrap_or_default()
                    );
                }
            }
            if json {
                println!(
                    "{}",
                    serde_json::json!({ "planted": total, "found": found })
                );
            }
            if found < total {
                std::process::exit(1);
            }
        }
    }
    Ok(())
}
