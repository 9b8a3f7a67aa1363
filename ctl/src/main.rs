//! `percolator-ctl`: parses the command line ([`percolator_ctl::cli`]), opens the store as
//! the other binaries do, dispatches to the verb ([`percolator_ctl::verbs`]) and prints its
//! answer as text or JSON.

use clap::Parser;
use percolator_cli::store::open_client;
use percolator_ctl::cli::{Cli, Command};
use percolator_ctl::verbs;
use percolator_ctl::Answer;
use serde_json::json;

/// mimalloc, not glibc's malloc, as in every binary of the workspace (see its Cargo.toml).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    percolator_cli::init_tracing("warn");
    let cli = Cli::parse();
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

async fn run(cli: &Cli) -> anyhow::Result<Answer> {
    let client = open_client(
        &cli.store.store,
        &cli.store.namespace,
        &cli.store.oracle,
        cli.store.durability,
    )
    .await?;
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
    })
}
