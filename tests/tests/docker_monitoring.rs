//! Offline checks of the compose cluster's monitoring profile (no Docker engine needed):
//! - `docker/prometheus/prometheus.yml` parses, and its scrape targets are exactly the
//!   metrics ports of the shared network namespace: every `--metrics-addr` of the compose
//!   file's commands (each parsed by its binary's clap types in docker_files.rs), PD's client
//!   URL and TiKV's status address, each as `127.0.0.1:PORT` and published by `net`;
//! - Prometheus and Grafana mount these files where their commands and provisioning read them;
//! - the Grafana provisioning files parse: the datasource is that Prometheus (on its listen
//!   port), the dashboard provider reads the directory the dashboards are mounted at;
//! - every dashboard JSON parses, each panel queries the provisioned datasource with PromQL
//!   that names metrics (photon/tests/dashboard_metrics.rs checks those names against what the
//!   binaries export).

use serde_yaml::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn docker_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docker")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn yaml(path: &Path) -> Value {
    serde_yaml::from_str(&read(path))
        .unwrap_or_else(|e| panic!("{} is not valid YAML: {e}", path.display()))
}

/// The compose file's services, merge keys applied.
fn services() -> BTreeMap<String, Value> {
    let mut doc = yaml(&docker_dir().join("docker-compose.yml"));
    doc.apply_merge().expect("merge keys");
    doc["services"]
        .as_mapping()
        .expect("services")
        .iter()
        .map(|(k, v)| (k.as_str().expect("name").to_string(), v.clone()))
        .collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_sequence()
        .into_iter()
        .flatten()
        .filter_map(|x| x.as_str().map(String::from))
        .collect()
}

fn image(svc: &Value) -> &str {
    svc["image"].as_str().unwrap_or("")
}

/// `--name=value` or `--name value` in an argument list.
fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter().enumerate().find_map(|(i, a)| {
        if a == name {
            args.get(i + 1).map(String::as_str)
        } else {
            a.strip_prefix(name)?.strip_prefix('=')
        }
    })
}

fn port(addr: &str) -> u16 {
    let addr = addr.rsplit("://").next().unwrap_or(addr);
    addr.rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .unwrap_or_else(|| panic!("{addr}: no port"))
}

/// The ports that serve `/metrics` in the namespace, with the service and flag.
fn metrics_ports() -> BTreeMap<u16, String> {
    let mut out = BTreeMap::new();
    for (name, svc) in services() {
        let args = strings(&svc["command"]);
        let flags: &[&str] = if image(&svc).starts_with("pingcap/pd:") {
            &["--client-urls"]
        } else if image(&svc).starts_with("pingcap/tikv:") {
            &["--status-addr"]
        } else {
            &["--metrics-addr"]
        };
        for f in flags {
            if let Some(value) = flag(&args, f) {
                let previous = out.insert(port(value), format!("{name} {f}"));
                assert!(previous.is_none(), "{name}: port of {f} used twice");
            }
        }
    }
    out
}

/// The ports `net` publishes on the host's loopback.
fn published() -> BTreeSet<u16> {
    let services = services();
    let holder = services.get("net").expect("the namespace holder `net`");
    strings(&holder["ports"])
        .iter()
        .map(|p| port(p.rsplit_once(':').map_or(p.as_str(), |(_, c)| c)))
        .collect()
}

/// The host file a service mounts at `target`.
fn mounted_at(svc: &Value, target: &str) -> PathBuf {
    strings(&svc["volumes"])
        .iter()
        .find_map(|m| {
            let parts: Vec<&str> = m.split(':').collect();
            (parts.get(1) == Some(&target)).then(|| docker_dir().join(parts[0]))
        })
        .unwrap_or_else(|| panic!("nothing is mounted at {target}"))
}

fn service_of(image_repository: &str) -> (String, Value) {
    services()
        .into_iter()
        .find(|(_, svc)| image(svc).starts_with(&format!("{image_repository}:")))
        .unwrap_or_else(|| panic!("no {image_repository} service"))
}

#[test]
fn prometheus_scrapes_exactly_the_metrics_ports_of_the_namespace() {
    let (name, prometheus) = service_of("prom/prometheus");
    let args = strings(&prometheus["command"]);
    let config_path = flag(&args, "--config.file").expect("--config.file");
    let config = yaml(&mounted_at(&prometheus, config_path));
    assert_eq!(
        mounted_at(&prometheus, config_path),
        docker_dir().join("./prometheus/prometheus.yml")
    );
    let published = published();
    let listen = port(flag(&args, "--web.listen-address").expect("--web.listen-address"));
    assert!(
        published.contains(&listen),
        "{name}: {listen} is not published"
    );
    let ports = metrics_ports();
    assert!(ports.len() >= 5, "metrics ports: {ports:?}");
    let mut scraped = BTreeSet::new();
    let jobs = config["scrape_configs"]
        .as_sequence()
        .expect("scrape_configs");
    for job in jobs {
        let job_name = job["job_name"].as_str().expect("job_name");
        let path = job["metrics_path"].as_str().unwrap_or("/metrics");
        assert_eq!(path, "/metrics", "{job_name}: every server serves /metrics");
        for sc in job["static_configs"].as_sequence().expect("static_configs") {
            for target in strings(&sc["targets"]) {
                let (host, p) = target.rsplit_once(':').expect("HOST:PORT");
                assert_eq!(
                    host, "127.0.0.1",
                    "{job_name}: {target}: the shared loopback"
                );
                let p: u16 = p.parse().expect("port");
                assert!(
                    ports.contains_key(&p),
                    "{job_name}: {target} is no metrics port of the namespace ({ports:?})"
                );
                assert!(published.contains(&p), "{target}: not published by net");
                assert!(scraped.insert(p), "{target} scraped twice");
            }
        }
    }
    let unscraped: Vec<_> = ports.iter().filter(|(p, _)| !scraped.contains(p)).collect();
    assert!(
        unscraped.is_empty(),
        "metrics ports nobody scrapes: {unscraped:?}"
    );
}

#[test]
fn grafana_provisions_the_prometheus_datasource_and_the_dashboards() {
    let (_, prometheus) = service_of("prom/prometheus");
    let prometheus_port =
        port(flag(&strings(&prometheus["command"]), "--web.listen-address").expect("listen"));
    let (name, grafana) = service_of("grafana/grafana");
    assert!(
        published().contains(&port(
            grafana["environment"]["GF_SERVER_HTTP_PORT"]
                .as_str()
                .expect("port")
        )),
        "{name}: its port is not published"
    );
    let provisioning = mounted_at(&grafana, "/etc/grafana/provisioning");
    let datasources = yaml(&provisioning.join("datasources/prometheus.yml"));
    let sources = datasources["datasources"]
        .as_sequence()
        .expect("datasources");
    assert_eq!(sources.len(), 1);
    let source = &sources[0];
    assert_eq!(source["type"].as_str(), Some("prometheus"));
    let url = source["url"].as_str().expect("url");
    assert_eq!(
        url,
        format!("http://127.0.0.1:{prometheus_port}"),
        "the datasource is the compose Prometheus"
    );
    let uid = source["uid"].as_str().expect("uid").to_string();

    let providers = yaml(&provisioning.join("dashboards/percolator.yml"));
    let provider = &providers["providers"][0];
    assert_eq!(provider["type"].as_str(), Some("file"));
    let path = provider["options"]["path"].as_str().expect("options.path");
    let dashboards = mounted_at(&grafana, path);
    let mut files = 0;
    for entry in std::fs::read_dir(&dashboards).expect("the dashboards directory") {
        let path = entry.expect("entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        files += 1;
        let dashboard: serde_json::Value = serde_json::from_str(&read(&path))
            .unwrap_or_else(|e| panic!("{}: not JSON: {e}", path.display()));
        assert!(
            dashboard["uid"].as_str().is_some(),
            "{}: a uid",
            path.display()
        );
        let panels = dashboard["panels"].as_array().expect("panels");
        let mut queries = 0;
        for panel in panels.iter().filter(|p| p["type"] != "row") {
            let title = panel["title"].as_str().unwrap_or("?");
            assert_eq!(
                panel["datasource"]["uid"].as_str(),
                Some(uid.as_str()),
                "{title}: the provisioned datasource"
            );
            let targets = panel["targets"].as_array().expect("targets");
            assert!(!targets.is_empty(), "{title}: no query");
            for t in targets {
                let expr = t["expr"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{title}: a target without expr"));
                assert!(
                    expr.contains("percolator_") || expr.contains("photon_"),
                    "{title}: {expr} names none of the project's metrics"
                );
                queries += 1;
            }
        }
        assert!(queries >= 10, "{}: {queries} queries", path.display());
    }
    assert!(files >= 1, "no dashboard JSON in {}", dashboards.display());
    // The home dashboard Grafana opens is one of them.
    if let Some(home) = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"].as_str()
    {
        assert!(home.starts_with(path), "{home} is not under {path}");
        let file = dashboards.join(Path::new(home).strip_prefix(path).expect("prefix"));
        assert!(file.is_file(), "{}: missing", file.display());
    }
}
