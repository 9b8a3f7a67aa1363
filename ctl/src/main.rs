//! `percolator-ctl`: parses the command line ([`percolator_ctl::cli`]), opens the store as
//! the other binaries do, dispatches to the verb ([`percolator_ctl::verbs`]) and prints its
//! answer as text or JSON.

use anyhow::Context;
use percolator_cli::exit;
use percolator_cli::store::open_existing_client;
use percolator_ctl::cli::{Cli, Command, ServeArgs, StoreArgs};
use percolator_ctl::serve::ServeConfig;
use percolator_ctl::verbs;
use percolator_ctl::{Answer, CtlError};
use serde_json::json;
use std::time::Duration;

/// mimalloc, not glibc's malloc, as in every binary of the workspace (see its Cargo.toml).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() {
    percolator_cli::init_tracing("warn");
    // Flags over environment over the configuration file (`--config`, `--print-config`); a
    // wrong command line exits with clap's status, `exit::USAGE`.
    let cli: Cli = percolator_cli::config::parse("ctl");
    if let Command::Serve(args) = &cli.command {
        if let Err(e) = serve(&cli, args).await {
            eprintln!("Error: {}", percolator_cli::report::error_line(e.as_ref()));
            std::process::exit(exit_code(&e));
        }
        return;
    }
    let answer = match run(&cli).await {
        Ok(answer) => answer,
        Err(e) => {
            // Scripts reading --json get a document on failures too.
            if cli.json {
                println!(
                    "{}",
                    json!({"error": percolator_cli::report::error_line(e.as_ref())})
                );
            }
            eprintln!("Error: {}", percolator_cli::report::error_line(e.as_ref()));
            std::process::exit(exit_code(&e));
        }
    };
    if cli.json {
        match serde_json::to_string_pretty(&answer.json) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("Error: {e}");
                std::process::exit(exit::FAILED);
            }
        }
    } else {
        print!("{}", answer.text);
    }
    std::process::exit(answer.status);
}

/// The exit status of a failed verb (`percolator_cli::exit`): a name or value the store
/// refuses is a usage error, a store that cannot be opened has its own status, anything
/// else is a failure.
fn exit_code(e: &anyhow::Error) -> i32 {
    for cause in e.chain() {
        if cause
            .downcast_ref::<percolator_cli::store::OpenError>()
            .is_some()
        {
            return exit::STORE_UNAVAILABLE;
        }
        if let Some(CtlError::Usage(_)) = cause.downcast_ref::<CtlError>() {
            return exit::USAGE;
        }
    }
    exit::FAILED
}

/// A client of the store the flags name, as the other binaries open it; an embedded path
/// that holds no store is refused, not created (every verb reads an existing store).
async fn client(store: &StoreArgs) -> anyhow::Result<percolator::Client> {
    Ok(open_existing_client(
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
        allowed_hosts: args.allow_hosts.clone(),
        header_timeout: Duration::from_millis(args.header_timeout_ms),
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
