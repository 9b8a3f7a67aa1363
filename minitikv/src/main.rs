//! `minitikv`: a single-node TiKV stand-in (PD subset + raw KV RPCs on one port).

use anyhow::Context;
use clap::{Parser, Subcommand};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

/// A single-node stand-in for a TiKV cluster: one gRPC port answers the PD calls and the
/// TiKV raw-mode RPCs that tikv-client 0.4.0 makes. One region covers every key.
#[derive(Parser, Debug)]
#[command(name = "minitikv", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve PD and TiKV on one address until interrupted (Ctrl-C / SIGTERM).
    ///
    /// Prints `minitikv listening on ADDR` on stdout once ready; give ADDR to clients as the
    /// PD endpoint (e.g. `--store tikv:ADDR`).
    Serve {
        /// Data directory (embedded fjall store); data is kept in memory when absent.
        #[arg(long, value_name = "DIR")]
        data: Option<PathBuf>,
        /// Address to listen on; port 0 picks a free port (the real one is printed).
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:2379")]
        listen: SocketAddr,
        /// Address announced to clients as PD member URL and store address
        /// (default: the bound address, 0.0.0.0 replaced by 127.0.0.1).
        #[arg(long, value_name = "HOST:PORT")]
        advertise: Option<String>,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    percolator_cli::init_tracing("info");
    let cli = Cli::parse();
    match cli.command {
        Command::Serve {
            data,
            listen,
            advertise,
        } => {
            // The handlers first: a SIGTERM the instant readiness is printed must shut down
            // gracefully, not kill the process.
            let shutdown = percolator_cli::shutdown_signal()?;
            let server = minitikv::start(minitikv::ServerConfig {
                listen,
                advertise,
                data: data.clone(),
            })
            .await
            .with_context(|| format!("starting minitikv on {listen}"))?;
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
