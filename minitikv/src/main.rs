//! `minitikv`: a single-node TiKV stand-in (PD subset + raw KV RPCs on one port).

use anyhow::Context;
use minitikv::cli::{Cli, Command};
use std::io::Write;

/// mimalloc, not glibc's malloc, as in every binary of the workspace (see its Cargo.toml).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() {
    // Errors are printed once, without a backtrace (`percolator_cli::report`), with exit
    // status 1 as before.
    if let Err(e) = run().await {
        percolator_cli::report::exit_with(e.as_ref(), 1);
    }
}

async fn run() -> anyhow::Result<()> {
    percolator_cli::init_tracing("info");
    // Flags over environment over the configuration file (`--config`, `--print-config`).
    let cli: Cli = percolator_cli::config::parse("minitikv");
    match cli.command {
        Command::Serve {
            data,
            durability,
            listen,
            advertise,
            metrics_addr,
            cluster,
        } => {
            // The handlers first: a SIGTERM the instant readiness is printed must shut down
            // gracefully, not kill the process.
            let shutdown = percolator_cli::shutdown_signal()?;
            let config = cluster.apply(minitikv::ServerConfig {
                listen,
                advertise,
                data: data.clone(),
                durability,
                // The memory knobs as every binary takes them (environment, then the
                // configuration file's `[embedded]` table, then the defaults).
                embedded_options: Some(percolator_cli::store::embedded_options(durability)),
                ..minitikv::ServerConfig::in_memory()
            });
            let server = minitikv::start(config)
                .await
                .with_context(|| format!("starting minitikv on {listen}"))?;
            if let Some(addr) = metrics_addr {
                let metrics = percolator_metrics::Metrics::new();
                server.register_metrics(&metrics);
                percolator_metrics::spawn(addr, metrics.render())?;
            }
            let mut stdout = std::io::stdout();
            writeln!(stdout, "minitikv listening on {}", server.endpoint())?;
            stdout.flush()?;
            tokio::select! {
                result = server.wait() => result.context("minitikv server stopped")?,
                signal = shutdown => tracing::info!(%signal, "shutting down"),
            }
            Ok(())
        }
    }
}
