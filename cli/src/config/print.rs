//! `--print-config`: the effective configuration as TOML, each value with its source.

use super::layer::{key_of, skipped, Layering};
use super::{StoreKnobs, SHARED_KEYS};
use clap::{ArgAction, ArgMatches, Command};
use std::path::Path;

/// A value as TOML: numbers and booleans bare, the rest quoted.
fn toml_value(raw: &str) -> String {
    if raw.parse::<i64>().is_ok()
        || raw.parse::<f64>().is_ok_and(f64::is_finite)
        || raw == "true"
        || raw == "false"
    {
        raw.to_string()
    } else {
        toml::Value::String(raw.to_string()).to_string()
    }
}

/// The effective configuration of the invoked command as TOML, each value commented with
/// its source.
pub(super) fn effective(
    cmd: &Command,
    matches: &ArgMatches,
    layering: &Layering,
    file: Option<&Path>,
    knobs: &StoreKnobs,
) -> String {
    use clap::parser::ValueSource;
    let from_file = layering.from_file.borrow();
    let mut shared = String::new();
    // One table per command of the path that has flags of its own: (section, lines).
    let mut tables: Vec<(String, String)> = Vec::new();
    let mut section = vec![layering.binary.clone()];
    let mut cmd = cmd;
    let mut matches = matches;
    loop {
        let mut own = String::new();
        for arg in cmd.get_arguments().filter(|a| !skipped(a)) {
            let id = arg.get_id().as_str();
            let Some(raw) = matches.get_raw(id) else {
                continue;
            };
            let values: Vec<String> = raw.map(|v| toml_value(&v.to_string_lossy())).collect();
            let key = key_of(arg);
            let source = match matches.value_source(id) {
                Some(ValueSource::CommandLine) => "flag".to_string(),
                Some(ValueSource::EnvVariable) => format!(
                    "env {}",
                    arg.get_env()
                        .map(|e| e.to_string_lossy().into_owned())
                        .unwrap_or_default()
                ),
                _ if from_file.iter().any(|(_, k)| *k == key) => "file".to_string(),
                _ => "default".to_string(),
            };
            let multi = arg.get_value_delimiter().is_some()
                || matches!(arg.get_action(), ArgAction::Append);
            let value = if values.len() == 1 && !multi {
                values[0].clone()
            } else {
                format!("[{}]", values.join(", "))
            };
            let line = format!("{key} = {value}  # {source}\n");
            if SHARED_KEYS.contains(&key.as_str()) {
                shared.push_str(&line);
            } else {
                own.push_str(&line);
            }
        }
        if !own.is_empty() {
            tables.push((section.join("."), own));
        }
        let Some((name, sub)) = matches.subcommand() else {
            break;
        };
        let Some(next) = cmd.find_subcommand(name) else {
            break;
        };
        section.push(name.to_string());
        cmd = next;
        matches = sub;
    }
    let mut out = format!(
        "# effective configuration of `{}` (file: {})\n",
        section.join(" "),
        file.map_or("none".to_string(), |p| p.display().to_string())
    );
    out.push_str(&shared);
    let knob_line = |out: &mut String, env: &str, key: &str, file_value: Option<u64>| {
        if let Ok(v) = std::env::var(env) {
            out.push_str(&format!("{key} = {}  # env {env}\n", toml_value(&v)));
        } else if let Some(v) = file_value {
            out.push_str(&format!("{key} = {v}  # file\n"));
        }
    };
    let mut embedded = String::new();
    knob_line(
        &mut embedded,
        "PERCOLATOR_EMBEDDED_CACHE_MB",
        "cache_mb",
        knobs.cache_mb,
    );
    knob_line(
        &mut embedded,
        "PERCOLATOR_EMBEDDED_WRITE_BUFFER_MB",
        "write_buffer_mb",
        knobs.write_buffer_mb,
    );
    if std::env::var_os(percolator::kv::WRITE_BUFFER_MB_ENV).is_none()
        && knobs.write_buffer_mb.is_none()
    {
        // Unset, the write buffer depends on the host: show what this process takes.
        embedded.push_str(&default_write_buffer_line());
    }
    if !embedded.is_empty() {
        out.push_str(&format!("\n[embedded]\n{embedded}"));
    }
    let mut tikv = String::new();
    knob_line(
        &mut tikv,
        crate::store::CAS_CONCURRENCY_ENV,
        "cas_concurrency",
        knobs.cas_concurrency.map(|n| n as u64),
    );
    if !tikv.is_empty() {
        out.push_str(&format!("\n[tikv]\n{tikv}"));
    }
    let mut client = String::new();
    knob_line(
        &mut client,
        crate::store::RECENT_WRITES_MB_ENV,
        "recent_writes_mb",
        knobs.recent_writes_mb,
    );
    if !client.is_empty() {
        out.push_str(&format!("\n[client]\n{client}"));
    }
    for (name, lines) in tables {
        out.push_str(&format!("\n[{name}]\n{lines}"));
    }
    out
}

/// The line `--print-config` shows for an unset write buffer: its default on this host
/// and why (`percolator::kv::default_write_buffer_bytes`).
fn default_write_buffer_line() -> String {
    use percolator::kv::{MAX_DEFAULT_WRITE_BUFFER_BYTES, MIN_DEFAULT_WRITE_BUFFER_BYTES};
    let mib = |bytes: u64| bytes / (1024 * 1024);
    let why = match percolator::kv::process_memory_bytes() {
        Some(bytes) => format!(
            "a sixteenth of the {} MiB this process may use, within {}..={}",
            mib(bytes),
            mib(MIN_DEFAULT_WRITE_BUFFER_BYTES),
            mib(MAX_DEFAULT_WRITE_BUFFER_BYTES)
        ),
        None => "this host's memory could not be read".to_string(),
    };
    let default = mib(percolator::kv::default_write_buffer_bytes());
    format!("write_buffer_mb = {default}  # default: {why}\n")
}
