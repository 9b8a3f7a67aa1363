//! Offline checks of `docker/` (no Docker engine needed, nothing is built here).
//!
//! The compose file, the TiKV and PD configurations, the Dockerfile and the README section
//! "Run on a TiKV cluster" are checked against each other and against the code:
//! - every image pulled from a registry is pinned to a version; PD and TiKV run the same one;
//! - every command (and healthcheck) of our binaries parses with that binary's own clap types
//!   (`photon::cli::Cli`, `oracle_server::cli::Cli`, `minitikv::cli::Cli`: `try_parse_from`);
//! - every `--store` parses with `percolator_cli::StoreSpec` as a TiKV store whose endpoints
//!   are PD's advertised client URLs; every `--oracle` list names exactly the oracle replicas,
//!   each under the address it advertises (clients follow redirects only to listed addresses);
//! - `docker/tikv.toml` selects the API version the backend speaks, and the backend still
//!   connects without a keyspace (API v1);
//! - the Dockerfile builds workspace packages that provide the binaries the compose file runs.

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
/// types (`photon::cli`, `oracle_server::cli`, `minitikv::cli`).
const OUR_BINARIES: [&str; 3] = ["oracle", "photon", "minitikv"];

/// A command line of one of our binaries, parsed by that binary's own clap types, with the
/// values the checks below look at.
#[derive(Debug)]
struct Invocation {
    /// `service (command)` or `service (healthcheck)`, for messages.
    origin: String,
    service: String,
    bin: String,
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
    /// The directory of logs it writes or reads (`photon gen --out`, `load`/`verify INPUT`).
    log_dir: Option<PathBuf>,
}

/// Parses `argv` with the clap types of the binary it names (`argv[0]`), exactly as the
/// binary would; `Err` is clap's message.
fn parse_invocation(service: &str, origin: &str, argv: &[String]) -> Result<Invocation, String> {
    let (bin, sub) = match argv {
        [bin, sub, ..] => (bin.clone(), sub.clone()),
        _ => return Err(format!("{argv:?}: expected BINARY SUBCOMMAND ...")),
    };
    let mut inv = Invocation {
        origin: format!("{service} ({origin})"),
        service: service.to_string(),
        bin: bin.clone(),
        sub,
        store: None,
        oracle: Vec::new(),
        listen: None,
        advertise: None,
        pipeline: None,
        worker: None,
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
                Command::Work { store, work, .. } => {
                    inv.pipeline = Some(work.pipeline);
                    inv.worker = work.worker;
                    Some(store)
                }
                Command::Run(args) => {
                    inv.log_dir = Some(args.input);
                    inv.pipeline = Some(args.work.pipeline);
                    inv.worker = args.work.worker;
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
                }
                Command::Get(args) => inv.oracle = args.oracle,
            }
        }
        "minitikv" => {
            use minitikv::cli::{Cli, Command};
            match Cli::try_parse_from(argv)
                .map_err(|e| e.to_string())?
                .command
            {
                Command::Serve {
                    listen, advertise, ..
                } => {
                    inv.listen = Some(listen.to_string());
                    inv.advertise = advertise;
                }
            }
        }
        other => {
            return Err(format!(
                "{other} is not one of our binaries {OUR_BINARIES:?}"
            ))
        }
    }
    Ok(inv)
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
    let mut versions = BTreeMap::new();
    for (name, svc) in services(&doc) {
        match registry_image(&svc) {
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
            let addr = url.trim().trim_start_matches("http://");
            let host = addr.split(':').next().unwrap();
            assert_eq!(
                host, name,
                "{name}: must advertise its own service name, got {url}"
            );
            out.insert(addr.to_string());
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
            let advertise = flag_value(&args, "--advertise-addr").expect("--advertise-addr");
            assert!(
                advertise.starts_with(&format!("{name}:")),
                "{name}: --advertise-addr must be its service name (PD hands it to clients)"
            );
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
        if inv.bin == "photon" {
            assert!(
                !inv.oracle.is_empty(),
                "{}: photon on a shared TiKV store needs --oracle",
                inv.origin
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
            format!("{}:{}", inv.service, listen.port()),
            "{}: must advertise its service name and port",
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

#[test]
fn photon_pipelines_and_one_shot_jobs_are_laid_out_as_documented() {
    let doc = compose();
    let all = services(&doc);
    let invocations = invocations(&doc);
    let workers: Vec<&Invocation> = invocations
        .iter()
        .filter(|i| i.bin == "photon" && i.sub == "work")
        .collect();
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
    for inv in invocations
        .iter()
        .filter(|i| i.origin.ends_with("(command)"))
    {
        let svc = &all[&inv.service];
        let one_shot = inv.bin == "photon" && ["gen", "load", "verify"].contains(&inv.sub.as_str());
        if one_shot {
            assert!(
                svc.get("profiles").is_some(),
                "{}: one-shot jobs need a profile so that `up` does not start them",
                inv.origin
            );
            let restart = svc.get("restart").and_then(Value::as_str).unwrap_or("no");
            assert_eq!(
                restart, "no",
                "{}: a one-shot job must not be restarted",
                inv.origin
            );
        } else {
            assert!(
                svc.get("profiles").is_none(),
                "{}: long-running, no profile",
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

#[test]
fn readme_section_names_real_services() {
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
    let section: Vec<&str> = lines
        .take_while(|l| {
            if l.starts_with("```") {
                in_code = !in_code;
            }
            let hashes = l.chars().take_while(|c| *c == '#').count();
            in_code || hashes == 0 || hashes > level
        })
        .collect();
    let all = services(&compose());
    let mut named = 0;
    // Commands are the lines of the section's code blocks that start with `docker compose`.
    for line in &section {
        if !line.trim_start().starts_with("docker compose") {
            continue;
        }
        assert!(
            line.contains("-f docker/docker-compose.yml"),
            "README: compose commands name the file (run from the repository root): {line}"
        );
        let words: Vec<&str> = line.split_whitespace().collect();
        if let Some(i) = words.iter().position(|w| *w == "--rm") {
            let service = words.get(i + 1).expect("a service after --rm");
            assert!(
                all.contains_key(*service),
                "README runs unknown service {service}"
            );
            named += 1;
        }
    }
    assert!(
        named >= 3,
        "README: expected the gen, load and verify commands"
    );
}
