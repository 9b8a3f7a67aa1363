//! The loader library on a table of its own (not Photon's): each line is written by exactly
//! one committed transaction, across a loader that crashes inside a batch (after its commit
//! point, and before it) and is restarted, and across two loaders of the same directory
//! running at once.

use app::load::lines::{LineMapping, Lines};
use app::load::{LoadError, LoadOptions, LoadStats};
use percolator::kv::MemoryKv;
use percolator::ts::LocalClock;
use percolator::txn::CrashPoint;
use percolator::{Cell, Client, ClientConfig, Transaction};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A line: `{"id": .., "body": ..}`.
#[derive(serde::Deserialize)]
struct Doc {
    id: String,
    body: String,
}

/// Writes `docs/<id>/body`, and marks `writes/<id>/<nonce>` with a nonce per transaction
/// attempt: the columns of `writes/<id>` count the committed transactions that wrote the
/// line. Crashes the transaction of its `crash_at`-th write at `point`.
struct Counting {
    writes: AtomicUsize,
    crash: Mutex<Option<(usize, CrashPoint)>>,
}

impl LineMapping for Counting {
    type Record = Doc;

    fn tag(&self, path: &Path) -> Option<String> {
        let name = path.file_name()?.to_str()?;
        name.starts_with("docs").then(|| "d".to_string())
    }

    fn parse(&self, _tag: &str, line: &str) -> Result<Doc, String> {
        serde_json::from_str(line).map_err(|e| e.to_string())
    }

    fn write(&self, txn: &Transaction, records: &[Doc], _batch: &str) -> Result<(), LoadError> {
        let n = self.writes.fetch_add(1, Ordering::SeqCst) + 1;
        let crash = *self.crash.lock().unwrap();
        if let Some((_, point)) = crash.filter(|(at, _)| *at == n) {
            txn.set_crash_hook(Arc::new(move |p| p == point));
        }
        let nonce = format!("{:016x}", rand::random::<u64>());
        for d in records {
            txn.set(Cell::new("docs", &d.id, "body"), d.body.clone());
            txn.set(Cell::new("writes", &d.id, &nonce), "1");
        }
        Ok(())
    }
}

/// A store and its one timestamp source (a restarted loader is a new client of both: two
/// local clocks would hand out overlapping timestamps, where processes share an oracle).
#[derive(Clone)]
struct Store(Arc<MemoryKv>, Arc<LocalClock>);

impl Store {
    fn new() -> Store {
        Store(Arc::new(MemoryKv::new()), Arc::new(LocalClock::new()))
    }

    /// Loads `dir` with a new loader process (a new client), crashing as `crash` says.
    async fn load(
        &self,
        dir: &Path,
        crash: Option<(usize, CrashPoint)>,
        stats: &LoadStats,
    ) -> Result<u64, LoadError> {
        let opts = options(dir);
        loader(crash)
            .load_dir(&self.client(), dir, &opts, stats)
            .await
    }

    /// A new client of the store (a restarted process).
    fn client(&self) -> Client {
        let config = ClientConfig {
            lock_ttl: Duration::from_millis(200),
            ..ClientConfig::with_namespace("wc")
        };
        Client::with_config(self.0.clone(), self.1.clone(), config)
    }
}

fn loader(crash: Option<(usize, CrashPoint)>) -> Lines<Counting> {
    Lines::new(Counting {
        writes: AtomicUsize::new(0),
        crash: Mutex::new(crash),
    })
    .with_table("wcloader")
}

/// Appends documents `from..to` to `path`, a malformed line every 50.
fn append(path: &Path, from: usize, to: usize) {
    let mut text = String::new();
    for i in from..to {
        text.push_str(&format!("{{\"id\": \"d{i:04}\", \"body\": \"w{i}\"}}\n"));
        if i % 50 == 49 {
            text.push_str("{not json\n");
        }
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
}

fn options(dir: &Path) -> LoadOptions {
    LoadOptions {
        batch: 7,
        rejects: dir.join("rejects.txt"),
        max_backlog: 0,
        ..LoadOptions::default()
    }
}

/// Every document `0..n` written by exactly one committed transaction.
async fn assert_each_once(client: &Client, n: usize) {
    let txn = client.begin().await.unwrap();
    let rows = txn.scan(b"writes", b"", None).await.unwrap();
    let mut per_doc = std::collections::BTreeMap::<String, usize>::new();
    for (cell, _) in rows {
        *per_doc
            .entry(String::from_utf8_lossy(&cell.row).into_owned())
            .or_default() += 1;
    }
    let missing: Vec<String> = (0..n)
        .map(|i| format!("d{i:04}"))
        .filter(|id| !per_doc.contains_key(id))
        .collect();
    assert!(missing.is_empty(), "not loaded: {missing:?}");
    let repeated: Vec<_> = per_doc.iter().filter(|(_, c)| **c != 1).collect();
    assert!(repeated.is_empty(), "written more than once: {repeated:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loader_crashing_inside_a_batch_and_restarted_loads_each_line_once() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (
        dir.path().join("docs-a.jsonl"),
        dir.path().join("docs-b.jsonl"),
    );
    append(&a, 0, 200);
    append(&b, 200, 350);
    let kv = Store::new();
    // Crash right after the commit point of the 5th batch: it committed, the loader saw
    // an error and stopped.
    let crash = Some((5, CrashPoint::Committed));
    let err = kv
        .load(dir.path(), crash, &LoadStats::default())
        .await
        .expect_err("the injected crash stops the loader");
    assert!(err.to_string().contains("crash"), "{err}");
    // A restarted loader (a new process: a new client) finishes the job.
    let stats = LoadStats::default();
    kv.load(dir.path(), None, &stats).await.unwrap();
    let again = stats.loaded.load(Ordering::Relaxed);
    assert!(again < 350, "the first run's batches stay");
    assert_each_once(&kv.client(), 350).await;
    // More lines, and a crash before the commit point (the batch's locks are left behind).
    append(&a, 350, 420);
    let crash = Some((2, CrashPoint::AllPrewritten));
    kv.load(dir.path(), crash, &LoadStats::default())
        .await
        .expect_err("the injected crash stops the loader");
    kv.load(dir.path(), None, &LoadStats::default())
        .await
        .unwrap();
    assert_each_once(&kv.client(), 420).await;
    let rejects = std::fs::read_to_string(dir.path().join("rejects.txt")).unwrap();
    assert!(rejects.contains("docs-a.jsonl:51: "), "{rejects}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_loaders_of_one_directory_at_once_load_each_line_once() {
    let dir = tempfile::tempdir().unwrap();
    append(&dir.path().join("docs-a.jsonl"), 0, 300);
    append(&dir.path().join("docs-b.jsonl"), 300, 500);
    let kv = Store::new();
    let (one, two) = (LoadStats::default(), LoadStats::default());
    let (c1, c2) = (kv.client(), kv.client());
    let (l1, l2) = (loader(None), loader(None));
    let opts = options(dir.path());
    let (r1, r2) = tokio::join!(
        l1.load_dir(&c1, dir.path(), &opts, &one),
        l2.load_dir(&c2, dir.path(), &opts, &two)
    );
    r1.unwrap();
    r2.unwrap();
    assert_eq!(
        one.loaded.load(Ordering::Relaxed) + two.loaded.load(Ordering::Relaxed),
        500
    );
    assert_each_once(&kv.client(), 500).await;
}

/// A batch ends at `MAX_BATCH_BYTES` of lines however many more its line count allows (ten
/// lines of 900 KiB load in two batches, each line once), and at half a backlog bound
/// (`batch_lines`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_end_at_their_bytes_and_at_half_the_backlog_bound() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("docs-0.jsonl");
    let body = "x".repeat(900 << 10);
    let mut text = String::new();
    for i in 0..10 {
        text.push_str(&format!("{{\"id\": \"d{i:04}\", \"body\": \"{body}\"}}\n"));
    }
    std::fs::write(&path, text).unwrap();
    let store = Store::new();
    let stats = LoadStats::default();
    let opts = LoadOptions {
        batch: 2_000,
        ..options(dir.path())
    };
    let loaded = loader(None)
        .load_dir(&store.client(), dir.path(), &opts, &stats)
        .await
        .unwrap();
    assert_eq!(loaded, 10);
    // 4 MiB / 900 KiB: a batch ends with its fifth line.
    assert_eq!(stats.batches.load(Ordering::Relaxed), 2, "5 + 5 lines");
    assert_each_once(&store.client(), 10).await;

    let bounded = LoadOptions {
        batch: 2_000,
        max_backlog: 10,
        ..options(dir.path())
    };
    assert_eq!(app::load::batch_lines(&bounded), 5);
    assert_eq!(app::load::batch_lines(&opts), 2_000, "no bound");
    let one = LoadOptions {
        max_backlog: 1,
        ..bounded
    };
    assert_eq!(app::load::batch_lines(&one), 1);
}
