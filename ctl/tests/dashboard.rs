//! `percolator-ctl serve` as a separate process against a minitikv with an oracle service and
//! real workers (one observer fails on purpose and dead-letters): its HTTP API at the
//! `curl` level, its clean stop, and the page in a real headless Chromium (the DevTools
//! protocol over a pipe: `support/cdp.rs`).

#[path = "support/cdp.rs"]
mod cdp;
#[path = "support/cluster.rs"]
mod cluster;

use cluster::{breakable_length, poll, worker_config, Env};

use observers::{observer_fn, DeadLetter, Registry, Worker};
use percolator::Cell;
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// Hang guard for the polls below (not a timing assertion).
const PATIENCE: Duration = Duration::from_secs(180);

impl Env {
    fn ctl(&self) -> tokio::process::Command {
        self.command()
    }

    /// Starts `percolator-ctl serve` on a free port; returns it and its address.
    async fn dashboard(&self) -> (tokio::process::Child, String) {
        self.dashboard_with_stderr(std::process::Stdio::inherit())
            .await
    }

    /// [`Env::dashboard`], its standard error going to `stderr`.
    async fn dashboard_with_stderr(
        &self,
        stderr: std::process::Stdio,
    ) -> (tokio::process::Child, String) {
        let mut child = self
            .ctl()
            .args(["serve", "--listen", "127.0.0.1:0", "--sample-ms", "1000"])
            .stdout(std::process::Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .expect("starting percolator-ctl serve");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let line = lines
            .next_line()
            .await
            .expect("reading stdout")
            .expect("percolator-ctl serve exited before listening");
        let addr = line
            .strip_prefix("dashboard listening on http://")
            .and_then(|rest| rest.strip_suffix('/'))
            .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
            .to_string();
        (child, addr)
    }
}

/// `docs/body` -> `docs/len` fails while `broken` is set; `docs/title` -> `docs/indexed`
/// always succeeds (the throughput the charts show).
fn registry(broken: Arc<AtomicBool>) -> Arc<Registry> {
    let mut registry = Registry::new();
    breakable_length(&mut registry, broken);
    registry
        .strong(
            "docs",
            "title",
            "index",
            observer_fn(|txn, cell: Cell| async move {
                txn.set(Cell::new("docs", &cell.row, "indexed"), "yes");
                Ok(())
            }),
        )
        .expect("register");
    Arc::new(registry)
}

/// Workers on the store, one dead letter (for `docs/a/body`), and the failing observer fixed
/// afterwards (so a replay succeeds).
async fn with_a_dead_letter(env: &Env, workers: usize) -> (Vec<Worker>, String) {
    let broken = Arc::new(AtomicBool::new(true));
    let registry = registry(broken.clone());
    let workers: Vec<Worker> = (0..workers)
        .map(|_| Worker::start(env.client.clone(), registry.clone(), worker_config()))
        .collect();
    for w in &workers {
        w.wait_until_settled().await;
    }
    env.write(&Cell::new("docs", "a", "body"), "body of a")
        .await;
    poll(PATIENCE, "a dead letter", || async {
        DeadLetter::list(&env.client).await.expect("list").len() == 1
    })
    .await;
    broken.store(false, Ordering::SeqCst);
    let letters = observers::admin::dead_letters(&env.client)
        .await
        .expect("letters");
    (workers, letters[0].id.clone())
}

/// One HTTP/1.1 request over a fresh connection: (status, content type, body).
async fn http(
    addr: &str,
    method: &str,
    path: &str,
    json_body: Option<&str>,
) -> (u16, String, String) {
    let mut socket = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut request = format!("{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n");
    if method == "POST" {
        // The dashboard's own page (a POST from any other origin is refused).
        request.push_str(&format!("origin: http://{addr}\r\n"));
    }
    if let Some(body) = json_body {
        request.push_str(&format!(
            "content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        ));
    } else {
        request.push_str("content-length: 0\r\n\r\n");
    }
    socket.write_all(request.as_bytes()).await.expect("send");
    let mut response = String::new();
    socket.read_to_string(&mut response).await.expect("read");
    let (head, body) = response.split_once("\r\n\r\n").expect("a response head");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status code");
    let lower = head.to_ascii_lowercase();
    assert!(!lower.contains("transfer-encoding: chunked"), "{head}");
    let content_type = lower
        .lines()
        .find_map(|l| l.strip_prefix("content-type: "))
        .unwrap_or_default()
        .to_string();
    (status, content_type, body.to_string())
}

async fn get_json(addr: &str, path: &str) -> Value {
    let (status, content_type, body) = http(addr, "GET", path, None).await;
    assert_eq!(status, 200, "GET {path}: {body}");
    assert_eq!(content_type, "application/json", "GET {path}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
}

/// `status --json` without the figures that move between two reads (ages, the oracle window).
fn steady(mut v: Value) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(map) => {
                map.retain(|k, _| !k.ends_with("_ms") && k != "window_end");
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut v);
    v
}

async fn stop(mut dashboard: tokio::process::Child) {
    percolator_cli::testkit::sigterm(dashboard.id().expect("pid")).expect("SIGTERM");
    let status = tokio::time::timeout(PATIENCE, dashboard.wait())
        .await
        .expect("the dashboard stops after SIGTERM")
        .expect("wait");
    assert!(
        status.success(),
        "percolator-ctl serve exited with {status}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_serves_status_metrics_and_replays_only_with_a_confirmation() {
    let env = Env::start("dash-api").await;
    let (workers, id) = with_a_dead_letter(&env, 1).await;
    let (dashboard, addr) = env.dashboard().await;

    // /api/status is `status --json` (read again while a figure moved between the two reads,
    // e.g. a heartbeat late on a loaded machine).
    let started = Instant::now();
    let api = loop {
        let cli = env
            .ctl()
            .args(["--json", "status"])
            .output()
            .await
            .expect("status");
        assert!(cli.status.success(), "{cli:?}");
        let cli: Value = serde_json::from_slice(&cli.stdout).expect("status json");
        let api = get_json(&addr, "/api/status").await;
        if steady(api.clone()) == steady(cli.clone()) {
            break api;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "/api/status differs from status --json:\n{api}\n{cli}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(api["dead_letters"], 1, "{api}");
    assert_eq!(api["workers"][0]["id"], workers[0].id(), "{api}");

    // The page and its assets are served from the binary.
    let (status, content_type, page) = http(&addr, "GET", "/", None).await;
    assert_eq!(
        (status, content_type.as_str()),
        (200, "text/html; charset=utf-8")
    );
    assert!(page.contains("<canvas id=\"chart-throughput\""), "{page}");
    let (status, _, script) = http(&addr, "GET", "/app.js", None).await;
    assert_eq!(status, 200);
    assert!(script.contains("/api/dead-letters/confirm"));

    // /metrics: the same gauges as Prometheus metrics (OpenMetrics text).
    let (status, content_type, metrics) = http(&addr, "GET", "/metrics", None).await;
    assert_eq!(
        (status, content_type.as_str()),
        (200, percolator_metrics::CONTENT_TYPE)
    );
    assert!(
        metrics
            .lines()
            .any(|l| l == "percolator_dead_letters{namespace=\"dash-api\"} 1.0"),
        "{metrics}"
    );
    // (Whether the worker counts as live depends on how late its heartbeat is.)
    let worker = format!(
        "percolator_worker_heartbeat_age_seconds{{namespace=\"dash-api\",worker=\"{}\"}} ",
        workers[0].id()
    );
    assert!(metrics.lines().any(|l| l.starts_with(&worker)), "{metrics}");
    assert!(metrics.contains("# TYPE percolator_workers gauge\npercolator_workers{namespace=\"dash-api\",state=\"live\"} "), "{metrics}");

    // History: samples accumulate.
    poll(PATIENCE, "two samples", || async {
        get_json(&addr, "/api/history").await["samples"]
            .as_array()
            .is_some_and(|s| s.len() >= 2)
    })
    .await;

    // Writes need JSON and a token from `prepare`; `prepare` alone changes nothing.
    let (status, _, _) = http(&addr, "POST", "/api/dead-letters/confirm", None).await;
    assert_eq!(status, 415);
    let (status, _, body) = http(
        &addr,
        "POST",
        "/api/dead-letters/confirm",
        Some(r#"{"token":"guess"}"#),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let (status, _, body) = http(
        &addr,
        "POST",
        "/api/dead-letters/prepare",
        Some(&format!(r#"{{"action":"replay","id":"{}"}}"#, &id[..8])),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let prepared: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(prepared["letters"][0]["id"], id.as_str(), "{prepared}");
    let listed = get_json(&addr, "/api/dead-letters").await;
    assert_eq!(
        listed["dead_letters"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );

    let confirm = format!(
        r#"{{"token":"{}"}}"#,
        prepared["token"].as_str().expect("token")
    );
    let (status, _, body) = http(&addr, "POST", "/api/dead-letters/confirm", Some(&confirm)).await;
    assert_eq!(status, 200, "{body}");
    let done: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(done["done"][0]["replayed"][0]["id"], id.as_str(), "{done}");
    // A token is used once.
    let (status, _, _) = http(&addr, "POST", "/api/dead-letters/confirm", Some(&confirm)).await;
    assert_eq!(status, 400);

    poll(PATIENCE, "the replayed observer ran", || async {
        env.read(&Cell::new("docs", "a", "len")).await.as_deref() == Some("9")
    })
    .await;
    assert!(DeadLetter::list(&env.client)
        .await
        .expect("list")
        .is_empty());
    stop(dashboard).await;
}

#[test]
fn serve_stops_cleanly_when_signalled_at_readiness() {
    let done = percolator_cli::testkit::sigterm_at_readiness(
        std::process::Command::new(env!("CARGO_BIN_EXE_percolator-ctl")).args([
            "--store",
            "memory",
            "serve",
            "--listen",
            "127.0.0.1:0",
        ]),
        percolator_cli::testkit::Stream::Stdout,
        "dashboard listening on http://",
    );
    assert!(done.status.success(), "{done:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_workers_and_dead_letters_and_replays_after_a_confirmation() {
    let Some(chromium) = cdp::find_chromium() else {
        panic!(
            "this test needs a headless Chromium: install it with `apt-get install -y chromium` \
             (Debian/Ubuntu; .ci/run does so), or set CHROMIUM=/path/to/chromium"
        );
    };
    let env = Arc::new(Env::start("dash-page").await);
    let (workers, id) = with_a_dead_letter(&env, 2).await;
    let ids: Vec<String> = workers.iter().map(|w| w.id().to_string()).collect();

    // Steady work for the throughput chart, until the test ends.
    let writing = Arc::new(AtomicBool::new(true));
    let writer = tokio::spawn({
        let (env, writing) = (env.clone(), writing.clone());
        async move {
            let mut n = 0;
            while writing.load(Ordering::SeqCst) {
                for _ in 0..5 {
                    n += 1;
                    env.write(&Cell::new("docs", format!("t{n}"), "title"), "a title")
                        .await;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });
    let (dashboard, addr) = env.dashboard().await;

    let screenshot = std::env::var_os("DASHBOARD_SCREENSHOT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard.png"));
    let client = env.client.clone();
    let oracle_addr = env.oracle_addr.clone();
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let mut browser = cdp::Browser::launch(&chromium, 1280, 1000);
        browser.open(&format!("http://{addr}/")).expect("open the page");
        // Lines of a few samples each (the throughput needs two samples for its first point).
        for (chart, points) in [("chart-backlog", 5), ("chart-age", 5), ("chart-throughput", 3)] {
            browser.wait_for(
                &format!("{chart} to draw {points} points"),
                &format!(
                    "Number(document.getElementById('{chart}').dataset.points || 0) >= {points}"
                ),
                PATIENCE,
            );
        }
        for worker in &ids {
            browser.wait_for(
                &format!("worker {worker} shown live"),
                &format!(
                    "[...document.querySelectorAll('#workers tbody tr')].some(r => r.dataset.key === '{worker}' && r.innerText.includes('live'))"
                ),
                PATIENCE,
            );
        }
        // The event-time and quarantine sections render (none of either in this store).
        browser.wait_for(
            "the event-time and quarantine sections rendered",
            "document.getElementById('event-time-total').innerText === '0 timed columns' && document.getElementById('quarantined-count').innerText === '0 not loaded to their end'",
            PATIENCE,
        );
        let row = format!("#dead-letters tbody tr[data-key='{id}']");
        browser.wait_for(
            "the dead letter shown",
            &format!("!!document.querySelector(\"{row}\") && document.querySelector(\"{row}\").innerText.includes('broken on purpose')"),
            PATIENCE,
        );
        browser.wait_for(
            "the oracle leader shown",
            &format!("document.getElementById('leader').innerText.includes('{oracle_addr}')"),
            PATIENCE,
        );

        // Replay asks first: nothing happens until the confirmation.
        browser
            .eval(&format!("document.querySelector(\"{row} button.replay\").click()"))
            .expect("click replay");
        browser.wait_for(
            "the confirmation",
            "!document.getElementById('confirm').hidden && document.getElementById('confirm-text').innerText.includes('docs/a/body')",
            PATIENCE,
        );
        let letters = handle.block_on(DeadLetter::list(&client)).expect("list");
        assert_eq!(letters.len(), 1, "replayed before the confirmation");
        let png = browser.screenshot().expect("screenshot");
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        std::fs::write(&screenshot, png).expect("saving the screenshot");
        eprintln!("screenshot: {}", screenshot.display());

        browser.eval("document.getElementById('confirm-yes').click()").expect("confirm");
        browser.wait_for(
            "the replay reported",
            "document.getElementById('message').innerText.includes('replayed 1')",
            PATIENCE,
        );
        browser.wait_for(
            "the dead letter gone from the page",
            &format!("!document.querySelector(\"{row}\") && document.getElementById('letters-count').innerText === '0'"),
            PATIENCE,
        );
    })
    .await
    .expect("browser session");

    poll(PATIENCE, "the replayed observer ran", || async {
        env.read(&Cell::new("docs", "a", "len")).await.as_deref() == Some("9")
    })
    .await;
    writing.store(false, Ordering::SeqCst);
    writer.await.expect("writer");
    stop(dashboard).await;
    drop(workers);
}

/// A dashboard started before the application declared its table ids (a supervisor starting
/// both at once) goes on once they appear, reading the application's keys with the new map:
/// a notification written through it shows in the backlog (issue 39, item 8; it used to stop
/// with "the namespace's table ids changed ... restart it").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_reloads_the_table_ids_when_they_appear() {
    let env = Env::start("dash-ids").await;
    let (mut dashboard, addr) = env.dashboard().await;
    let ids = percolator::codec::TableIds::new([("docs", 1)]).expect("ids");
    assert!(dashboard.try_wait().expect("try_wait").is_none());
    let app = percolator_cli::store::open_client(
        &env.spec,
        &env.namespace,
        std::slice::from_ref(&env.oracle_addr),
        percolator::kv::Durability::Process,
        Some(&ids),
    )
    .await
    .expect("the application's client declares its map");
    app.observe_column("docs", "body");
    let txn = app.begin().await.expect("begin");
    txn.set(Cell::new("docs", "a", "body"), "body of a");
    txn.commit().await.expect("commit");
    // (A dashboard that stopped refuses the connection: `get_json` fails.)
    poll(PATIENCE, "the backlog under the new map", || async {
        let status = get_json(&addr, "/api/status").await;
        status["backlog"]["columns"]
            .as_array()
            .is_some_and(|columns| {
                columns
                    .iter()
                    .any(|c| c["table"] == "docs" && c["column"] == "body")
            })
    })
    .await;
    stop(dashboard).await;
}
