//! `percolator-ctl`: parses the command line ([`percolator_ctl::cli`]), opens the store as
//! the other binaries do, dispatches to the verb ([`percolator_ctl::verbs`]) and prints its
//! answer as text or JSON.

use anyhow::Context;
use percolator_cli::store::open_client;
use percolator_ctl::cli::{Cli, Command, ServeArgs, StoreArgs};
use percolator_ctl::serve::ServeConfig;
use percolator_ctl::verbs;
use percolator_ctl::Answer;
use serde_json::json;
use std::time::Duration;

/// mimalloc, not glibc's malloc, as in every binary of the workspace (see its Cargo.toml).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    percolator_cli::init_tracing("warn");
    // Flags over environment over the configuration file (`--config`, `--print-config`).
    let cli: Cli = percolator_cli::config::parse("ctl");
    if let Command::Serve(args) = &cli.command {
        return serve(&cli, args).await;
    }
    let answer = match run(&cli).await {
        Ok(answer) => answer,
        Err(e) => {
            // Scripts reading --json get a document on failures too.
            if cli.json {
                println!("{}", json!({"error": format!("{e:#}")}));
            }
            eprintln!("Error: {e:#}");
            std::process::exit(1);
        }
    };
    if cli.json {
        println!("{}", serde_json::to_string_pretty(&answer.json)?);
    } else {
        print!("{}", answer.text);
    }
    if answer.status != 0 {
        std::process::exit(answer.status);
    }
    Ok(())
}

/// A client of the store the flags name, as the other binaries open it.
async fn client(store: &StoreArgs) -> anyhow::Result<percolator::Client> {
    Ok(open_client(
        &store.store,
        &store.namespace,
        &store.oracle,
        store.durability,
        None,
    )
    .await?)
}

async fn run(cli: &Cli) -> anyhow::Result<Answer> {
    let client = client(&cli.store).await?;
    Ok(match &cli.command {
        Command::Status => verbs::status::status(&client, &cli.store).await?,
        Command::Scan(args) => verbs::scan::scan(&client, args).await?,
        Command::Notifications { limit } => {
            verbs::notifications::notifications(&client, *limit).await?
        }
        Command::DeadLetters(command) => {
            verbs::dead_letters::dead_letters(&client, command).await?
        }
        Command::Locks { resolve } => verbs::locks::locks(&client, *resolve).await?,
        Command::Renotify(args) => verbs::renotify::renotify(&client, args).await?,
        Command::Gc => verbs::gc::gc(&client).await?,
        Command::Wait { timeout, poll_ms } => {
            verbs::wait::wait(&client, &cli.store, *timeout, *poll_ms).await?
        }
        Command::Serve(_) => unreachable!("serve is dispatched before"),
    })
}

/// `serve`: the dashboard until SIGTERM or SIGINT. Prints `dashboard listening on
/// http://ADDR/` once it accepts connections (with `--listen HOST:0`, the port chosen).
async fn serve(cli: &Cli, args: &ServeArgs) -> anyhow::Result<()> {
    let client = client(&cli.store).await?;
    let listener = std::net::TcpListener::bind(args.listen)
        .with_context(|| format!("listening on {}", args.listen))?;
    let addr = listener.local_addr()?;
    let signal = percolator_cli::shutdown_signal()?;
    let config = ServeConfig {
        sample_every: Duration::from_millis(args.sample_ms.max(100)),
        history: args.history,
        metrics_addr: args.metrics_addr,
    };
    println!("dashboard listening on http://{addr}/");
    tracing::info!(%addr, "dashboard listening");
    percolator_ctl::serve::serve(client, cli.store.clone(), config, listener, async move {
        let signal = signal.await;
        tracing::info!(%signal, "stopping the dashboard");
    })
    .await?;
    Ok(())
}
