//! Event-time windows, each emitted exactly once (MillWheel's low watermarks and timers,
//! `observers::time`). Clicks arrive as JSON lines (`clicks*.jsonl`: `click_id`,
//! `event_time` in ms, and a key field, default `query_id`; a repeated `click_id` is one
//! click); the loader marks each click pending at its event time and publishes its watermark
//! (the latest event time loaded minus the allowed out-of-orderness; at the end of bounded
//! input, all of it). An observer counts each click into its (key, window) and sets the
//! window's timer at window end plus the allowed lateness; when the clicks column's low
//! watermark passes it, the timer fires once and writes the window's line to an outbox in
//! the same transaction. A writer appends committed outbox lines to FILE and then deletes
//! them: after a crash it finds the lines FILE already holds and skips them, so FILE gets
//! each window once, with its count, however often the process is killed.
//!
//! A click whose window may have fired (the watermark past its window's end plus the
//! lateness) is late: dropped and counted.
//!
//! Run: `cargo run --release -p percolator-app --example window_count -- --input DIR --out
//! FILE [--key FIELD] [--window-secs 60] [--out-of-orderness-secs 5] [--lateness-secs 5]
//! [--store S] [--follow]`; its tests (kill -9 loops, duplicates, out-of-order input):
//! `cargo test -p percolator-app --example window_count`.

use anyhow::Context as _;
use app::load::lines::{LineMapping, Lines};
use app::load::{LoadError, LoadOptions, LoadStats, WatermarkOptions};
use clap::Parser;
use observers::time::{self, Column, TimerAt, TimerDriver, TimerSpec};
use observers::{ObserverError, Registry, Worker, WorkerConfig};
use percolator::{Cell, Client, Transaction, TxnError};
use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Counts clicks per key per event-time window; writes each window once to FILE.
#[derive(Parser, Clone, Debug)]
struct Args {
    /// Directory of `clicks*.jsonl`.
    #[arg(long)]
    input: PathBuf,
    /// Where windows go: one JSON line per (key, window).
    #[arg(long)]
    out: PathBuf,
    /// The field counted by.
    #[arg(long, default_value = "query_id")]
    key: String,
    /// Window length.
    #[arg(long, default_value_t = 60)]
    window_secs: u64,
    /// How far behind the latest loaded event time clicks may still arrive in order.
    #[arg(long, default_value_t = 5)]
    out_of_orderness_secs: u64,
    /// How long after a window's end (in event time, past the watermark) its clicks still
    /// count.
    #[arg(long, default_value_t = 5)]
    lateness_secs: u64,
    /// The store (`embedded:PATH`, `memory`, `tikv:PD,...` with `--oracle`).
    #[arg(long, default_value = "embedded:./window-count-data")]
    store: percolator_cli::StoreSpec,
    /// The oracle service (needed with TiKV).
    #[arg(long, value_delimiter = ',')]
    oracle: Vec<String>,
    /// Keep loading as the input grows (windows are emitted as the watermark passes them).
    #[arg(long)]
    follow: bool,
    /// Poll interval while following.
    #[arg(long, default_value_t = 200)]
    poll_ms: u64,
}

const NAMESPACE: &str = "window_count";
/// The observer (and its timers' name).
const OBSERVER: &str = "window-count";
const TIMER_TAG: &str = "window";

fn clicks_column() -> Column {
    Column::new("clicks", "event")
}

/// A parsed click.
struct Click {
    id: String,
    event_time: u64,
    key: String,
}

/// The input mapping: `clicks*.jsonl` lines into `clicks/<click_id>/event` = `<event
/// time> <key>`, a timed column.
struct Clicks {
    key: String,
}

fn field_text(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

impl LineMapping for Clicks {
    type Record = Click;

    fn tag(&self, path: &Path) -> Option<String> {
        let name = path.file_name()?.to_str()?;
        (name.starts_with("clicks") && name.ends_with(".jsonl")).then(|| "click".to_string())
    }

    fn parse(&self, _tag: &str, line: &str) -> Result<Click, String> {
        let v: serde_json::Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
        let id = v
            .get("click_id")
            .and_then(field_text)
            .ok_or("no click_id")?;
        let event_time = v
            .get("event_time")
            .and_then(serde_json::Value::as_u64)
            .ok_or("no event_time (ms, an unsigned integer)")?;
        let key = v
            .get(&self.key)
            .and_then(field_text)
            .ok_or_else(|| format!("no {}", self.key))?;
        if id.contains('\0') {
            return Err("a click_id with a NUL byte".to_string());
        }
        Ok(Click {
            id,
            event_time,
            key,
        })
    }

    fn event_time(&self, record: &Click) -> Option<u64> {
        Some(record.event_time)
    }

    fn declare(&self, client: &Client) {
        client.observe_column("clicks", "event");
    }

    fn timed_columns(&self) -> Vec<Column> {
        vec![clicks_column()]
    }

    fn timed_cells(&self, record: &Click) -> Vec<Cell> {
        vec![click_cell(&record.id)]
    }

    fn write(&self, txn: &Transaction, records: &[Click], _batch: &str) -> Result<(), LoadError> {
        for r in records {
            txn.set(
                click_cell(&r.id),
                format!("{} {}", r.event_time, r.key).into_bytes(),
            );
        }
        Ok(())
    }
}

fn click_cell(id: &str) -> Cell {
    Cell::new("clicks", id, "event")
}

/// Window settings, in ms.
#[derive(Clone, Copy, Debug)]
struct Windows {
    length: u64,
    lateness: u64,
}

impl Windows {
    fn start_of(&self, t: u64) -> u64 {
        t - t % self.length
    }

    /// The event time the window's timer waits for the watermark to pass.
    fn due(&self, start: u64) -> u64 {
        start
            .saturating_add(self.length)
            .saturating_add(self.lateness)
    }
}

/// The timer's row of window (start, key): start, then the key.
fn window_row(start: u64, key: &str) -> Vec<u8> {
    let mut row = start.to_be_bytes().to_vec();
    row.extend_from_slice(key.as_bytes());
    row
}

/// The prefix of the rows holding a window's clicks (`win` table): start, key length, key.
fn members_prefix(start: u64, key: &str) -> Vec<u8> {
    let mut row = start.to_be_bytes().to_vec();
    row.extend_from_slice(&(key.len() as u32).to_be_bytes());
    row.extend_from_slice(key.as_bytes());
    row
}

fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    end.push(0xff);
    end.push(0xff);
    end
}

/// The observer: a click (once per click_id) goes into its window, or is late.
fn registry(windows: Windows) -> Result<Registry, observers::WorkerError> {
    let mut registry = Registry::new();
    registry.strong(
        "clicks",
        "event",
        OBSERVER,
        time::timed_observer_fn(move |txn, cell: Cell, change| async move {
            let counted = Cell::new("clicks", &cell.row, "counted");
            if txn.get(&counted).await?.is_some() {
                return Ok(()); // a repeated click_id: the same click
            }
            let Some(value) = txn.get(&cell).await? else {
                return Ok(());
            };
            let text = String::from_utf8(value).map_err(|_| ObserverError::failed("not UTF-8"))?;
            let (t, key) = text
                .split_once(' ')
                .and_then(|(t, k)| Some((t.parse::<u64>().ok()?, k.to_string())))
                .ok_or_else(|| ObserverError::failed(format!("bad click value {text:?}")))?;
            let start = windows.start_of(t);
            let due = windows.due(start);
            let (watermark, held) = match change {
                Some(c) => (c.watermark_ms, c.held),
                None => (time::published(&txn, &clicks_column()).await?, false),
            };
            if watermark.is_some_and(|w| w > due) {
                // The window's timer may have fired: late, dropped and counted.
                txn.set(counted, "late");
                txn.set(Cell::new("late", &cell.row, "t"), t.to_string());
                return Ok(());
            }
            txn.set(counted, start.to_string());
            let mut member = members_prefix(start, &key);
            member.extend_from_slice(&cell.row);
            txn.set(Cell::new("win", member, "c"), Vec::new());
            // The window's timer. A change that held the watermark needs it set only: its
            // window cannot fire before this run commits. Any other (re)sets it, so that a
            // firing running meanwhile conflicts with this run (one of them retries and
            // sees the other).
            let row = window_row(start, &key);
            let set = time::timer(&txn, OBSERVER, &row, TIMER_TAG).await?;
            if !held || set != Some(TimerAt::EventTime(due)) {
                time::set_timer(&txn, OBSERVER, &row, TIMER_TAG, TimerAt::EventTime(due)).await?;
            }
            Ok(())
        }),
    )?;
    Ok(registry)
}

/// The timer: counts the window's clicks and writes its line to the outbox.
fn on_window() -> Arc<dyn time::OnTimer> {
    time::on_timer_fn(move |txn, timer| async move {
        let start = u64::from_be_bytes(
            timer
                .row
                .get(..8)
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| ObserverError::failed("a window timer row without its start"))?,
        );
        let key = String::from_utf8_lossy(&timer.row[8..]).into_owned();
        let prefix = members_prefix(start, &key);
        let members = txn
            .scan(b"win", &prefix, Some(&prefix_end(&prefix)))
            .await?;
        let watermark = time::published(&txn, &clicks_column()).await?;
        for (cell, _) in &members {
            txn.delete(cell.clone());
        }
        let line = serde_json::json!({
            "key": key,
            "window_start_ms": start,
            "count": members.len(),
            "emitted_at_ms": wall_ms(),
            "watermark_ms": watermark,
        });
        txn.set(Cell::new("outbox", &timer.row, "line"), line.to_string());
        Ok(())
    })
}

fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// FILE, written from the committed outbox exactly once per window.
struct OutFile {
    path: PathBuf,
    /// (key, window start) of every line in FILE.
    written: HashSet<(String, u64)>,
}

impl OutFile {
    /// Opens FILE: drops a last line cut short by a crash, and reads which windows it holds.
    fn open(path: &Path) -> anyhow::Result<OutFile> {
        let mut written = HashSet::new();
        if let Ok(bytes) = std::fs::read(path) {
            let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
            if complete < bytes.len() {
                let f = std::fs::OpenOptions::new().write(true).open(path)?;
                f.set_len(complete as u64)?;
                f.sync_all()?;
            }
            for line in bytes[..complete]
                .split(|b| *b == b'\n')
                .filter(|l| !l.is_empty())
            {
                let v: serde_json::Value = serde_json::from_slice(line)
                    .with_context(|| format!("{}: a line that is not JSON", path.display()))?;
                let key = v["key"].as_str().unwrap_or_default().to_string();
                let start = v["window_start_ms"].as_u64().unwrap_or_default();
                written.insert((key, start));
            }
        }
        Ok(OutFile {
            path: path.to_path_buf(),
            written,
        })
    }

    /// Appends the committed outbox lines FILE lacks, syncs, then deletes them from the
    /// outbox. Returns the lines appended.
    async fn drain(&mut self, client: &Client) -> anyhow::Result<u64> {
        let snapshot = client.snapshot().await?;
        let rows = snapshot.scan(b"outbox", b"", None).await?;
        if rows.is_empty() {
            return Ok(0);
        }
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .with_context(|| format!("opening {}", self.path.display()))?;
        let mut appended = 0;
        for (_, line) in &rows {
            let v: serde_json::Value = serde_json::from_slice(line)?;
            let id = (
                v["key"].as_str().unwrap_or_default().to_string(),
                v["window_start_ms"].as_u64().unwrap_or_default(),
            );
            if self.written.insert(id) {
                f.write_all(line)?;
                f.write_all(b"\n")?;
                appended += 1;
            }
        }
        f.sync_all()?;
        let cells: Vec<Cell> = rows.into_iter().map(|(c, _)| c).collect();
        client
            .run(|txn| {
                let cells = cells.clone();
                async move {
                    for c in cells {
                        txn.delete(c);
                    }
                    Ok::<_, TxnError>(())
                }
            })
            .await?;
        Ok(appended)
    }
}

async fn count_rows(client: &Client, table: &[u8]) -> anyhow::Result<u64> {
    Ok(client.snapshot().await?.scan(table, b"", None).await?.len() as u64)
}

async fn run(args: Args) -> anyhow::Result<()> {
    let windows = Windows {
        length: args.window_secs.max(1) * 1000,
        lateness: args.lateness_secs * 1000,
    };
    let client = percolator_cli::store::open_client(
        &args.store,
        NAMESPACE,
        &args.oracle,
        Default::default(),
        None,
    )
    .await?;
    let mut out = OutFile::open(&args.out)?;
    let worker = Worker::start(
        client.clone(),
        Arc::new(registry(windows)?),
        WorkerConfig::default(),
    );
    let driver = TimerDriver::start_on(
        &worker,
        TimerSpec {
            poll: Duration::from_millis(args.poll_ms),
            ..TimerSpec::new(OBSERVER, Some(clicks_column()), on_window())
        },
    );
    let options = LoadOptions {
        rejects: args.out.with_extension("rejects.txt"),
        follow: args.follow,
        watermarks: WatermarkOptions {
            out_of_orderness: Duration::from_secs(args.out_of_orderness_secs),
            ..WatermarkOptions::default()
        },
        ..LoadOptions::default()
    };
    let lines = Lines::new(Clicks {
        key: args.key.clone(),
    });
    let stats = LoadStats::default();
    let started = std::time::Instant::now();
    let poll = Duration::from_millis(args.poll_ms);
    let mut emitted = 0;
    loop {
        lines
            .load_dir(&client, &args.input, &options, &stats)
            .await?;
        emitted += out.drain(&client).await?;
        if args.follow {
            tokio::time::sleep(poll).await;
            continue;
        }
        // Bounded input: loaded; done once every click is observed, every timer fired and
        // every window written.
        let faulted = stats.quarantined.load(std::sync::atomic::Ordering::Relaxed)
            + stats.unreadable.load(std::sync::atomic::Ordering::Relaxed);
        if faulted > 0 {
            // The input did not end: the watermark stays below what those files hold.
            anyhow::bail!(
                "{faulted} input files could not be loaded to their end (see {}): the windows \
                 after them are not emitted",
                options.rejects.display()
            );
        }
        // The watermark at the end of input means no click is pending (none is observed
        // late either: the worker is quiescent).
        worker.wait_until_quiescent().await?;
        let snapshot = client.snapshot().await?;
        let ended = time::published(&snapshot, &clicks_column()).await? == Some(u64::MAX);
        let (timers, _) = time::pending_timers(&snapshot, OBSERVER).await?;
        let outbox = count_rows(&client, b"outbox").await?;
        if ended && timers == 0 && outbox == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    driver.shutdown().await;
    worker.shutdown().await;
    let late = count_rows(&client, b"late").await?;
    println!(
        "{}; {} windows in {} ({emitted} written by this run); {late} late clicks dropped",
        stats.summary("clicks", started.elapsed(), &options.rejects),
        out.written.len(),
        args.out.display(),
    );
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    run(Args::parse()).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use std::collections::HashMap;
    use std::process::{Child, Command};

    const CHILD_ARGS: &str = "WINDOW_COUNT_CHILD_ARGS";

    /// Not a test: the process the kill -9 tests start (this test binary, run with
    /// `--ignored --exact tests::child_entry`), running the example on the arguments in
    /// `WINDOW_COUNT_CHILD_ARGS`.
    #[test]
    #[ignore = "the child process of the kill -9 tests"]
    fn child_entry() {
        let Ok(raw) = std::env::var(CHILD_ARGS) else {
            return;
        };
        let argv: Vec<String> = serde_json::from_str(&raw).expect("child arguments");
        let args = Args::parse_from(std::iter::once("window_count".to_string()).chain(argv));
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(run(args)).expect("window_count");
    }

    fn child(argv: &[String]) -> Child {
        Command::new(std::env::current_exe().expect("test binary"))
            .args(["--ignored", "--exact", "tests::child_entry", "--nocapture"])
            .env(CHILD_ARGS, serde_json::to_string(argv).unwrap())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("spawn the child")
    }

    /// Writes `n` clicks over `keys` keys, 40 ms apart in event time with up to ±2 s of
    /// disorder, into two files; every 25th click is delivered again (same line) in the
    /// other file. Returns the expected count per (key, window start).
    fn input(
        dir: &Path,
        n: u64,
        keys: u64,
        window_ms: u64,
        seed: u64,
    ) -> HashMap<(String, u64), u64> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let base = 1_700_000_000_000u64;
        let (mut a, mut b) = (String::new(), String::new());
        let mut expected: HashMap<(String, u64), u64> = HashMap::new();
        for i in 0..n {
            let t = base + i * 40 + rng.gen_range(0..4_000) - 2_000;
            let key = format!("q{}", rng.gen_range(0..keys));
            let line = format!(
                "{{\"click_id\": \"c{i}\", \"event_time\": {t}, \"query_id\": \"{key}\"}}\n"
            );
            *expected.entry((key, t - t % window_ms)).or_default() += 1;
            if i % 2 == 0 {
                a.push_str(&line)
            } else {
                b.push_str(&line)
            }
            if i % 25 == 0 {
                if i % 2 == 0 {
                    b.push_str(&line)
                } else {
                    a.push_str(&line)
                }
            }
        }
        std::fs::write(dir.join("clicks-a.jsonl"), a).unwrap();
        std::fs::write(dir.join("clicks-b.jsonl"), b).unwrap();
        expected
    }

    fn output(path: &Path) -> HashMap<(String, u64), u64> {
        let mut got = HashMap::new();
        for line in std::fs::read_to_string(path).unwrap_or_default().lines() {
            let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            let id = (
                v["key"].as_str().unwrap().to_string(),
                v["window_start_ms"].as_u64().unwrap(),
            );
            let count = v["count"].as_u64().unwrap();
            assert!(
                got.insert(id.clone(), count).is_none(),
                "window {id:?} written twice"
            );
        }
        got
    }

    /// The example's arguments on `dir`'s `in` and `store`, 10 s windows, and `extra`.
    fn args(dir: &Path, out: &Path, extra: &[&str]) -> Vec<String> {
        let (input, store) = (dir.join("in"), dir.join("store"));
        let mut argv: Vec<String> = vec![
            "--input".into(),
            input.display().to_string(),
            "--out".into(),
            out.display().to_string(),
            "--window-secs".into(),
            "10".into(),
            "--store".into(),
            format!("embedded:{}", store.display()),
        ];
        argv.extend(extra.iter().map(|s| s.to_string()));
        argv
    }

    /// Killed with SIGKILL at random moments and restarted on the same store and FILE, then
    /// run to the end: FILE holds each window once with its count (out-of-order input,
    /// redelivered clicks counted once).
    #[test]
    fn killed_at_random_moments_it_still_writes_each_window_once() {
        let dir = tempfile::tempdir().unwrap();
        let input_dir = dir.path().join("in");
        std::fs::create_dir(&input_dir).unwrap();
        let expected = input(&input_dir, 1_500, 5, 10_000, 7);
        let out = dir.path().join("windows.jsonl");
        let argv = args(
            dir.path(),
            &out,
            &["--out-of-orderness-secs", "3", "--lateness-secs", "1"],
        );
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        for _ in 0..5 {
            let mut c = child(&argv);
            std::thread::sleep(Duration::from_millis(rng.gen_range(100..1_500)));
            let _ = c.kill(); // SIGKILL
            let _ = c.wait();
        }
        let status = child(&argv).wait().unwrap();
        assert!(status.success(), "the last run failed: {status}");
        let got = output(&out);
        let total: u64 = got.values().sum();
        assert_eq!(total, 1_500, "every click counted once");
        assert_eq!(got, expected);
    }

    /// A click whose window has fired is late: dropped, counted, and its window is not
    /// written again.
    #[test]
    fn a_click_after_its_window_fired_is_late() {
        let dir = tempfile::tempdir().unwrap();
        let input_dir = dir.path().join("in");
        std::fs::create_dir(&input_dir).unwrap();
        let expected = input(&input_dir, 200, 2, 10_000, 3);
        let out = dir.path().join("windows.jsonl");
        let argv = args(dir.path(), &out, &[]);
        assert!(child(&argv).wait().unwrap().success());
        assert_eq!(output(&out), expected);
        // The input ended (the watermark passed everything): a new click in an old window.
        std::fs::write(
            input_dir.join("clicks-late.jsonl"),
            "{\"click_id\": \"late-1\", \"event_time\": 1700000000500, \"query_id\": \"q0\"}\n",
        )
        .unwrap();
        assert!(child(&argv).wait().unwrap().success());
        assert_eq!(output(&out), expected, "no window written again");
        let rt = tokio::runtime::Runtime::new().unwrap();
        let late = rt.block_on(async {
            let spec: percolator_cli::StoreSpec =
                format!("embedded:{}", dir.path().join("store").display())
                    .parse()
                    .unwrap();
            let client =
                percolator_cli::store::open_client(&spec, NAMESPACE, &[], Default::default(), None)
                    .await
                    .unwrap();
            count_rows(&client, b"late").await.unwrap()
        });
        assert_eq!(late, 1);
    }
}
