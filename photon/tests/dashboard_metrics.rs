//! The Grafana dashboard of the compose cluster (`docker/grafana/dashboards/percolator.json`)
//! queries only metrics the binaries export. Every metric name in its PromQL (panels and
//! template variables) must be served on `/metrics` by one of the processes the compose
//! Prometheus scrapes, here started for real: a `photon run` child process with
//! `--metrics-addr` (worker, observer, loader, GC and join metrics) on a minitikv with an
//! oracle service, the oracle's and minitikv's endpoints, and `percolator-ctl serve`'s
//! (in-process, on the same code as their binaries). A histogram counts as exported through
//! its `_bucket`, `_sum` and `_count` series, a counter through `_total`.

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn dashboard() -> serde_json::Value {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docker/grafana/dashboards/percolator.json");
    let text = std::fs::read_to_string(&path).expect("the dashboard JSON");
    serde_json::from_str(&text).expect("the dashboard is JSON")
}

/// Every PromQL expression of the dashboard: panel targets (rows' panels included) and
/// template variables' queries.
fn expressions(dashboard: &serde_json::Value) -> Vec<String> {
    fn panels(list: &serde_json::Value, out: &mut Vec<String>) {
        for panel in list.as_array().into_iter().flatten() {
            for target in panel["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = target["expr"].as_str() {
                    out.push(expr.to_string());
                }
            }
            panels(&panel["panels"], out);
        }
    }
    let mut out = Vec::new();
    panels(&dashboard["panels"], &mut out);
    for var in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let query = var["query"]["query"].as_str().or(var["query"].as_str());
        if let Some(q) = query {
            out.push(q.to_string());
        }
    }
    out
}

/// Keywords other than those of [`LABEL_LISTS`].
const KEYWORDS: &[&str] = &[
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "inf",
    "nan",
    // Aggregation operators (`sum by (...) (...)`: not followed by their parenthesis).
    "sum",
    "min",
    "max",
    "avg",
    "count",
    "group",
    "stddev",
    "stdvar",
    "topk",
    "bottomk",
    "quantile",
    "count_values",
];

/// Keywords followed by a list of labels.
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// The metric names a PromQL expression selects: identifiers outside strings, label
/// matchers (`{...}`) and ranges (`[...]`) that are not functions (followed by `(`),
/// keywords and aggregations, or the labels of a `by (...)`, `on (...)` (...) clause. A
/// template query `label_values(m, label)` names `m`.
fn metric_names(expr: &str) -> BTreeSet<String> {
    if let Some(args) = expr.trim().strip_prefix("label_values(") {
        let metric = args.trim_end_matches(')').split(',').next().unwrap_or("");
        return metric_names(metric);
    }
    let mut names = BTreeSet::new();
    let chars: Vec<char> = expr.chars().collect();
    let (mut i, mut depth_brace, mut depth_bracket) = (0, 0, 0);
    let mut in_label_list = false;
    let mut previous = String::new();
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' | '`' => {
                i += 1;
                while i < chars.len() && chars[i] != c {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
                continue;
            }
            '{' => depth_brace += 1,
            '}' => depth_brace -= 1,
            '[' => depth_bracket += 1,
            ']' => depth_bracket -= 1,
            ')' if in_label_list => in_label_list = false,
            '(' if LABEL_LISTS.contains(&previous.as_str()) => in_label_list = true,
            _ => {}
        }
        if (c.is_ascii_alphabetic() || c == '_' || c == ':')
            && depth_brace == 0
            && depth_bracket == 0
        {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let next = chars[i..].iter().find(|c| !c.is_whitespace());
            let call = next == Some(&'(');
            let keyword = KEYWORDS.contains(&word.as_str()) || LABEL_LISTS.contains(&word.as_str());
            if !in_label_list && !keyword && !call {
                names.insert(word.clone());
            }
            previous = word;
            continue;
        }
        if !c.is_whitespace() && c != '(' {
            previous.clear();
        }
        i += 1;
    }
    names
}

/// The names a metrics text exports: every sample's name, and for every declared family
/// (`# TYPE name kind`, present before its first sample) the names of its samples.
fn exported(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
                continue;
            };
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" => &["_bucket", "_sum", "_count"],
                _ => &[""],
            };
            out.extend(suffixes.iter().map(|s| format!("{name}{s}")));
        } else if !line.starts_with('#') && !line.is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            out.insert(line[..end].to_string());
        }
    }
    out
}

/// `GET path` on `addr`: the status code and body, `None` if nothing answers (yet).
async fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut socket = tokio::net::TcpStream::connect(addr).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
    socket.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    socket.read_to_string(&mut response).await.ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

/// Scrapes `addr`'s `/metrics` until `ready` holds for its text (polling; the deadline
/// only ends a hung run). `ready` is also called with an empty text while nothing answers.
async fn scrape_until(addr: SocketAddr, what: &str, mut ready: impl FnMut(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        match get(addr, "/metrics").await {
            Some((200, text)) if ready(&text) => return text,
            Some(_) => {}
            None => {
                ready("");
            }
        }
        assert!(
            Instant::now() < deadline,
            "{what}: /metrics never became ready"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn free_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr")
}

/// Whether `text` has a sample of `name` with a positive value.
fn positive(text: &str, name: &str) -> bool {
    text.lines().any(|l| {
        l.starts_with(&format!("{name}{{"))
            && l.rsplit(' ')
                .next()
                .and_then(|v| v.parse::<f64>().ok())
                .is_some_and(|v| v > 0.0)
    })
}

/// Kills the child process when the test ends, however it ends.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn metric_names_are_read_from_promql() {
    let names = metric_names(
        r#"histogram_quantile(0.99, sum by (le, observer) (rate(a_bucket{namespace=~"$ns", x="b_c"}[5m]))) / on (job) group_left b_total > 0 or max without (w) (c_total) / 2"#,
    );
    assert_eq!(
        names,
        ["a_bucket", "b_total", "c_total"].map(String::from).into()
    );
    assert_eq!(
        metric_names(r#"time() - max(d_seconds{a="x"} > 0)"#),
        ["d_seconds".to_string()].into()
    );
    assert_eq!(
        metric_names("label_values(e_total, namespace)"),
        ["e_total".to_string()].into()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_queries_only_metrics_the_binaries_export() {
    let queried: BTreeSet<String> = expressions(&dashboard())
        .iter()
        .flat_map(|e| metric_names(e))
        .collect();
    assert!(queried.len() > 20, "the dashboard queries {queried:?}");
    let dir = tempfile::tempdir().unwrap();
    let server = minitikv::start(minitikv::ServerConfig::in_memory())
        .await
        .unwrap();
    let (oracle, store) = common::oracle_on(&server).await;

    // minitikv's and the oracle's endpoints, as `minitikv serve` and `oracle serve` set them up.
    let minitikv_metrics = percolator_metrics::Metrics::new();
    server.register_metrics(&minitikv_metrics);
    let (minitikv_addr, _) =
        percolator_metrics::spawn("127.0.0.1:0".parse().unwrap(), minitikv_metrics.render())
            .unwrap();
    let oracle_metrics = percolator_metrics::Metrics::new();
    oracle_server::metrics::register(&oracle_metrics, "default", oracle.stats());
    let (oracle_addr, _) =
        percolator_metrics::spawn("127.0.0.1:0".parse().unwrap(), oracle_metrics.render()).unwrap();

    // photon run, a real process, on a small generated log.
    let logs = dir.path().join("logs");
    let gen = photon::gen::GenOptions {
        queries: 300,
        files: 1,
        seed: 5,
        ..photon::gen::GenOptions::default()
    };
    photon::gen::generate(&logs, &gen).unwrap();
    let photon_addr = free_port();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_photon"))
        .args(["run", "--input"])
        .arg(&logs)
        .args(&store)
        .args(["--gc-every-secs", "1", "--metrics-addr"])
        .arg(photon_addr.to_string())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("photon run");
    let mut child = Child(child);

    // percolator-ctl serve with --metrics-addr, on the same store.
    let ctl_addr = free_port();
    let mut argv = vec!["percolator-ctl".to_string()];
    argv.extend(store.iter().cloned());
    argv.extend(["--namespace".into(), "photon".into(), "serve".into()]);
    let cli = <percolator_ctl::cli::Cli as clap::Parser>::try_parse_from(&argv).unwrap();
    let client = percolator_cli::store::open_client(
        &cli.store.store,
        &cli.store.namespace,
        &cli.store.oracle,
        cli.store.durability,
        // Photon's map, declared here too: the dashboard would otherwise race `photon run`
        // for it (and stop when the map appears, for its supervisor to restart it).
        Some(&photon::schema::table_ids()),
    )
    .await
    .unwrap();
    let config = percolator_ctl::serve::ServeConfig {
        metrics_addr: Some(ctl_addr),
        ..percolator_ctl::serve::ServeConfig::default()
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dashboard = tokio::spawn(percolator_ctl::serve::serve(
        client,
        cli.store.clone(),
        config,
        listener,
        std::future::pending(),
    ));

    let mut exports = BTreeSet::new();
    let photon_text = scrape_until(photon_addr, "photon run", |t| {
        if let Ok(Some(status)) = child.0.try_wait() {
            panic!("photon run exited early: {status}");
        }
        positive(t, "percolator_observer_runs_total")
            && positive(t, "percolator_loader_lines_total")
    })
    .await;
    // Its listener for relayed hints (on by default) counts what it refuses.
    for name in [
        "percolator_hint_datagrams_malformed_total",
        "percolator_hint_datagrams_dropped_total",
    ] {
        assert!(
            photon_text.contains(name),
            "photon run does not export {name}"
        );
    }
    exports.extend(exported(&photon_text));
    let ctl_text = scrape_until(ctl_addr, "percolator-ctl serve", |t| {
        t.contains("percolator_workers{")
    })
    .await;
    exports.extend(exported(&ctl_text));
    exports.extend(exported(
        &scrape_until(oracle_addr, "oracle", |t| t.contains("# EOF")).await,
    ));
    exports.extend(exported(
        &scrape_until(minitikv_addr, "minitikv", |t| t.contains("# EOF")).await,
    ));
    dashboard.abort();
    let missing: Vec<&String> = queried.difference(&exports).collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries metrics no binary exports: {missing:?}\nexported: {exports:?}"
    );
    // The generic names keep their prefix; Photon's own carry photon_.
    for name in &queried {
        assert!(
            name.starts_with("percolator_") || name.starts_with("photon_"),
            "{name}: expected the percolator_ or photon_ prefix"
        );
    }
    oracle.shutdown().await;
}
