//! A worker whose observer fails while a file exists: a way to produce dead letters and
//! practise finding and replaying them with `percolator-ctl` (README, "Operating").
//!
//! ```sh
//! touch ./broken
//! cargo run -p percolator-ctl --example flaky -- --store tikv:127.0.0.1:2379 \
//!     --oracle 127.0.0.1:7707 --fail-while ./broken
//! ```
//!
//! It writes `--docs` cells `docs/<n>/body` in namespace `flaky`; the observer on them writes
//! `docs/<n>/len`, or fails while the `--fail-while` file exists (each notification is
//! dead-lettered after 3 failures). It runs until SIGINT/SIGTERM.

use clap::Parser;
use observers::{observer_fn, ObserverError, Registry, Worker, WorkerConfig};
use percolator::Cell;
use percolator_cli::StoreSpec;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Parser)]
struct Args {
    /// Store: embedded:PATH, memory, or tikv:PD_ADDR[,PD_ADDR...].
    #[arg(long)]
    store: StoreSpec,
    /// Oracle service addresses (required with a TiKV store).
    #[arg(long, value_delimiter = ',')]
    oracle: Vec<String>,
    /// Key namespace.
    #[arg(long, default_value = "flaky")]
    namespace: String,
    /// Documents written at start.
    #[arg(long, default_value_t = 5)]
    docs: usize,
    /// The observer fails while this file exists.
    #[arg(long, default_value = "./broken")]
    fail_while: PathBuf,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    percolator_cli::init_tracing("error");
    let args = Args::parse();
    let stop = percolator_cli::shutdown_signal()?;
    let client = percolator_cli::store::open_client(
        &args.store,
        &args.namespace,
        &args.oracle,
        percolator::kv::Durability::Process,
        None,
    )
    .await?;
    let flag = Arc::new(args.fail_while.clone());
    let mut registry = Registry::new();
    registry.strong(
        "docs",
        "body",
        "length",
        observer_fn(move |txn, cell: Cell| {
            let flag = flag.clone();
            async move {
                if flag.exists() {
                    return Err(ObserverError::failed(format!(
                        "{} exists: failing on purpose",
                        flag.display()
                    )));
                }
                let body = txn.get(&cell).await?.unwrap_or_default();
                txn.set(Cell::new("docs", &cell.row, "len"), body.len().to_string());
                Ok(())
            }
        }),
    )?;
    let config = WorkerConfig {
        max_failures: 3,
        ..WorkerConfig::default()
    };
    let worker = Worker::start(client.clone(), Arc::new(registry), config);
    worker.wait_until_settled().await;
    for n in 0..args.docs {
        let txn = client.begin().await?;
        txn.set(
            Cell::new("docs", format!("doc-{n}"), "body"),
            format!("text of doc {n}"),
        );
        txn.commit().await?;
    }
    eprintln!(
        "flaky worker {} running; SIGINT/SIGTERM to stop",
        worker.id()
    );
    worker
        .run_until(async {
            stop.await;
        })
        .await;
    Ok(())
}
