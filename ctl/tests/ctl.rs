//! `percolator-ctl` as a separate process against a real store with real workers: a
//! minitikv over an embedded store and an oracle service in the test process, workers on a
//! client of them, and every verb run as `percolator-ctl --store tikv:... --oracle ... --json`.

use observers::{observer_fn, DeadLetter, Registry, Worker};
use percolator::txn::CrashPoint;
use percolator::{Cell, Client, ClientConfig};
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[path = "support/cluster.rs"]
mod cluster;

use cluster::{breakable_length, poll, worker_config, Env};

/// Hang guard for the polls below (not a timing assertion).
const PATIENCE: Duration = Duration::from_secs(120);

/// What one run of the binary printed.
struct Run {
    status: i32,
    json: Value,
    stderr: String,
}

impl Env {
    /// Runs `percolator-ctl ARGS --json` against the store.
    async fn ctl(&self, args: &[&str]) -> Run {
        let out = self
            .command()
            .arg("--json")
            .args(args)
            .output()
            .await
            .expect("running percolator-ctl");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let json = serde_json::from_str(&stdout).unwrap_or_else(|e| {
            panic!("percolator-ctl {args:?}: not JSON ({e}):\n{stdout}\nstderr:\n{stderr}")
        });
        Run {
            status: out.status.code().unwrap_or(-1),
            json,
            stderr,
        }
    }

    /// Runs `percolator-ctl ARGS --json`, which must succeed.
    async fn ok(&self, args: &[&str]) -> Value {
        let run = self.ctl(args).await;
        assert_eq!(
            run.status, 0,
            "percolator-ctl {args:?} failed:\n{}\n{}",
            run.json, run.stderr
        );
        run.json
    }
}

fn body(row: &str) -> Cell {
    Cell::new("docs", row, "body")
}

/// A chain of two observers: `docs/body` -> `docs/len` -> `docs/done`. The first fails on
/// purpose while `broken` is set.
fn chain(broken: Arc<AtomicBool>) -> Arc<Registry> {
    let mut registry = Registry::new();
    breakable_length(&mut registry, broken);
    registry
        .strong(
            "docs",
            "len",
            "done",
            observer_fn(|txn, cell: Cell| async move {
                let len = txn.get(&cell).await?.unwrap_or_default();
                txn.set(Cell::new("docs", &cell.row, "done"), len);
                Ok(())
            }),
        )
        .expect("register");
    Arc::new(registry)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_listed_shown_dropped_only_when_confirmed_and_replayed() {
    let env = Env::start("dl").await;
    let broken = Arc::new(AtomicBool::new(true));
    let worker = Worker::start(env.client.clone(), chain(broken.clone()), worker_config());
    worker.wait_until_settled().await;
    for row in ["a", "b", "c"] {
        env.write(&body(row), &format!("body of {row}")).await;
    }
    poll(PATIENCE, "three dead letters", || async {
        DeadLetter::list(&env.client).await.expect("list").len() == 3
    })
    .await;

    let status = env.ok(&["status"]).await;
    assert_eq!(status["dead_letters"], 3, "{status}");
    let workers = status["workers"].as_array().expect("workers");
    assert_eq!(workers.len(), 1, "{status}");
    assert_eq!(workers[0]["id"], worker.id(), "{status}");
    assert_eq!(workers[0]["live"], true, "{status}");
    assert_eq!(workers[0]["live_workers"], 1, "{status}");

    let list = env.ok(&["dead-letters", "list"]).await;
    let letters = list["dead_letters"].as_array().expect("letters").clone();
    assert_eq!(letters.len(), 3, "{list}");
    let mut rows: Vec<String> = letters
        .iter()
        .map(|l| {
            assert!(
                l["error"]
                    .as_str()
                    .unwrap_or("")
                    .contains("broken on purpose"),
                "{l}"
            );
            l["cell"]["row"].as_str().expect("row").to_string()
        })
        .collect();
    rows.sort();
    assert_eq!(rows, ["a", "b", "c"]);
    let id_of = |row: &str| {
        letters
            .iter()
            .find(|l| l["cell"]["row"] == row)
            .and_then(|l| l["id"].as_str())
            .expect("id")
            .to_string()
    };

    // show takes a prefix of the id.
    let c_id = id_of("c");
    let shown = env.ok(&["dead-letters", "show", &c_id[..8]]).await;
    assert_eq!(shown["id"], c_id.as_str());
    assert_eq!(shown["cell"]["row"], "c");
    assert_eq!(shown["notification"]["kind"], "committed", "{shown}");

    // drop without --yes drops nothing and says so in its exit status.
    let refused = env.ctl(&["dead-letters", "drop", &c_id]).await;
    assert_eq!(refused.status, 1, "{}", refused.json);
    assert_eq!(refused.json["confirmed"], false);
    assert_eq!(DeadLetter::list(&env.client).await.expect("list").len(), 3);
    let refused_all = env.ctl(&["dead-letters", "drop", "--all"]).await;
    assert_eq!(refused_all.status, 1);
    assert_eq!(DeadLetter::list(&env.client).await.expect("list").len(), 3);

    let dropped = env.ok(&["dead-letters", "drop", &c_id, "--yes"]).await;
    assert_eq!(dropped["dropped"].as_array().map(Vec::len), Some(1));
    assert_eq!(DeadLetter::list(&env.client).await.expect("list").len(), 2);
    let missing = env.ctl(&["dead-letters", "show", &c_id]).await;
    assert_ne!(missing.status, 0);

    // Fixed: replay one by id, the other with --all, and wait for the drain.
    broken.store(false, Ordering::SeqCst);
    let replayed = env.ok(&["dead-letters", "replay", &id_of("a")]).await;
    assert_eq!(replayed["replayed"].as_array().map(Vec::len), Some(1));
    let replayed = env.ok(&["dead-letters", "replay", "--all"]).await;
    assert_eq!(replayed["replayed"].as_array().map(Vec::len), Some(1));
    assert!(DeadLetter::list(&env.client)
        .await
        .expect("list")
        .is_empty());
    let waited = env.ok(&["wait", "--timeout", "120"]).await;
    assert_eq!(waited["drained"], true);
    for row in ["a", "b"] {
        let expected = format!("body of {row}").len().to_string();
        assert_eq!(
            env.read(&Cell::new("docs", row, "done")).await,
            Some(expected)
        );
    }
    assert_eq!(env.read(&Cell::new("docs", "c", "done")).await, None);
    let status = env.ok(&["status"]).await;
    assert_eq!(status["dead_letters"], 0);
    assert_eq!(status["backlog"]["total"], 0);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_times_out_on_a_backlog_and_returns_once_the_chain_is_drained() {
    let env = Env::start("wait").await;
    let registry = chain(Arc::new(AtomicBool::new(false)));
    // No worker yet: the writes pile up as a backlog.
    registry.declare(&env.client);
    let rows: Vec<String> = (0..40).map(|i| format!("r{i:02}")).collect();
    for row in &rows {
        env.write(&body(row), &"x".repeat(row.len() + 3)).await;
    }

    let timed_out = env.ctl(&["wait", "--timeout", "0.5"]).await;
    assert_eq!(timed_out.status, 3, "{}", timed_out.json);
    assert_eq!(timed_out.json["drained"], false);

    let listed = env.ok(&["notifications", "--limit", "10"]).await;
    let shown = listed["notifications"].as_array().expect("list");
    assert_eq!(shown.len(), 10, "{listed}");
    assert!(
        shown.iter().all(|n| n["cell"]["column"] == "body"),
        "{listed}"
    );
    let status = env.ok(&["status"]).await;
    assert_eq!(status["backlog"]["total"], 40, "{status}");
    let columns = status["backlog"]["columns"].as_array().expect("columns");
    assert_eq!(columns.len(), 1);
    assert_eq!(columns[0]["table"], "docs");
    assert_eq!(columns[0]["count"], 40);

    // Two workers share the chain; `wait` must not return while a hop is in flight: every
    // row's last cell must be there when it does.
    let w1 = Worker::start(env.client.clone(), registry.clone(), worker_config());
    let w2 = Worker::start(env.client.clone(), registry.clone(), worker_config());
    let waited = env.ok(&["wait", "--timeout", "120"]).await;
    assert_eq!(waited["drained"], true);
    for row in &rows {
        assert_eq!(
            env.read(&Cell::new("docs", row, "done")).await,
            Some((row.len() + 3).to_string()),
            "row {row} not done when wait returned"
        );
    }
    let status = env.ok(&["status"]).await;
    assert_eq!(status["backlog"]["total"], 0, "{status}");
    let live: Vec<_> = status["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .filter(|w| w["live"] == true)
        .collect();
    assert_eq!(live.len(), 2, "{status}");
    w1.shutdown().await;
    w2.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_writers_lock_shows_in_locks_and_status_until_resolved() {
    let env = Env::start("locks").await;
    // A writer with a short TTL that dies right after its locks are in place.
    let config = ClientConfig {
        lock_ttl: Duration::from_millis(200),
        ..ClientConfig::with_namespace("locks")
    };
    let crashing = Client::with_config(
        env.client.store().clone(),
        env.client.oracle().clone(),
        config,
    );
    let txn = crashing.begin().await.expect("begin");
    txn.set(Cell::new("acct", "alice", "balance"), "90");
    txn.set(Cell::new("acct", "bob", "balance"), "110");
    txn.set_crash_hook(Arc::new(|p| p == CrashPoint::AllPrewritten));
    assert!(
        txn.commit().await.is_err(),
        "the crash hook must stop the commit"
    );

    let listed = env.ok(&["locks"]).await;
    let locks = listed["locks"].as_array().expect("locks");
    assert_eq!(locks.len(), 2, "{listed}");
    let primaries = locks.iter().filter(|l| l["primary"].is_null()).count();
    assert_eq!(primaries, 1, "one primary, one secondary: {listed}");
    // The TTL counts from the transaction's start: at least the configured 200 ms.
    assert!(
        locks.iter().all(|l| l["ttl_ms"]
            .as_u64()
            .is_some_and(|t| (200..3000).contains(&t))),
        "{listed}"
    );

    // Expiry is decided on oracle time: poll until the TTL has passed.
    poll(PATIENCE, "the locks to expire", || async {
        env.ok(&["status"]).await["locks"]["expired"]
            .as_array()
            .is_some_and(|e| e.len() == 2)
    })
    .await;
    let status = env.ok(&["status"]).await;
    assert_eq!(status["locks"]["total"], 2, "{status}");

    // scan shows the lock beside the (absent) committed value.
    let scanned = env.ok(&["scan", "acct"]).await;
    let cells = scanned["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 2, "{scanned}");
    assert!(
        cells.iter().all(|c| c["lock"]["expired"] == true),
        "{scanned}"
    );

    let resolved = env.ok(&["locks", "--resolve"]).await;
    assert_eq!(resolved["resolved"], 2, "{resolved}");
    let after = env.ok(&["locks"]).await;
    assert_eq!(after["locks"].as_array().map(Vec::len), Some(0), "{after}");
    let status = env.ok(&["status"]).await;
    assert_eq!(status["locks"]["total"], 0);
    // Rolled back: nothing committed.
    assert_eq!(env.read(&Cell::new("acct", "alice", "balance")).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_shows_the_latest_a_past_snapshot_and_the_history() {
    let env = Env::start("scan").await;
    let cell = Cell::new("docs", "page-1", "title");
    let mut commits = Vec::new();
    for v in ["first", "second", "third"] {
        commits.push(env.write(&cell, v).await);
    }
    // Large enough to be stored out of line.
    let big = "y".repeat(3000);
    env.write(&Cell::new("docs", "page-2", "title"), &big).await;
    env.write(&Cell::new("other", "page-1", "title"), "not in docs")
        .await;

    let latest = env.ok(&["scan", "docs", "--prefix", "page-"]).await;
    let cells = latest["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 2, "{latest}");
    assert_eq!(cells[0]["row"], "page-1");
    assert_eq!(cells[0]["versions"][0]["value"], "third");
    assert_eq!(cells[0]["versions"][0]["commit_ts"], commits[2]);
    assert_eq!(cells[1]["versions"][0]["value"], big.as_str());

    let at = commits[1].to_string();
    let past = env
        .ok(&[
            "scan", "docs", "--from", "page-1", "--to", "page-2", "--at", &at,
        ])
        .await;
    let cells = past["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 1, "{past}");
    assert_eq!(cells[0]["versions"][0]["value"], "second");

    let history = env
        .ok(&["scan", "docs", "--prefix", "page-1", "--versions"])
        .await;
    let versions = history["cells"][0]["versions"]
        .as_array()
        .expect("versions");
    let values: Vec<_> = versions.iter().map(|v| v["value"].clone()).collect();
    assert_eq!(values, ["third", "second", "first"], "{history}");
    let stamps: Vec<u64> = versions
        .iter()
        .map(|v| v["commit_ts"].as_u64().expect("ts"))
        .collect();
    assert_eq!(stamps, [commits[2], commits[1], commits[0]]);

    // gc at the policy's safe point: nothing is old enough to go, and the safe point is
    // published (status shows it).
    let gc = env.ok(&["gc"]).await;
    assert_eq!(gc["versions_deleted"], 0, "{gc}");
    assert_eq!(gc["records_resolved"], 0, "{gc}");
    assert_eq!(gc["records_deleted"], 0, "{gc}");
    let status = env.ok(&["status"]).await;
    assert_eq!(status["gc_safe_point"], gc["safe_point"], "{status}");
    assert!(status["oracle"]["leader"]["addr"].is_string(), "{status}");
    let history = env
        .ok(&["scan", "docs", "--prefix", "page-1", "--versions"])
        .await;
    assert_eq!(
        history["cells"][0]["versions"].as_array().map(Vec::len),
        Some(3)
    );
}

/// `renotify` runs the observers on cells written before they existed: stopped by
/// `--pages`, shown in progress by `status`, resumed by a second run; afterwards every row
/// went through the chain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renotify_processes_cells_written_before_their_observer() {
    let env = Env::start("rn").await;
    let rows: Vec<String> = (0..7).map(|i| format!("r{i}")).collect();
    for row in &rows {
        env.write(&body(row), &format!("body of {row}")).await;
    }
    let worker = Worker::start(
        env.client.clone(),
        chain(Arc::new(AtomicBool::new(false))),
        worker_config(),
    );
    worker.wait_until_settled().await;

    let first = env
        .ok(&[
            "renotify",
            "docs",
            "body",
            "--page-size",
            "3",
            "--pages",
            "1",
        ])
        .await;
    assert_eq!(first["finished"], false, "{first}");
    assert_eq!(first["rows_done"], 3, "{first}");
    let status = env.ok(&["status"]).await;
    let passes = status["renotify"].as_array().expect("renotify");
    assert_eq!(passes.len(), 1, "{status}");
    assert_eq!(passes[0]["table"], "docs", "{status}");
    assert_eq!(passes[0]["column"], "body", "{status}");
    assert_eq!(passes[0]["rows_done"], 3, "{status}");
    assert_eq!(passes[0]["last_row"], "r2", "{status}");

    let done = env
        .ok(&["renotify", "docs", "body", "--page-size", "3"])
        .await;
    assert_eq!(done["finished"], true, "{done}");
    assert_eq!(done["resumed"], true, "{done}");
    assert_eq!(done["rows_done"], 7, "{done}");
    assert_eq!(done["notified"], 7, "{done}");
    let status = env.ok(&["status"]).await;
    assert_eq!(status["renotify"], serde_json::json!([]), "{status}");

    let waited = env.ok(&["wait", "--timeout", "60"]).await;
    assert_eq!(waited["drained"], true, "{waited}");
    for row in &rows {
        let len = format!("body of {row}").len().to_string();
        assert_eq!(
            env.read(&Cell::new("docs", row, "done")).await,
            Some(len),
            "{row}"
        );
    }
    worker.shutdown().await;
}

/// `scan` and `renotify` see write-once cells (records without heads, as Photon's events
/// are), and refuse a table the namespace's table ids do not name and a column no cell is
/// in (issue 39, item 11).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_and_renotify_cover_write_once_cells_and_refuse_unknown_names() {
    let env = Env::start("once").await;
    let ids = percolator::codec::TableIds::new([("clicks", 1), ("loader", 2)]).expect("ids");
    let client = percolator_cli::store::open_client(
        &env.spec,
        &env.namespace,
        std::slice::from_ref(&env.oracle_addr),
        percolator::kv::Durability::Process,
        Some(&ids),
    )
    .await
    .expect("client with table ids");
    client.write_once_column("clicks", "event");
    let txn = client.begin().await.expect("begin");
    for i in 0..3 {
        txn.set(
            Cell::new("clicks", format!("c{i}"), "event"),
            format!("click {i}"),
        );
    }
    // An ordinary cell: the primary (a loader's offset).
    txn.set(Cell::new("loader", "f", "offset"), "3");
    txn.commit().await.expect("commit");

    let scanned = env.ok(&["scan", "clicks"]).await;
    let cells = scanned["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 3, "{scanned}");
    assert_eq!(cells[1]["row"], "c1", "{scanned}");
    assert_eq!(cells[1]["versions"][0]["value"], "click 1", "{scanned}");

    let done = env.ok(&["renotify", "clicks", "event"]).await;
    assert_eq!(done["finished"], true, "{done}");
    assert_eq!(done["rows_done"], 3, "{done}");
    assert_eq!(done["notified"], 3, "{done}");
    let pending = env.ok(&["notifications"]).await;
    assert!(pending.to_string().contains("c2"), "{pending}");

    for args in [
        &["scan", "clickz"][..],
        &["renotify", "clickz", "event"],
        &["renotify", "clicks", "evnt"],
    ] {
        let run = env.ctl(args).await;
        assert_ne!(run.status, 0, "{args:?}: {}", run.json);
        assert!(run.json["error"].is_string(), "{args:?}: {}", run.json);
    }
}

/// A source the loader quarantined (recorded in the store by the loader of another process)
/// shows in `status`, text and JSON: its path, the cause and since when.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_quarantined_input_files() {
    let env = Env::start("quarantine").await;
    let status = env.ok(&["status"]).await;
    assert_eq!(status["quarantined"], serde_json::json!([]), "{status}");
    let cause = "logs/queries-000.jsonl: the log changed in place";
    observers::admin::record_quarantine(&env.client, "logs/queries-000.jsonl", cause)
        .await
        .expect("record");
    let status = env.ok(&["status"]).await;
    let listed = status["quarantined"].as_array().expect("quarantined");
    assert_eq!(listed.len(), 1, "{status}");
    assert_eq!(listed[0]["source"], "logs/queries-000.jsonl", "{status}");
    assert_eq!(listed[0]["cause"], cause, "{status}");
    assert!(listed[0]["since_ms"].as_u64().unwrap_or(0) > 0, "{status}");
    assert!(listed[0]["age_ms"].is_u64(), "{status}");
    let out = env
        .command()
        .arg("status")
        .output()
        .await
        .expect("percolator-ctl status");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("quarantine 1 input files not loaded"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains("logs/queries-000.jsonl") && l.contains("changed in place")),
        "{text}"
    );
}
