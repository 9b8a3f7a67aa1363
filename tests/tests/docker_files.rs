//! Offline checks of `docker/` (no Docker engine needed, nothing is built here).
//!
//! The compose file, the TiKV and PD configurations, the Dockerfile and the README section
//! "Run on a TiKV cluster" are checked against each other and against the code:
//! - every image pulled from a registry is pinned to a version; PD and TiKV run the same one;
//! - every command (and healthcheck) of our binaries parses with that binary's own clap types
//!   (`photon::cli::Cli`, `oracle_server::cli::Cli`, `percolator_ctl::cli::Cli`,
//!   `minitikv::cli::Cli`: `try_parse_from`);
//! - every service shares one network namespace, whose holder publishes every port a server
//!   listens on for clients on the host's loopback under the same number, and every address a
//!   server advertises is `127.0.0.1` on such a port: the same server inside the containers
//!   and on the host (no two servers on one port);
//! - every `--store` parses with `percolator_cli::StoreSpec` as a TiKV store whose endpoints
//!   are PD's advertised client URLs; every `--oracle` list names exactly the oracle replicas,
//!   each under the address it advertises (clients follow redirects only to listed addresses);
//! - healthchecks (and the commands of pulled images) call only tools the images contain;
//! - the `pipeline` profile holds the README walk-through's processes, in its order;
//! - `docker/tikv.toml` selects the API version the backend speaks, and the backend still
//!   connects without a keyspace (API v1);
//! - the Dockerfile builds workspace packages that provide the binaries the compose file runs;
//! - the README's "Run on a TiKV cluster" names real profiles and services, its host commands
//!   parse and reach the published addresses.

use clap::Parser;
use percolator_cli::StoreSpec;
use serde_yaml::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

// ---- files ----------------------------------------------------------------------------------

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate lives one level below the repository root")
        .to_path_buf()
}

fn docker_dir() -> PathBuf {
    repo_root().join("docker")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn read_toml(path: &Path) -> toml::Table {
    read(path)
        .parse()
        .unwrap_or_else(|e| panic!("{} is not valid TOML: {e}", path.display()))
}

/// The compose file with YAML merge keys (`<<: *percolator`) applied.
fn compose() -> Value {
    let path = docker_dir().join("docker-compose.yml");
    let mut doc: Value = serde_yaml::from_str(&read(&path))
        .unwrap_or_else(|e| panic!("{} is not valid YAML: {e}", path.display()));
    doc.apply_merge()
        .unwrap_or_else(|e| panic!("{}: bad merge key: {e}", path.display()));
    doc
}

fn services(doc: &Value) -> BTreeMap<String, Value> {
    doc["services"]
        .as_mapping()
        .expect("the compose file has a services mapping")
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().expect("service names are strings").to_string(),
                v.clone(),
            )
        })
        .collect()
}

fn strings(v: &Value, what: &str) -> Vec<String> {
    v.as_sequence()
        .unwrap_or_else(|| panic!("{what} must be a list (exec form), got {v:?}"))
        .iter()
        .map(|x| {
            x.as_str()
                .unwrap_or_else(|| panic!("{what}: every item must be a string, got {x:?}"))
                .to_string()
        })
        .collect()
}

/// The image of a service pulled from a registry (`None` for services built here).
fn registry_image(svc: &Value) -> Option<&str> {
    if svc.get("build").is_some() {
        None
    } else {
        svc["image"].as_str()
    }
}

fn is_image(svc: &Value, repository: &str) -> bool {
    registry_image(svc).is_some_and(|i| i.split(':').next() == Some(repository))
}

/// `--name=value` or `--name value` in an argument list.
fn flag_value<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let inline = format!("{name}=");
    args.iter().enumerate().find_map(|(i, a)| {
        if let Some(v) = a.strip_prefix(&inline) {
            Some(v)
        } else if a == name {
            args.get(i + 1).map(String::as_str)
        } else {
            None
        }
    })
}

/// Services the given one waits for (`depends_on` in list or mapping form), with the
/// condition (`service_started` when none is given).
fn depends_on(svc: &Value) -> BTreeMap<String, String> {
    match svc.get("depends_on") {
        None => BTreeMap::new(),
        Some(Value::Sequence(list)) => list
            .iter()
            .map(|s| (s.as_str().unwrap().to_string(), "service_started".into()))
            .collect(),
        Some(Value::Mapping(map)) => map
            .iter()
            .map(|(k, v)| {
                let condition = v["condition"].as_str().unwrap_or("service_started");
                (k.as_str().unwrap().to_string(), condition.to_string())
            })
            .collect(),
        Some(other) => panic!("depends_on must be a list or a mapping, got {other:?}"),
    }
}

/// Short-syntax volume mounts `SOURCE:TARGET[:MODE]` of a service, as (source, target).
fn mounts(svc: &Value) -> Vec<(String, String)> {
    match svc.get("volumes") {
        None => vec![],
        Some(v) => strings(v, "volumes")
            .into_iter()
            .map(|m| {
                let parts: Vec<&str> = m.split(':').collect();
                assert!(
                    (2..=3).contains(&parts.len()),
                    "volume {m:?}: expected SOURCE:TARGET[:MODE]"
                );
                (parts[0].to_string(), parts[1].to_string())
            })
            .collect(),
    }
}

fn is_bind_mount(source: &str) -> bool {
    source.starts_with('.') || source.starts_with('/')
}

// ---- our CLIs --------------------------------------------------------------------------------

/// The binaries of the project's image; their command lines are parsed with their own clap
/// types (`photon::cli`, `oracle_server::cli`, `percolator_ctl::cli`, `minitikv::cli`).
const OUR_BINARIES: [&str; 4] = ["oracle", "photon", "percolator-ctl", "minitikv"];

/// A command line of one of our binaries, parsed by that binary's own clap types, with the
/// values the checks below look at.
#[derive(Debug)]
struct Invocation {
    /// `service (command)` or `service (healthcheck)`, for messages.
    origin: String,
    service: String,
    bin: String,
    /// The subcommand clap chose (global flags may come before it).
    sub: String,
    /// The store it opens (its `--store`, or that flag's default).
    store: Option<StoreSpec>,
    /// The oracle addresses it asks (`--oracle`; empty: none given).
    oracle: Vec<String>,
    /// `oracle serve --listen`, `--advertise`.
    listen: Option<String>,
    advertise: Option<String>,
    /// `photon work --pipeline`, `--worker`.
    pipeline: Option<String>,
    worker: Option<String>,
    /// `--metrics-addr` (every long-running binary has it).
    metrics: Option<SocketAddr>,
    /// The directory of logs it writes or reads (`photon gen --out`, `load`/`verify INPUT`).
    log_dir: Option<PathBuf>,
}

/// Parses `argv` with the clap types of the binary it names (`argv[0]`), exactly as the
/// binary would; `Err` is clap's message.
fn parse_invocation(service: &str, origin: &str, argv: &[String]) -> Result<Invocation, String> {
    let Some(bin) = argv.first().cloned() else {
        return Err("empty command line".into());
    };
    let mut inv = Invocation {
        origin: format!("{service} ({origin})"),
        service: service.to_string(),
        bin: bin.clone(),
        sub: String::new(),
        store: None,
        oracle: Vec::new(),
        listen: None,
        advertise: None,
        pipeline: None,
        worker: None,
        metrics: None,
        log_dir: None,
    };
    match bin.as_str() {
        "photon" => {
            use photon::cli::{Cli, Command};
            let cli = Cli::try_parse_from(argv).map_err(|e| e.to_string())?;
            let store = match cli.command {
                Command::Gen(args) => {
                    inv.log_dir = Some(args.out);
                    None
                }
                Command::Load { store, input, .. } | Command::Verify { store, input, .. } => {
                    inv.log_dir = Some(input);
                    Some(store)
                }
                Command::Work {
                    store,
                    work,
                    metrics_addr,
                    ..
                } => {
                    inv.pipeline = Some(work.pipeline);
                    inv.worker = work.worker;
                    inv.metrics = metrics_addr;
                    Some(store)
                }
                Command::Run(args) => {
                    inv.log_dir = Some(args.input);
                    inv.pipeline = Some(args.work.pipeline);
                    inv.worker = args.work.worker;
                    inv.metrics = args.metrics_addr;
                    Some(args.store)
                }
                Command::Export { store, .. } | Command::Gc { store, .. } => Some(store),
                Command::Demo { store, .. } => {
                    inv.store = store;
                    None
                }
            };
            if let Some(store) = store {
                inv.store = Some(store.store);
                inv.oracle = store.oracle;
            }
        }
        "oracle" => {
            use oracle_server::cli::{Cli, Command};
            match Cli::try_parse_from(argv)
                .map_err(|e| e.to_string())?
                .command
            {
                Command::Serve(args) => {
                    inv.store = Some(args.store);
                    inv.listen = Some(args.listen);
                    inv.advertise = args.advertise;
                    inv.metrics = args.metrics_addr;
                }
                Command::Get(args) => inv.oracle = args.oracle,
            }
        }
        "percolator-ctl" => {
            // --store and --oracle are global: they may come before the verb.
            let cli = percolator_ctl::cli::Cli::try_parse_from(argv).map_err(|e| e.to_string())?;
            inv.store = Some(cli.store.store);
            inv.oracle = cli.store.oracle;
            if let percolator_ctl::cli::Command::Serve(args) = cli.command {
                inv.listen = Some(args.listen.to_string());
                inv.metrics = args.metrics_addr;
            }
        }
        "minitikv" => {
            use minitikv::cli::{Cli, Command};
            match Cli::try_parse_from(argv)
                .map_err(|e| e.to_string())?
                .command
            {
                Command::Serve {
                    listen,
                    advertise,
                    metrics_addr,
                    ..
                } => {
                    inv.listen = Some(listen.to_string());
                    inv.advertise = advertise;
                    inv.metrics = metrics_addr;
                }
            }
        }
        other => {
            return Err(format!(
                "{other} is not one of our binaries {OUR_BINARIES:?}"
            ))
        }
    }
    inv.sub = subcommand_name(&bin, argv).unwrap_or_default();
    Ok(inv)
}

/// The subcommand clap picks from `argv` (global flags may precede it), for a command line
/// that parsed.
fn subcommand_name(bin: &str, argv: &[String]) -> Option<String> {
    use clap::CommandFactory;
    let command = match bin {
        "photon" => photon::cli::Cli::command(),
        "oracle" => oracle_server::cli::Cli::command(),
        "percolator-ctl" => percolator_ctl::cli::Cli::command(),
        "minitikv" => minitikv::cli::Cli::command(),
        _ => return None,
    };
    let matches = command.try_get_matches_from(argv).ok()?;
    matches.subcommand_name().map(String::from)
}

/// Every command and exec-form healthcheck in the compose file that runs one of our
/// binaries, parsed. Panics on any that does not parse, or on a service of our image whose
/// command is not in exec form or runs something else.
fn invocations(doc: &Value) -> Vec<Invocation> {
    let ours = OUR_BINARIES;
    let mut out = Vec::new();
    for (name, svc) in services(doc) {
        if svc.get("build").is_some() {
            let argv = strings(&svc["command"], &format!("{name}: command"));
            assert!(
                argv.first().is_some_and(|b| ours.contains(&b.as_str())),
                "{name}: the project's image has no entrypoint; the command must start with \
                 one of {ours:?}, got {argv:?}"
            );
            out.push(
                parse_invocation(&name, "command", &argv)
                    .unwrap_or_else(|e| panic!("{name}: command {argv:?}: {e}")),
            );
        }
        if let Some(test) = svc.get("healthcheck").and_then(|h| h.get("test")) {
            if let Value::Sequence(_) = test {
                let argv = strings(test, &format!("{name}: healthcheck test"));
                if argv[0] == "CMD" && argv.get(1).is_some_and(|b| ours.contains(&b.as_str())) {
                    out.push(
                        parse_invocation(&name, "healthcheck", &argv[1..])
                            .unwrap_or_else(|e| panic!("{name}: healthcheck {argv:?}: {e}")),
                    );
                }
            }
        }
    }
    out
}

// ---- compose: images ------------------------------------------------------------------------

/// `vMAJOR.MINOR.PATCH` (what PingCAP tags releases with).
fn release_version(tag: &str) -> Option<(u32, u32, u32)> {
    let mut parts = tag.strip_prefix('v')?.split('.');
    let v = (
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
    );
    parts.next().is_none().then_some(v)
}

#[test]
fn every_registry_image_is_pinned_and_pd_matches_tikv() {
    let doc = compose();
    let runtime = dockerfile_runtime_image();
    let mut versions = BTreeMap::new();
    for (name, svc) in services(&doc) {
        match registry_image(&svc) {
            // The Dockerfile's runtime base: a Debian release (codename), checked there.
            Some(image) if image == runtime => {}
            None => assert!(
                svc["build"]["dockerfile"].as_str().is_some(),
                "{name}: a service without a pulled image must be built from a Dockerfile"
            ),
            Some(image) => {
                let (repository, tag) = image
                    .rsplit_once(':')
                    .unwrap_or_else(|| panic!("{name}: image {image} has no tag (means latest)"));
                assert!(
                    !tag.eq_ignore_ascii_case("latest") && tag.chars().any(|c| c.is_ascii_digit()),
                    "{name}: image {image} is not pinned to a version"
                );
                if repository == "pingcap/pd" || repository == "pingcap/tikv" {
                    let v = release_version(tag).unwrap_or_else(|| {
                        panic!("{name}: {image}: expected an exact release tag vX.Y.Z")
                    });
                    versions.insert(repository.to_string(), v);
                }
            }
        }
    }
    let pd = versions
        .get("pingcap/pd")
        .expect("a PD service (pingcap/pd)");
    let tikv = versions
        .get("pingcap/tikv")
        .expect("a TiKV service (pingcap/tikv)");
    assert_eq!(pd, tikv, "PD and TiKV must run the same release");
}

#[test]
fn project_services_build_the_repository_dockerfile() {
    let doc = compose();
    for (name, svc) in services(&doc) {
        let Some(build) = svc.get("build") else {
            continue;
        };
        let context = docker_dir().join(build["context"].as_str().expect("build.context"));
        let context = context.canonicalize().expect("build context exists");
        assert_eq!(
            context,
            repo_root().canonicalize().unwrap(),
            "{name}: the build context must be the repository root (the workspace)"
        );
        let dockerfile = context.join(build["dockerfile"].as_str().expect("build.dockerfile"));
        assert!(
            dockerfile.is_file(),
            "{name}: {} is missing",
            dockerfile.display()
        );
    }
}

// ---- compose: the cluster --------------------------------------------------------------------

/// PD's advertised client addresses (`host:port`), which clients reach PD at.
fn pd_client_addresses(doc: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (name, svc) in services(doc) {
        if !is_image(&svc, "pingcap/pd") {
            continue;
        }
        let args = strings(&svc["command"], &format!("{name}: command"));
        let urls = flag_value(&args, "--advertise-client-urls")
            .unwrap_or_else(|| panic!("{name}: --advertise-client-urls is needed in Docker"));
        for url in urls.split(',') {
            out.insert(url.trim().trim_start_matches("http://").to_string());
        }
    }
    assert!(!out.is_empty(), "no PD service found");
    out
}

/// The file on the host that a service mounts at `target`, and the mount's source.
fn bind_mount_source(name: &str, svc: &Value, target: &str) -> PathBuf {
    let (source, _) = mounts(svc)
        .into_iter()
        .find(|(_, t)| t == target)
        .unwrap_or_else(|| panic!("{name}: nothing is mounted at {target}"));
    assert!(
        is_bind_mount(&source),
        "{name}: {target} must come from a file in docker/"
    );
    docker_dir().join(source)
}

/// Checks that `data_dir` lies on a named volume declared at the top level.
fn assert_on_named_volume(doc: &Value, name: &str, svc: &Value, data_dir: &str) {
    let declared = doc["volumes"].as_mapping().expect("top-level volumes");
    let on_volume = mounts(svc).into_iter().any(|(source, target)| {
        !is_bind_mount(&source)
            && declared.contains_key(source.as_str())
            && Path::new(data_dir).starts_with(&target)
    });
    assert!(
        on_volume,
        "{name}: its data directory {data_dir} must be on a declared named volume"
    );
}

#[test]
fn pd_and_tikv_are_wired_to_each_other_their_configs_and_volumes() {
    let doc = compose();
    let pd_addrs = pd_client_addresses(&doc);
    let all = services(&doc);
    let mut tikv_services = 0;
    for (name, svc) in &all {
        let pd = is_image(svc, "pingcap/pd");
        let tikv = is_image(svc, "pingcap/tikv");
        if !pd && !tikv {
            continue;
        }
        let args = strings(&svc["command"], &format!("{name}: command"));
        let data_dir = flag_value(&args, "--data-dir").expect("--data-dir");
        assert_on_named_volume(&doc, name, svc, data_dir);
        let config = flag_value(&args, "--config").expect("--config");
        let file = bind_mount_source(name, svc, config);
        let expected = if pd { "pd.toml" } else { "tikv.toml" };
        assert_eq!(
            file,
            docker_dir().join(expected),
            "{name}: --config must be docker/{expected}"
        );
        assert!(
            svc.get("healthcheck").is_some(),
            "{name}: needs a healthcheck"
        );
        if tikv {
            tikv_services += 1;
            for endpoint in flag_value(&args, "--pd").expect("--pd").split(',') {
                assert!(
                    pd_addrs.contains(endpoint),
                    "{name}: --pd {endpoint} is not PD"
                );
            }
            let waits_for_pd = depends_on(svc).iter().any(|(dep, condition)| {
                is_image(&all[dep], "pingcap/pd") && condition == "service_healthy"
            });
            assert!(waits_for_pd, "{name}: must wait for a healthy PD");
        }
    }
    assert!(tikv_services > 0, "no TiKV service");
    let pd = read_toml(&docker_dir().join("pd.toml"));
    let replicas = pd["replication"]["max-replicas"]
        .as_integer()
        .expect("pd.toml: replication.max-replicas");
    assert!(
        (1..=tikv_services).contains(&replicas),
        "pd.toml: max-replicas = {replicas} but the compose file runs {tikv_services} TiKV store(s)"
    );
}

// ---- compose: one network namespace, advertised as 127.0.0.1 -----------------------------------

/// A server socket of the shared network namespace, from a service's command line.
#[derive(Debug)]
struct Listener {
    service: String,
    /// The flag it comes from, for messages.
    flag: &'static str,
    addr: SocketAddr,
}

/// An address a server hands to its clients (through PD, or an oracle's redirect).
#[derive(Debug)]
struct Advertised {
    service: String,
    flag: &'static str,
    host: String,
    port: u16,
    /// Only servers of the namespace use it (PD's peer URL): it need not be published.
    internal: bool,
}

/// `http://host:port` or `host:port` as (host, port).
fn host_port(text: &str) -> (String, u16) {
    let addr = text.trim().trim_start_matches("http://");
    let (host, port) = addr
        .rsplit_once(':')
        .unwrap_or_else(|| panic!("{text}: expected HOST:PORT"));
    let port = port.parse().unwrap_or_else(|e| panic!("{text}: port: {e}"));
    (host.to_string(), port)
}

fn socket(text: &str, what: &str) -> SocketAddr {
    let (host, port) = host_port(text);
    format!("{host}:{port}")
        .parse()
        .unwrap_or_else(|e| panic!("{what}: {text} is not IP:PORT: {e}"))
}

/// The service whose network namespace every other service joins (`network_mode:
/// service:NAME`); panics unless there is exactly one and every other service joins it.
fn namespace_holder(doc: &Value) -> String {
    let all = services(doc);
    let holders: BTreeSet<&String> = all
        .iter()
        .filter(|(_, svc)| svc.get("network_mode").is_none())
        .map(|(name, _)| name)
        .collect();
    assert_eq!(
        holders.len(),
        1,
        "exactly one service holds the network namespace (no network_mode), got {holders:?}"
    );
    let holder = holders.into_iter().next().unwrap().clone();
    for (name, svc) in &all {
        if *name == holder {
            continue;
        }
        assert_eq!(
            svc["network_mode"].as_str(),
            Some(format!("service:{holder}").as_str()),
            "{name}: must join the namespace of {holder}, where every advertised 127.0.0.1 \
             address is the same server"
        );
        assert!(
            svc.get("ports").is_none(),
            "{name}: a service in another's namespace cannot publish ports; {holder} does"
        );
    }
    holder
}

/// The ports the namespace holder publishes, each on the host's loopback under the same
/// number (so `127.0.0.1:PORT` is one server inside and outside).
fn published_ports(doc: &Value) -> BTreeSet<u16> {
    let holder = namespace_holder(doc);
    let all = services(doc);
    let mut out = BTreeSet::new();
    for spec in strings(&all[&holder]["ports"], &format!("{holder}: ports")) {
        let parts: Vec<&str> = spec.split(':').collect();
        let [ip, host, container] = parts[..] else {
            panic!("{holder}: port {spec:?}: expected 127.0.0.1:HOST_PORT:CONTAINER_PORT")
        };
        assert_eq!(
            ip, "127.0.0.1",
            "{holder}: {spec}: publish on the host's loopback only"
        );
        assert_eq!(
            host, container,
            "{holder}: {spec}: the host port must be the container port, or the advertised \
             127.0.0.1:{container} is another port on the host"
        );
        let port: u16 = host
            .parse()
            .unwrap_or_else(|e| panic!("{holder}: {spec}: {e}"));
        assert!(out.insert(port), "{holder}: {port} published twice");
    }
    out
}

/// The URLs the PD and TiKV services give the flags `flags(is_pd)` names, each flag with
/// a tag: (service, flag, tag, URL), one a comma-separated value. A flag missing panics.
fn tidb_urls<T: Copy + 'static>(
    doc: &Value,
    flags: impl Fn(bool) -> &'static [(&'static str, T)],
) -> Vec<(String, &'static str, T, String)> {
    let mut out = Vec::new();
    for (name, svc) in services(doc) {
        let pd = is_image(&svc, "pingcap/pd");
        let tikv = is_image(&svc, "pingcap/tikv");
        if !pd && !tikv {
            continue;
        }
        let args = strings(&svc["command"], &format!("{name}: command"));
        for &(flag, tag) in flags(pd) {
            let value =
                flag_value(&args, flag).unwrap_or_else(|| panic!("{name}: {flag} is needed"));
            for url in value.split(',') {
                out.push((name.clone(), flag, tag, url.to_string()));
            }
        }
    }
    out
}

/// Every server socket of the namespace (PD's, TiKV's and our binaries').
fn listeners(doc: &Value) -> Vec<Listener> {
    let flags = |pd| -> &'static [(&'static str, ())] {
        if pd {
            &[("--client-urls", ()), ("--peer-urls", ())]
        } else {
            &[("--addr", ()), ("--status-addr", ())]
        }
    };
    let mut out: Vec<Listener> = tidb_urls(doc, flags)
        .into_iter()
        .map(|(service, flag, (), url)| Listener {
            addr: socket(&url, &format!("{service}: {flag}")),
            service,
            flag,
        })
        .collect();
    // The monitoring profile's servers: Prometheus' --web.listen-address, Grafana's
    // GF_SERVER_HTTP_ADDR and GF_SERVER_HTTP_PORT.
    for (name, svc) in services(doc) {
        if is_image(&svc, "prom/prometheus") {
            let args = strings(&svc["command"], &format!("{name}: command"));
            let value = flag_value(&args, "--web.listen-address")
                .unwrap_or_else(|| panic!("{name}: --web.listen-address is needed"));
            out.push(Listener {
                service: name.clone(),
                flag: "--web.listen-address",
                addr: socket(value, &name),
            });
        }
        if is_image(&svc, "grafana/grafana") {
            let env = |key: &str| {
                svc["environment"][key]
                    .as_str()
                    .unwrap_or_else(|| panic!("{name}: environment {key} is needed"))
                    .to_string()
            };
            let addr = format!(
                "{}:{}",
                env("GF_SERVER_HTTP_ADDR"),
                env("GF_SERVER_HTTP_PORT")
            );
            out.push(Listener {
                service: name.clone(),
                flag: "GF_SERVER_HTTP_PORT",
                addr: socket(&addr, &name),
            });
        }
    }
    for inv in invocations(doc) {
        if inv.origin.ends_with("(healthcheck)") {
            continue;
        }
        if let Some(listen) = &inv.listen {
            out.push(Listener {
                service: inv.service.clone(),
                flag: "--listen",
                addr: socket(listen, &inv.origin),
            });
        }
        if let Some(metrics) = inv.metrics {
            out.push(Listener {
                service: inv.service.clone(),
                flag: "--metrics-addr",
                addr: metrics,
            });
        }
    }
    out
}

/// Every address a server of the namespace advertises.
fn advertised(doc: &Value) -> Vec<Advertised> {
    // The tag: whether only servers of the namespace use the address.
    let flags = |pd| -> &'static [(&'static str, bool)] {
        if pd {
            &[
                ("--advertise-client-urls", false),
                ("--advertise-peer-urls", true),
            ]
        } else {
            // Without them TiKV advertises its listening address, 0.0.0.0, which it refuses.
            &[
                ("--advertise-addr", false),
                ("--advertise-status-addr", false),
            ]
        }
    };
    let mut out: Vec<Advertised> = tidb_urls(doc, flags)
        .into_iter()
        .map(|(service, flag, internal, url)| {
            let (host, port) = host_port(&url);
            Advertised {
                service,
                flag,
                host,
                port,
                internal,
            }
        })
        .collect();
    for inv in invocations(doc) {
        if inv.bin == "oracle" && inv.sub == "serve" {
            let advertise = inv.advertise.as_deref().unwrap_or_else(|| {
                panic!("{}: --advertise (else it advertises --listen)", inv.origin)
            });
            let (host, port) = host_port(advertise);
            out.push(Advertised {
                service: inv.service.clone(),
                flag: "--advertise",
                host,
                port,
                internal: false,
            });
        }
    }
    out
}

#[test]
fn every_service_shares_one_namespace_that_publishes_on_loopback() {
    let doc = compose();
    let holder = namespace_holder(&doc);
    let published = published_ports(&doc);
    assert!(!published.is_empty(), "{holder}: publishes no port");
}

#[test]
fn no_two_servers_of_the_namespace_listen_on_one_port() {
    let doc = compose();
    let mut by_port: BTreeMap<u16, String> = BTreeMap::new();
    for l in listeners(&doc) {
        let this = format!("{} {} {}", l.service, l.flag, l.addr);
        if let Some(other) = by_port.insert(l.addr.port(), this.clone()) {
            panic!("{this} and {other}: one port, one network namespace");
        }
    }
}

#[test]
fn advertised_addresses_are_published_loopback_ports_with_a_listener() {
    let doc = compose();
    let published = published_ports(&doc);
    let listeners = listeners(&doc);
    for a in advertised(&doc) {
        let what = format!("{} {} {}:{}", a.service, a.flag, a.host, a.port);
        assert_eq!(
            a.host, "127.0.0.1",
            "{what}: advertise 127.0.0.1, the same server in every container of the \
             namespace and (published) on the host"
        );
        let listener = listeners
            .iter()
            .find(|l| l.service == a.service && l.addr.port() == a.port)
            .unwrap_or_else(|| panic!("{what}: the service listens on no such port"));
        if a.internal {
            continue;
        }
        assert!(
            published.contains(&a.port),
            "{what}: port {} is not published, so a client on the host cannot follow it",
            a.port
        );
        assert!(
            listener.addr.ip().is_unspecified(),
            "{what}: {} {} must listen on 0.0.0.0: published ports arrive on the namespace's \
             network interface, not on its loopback",
            listener.flag,
            listener.addr
        );
    }
    // Every server that listens for clients beyond the loopback is reachable from the host.
    for l in &listeners {
        assert!(
            !l.addr.ip().is_unspecified() || published.contains(&l.addr.port()),
            "{} {} {}: not published",
            l.service,
            l.flag,
            l.addr
        );
    }
    // Nothing is published into a port where nobody listens for the host.
    for port in &published {
        assert!(
            listeners
                .iter()
                .any(|l| l.addr.port() == *port && l.addr.ip().is_unspecified()),
            "port {port} is published but no server listens on 0.0.0.0:{port}"
        );
    }
    // Servers of the namespace reach PD on its advertised address.
    let pd = pd_client_addresses(&doc);
    assert!(
        pd.iter().all(|a| a.starts_with("127.0.0.1:")),
        "PD advertises {pd:?}"
    );
}

#[test]
fn every_dependency_exists_and_healthy_conditions_have_healthchecks() {
    let doc = compose();
    let all = services(&doc);
    for (name, svc) in &all {
        for (dep, condition) in depends_on(svc) {
            let target = all
                .get(&dep)
                .unwrap_or_else(|| panic!("{name}: depends on unknown service {dep}"));
            assert!(
                [
                    "service_started",
                    "service_healthy",
                    "service_completed_successfully"
                ]
                .contains(&condition.as_str()),
                "{name}: unknown condition {condition}"
            );
            if condition == "service_healthy" {
                assert!(
                    target.get("healthcheck").is_some(),
                    "{name}: {dep} has no healthcheck"
                );
            }
            assert!(
                target.get("profiles").is_none() || svc.get("profiles").is_some(),
                "{name}: a service that `up` starts cannot wait for {dep}, which has a profile"
            );
        }
        for (source, _) in mounts(svc) {
            if is_bind_mount(&source) {
                let path = docker_dir().join(&source);
                assert!(
                    path.exists(),
                    "{name}: mounts {source}, which does not exist"
                );
            } else {
                assert!(
                    doc["volumes"].get(source.as_str()).is_some(),
                    "{name}: volume {source} is not declared under top-level volumes"
                );
            }
        }
    }
}

// ---- compose: our services -------------------------------------------------------------------

#[test]
fn every_store_is_the_tikv_cluster_and_services_wait_for_it() {
    let doc = compose();
    let all = services(&doc);
    let pd_addrs = pd_client_addresses(&doc);
    let invocations = invocations(&doc);
    assert!(
        invocations.iter().any(|i| i.store.is_some()),
        "no --store at all"
    );
    for inv in &invocations {
        let Some(store) = &inv.store else {
            continue;
        };
        let StoreSpec::Tikv(endpoints) = store else {
            panic!("{}: --store {store} is not the TiKV cluster", inv.origin)
        };
        for endpoint in endpoints {
            assert!(
                pd_addrs.contains(endpoint),
                "{}: --store endpoint {endpoint} is not one of PD's advertised client addresses \
                 {pd_addrs:?}",
                inv.origin
            );
        }
        // The service must (transitively) wait for a healthy TiKV store.
        let mut seen = BTreeSet::new();
        let mut queue = vec![inv.service.clone()];
        let mut waits_for_tikv = false;
        while let Some(current) = queue.pop() {
            for (dep, condition) in depends_on(&all[&current]) {
                if is_image(&all[&dep], "pingcap/tikv") && condition == "service_healthy" {
                    waits_for_tikv = true;
                }
                if seen.insert(dep.clone()) {
                    queue.push(dep);
                }
            }
        }
        assert!(
            waits_for_tikv,
            "{}: must wait (transitively) for a healthy TiKV",
            inv.origin
        );
        // Several processes share this store: an in-process oracle (the default without
        // --oracle) would compete with the oracle service for the same record.
        if inv.bin != "oracle" {
            assert!(
                !inv.oracle.is_empty(),
                "{}: {} on a shared TiKV store needs --oracle",
                inv.origin,
                inv.bin
            );
        }
    }
}

#[test]
fn oracles_listen_on_the_network_and_every_client_lists_every_replica() {
    let doc = compose();
    let invocations = invocations(&doc);
    let mut replicas = BTreeSet::new();
    for inv in invocations
        .iter()
        .filter(|i| i.bin == "oracle" && i.sub == "serve")
    {
        let listen: SocketAddr = inv
            .listen
            .as_deref()
            .unwrap_or_else(|| panic!("{}: --listen (the default is loopback)", inv.origin))
            .parse()
            .unwrap_or_else(|e| panic!("{}: --listen: {e}", inv.origin));
        assert!(
            !listen.ip().is_loopback(),
            "{}: --listen {listen} is unreachable from other containers",
            inv.origin
        );
        let advertise = inv
            .advertise
            .as_deref()
            .unwrap_or_else(|| panic!("{}: --advertise (else it advertises {listen})", inv.origin));
        assert_eq!(
            advertise,
            format!("127.0.0.1:{}", listen.port()),
            "{}: must advertise 127.0.0.1 and its port (one namespace, published)",
            inv.origin
        );
        replicas.insert(advertise.to_string());
    }
    assert!(
        replicas.len() >= 2,
        "expected at least two oracle replicas, got {replicas:?}"
    );
    let mut clients = 0;
    for inv in &invocations {
        if inv.oracle.is_empty() {
            continue;
        }
        clients += 1;
        let listed: BTreeSet<String> = inv.oracle.iter().map(|a| a.trim().to_string()).collect();
        assert_eq!(
            listed, replicas,
            "{}: --oracle must list every replica exactly as it advertises itself",
            inv.origin
        );
    }
    assert!(clients > 0, "no service uses the oracle");
}

/// The profile that runs the README's multi-process walk-through inside the namespace.
const PIPELINE_PROFILE: &str = "pipeline";

/// The profile of Prometheus and Grafana (checked further by docker_monitoring.rs).
const MONITORING_PROFILE: &str = "monitoring";

fn profiles(svc: &Value) -> Vec<String> {
    svc.get("profiles")
        .map(|p| strings(p, "profiles"))
        .unwrap_or_default()
}

/// Whether `service` waits for `dep` (directly) under `condition`.
fn waits_for(all: &BTreeMap<String, Value>, service: &str, dep: &str, condition: &str) -> bool {
    depends_on(&all[service]).get(dep).map(String::as_str) == Some(condition)
}

#[test]
fn the_pipeline_profile_runs_the_walk_through_in_order() {
    let doc = compose();
    let all = services(&doc);
    // A plain `up` starts the cluster only: PD, TiKV and the namespace holder.
    for (name, svc) in &all {
        let ours = svc.get("build").is_some();
        let profiles = profiles(svc);
        if ours {
            assert_eq!(
                profiles,
                [PIPELINE_PROFILE],
                "{name}: the project's services belong to the {PIPELINE_PROFILE} profile"
            );
        } else if is_image(svc, "prom/prometheus") || is_image(svc, "grafana/grafana") {
            assert_eq!(
                profiles,
                [MONITORING_PROFILE],
                "{name}: Prometheus and Grafana belong to the {MONITORING_PROFILE} profile"
            );
        } else {
            assert!(
                profiles.is_empty(),
                "{name}: the cluster starts with a plain `up`"
            );
        }
    }
    let invocations = invocations(&doc);
    let commands: Vec<&Invocation> = invocations
        .iter()
        .filter(|i| i.origin.ends_with("(command)"))
        .collect();
    let find = |bin: &str, sub: &str| -> Vec<&Invocation> {
        commands
            .iter()
            .copied()
            .filter(|i| i.bin == bin && i.sub == sub)
            .collect()
    };
    let one = |bin: &str, sub: &str| -> String {
        let found = find(bin, sub);
        assert_eq!(
            found.len(),
            1,
            "expected one `{bin} {sub}` service, got {}",
            found.len()
        );
        found[0].service.clone()
    };
    assert!(
        find("oracle", "serve").len() >= 2,
        "expected two oracle replicas"
    );
    let workers = find("photon", "work");
    let names: BTreeSet<_> = workers.iter().filter_map(|w| w.worker.as_deref()).collect();
    assert_eq!(
        names.len(),
        workers.len(),
        "every worker needs its own --worker name"
    );
    let pipelines: BTreeSet<_> = workers
        .iter()
        .filter_map(|w| w.pipeline.as_deref())
        .collect();
    assert!(
        pipelines.len() >= 2,
        "expected two redundant pipelines, got {pipelines:?}"
    );
    let gen = one("photon", "gen");
    let load = one("photon", "load");
    let drained = one("percolator-ctl", "wait");
    let verify = one("photon", "verify");
    // The walk-through's order: gen, load (workers running), wait for the drain, verify.
    let done = "service_completed_successfully";
    assert!(
        waits_for(&all, &load, &gen, done),
        "{load} must wait for {gen} to complete"
    );
    assert!(
        waits_for(&all, &drained, &load, done),
        "{drained} must wait for {load} to complete"
    );
    for w in &workers {
        assert!(
            depends_on(&all[&drained]).contains_key(&w.service),
            "{drained}: the drain needs the worker {} running",
            w.service
        );
    }
    assert!(
        waits_for(&all, &verify, &drained, done),
        "{verify} must wait for {drained} to complete"
    );
    for inv in &commands {
        let svc = &all[&inv.service];
        let one_shot = [&gen, &load, &drained, &verify].contains(&&inv.service);
        let restart = svc.get("restart").and_then(Value::as_str).unwrap_or("no");
        if one_shot {
            assert_eq!(
                restart, "no",
                "{}: a one-shot job must not be restarted",
                inv.origin
            );
        } else {
            assert_ne!(
                restart, "no",
                "{}: a long-running server is restarted",
                inv.origin
            );
        }
        // Jobs reading or writing logs share one volume at the path they name.
        if let Some(dir) = &inv.log_dir {
            let mounted = mounts(svc).into_iter().any(|(source, target)| {
                source == "photon-logs" && Path::new(dir).starts_with(target)
            });
            assert!(
                mounted,
                "{}: {} must be on the photon-logs volume",
                inv.origin,
                dir.display()
            );
        }
    }
}

// ---- compose: tools in the images ---------------------------------------------------------------

/// The commands a `CMD-SHELL` line runs: the first word of each pipeline stage.
fn shell_commands(line: &str) -> Vec<String> {
    line.split(['|', '&', ';', '(', ')', '\n'])
        .filter_map(|stage| {
            stage
                .split_whitespace()
                .find(|w| *w != "!" && !w.contains('='))
                .map(String::from)
        })
        .collect()
}

/// Tools of Debian's slim images (essential packages: dash, bash, coreutils, grep), the
/// base of the project's image and the namespace holder's image.
const DEBIAN_TOOLS: &[&str] = &["sh", "bash", "grep", "sleep", "cat", "test", "true"];

/// The tools of a service's image. PingCAP's release images of v7 (PingCAP-QE/artifacts,
/// dockerfiles/products/{pd,tikv}/Dockerfile) are built on pd-base and tikv-base over
/// pingcap-base (Rocky Linux 9: sh, grep, coreutils); both bases `dnf install wget`, and the
/// products copy their binaries into `/`. Their busybox and curl are not counted: busybox
/// did not run on that base until late 2025 (it needed a newer glibc), and curl comes only
/// with some Rocky image variants. The project's image: Debian plus the binaries the
/// Dockerfile copies into /usr/local/bin (nothing the apt line installs is a tool).
fn image_tools(svc: &Value) -> BTreeSet<String> {
    let mut tools: BTreeSet<String> = BTreeSet::new();
    if svc.get("build").is_some() {
        tools.extend(DEBIAN_TOOLS.iter().map(|t| t.to_string()));
        let dockerfile = read(&docker_dir().join("Dockerfile"));
        let copy = dockerfile
            .lines()
            .find(|l| l.starts_with("COPY --from=build") && l.contains("/usr/local/bin"))
            .expect("Dockerfile: COPY --from=build ... /usr/local/bin/");
        tools.extend(
            copy.split_whitespace()
                .filter_map(|w| w.strip_prefix("/out/"))
                .map(String::from),
        );
        return tools;
    }
    let image = registry_image(svc).unwrap_or_default();
    let repository = image.split(':').next().unwrap_or_default();
    match repository {
        "pingcap/pd" | "pingcap/tikv" => {
            tools.extend(["sh", "grep", "wget"].map(String::from));
            let bins: &[&str] = if repository == "pingcap/pd" {
                &["/pd-server", "/pd-ctl", "/pd-recover"]
            } else {
                &["/tikv-server", "/tikv-ctl"]
            };
            tools.extend(bins.iter().map(|b| b.to_string()));
        }
        "debian" => tools.extend(DEBIAN_TOOLS.iter().map(|t| t.to_string())),
        // Prometheus' image is built on its busybox base (quay.io/prometheus/busybox: sh,
        // wget) with the binaries in /bin; Grafana's OSS image on Alpine (busybox: sh, wget).
        "prom/prometheus" => {
            tools.extend(["sh", "wget", "/bin/prometheus", "/bin/promtool"].map(String::from))
        }
        "grafana/grafana" => tools.extend(["sh", "wget", "/run.sh"].map(String::from)),
        other => panic!("{other}: no known tool list; add one to image_tools"),
    }
    tools
}

/// Images whose entrypoint is their server (a compose `command` only passes it flags).
const ENTRYPOINT_IMAGES: [&str; 4] = [
    "pingcap/pd",
    "pingcap/tikv",
    "prom/prometheus",
    "grafana/grafana",
];

/// `IMAGE:TAG` of the Dockerfile's runtime stage (its last `FROM`).
fn dockerfile_runtime_image() -> String {
    let dockerfile = read(&docker_dir().join("Dockerfile"));
    from_images(&dockerfile)
        .last()
        .map(|(image, tag)| format!("{image}:{tag}"))
        .expect("Dockerfile: a runtime stage")
}

#[test]
fn healthchecks_and_commands_call_tools_the_images_contain() {
    let doc = compose();
    let runtime = dockerfile_runtime_image();
    for (name, svc) in services(&doc) {
        let tools = image_tools(&svc);
        let mut called = Vec::new();
        if let Some(test) = svc.get("healthcheck").and_then(|h| h.get("test")) {
            let argv = match test {
                Value::String(line) => vec!["CMD-SHELL".to_string(), line.clone()],
                _ => strings(test, &format!("{name}: healthcheck test")),
            };
            match argv[0].as_str() {
                "CMD" => called.push(argv[1].clone()),
                "CMD-SHELL" => {
                    called.push("sh".into());
                    called.extend(shell_commands(&argv[1..].join(" ")));
                }
                "NONE" => {}
                other => panic!("{name}: healthcheck {other}: expected CMD or CMD-SHELL"),
            }
        }
        // PingCAP's, Prometheus' and Grafana's images have an entrypoint (their server); the
        // others run their command.
        if !ENTRYPOINT_IMAGES.iter().any(|image| is_image(&svc, image)) {
            let argv = strings(&svc["command"], &format!("{name}: command"));
            called.push(argv[0].clone());
        }
        if is_image(&svc, "debian") {
            assert_eq!(
                registry_image(&svc),
                Some(runtime.as_str()),
                "{name}: use the Dockerfile's runtime image (pulled by the build anyway)"
            );
        }
        for tool in called {
            assert!(
                tools.contains(&tool),
                "{name}: calls {tool}, which its image does not contain ({tools:?})"
            );
        }
    }
}

// ---- the command-line parser ----------------------------------------------------------------

#[test]
fn command_parser_refuses_what_clap_refuses() {
    let argv = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
    let ok = parse_invocation(
        "s",
        "t",
        &argv("photon work --store tikv:pd:2379 --pipeline A"),
    );
    assert_eq!(ok.unwrap().pipeline.as_deref(), Some("A"));
    let ok = parse_invocation("s", "t", &argv("oracle get -n 3 --oracle=a:1,b:2")).unwrap();
    assert_eq!(ok.oracle, ["a:1", "b:2"]);
    // Global flags before the verb: the subcommand is clap's, not the second word.
    let ok = parse_invocation(
        "s",
        "t",
        &argv("percolator-ctl --store tikv:h:1 --oracle a:1 wait --timeout 9"),
    )
    .unwrap();
    assert_eq!((ok.sub.as_str(), ok.oracle.len()), ("wait", 1));
    for bad in [
        "photon work --stroe tikv:pd:2379", // misspelt flag
        "photon wrok --store tikv:pd:2379", // unknown subcommand
        "photon work --store tikv:",        // a store spec that does not parse
        "photon load --store tikv:pd:2379", // missing INPUT
        "photon load /a /b",                // one INPUT only
        "photon verify /logs --json=yes",   // switch with a value
        "photon work --pipeline",           // missing value
        "photon work --pipeline --store x", // value swallowed by the next flag
        "photon work --pipeline A --pipeline B",
        "oracle serve --listen 0.0.0.0:7707", // --store is required
        "oracle",
        "minitikv serve --listen nowhere", // not a socket address
        "percolator-ctl wait --timeout soon",
        "percolator-ctl --store tikv:h:1 wiat",
    ] {
        assert!(
            parse_invocation("s", "t", &argv(bad)).is_err(),
            "accepted {bad:?}"
        );
    }
}

// ---- TiKV and PD configuration ----------------------------------------------------------------

#[test]
fn tikv_config_selects_the_api_version_the_backend_speaks() {
    let tikv = read_toml(&docker_dir().join("tikv.toml"));
    let storage = tikv["storage"].as_table().expect("tikv.toml: [storage]");
    // tikv-client 0.4.0 without a keyspace sends API V1 requests, which TiKV accepts only
    // with storage.api-version = 1 (API v2 refuses V1 raw requests).
    assert_eq!(
        storage.get("api-version").and_then(toml::Value::as_integer),
        Some(1),
        "tikv.toml: storage.api-version must be 1 (stated explicitly)"
    );
    assert_eq!(
        storage.get("enable-ttl").and_then(toml::Value::as_bool),
        Some(false),
        "tikv.toml: storage.enable-ttl must be false: the backend writes no TTLs, and the \
         value fixes the on-disk format"
    );
    // The other half of the contract: the backend still connects without a keyspace. If it
    // ever selects one (API v2), TiKV's api-version and this test must change with it.
    let backend = read(&repo_root().join("tikv/src/lib.rs"));
    assert!(
        !backend.contains("keyspace"),
        "percolator-tikv mentions a keyspace: API v2 needs storage.api-version = 2 and \
         storage.enable-ttl = true in docker/tikv.toml"
    );
    assert!(
        backend.contains("RawClient::new_with_config") && backend.contains("with_atomic_for_cas"),
        "percolator-tikv no longer connects as docker/tikv.toml's comments describe"
    );
}

#[test]
fn small_regions_are_not_merged_back_by_pd() {
    let tikv = read_toml(&docker_dir().join("tikv.toml"));
    let pd = read_toml(&docker_dir().join("pd.toml"));
    let split = tikv
        .get("coprocessor")
        .and_then(|c| c.get("region-split-size"))
        .and_then(toml::Value::as_str);
    let Some(split) = split else { return };
    let mb: u64 = split
        .strip_suffix("MB")
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("tikv.toml: region-split-size {split:?}: expected N MB"));
    // PD merges regions below 20 MB (its max-merge-region-size default) unless merging is
    // off; smaller split sizes would make TiKV split and PD merge forever.
    let merge_limit = pd
        .get("schedule")
        .and_then(|s| s.get("merge-schedule-limit"))
        .and_then(toml::Value::as_integer);
    if mb < 20 {
        assert_eq!(
            merge_limit,
            Some(0),
            "pd.toml: schedule.merge-schedule-limit must be 0"
        );
    }
}

// ---- Dockerfile ---------------------------------------------------------------------------------

/// Workspace packages by name, with the names of the binaries each one builds.
fn workspace_binaries() -> BTreeMap<String, BTreeSet<String>> {
    let root = read_toml(&repo_root().join("Cargo.toml"));
    let members = root["workspace"]["members"]
        .as_array()
        .expect("workspace.members");
    let mut out = BTreeMap::new();
    for member in members {
        let manifest = read_toml(
            &repo_root()
                .join(member.as_str().unwrap())
                .join("Cargo.toml"),
        );
        let name = manifest["package"]["name"].as_str().unwrap().to_string();
        let bins = manifest
            .get("bin")
            .and_then(toml::Value::as_array)
            .map(|bins| {
                bins.iter()
                    .map(|b| b["name"].as_str().unwrap().to_string())
                    .collect()
            })
            .unwrap_or_default();
        out.insert(name, bins);
    }
    out
}

/// `(image, tag)` of every `FROM` line.
fn from_images(dockerfile: &str) -> Vec<(String, String)> {
    dockerfile
        .lines()
        .filter_map(|l| l.trim().strip_prefix("FROM "))
        .map(|rest| {
            let image = rest.split_whitespace().next().unwrap();
            let (name, tag) = image
                .rsplit_once(':')
                .unwrap_or_else(|| panic!("Dockerfile: FROM {image} has no tag (means latest)"));
            (name.to_string(), tag.to_string())
        })
        .collect()
}

#[test]
fn dockerfile_is_pinned_and_builds_the_binaries_compose_runs() {
    let text = read(&docker_dir().join("Dockerfile"));
    let images = from_images(&text);
    assert_eq!(
        images.len(),
        2,
        "expected a build stage and a runtime stage"
    );
    for (image, tag) in &images {
        assert!(
            tag != "latest" && tag.chars().any(|c| c.is_ascii_alphanumeric()),
            "Dockerfile: {image}:{tag} is not pinned"
        );
    }
    // Build stage: rust:X.Y.Z-slim-CODENAME, at least the workspace's rust-version.
    let (rust, rust_tag) = &images[0];
    assert_eq!(rust, "rust", "the build stage uses the official Rust image");
    let (version, variant) = rust_tag.split_once('-').expect("rust tag X.Y.Z-VARIANT");
    let parts: Vec<u32> = version.split('.').map(|p| p.parse().unwrap()).collect();
    assert_eq!(
        parts.len(),
        3,
        "rust:{rust_tag}: pin an exact toolchain X.Y.Z"
    );
    let root = read_toml(&repo_root().join("Cargo.toml"));
    let msrv: Vec<u32> = root["workspace"]["package"]["rust-version"]
        .as_str()
        .unwrap()
        .split('.')
        .map(|p| p.parse().unwrap())
        .collect();
    assert!(
        parts[..2] >= msrv[..2],
        "rust:{rust_tag} is older than rust-version {msrv:?}"
    );
    // Runtime stage: the same Debian release as the builder (the binaries link its glibc).
    let codename = variant.rsplit('-').next().unwrap();
    let (debian, debian_tag) = &images[1];
    assert_eq!(debian, "debian", "the runtime stage is Debian");
    assert!(
        debian_tag.starts_with(codename),
        "runtime debian:{debian_tag} is not the builder's Debian release ({codename})"
    );

    // The cargo build command: --locked, and only workspace packages.
    let build = text
        .lines()
        .find(|l| l.contains("cargo build"))
        .expect("a cargo build command");
    assert!(
        build.contains("--locked"),
        "cargo build must use --locked: {build}"
    );
    let words: Vec<&str> = build.split_whitespace().collect();
    let packages: Vec<&str> = words
        .windows(2)
        .filter(|w| w[0] == "-p" || w[0] == "--package")
        .map(|w| w[1])
        .collect();
    let workspace = workspace_binaries();
    let mut built_bins = BTreeSet::new();
    for package in &packages {
        let bins = workspace
            .get(*package)
            .unwrap_or_else(|| panic!("Dockerfile builds {package}, not a workspace package"));
        built_bins.extend(bins.iter().cloned());
        for bin in bins {
            assert!(
                text.contains(&format!("target/release/{bin}")),
                "Dockerfile: the binary {bin} of {package} is not copied out of the build"
            );
        }
    }
    // Every binary copied out of the build is one that `cargo build` produced.
    for copied in text.split("target/release/").skip(1) {
        let name: String = copied
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
            .collect();
        assert!(
            built_bins.contains(&name),
            "Dockerfile copies target/release/{name}, which cargo build does not build"
        );
    }
    // Every binary the compose file runs is built into the image.
    for inv in invocations(&compose()) {
        assert!(
            built_bins.contains(&inv.bin),
            "{}: runs {}, which the Dockerfile does not build",
            inv.origin,
            inv.bin
        );
    }
    // Runs as an unprivileged user.
    let user = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("USER "))
        .next_back()
        .expect("a USER instruction");
    assert!(
        !["root", "0"].contains(&user.trim()),
        "the image must not run as root"
    );

    let ignore = read(&repo_root().join(".dockerignore"));
    let patterns: BTreeSet<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    for needed in ["target/", ".git"] {
        assert!(
            patterns.contains(needed),
            ".dockerignore must exclude {needed}"
        );
    }
}

// ---- README -------------------------------------------------------------------------------------

/// The lines of the README's "Run on a TiKV cluster" section.
fn readme_section() -> Vec<String> {
    let readme = read(&repo_root().join("README.md"));
    let mut lines = readme.lines();
    let heading = lines
        .by_ref()
        .find(|l| l.trim_start_matches('#').trim() == "Run on a TiKV cluster" && l.starts_with('#'))
        .expect("README.md: a section titled exactly \"Run on a TiKV cluster\"");
    let level = heading.chars().take_while(|c| *c == '#').count();
    // The section ends at the next heading of the same or a higher level; `#` lines inside
    // code blocks are shell comments, not headings.
    let mut in_code = false;
    lines
        .take_while(|l| {
            if l.starts_with("```") {
                in_code = !in_code;
            }
            let hashes = l.chars().take_while(|c| *c == '#').count();
            in_code || hashes == 0 || hashes > level
        })
        .map(String::from)
        .collect()
}

/// `docker compose` options that take a value.
const COMPOSE_VALUE_OPTIONS: [&str; 2] = ["-f", "--profile"];

/// A `docker compose` line of the README: its profiles, subcommand and the services it names.
fn compose_line(line: &str) -> (Vec<String>, String, Vec<String>) {
    let words: Vec<&str> = line
        .split('#')
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(2)
        .collect();
    let mut profiles = Vec::new();
    let mut i = 0;
    while i < words.len() && words[i].starts_with('-') {
        if words[i] == "--profile" {
            profiles.push(words.get(i + 1).expect("--profile NAME").to_string());
        }
        i += if COMPOSE_VALUE_OPTIONS.contains(&words[i]) {
            2
        } else {
            1
        };
    }
    let sub = words.get(i).map(|w| w.to_string()).unwrap_or_default();
    let mut services: Vec<String> = words
        .iter()
        .skip(i + 1)
        .filter(|w| !w.starts_with('-'))
        .map(|w| w.to_string())
        .collect();
    if ["run", "exec"].contains(&sub.as_str()) {
        services.truncate(1); // the rest is the command
    }
    (profiles, sub, services)
}

#[test]
fn readme_section_matches_the_compose_file() {
    let section = readme_section();
    let doc = compose();
    let all = services(&doc);
    let known_profiles: BTreeSet<String> = all.values().flat_map(profiles).collect();
    let published = published_ports(&doc);
    let pd = pd_client_addresses(&doc);
    let replicas: BTreeSet<String> = advertised(&doc)
        .into_iter()
        .filter(|a| a.flag == "--advertise")
        .map(|a| format!("{}:{}", a.host, a.port))
        .collect();
    let (mut plain_up, mut pipeline_up, mut host_commands) = (false, false, 0);
    let mut in_code = false;
    for line in &section {
        if line.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        // Every loopback address the section names is one the cluster publishes.
        for rest in line.split("127.0.0.1:").skip(1) {
            let port: String = rest.chars().take_while(char::is_ascii_digit).collect();
            let Ok(port) = port.parse::<u16>() else {
                continue; // 127.0.0.1:PORT, in prose
            };
            assert!(
                published.contains(&port),
                "README names 127.0.0.1:{port}, which the compose file does not publish: {line}"
            );
        }
        if !in_code {
            continue;
        }
        let text = line.trim_start();
        if text.starts_with("docker compose") {
            assert!(
                text.contains("-f docker/docker-compose.yml"),
                "README: compose commands name the file (run from the repository root): {line}"
            );
            let (profiles, sub, named) = compose_line(text);
            for profile in &profiles {
                assert!(
                    known_profiles.contains(profile),
                    "README: unknown profile {profile}: {line}"
                );
            }
            for service in &named {
                assert!(
                    all.contains_key(service),
                    "README: unknown service {service}: {line}"
                );
            }
            if sub == "up" {
                plain_up |= profiles.is_empty();
                pipeline_up |= profiles.iter().any(|p| p == PIPELINE_PROFILE);
            }
            if sub == "down" {
                assert!(
                    profiles.iter().any(|p| p == PIPELINE_PROFILE),
                    "README: `down` without --profile {PIPELINE_PROFILE} leaves its containers \
                     in the namespace: {line}"
                );
            }
            continue;
        }
        // Host commands of our binaries parse, and reach the cluster's published addresses.
        let argv: Vec<String> = text
            .split('#')
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .map(String::from)
            .collect();
        if !argv
            .first()
            .is_some_and(|b| OUR_BINARIES.contains(&b.as_str()))
        {
            continue;
        }
        let inv = parse_invocation("README", "host", &argv)
            .unwrap_or_else(|e| panic!("README: {line}: {e}"));
        host_commands += 1;
        if let Some(StoreSpec::Tikv(endpoints)) = &inv.store {
            for endpoint in endpoints {
                assert!(
                    pd.contains(endpoint),
                    "README: {line}: {endpoint} is not PD's advertised address {pd:?}"
                );
            }
        }
        if !inv.oracle.is_empty() {
            let listed: BTreeSet<String> = inv.oracle.iter().cloned().collect();
            assert_eq!(
                listed, replicas,
                "README: {line}: --oracle must list every replica as it advertises itself"
            );
        }
    }
    assert!(plain_up, "README: the `up` of the cluster alone");
    assert!(
        pipeline_up,
        "README: the `up` of the {PIPELINE_PROFILE} profile"
    );
    assert!(
        host_commands > 0,
        "README: a command run on the host against the cluster"
    );
    assert!(
        section.iter().any(|l| l.contains("offline")),
        "README: say that the cluster was validated offline only"
    );
}
