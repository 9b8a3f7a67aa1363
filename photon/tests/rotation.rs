//! The loader against log rotation and files it cannot open: a log renamed to a name the
//! loader matches, or to one it does not (logrotate's `clicks.jsonl.1`) after lines were
//! appended past the last batch, with a new file started at the old path; a moved input
//! directory; logs shorter than the fingerprint window; a dangling symlink, a directory with a
//! log's name, a file gone before it is opened. Every line is loaded exactly once.

mod common;
use percolator::kv::MemoryKv;
use percolator::Client;
use photon::event::Kind;
use photon::gen::{generate, GenOptions};
use photon::load::status::dir_status;
use photon::load::{lines_to_load, load_dir, load_file, LoadOptions, LoadStats};
use photon::verify::verify;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

fn client() -> Client {
    common::client_living(
        Arc::new(MemoryKv::new()),
        Duration::from_secs(10),
        Duration::from_secs(60),
    )
}

fn options(dir: &Path) -> LoadOptions {
    LoadOptions {
        batch: 40,
        rejects: dir.join("rejects.txt"),
        max_backlog: 0,
        ..LoadOptions::default()
    }
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn append(path: &Path, lines: &[String]) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    for l in lines {
        writeln!(f, "{l}").unwrap();
    }
}

/// Query lines with ids `{prefix}-{i}`, each about 60 bytes.
fn queries(prefix: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            format!(
                "{{\"query_id\":\"{prefix}-{i:04}\",\"event_time\":{}}}",
                1_000 + i
            )
        })
        .collect()
}

/// Logs to load in two parts: `live` holds the first half of every line of the generated
/// logs (and of a small query log, shorter than the fingerprint window); `rest` the second
/// half, per file name, to append later. Returns the events of all of them.
struct Logs {
    live: PathBuf,
    rest: Vec<(String, Vec<String>)>,
    queries: u64,
    clicks: u64,
}

fn half_loaded_logs(root: &Path, seed: u64) -> Logs {
    let full = root.join("full");
    let gen = GenOptions {
        queries: 300,
        duplicates: 0.0,
        orphans: 0.0,
        malformed: 0.0,
        files: 1,
        seed,
        ..GenOptions::default()
    };
    let summary = generate(&full, &gen).unwrap();
    let live = root.join("logs");
    std::fs::create_dir_all(&live).unwrap();
    std::fs::write(
        full.join("queries-small.jsonl"),
        queries("small", 6).join("\n") + "\n",
    )
    .unwrap();
    let mut rest = Vec::new();
    for name in [
        "queries-000.jsonl",
        "clicks-000.jsonl",
        "queries-small.jsonl",
    ] {
        let all = lines(&full.join(name));
        let (first, second) = all.split_at(all.len() / 2);
        append(&live.join(name), first);
        rest.push((name.to_string(), second.to_vec()));
    }
    assert!(
        std::fs::metadata(live.join("queries-small.jsonl"))
            .unwrap()
            .len()
            < 4096
    );
    Logs {
        live,
        rest,
        queries: summary.queries + 6,
        clicks: summary.clicks,
    }
}

/// Every event of `queries` and `clicks` is in the store, and `stats` (of every load since
/// the store was empty) counts each once.
async fn assert_loaded_once(client: &Client, stats: &LoadStats, queries: u64, clicks: u64) {
    let txn = client.begin().await.unwrap();
    let stored_queries = txn.scan(b"queries", b"", None).await.unwrap().len() as u64;
    let stored_clicks = txn.scan(b"clicks", b"", None).await.unwrap().len() as u64;
    assert_eq!(stored_queries, queries, "queries loaded");
    assert_eq!(stored_clicks, clicks, "clicks loaded");
    assert_eq!(
        stats.loaded.load(Ordering::Relaxed),
        queries + clicks,
        "events loaded (an event loaded twice counts twice)"
    );
}

/// Half-loaded logs (seed `seed`) loaded once by a client of a fresh store: the state each
/// rotation starts from, with the options and counters to go on with.
async fn loaded_once(root: &Path, seed: u64) -> (Logs, Client, LoadOptions, LoadStats) {
    let logs = half_loaded_logs(root, seed);
    let client = client();
    let opts = options(root);
    let stats = LoadStats::default();
    load_dir(&client, &logs.live, &opts, &stats).await.unwrap();
    (logs, client, opts, stats)
}

/// Logs renamed to names the loader matches (`clicks-20261124.jsonl`), with a new file
/// started at each old path, and lines appended to the renamed files afterwards (the small
/// one past the fingerprint window): each line is loaded once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_renamed_to_a_matching_name_is_not_loaded_again() {
    let dir = tempfile::tempdir().unwrap();
    let (logs, client, opts, stats) = loaded_once(dir.path(), 1).await;
    let successor = queries("successor", 3);
    for (name, rest) in &logs.rest {
        let renamed = logs.live.join(name.replace(".jsonl", "-20261124.jsonl"));
        std::fs::rename(logs.live.join(name), &renamed).unwrap();
        std::fs::write(logs.live.join(name), b"").unwrap();
        append(&renamed, rest);
    }
    // The small log grows past the fingerprint window under its new name.
    let grown = queries("grown", 100);
    append(&logs.live.join("queries-small-20261124.jsonl"), &grown);
    append(&logs.live.join("queries-000.jsonl"), &successor);
    load_dir(&client, &logs.live, &opts, &stats).await.unwrap();
    let before = stats.loaded.load(Ordering::Relaxed);
    load_dir(&client, &logs.live, &opts, &stats).await.unwrap();
    assert_eq!(stats.loaded.load(Ordering::Relaxed), before, "nothing left");
    assert_loaded_once(&client, &stats, logs.queries + 3 + 100, logs.clicks).await;
}

/// Logs renamed to names the loader does not match (`clicks-000.jsonl.1`, logrotate's
/// default) after lines were appended past the last batch, with a new file at the old path:
/// the loader finishes the renamed files and loads the new ones; until it has, the status
/// `--until-drained` checks is not done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_renamed_to_another_name_is_finished_and_its_successor_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let (logs, client, opts, stats) = loaded_once(dir.path(), 2).await;
    for (name, rest) in &logs.rest {
        append(&logs.live.join(name), rest);
        let rotated = logs.live.join(format!("{name}.1"));
        std::fs::rename(logs.live.join(name), rotated).unwrap();
        std::fs::write(logs.live.join(name), b"").unwrap();
    }
    let successor = queries("successor", 3);
    append(&logs.live.join("queries-small.jsonl"), &successor);
    let status = dir_status(&client, &logs.live).await.unwrap();
    assert!(
        status.iter().any(|f| !f.done()),
        "the rotated files are not loaded to their end yet: {status:?}"
    );
    assert!(lines_to_load(&client, &logs.live).await.unwrap() > 3);
    load_dir(&client, &logs.live, &opts, &stats)
        .await
        .expect("the new files at the old paths are new logs");
    let status = dir_status(&client, &logs.live).await.unwrap();
    assert!(status.iter().all(|f| f.done()), "{status:?}");
    assert_eq!(lines_to_load(&client, &logs.live).await.unwrap(), 0);
    assert_loaded_once(&client, &stats, logs.queries + 3, logs.clicks).await;
    // A second rotation of the small log, after two more lines: `.1` becomes `.2`, the
    // current file `.1`.
    let small = logs.live.join("queries-small.jsonl");
    std::fs::rename(
        logs.live.join("queries-small.jsonl.1"),
        logs.live.join("queries-small.jsonl.2"),
    )
    .unwrap();
    append(&small, &queries("late", 2));
    std::fs::rename(&small, logs.live.join("queries-small.jsonl.1")).unwrap();
    load_dir(&client, &logs.live, &opts, &stats).await.unwrap();
    assert_loaded_once(&client, &stats, logs.queries + 5, logs.clicks).await;
    // Verify reads the renamed logs too: the same clicks as in the logs before rotation.
    let live = verify(&client, &logs.live).await.unwrap();
    let full = verify(&client, &dir.path().join("full")).await.unwrap();
    assert_eq!(live.joinable, full.joinable, "{live:?}");
    assert!(full.joinable > 0, "{full:?}");
}

/// An input directory moved after its logs were partly loaded, with lines appended since:
/// loading the new path loads only what was not loaded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moved_directory_is_not_loaded_again() {
    let dir = tempfile::tempdir().unwrap();
    let (logs, client, opts, stats) = loaded_once(dir.path(), 3).await;
    for (name, rest) in &logs.rest {
        append(&logs.live.join(name), rest);
    }
    let moved = dir.path().join("moved");
    std::fs::rename(&logs.live, &moved).unwrap();
    load_dir(&client, &moved, &opts, &stats).await.unwrap();
    assert_loaded_once(&client, &stats, logs.queries, logs.clicks).await;
}

/// A dangling symlink and a directory named like logs are reported (rejects file and log)
/// and the other logs load; so does a log gone before the loader opens it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_that_cannot_be_opened_are_reported_and_the_rest_loads() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let gen = GenOptions {
        queries: 200,
        duplicates: 0.0,
        orphans: 0.0,
        malformed: 0.0,
        files: 1,
        seed: 4,
        ..GenOptions::default()
    };
    let summary = generate(&logs, &gen).unwrap();
    std::os::unix::fs::symlink(
        dir.path().join("gone.jsonl"),
        logs.join("clicks-dangling.jsonl"),
    )
    .unwrap();
    std::fs::create_dir(logs.join("clicks-x.jsonl")).unwrap();
    let client = client();
    let opts = options(dir.path());
    let stats = LoadStats::default();
    assert!(lines_to_load(&client, &logs).await.unwrap() > 0);
    load_dir(&client, &logs, &opts, &stats)
        .await
        .expect("files that cannot be opened are skipped");
    assert_loaded_once(&client, &stats, summary.queries, summary.clicks).await;
    let rejects = std::fs::read_to_string(&opts.rejects).unwrap();
    assert!(rejects.contains("clicks-dangling.jsonl"), "{rejects}");
    assert!(rejects.contains("clicks-x.jsonl"), "{rejects}");
    let status = dir_status(&client, &logs).await.unwrap();
    assert!(status.iter().all(|f| f.done()), "{status:?}");
    // A log deleted between the listing and its opening.
    let gone = logs.join("clicks-deleted.jsonl");
    let loaded = load_file(&client, &gone, Kind::Click, &opts, &LoadStats::default())
        .await
        .expect("a log gone before it is opened is skipped");
    assert_eq!(loaded, 0);
    let rejects = std::fs::read_to_string(&opts.rejects).unwrap();
    assert!(rejects.contains("clicks-deleted.jsonl"), "{rejects}");
}

/// A record of an earlier version (keyed by the file's path, `offset,line`) resumes its file
/// where it was, and moves to the file's new key with the next batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_of_the_previous_version_resume_and_move_to_the_new_key() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let path = logs.join("queries-000.jsonl");
    let first = queries("old", 100);
    append(&path, &first);
    let loaded_len = std::fs::metadata(&path).unwrap().len();
    let client = client();
    let legacy =
        photon::schema::offset_cell(&std::fs::canonicalize(&path).unwrap().display().to_string());
    let txn = client.begin().await.unwrap();
    txn.set(legacy.clone(), format!("{loaded_len},100"));
    txn.commit().await.unwrap();
    append(&path, &queries("new", 10));
    let stats = LoadStats::default();
    load_dir(&client, &logs, &options(dir.path()), &stats)
        .await
        .unwrap();
    assert_eq!(
        stats.loaded.load(Ordering::Relaxed),
        10,
        "only the new lines"
    );
    let key = photon::load::file_key(&path).unwrap().unwrap();
    let txn = client.begin().await.unwrap();
    assert!(
        txn.get(&legacy).await.unwrap().is_none(),
        "the old key is gone"
    );
    let record = txn
        .get(&photon::schema::offset_cell(&key))
        .await
        .unwrap()
        .expect("the record under the new key");
    let size = std::fs::metadata(&path).unwrap().len();
    assert!(String::from_utf8(record)
        .unwrap()
        .starts_with(&format!("{size},110,")));
}

/// gzips `path` into `path.gz` and removes `path`, as logrotate's `compress` does at once
/// (no `delaycompress`).
fn gzip(path: &Path) -> PathBuf {
    let gz = PathBuf::from(format!("{}.gz", path.display()));
    let mut encoder = flate2::write::GzEncoder::new(
        std::fs::File::create(&gz).unwrap(),
        flate2::Compression::default(),
    );
    encoder.write_all(&std::fs::read(path).unwrap()).unwrap();
    encoder.finish().unwrap();
    std::fs::remove_file(path).unwrap();
    gz
}

/// Logs renamed and gzipped at once (logrotate's `compress` without `delaycompress`) after
/// lines were appended past the last batch, with a new file at the old path: the `.gz` is
/// the same log (known by its decompressed first bytes), finished from the offset the plain
/// file was loaded to; loaded again, it loads nothing, and the status is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_gzipped_at_rotation_is_finished_from_its_offset() {
    let dir = tempfile::tempdir().unwrap();
    let (logs, client, opts, stats) = loaded_once(dir.path(), 6).await;
    for (name, rest) in &logs.rest {
        append(&logs.live.join(name), rest);
        let rotated = logs.live.join(format!("{name}.1"));
        std::fs::rename(logs.live.join(name), &rotated).unwrap();
        gzip(&rotated);
        std::fs::write(logs.live.join(name), b"").unwrap();
    }
    let status = dir_status(&client, &logs.live).await.unwrap();
    assert!(status.iter().any(|f| !f.done()), "{status:?}");
    load_dir(&client, &logs.live, &opts, &stats).await.unwrap();
    assert_loaded_once(&client, &stats, logs.queries, logs.clicks).await;
    let again = LoadStats::default();
    load_dir(&client, &logs.live, &opts, &again).await.unwrap();
    assert_eq!(again.loaded.load(Ordering::Relaxed), 0);
    assert_eq!(again.quarantined.load(Ordering::Relaxed), 0);
    let status = dir_status(&client, &logs.live).await.unwrap();
    assert!(status.iter().all(|f| f.done()), "{status:?}");
    assert_eq!(lines_to_load(&client, &logs.live).await.unwrap(), 0);
    // `photon verify` reads the gzipped logs as the loader did: every click, no line
    // malformed (it read their compressed bytes as lines).
    let report = verify(&client, &logs.live).await.unwrap();
    assert_eq!(
        (report.clicks, report.malformed_lines),
        (logs.clicks, 0),
        "{report:?}"
    );
}

/// An input directory of symlinks to logs that rotate in another directory (the Kubernetes
/// layout: `/var/log/containers/*.log` -> `/var/log/pods/.../0.log`, renamed to
/// `0.log.<date>` there with a new `0.log`): the loader finishes the rotated files in the
/// targets' directory, then loads the new ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlinked_logs_rotated_in_their_targets_directory_are_finished() {
    let dir = tempfile::tempdir().unwrap();
    let logs = half_loaded_logs(dir.path(), 7);
    // The pods' directories hold the files; the input directory only links to them.
    let input = dir.path().join("containers");
    std::fs::create_dir_all(&input).unwrap();
    for (name, _) in &logs.rest {
        let pod = dir.path().join("pods").join(name.replace(".jsonl", ""));
        std::fs::create_dir_all(&pod).unwrap();
        std::fs::rename(logs.live.join(name), pod.join("0.log")).unwrap();
        std::os::unix::fs::symlink(pod.join("0.log"), input.join(name)).unwrap();
    }
    let client = client();
    let opts = options(dir.path());
    let stats = LoadStats::default();
    load_dir(&client, &input, &opts, &stats).await.unwrap();
    for (name, rest) in &logs.rest {
        let pod = dir.path().join("pods").join(name.replace(".jsonl", ""));
        append(&pod.join("0.log"), rest);
        std::fs::rename(pod.join("0.log"), pod.join("0.log.20261124-000000")).unwrap();
        std::fs::write(pod.join("0.log"), b"").unwrap();
    }
    let successor = queries("successor", 3);
    append(
        &dir.path().join("pods").join("queries-small").join("0.log"),
        &successor,
    );
    let status = dir_status(&client, &input).await.unwrap();
    assert!(status.iter().any(|f| !f.done()), "{status:?}");
    load_dir(&client, &input, &opts, &stats).await.unwrap();
    assert_loaded_once(&client, &stats, logs.queries + 3, logs.clicks).await;
    let status = dir_status(&client, &input).await.unwrap();
    assert!(status.iter().all(|f| f.done()), "{status:?}");
}

/// Writes `lines` into `path` at `offset` without O_APPEND (a writer that keeps its own
/// position, as log4j does): past the end of a truncated file, it leaves a hole of NULs.
fn write_at(path: &Path, offset: u64, lines: &[String]) -> u64 {
    use std::io::{Seek, SeekFrom};
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    let mut written = 0;
    for l in lines {
        writeln!(f, "{l}").unwrap();
        written += l.len() as u64 + 1;
    }
    offset + written
}

/// copytruncate with a writer that does not open with O_APPEND: each truncation leaves the
/// file restarting with a hole of NULs as long as the writer's position. The hole is skipped
/// (counted, no line rejected), each generation of the file is its own log, the copies are
/// finished, and nothing is refused as changed in place, rotation after rotation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copytruncate_by_a_writer_without_o_append_skips_the_nul_hole() {
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("logs");
    std::fs::create_dir_all(&live).unwrap();
    let log = live.join("queries-000.jsonl");
    std::fs::write(&log, b"").unwrap();
    let client = client();
    let opts = options(dir.path());
    let stats = LoadStats::default();
    let mut position = write_at(&log, 0, &queries("gen0", 100));
    let mut total = 100;
    let mut holes = 0;
    for generation in 1..=3 {
        load_dir(&client, &live, &opts, &stats).await.unwrap();
        // Lines after the last batch, then logrotate's copytruncate.
        position = write_at(&log, position, &queries(&format!("late{generation}"), 10));
        if live.join("queries-000.jsonl.1").exists() {
            std::fs::rename(
                live.join("queries-000.jsonl.1"),
                live.join(format!("queries-000.jsonl.{generation}")),
            )
            .unwrap();
        }
        std::fs::copy(&log, live.join("queries-000.jsonl.1")).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&log)
            .unwrap()
            .set_len(0)
            .unwrap();
        holes += position;
        position = write_at(&log, position, &queries(&format!("gen{generation}"), 50));
        total += 60;
    }
    load_dir(&client, &live, &opts, &stats).await.unwrap();
    assert_loaded_once(&client, &stats, total, 0).await;
    assert_eq!(stats.rejected.load(Ordering::Relaxed), 0, "no line of NULs");
    assert_eq!(stats.quarantined.load(Ordering::Relaxed), 0);
    assert!(
        stats.nul_bytes.load(Ordering::Relaxed) >= holes,
        "the holes are counted: {} < {holes}",
        stats.nul_bytes.load(Ordering::Relaxed)
    );
    let status = dir_status(&client, &live).await.unwrap();
    assert!(status.iter().all(|f| f.done()), "{status:?}");
}
