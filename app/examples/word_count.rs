//! A complete small observer application: an observer registry plus a mapping of its input
//! to cells, nothing copied from Photon. Documents arrive as JSON lines (`docs*.jsonl`,
//! `{"id": "a", "body": "..."}`) and are loaded into `docs/<id>/body` by the application
//! layer's loader ([`app::load::json::JsonLines`]: each batch committed with its file's
//! offset, so a restarted loader loads each line once; malformed lines reported with
//! `file:line`). An observer keeps `docs/<id>/words` (the word count) and notifies a second
//! observer that keeps the running total in `stats/all/words`, a chain of two observers.
//!
//! Run: `cargo run -p percolator-app --example word_count [DIR]` (a directory of
//! `docs*.jsonl`; without it, a small sample); its tests (on `observers::testing`'s harness,
//! in memory): `cargo test -p percolator-app --example word_count`.

use app::load::json::JsonLines;
use app::load::lines::{LineMapping, Lines};
use app::load::{LoadOptions, LoadStats};
use observers::{observer_fn, Registry, Worker, WorkerConfig, WorkerError};
use percolator::ts::LocalClock;
use percolator::{Cell, Client, ClientConfig};
use std::sync::Arc;

/// A line of the input.
#[derive(serde::Deserialize)]
struct Doc {
    id: String,
    body: String,
}

/// The application's mapping: every `docs*.jsonl` of the directory; a line writes its
/// document's body (an observed column).
fn mapping() -> impl LineMapping {
    JsonLines::new(
        |path| {
            let name = path.file_name()?.to_str()?;
            (name.starts_with("docs") && name.ends_with(".jsonl")).then(|| "doc".to_string())
        },
        |_tag, doc: &Doc| {
            vec![(
                Cell::new("docs", &doc.id, "body"),
                doc.body.clone().into_bytes(),
            )]
        },
    )
    .observing("docs", "body")
}

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
    let input = match std::env::args_os().nth(1) {
        Some(input) => input.into(),
        None => {
            let input = dir.path().join("input");
            std::fs::create_dir(&input)?;
            let lines = [
                r#"{"id": "a", "body": "the quick brown fox"}"#,
                r#"{"id": "b", "body": "jumps over"}"#,
                r#"not a document"#,
                r#"{"id": "a", "body": "the lazy dog"}"#,
            ];
            std::fs::write(input.join("docs-000.jsonl"), lines.join("\n") + "\n")?;
            input
        }
    };
    let store = Arc::new(percolator::txn::open_embedded(
        dir.path().join("store"),
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
    let options = LoadOptions {
        batch: 500,
        rejects: dir.path().join("rejects.txt"),
        max_backlog: app::load::DEFAULT_MAX_BACKLOG,
        ..LoadOptions::default()
    };
    let stats = LoadStats::default();
    let started = std::time::Instant::now();
    Lines::new(mapping())
        .load_dir(&client, &input, &options, &stats)
        .await?;
    println!(
        "{}",
        stats.summary("documents", started.elapsed(), &options.rejects)
    );
    worker.wait_until_quiescent().await?;
    let txn = client.begin().await?;
    let total = parse(txn.get(&Cell::new("stats", "all", "words")).await?);
    println!("total words: {total}");
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

    /// The input loaded through the loader (a malformed line rejected, the rest loaded),
    /// then loaded again after a line is appended: only the new line loads, and the total
    /// follows.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn loaded_documents_are_counted_and_a_second_load_takes_only_new_lines() {
        let h = Harness::new(registry().unwrap());
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("docs-000.jsonl");
        std::fs::write(
            &file,
            "{\"id\": \"a\", \"body\": \"one two three\"}\nnot json\n",
        )
        .unwrap();
        let options = LoadOptions {
            batch: 1,
            rejects: dir.path().join("rejects.txt"),
            max_backlog: 0,
            ..LoadOptions::default()
        };
        let loader = Lines::new(mapping());
        let stats = LoadStats::default();
        loader
            .load_dir(h.client(), dir.path(), &options, &stats)
            .await
            .unwrap();
        let rejects = std::fs::read_to_string(&options.rejects).unwrap();
        assert!(rejects.contains("docs-000.jsonl:2:"), "{rejects}");
        h.run_until_quiet().await.unwrap();
        let words = Cell::new("stats", "all", "words");
        assert_eq!(total(h.read(&words).await.unwrap()), 3);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .unwrap();
        std::io::Write::write_all(&mut f, b"{\"id\": \"b\", \"body\": \"four\"}\n").unwrap();
        let again = LoadStats::default();
        loader
            .load_dir(h.client(), dir.path(), &options, &again)
            .await
            .unwrap();
        assert_eq!(again.loaded.load(std::sync::atomic::Ordering::Relaxed), 1);
        h.run_until_quiet().await.unwrap();
        assert_eq!(total(h.read(&words).await.unwrap()), 4);
        h.shutdown().await;
    }
}
