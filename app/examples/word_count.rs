//! A complete small observer application: documents are written into `docs/<id>/body`; an
//! observer keeps `docs/<id>/words` (the word count) and notifies a second observer that keeps
//! the running total in `stats/all/words`, a chain of two observers.
//!
//! Run: `cargo run -p percolator-observers --example word_count`; its tests (on `observers::testing`'s
//! harness, in memory): `cargo test -p percolator-observers --example word_count`.

use observers::{observer_fn, Registry, Worker, WorkerConfig, WorkerError};
use percolator::ts::LocalClock;
use percolator::{Cell, Client, ClientConfig};
use std::sync::Arc;

fn parse(v: Option<Vec<u8>>) -> i64 {
    v.and_then(|b| String::from_utf8(b).ok()?.parse().ok())
        .unwrap_or(0)
}

/// The application's two observers.
fn registry() -> Result<Registry, WorkerError> {
    let mut registry = Registry::new();
    // 1. A document changed: recount its words, record the delta for the total.
    registry.strong(
        "docs",
        "body",
        "count-words",
        observer_fn(|txn, cell: Cell| async move {
            let body = txn.get(&cell).await?.unwrap_or_default();
            let words = String::from_utf8_lossy(&body).split_whitespace().count() as i64;
            let count_cell = Cell::new("docs", &cell.row, "words");
            let before = parse(txn.get(&count_cell).await?);
            txn.set(count_cell.clone(), words.to_string());
            // The delta goes to a per-document column that the total's observer watches.
            let delta_cell = Cell::new("docs", &cell.row, "delta");
            let pending = parse(txn.get(&delta_cell).await?);
            txn.set(delta_cell, (pending + words - before).to_string());
            Ok(())
        }),
    )?;
    // 2. A delta appeared: fold it into the total (conflicting totals are retried).
    registry.strong(
        "docs",
        "delta",
        "fold-total",
        observer_fn(|txn, cell: Cell| async move {
            let delta = parse(txn.get(&cell).await?);
            if delta != 0 {
                let total_cell = Cell::new("stats", "all", "words");
                let total = parse(txn.get(&total_cell).await?);
                txn.set(total_cell, (total + delta).to_string());
                txn.set(cell, "0");
            }
            Ok(())
        }),
    )?;
    Ok(registry)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let store = Arc::new(percolator::txn::open_embedded(
        dir.path(),
        Default::default(),
    )?);
    let client = Client::with_config(
        store,
        Arc::new(LocalClock::new()),
        ClientConfig::with_namespace("wordcount"),
    );
    let worker = Worker::start(
        client.clone(),
        Arc::new(registry()?),
        WorkerConfig::default(),
    );

    for (id, text) in [
        ("a", "the quick brown fox"),
        ("b", "jumps over"),
        ("a", "the lazy dog"),
    ] {
        let txn = client.begin().await?;
        txn.set(Cell::new("docs", id, "body"), text);
        txn.commit().await?;
    }
    worker.wait_until_quiescent().await?;
    let txn = client.begin().await?;
    let total = parse(txn.get(&Cell::new("stats", "all", "words")).await?);
    println!("total words: {total}");
    assert_eq!(total, 5, "3 words in a, 2 in b");
    let m = worker.metrics().snapshot();
    println!(
        "observer runs: {}, duplicates: {}, p50 {:?}",
        m.processed, m.duplicates, m.latency_p50
    );
    worker.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use observers::testing::Harness;

    fn total(v: Option<Vec<u8>>) -> i64 {
        parse(v)
    }

    /// Documents written, rewritten and emptied: the chain keeps the total right after each
    /// round, whichever runs coalesced.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_total_follows_every_rewrite() {
        let h = Harness::new(registry().unwrap());
        let words = Cell::new("stats", "all", "words");
        h.write(Cell::new("docs", "a", "body"), "the quick brown fox")
            .await
            .unwrap();
        h.write(Cell::new("docs", "b", "body"), "jumps over")
            .await
            .unwrap();
        let quiet = h.run_until_quiet().await.unwrap();
        assert!(quiet.dead_letters.is_empty(), "{quiet:?}");
        assert_eq!(total(h.read(&words).await.unwrap()), 6);
        h.write(Cell::new("docs", "a", "body"), "the lazy dog")
            .await
            .unwrap();
        h.write(Cell::new("docs", "b", "body"), "").await.unwrap();
        h.run_until_quiet().await.unwrap();
        assert_eq!(total(h.read(&words).await.unwrap()), 3);
        h.shutdown().await;
    }
}
