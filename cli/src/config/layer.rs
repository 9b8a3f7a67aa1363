//! The layering: which subcommand the arguments select, and for each flag of the commands on
//! that path its environment variable and, from the file, its default (checked first).

use super::{ConfigError, CONFIG_ID, PRINT_ID, SHARED_KEYS};
use clap::{Arg, ArgAction, Command};
use std::cell::RefCell;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The TOML key of an argument: its long name (else its id), with `_` for `-`.
pub(super) fn key_of(arg: &Arg) -> String {
    arg.get_long()
        .unwrap_or(arg.get_id().as_str())
        .replace('-', "_")
}

/// Arguments the layering leaves alone: help, version, its own, positionals (the input a
/// command works on, not configuration).
pub(super) fn skipped(arg: &Arg) -> bool {
    let id = arg.get_id().as_str();
    matches!(id, "help" | "version" | CONFIG_ID | PRINT_ID)
        || arg.is_positional()
        || matches!(
            arg.get_action(),
            ArgAction::Help | ArgAction::Version | ArgAction::HelpShort | ArgAction::HelpLong
        )
}

/// A switch (`--follow`) also takes `=true` or `=false` (`--follow=false`), so that a flag
/// can turn off what the file or the environment turned on; alone it still means true.
/// Other arguments are returned as they are.
pub(super) fn on_off(arg: Arg) -> Arg {
    if !matches!(arg.get_action(), ArgAction::SetTrue) {
        return arg;
    }
    arg.action(ArgAction::Set)
        .num_args(0..=1)
        .require_equals(true)
        .default_missing_value("true")
        .default_value("false")
        .value_name("true|false")
        .value_parser(clap::builder::BoolishValueParser::new())
}

/// The subcommand names the arguments select, and the `--config` value, from the raw
/// arguments (before the file can change what they mean).
pub(super) fn scan_args(cmd: &Command, args: &[OsString]) -> (Vec<String>, Option<PathBuf>) {
    let mut path = Vec::new();
    let mut config = None;
    let mut current = cmd;
    let mut globals: Vec<&Arg> = cmd.get_arguments().filter(|a| a.is_global_set()).collect();
    let mut tokens = args.iter().skip(1);
    while let Some(token) = tokens.next() {
        let text = token.to_string_lossy();
        if text == "--" {
            break;
        }
        if let Some(long) = text.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (long, None),
            };
            if name == "config" {
                config = inline
                    .map(PathBuf::from)
                    .or_else(|| tokens.next().map(PathBuf::from));
                continue;
            }
            let arg = current
                .get_arguments()
                .chain(globals.iter().copied())
                .find(|a| a.get_long() == Some(name));
            if inline.is_none() && arg.is_some_and(|a| a.get_action().takes_values()) {
                tokens.next();
            }
            continue;
        }
        if let Some(sub) = current.find_subcommand(text.as_ref()) {
            path.push(sub.get_name().to_string());
            globals.extend(sub.get_arguments().filter(|a| a.is_global_set()));
            current = sub;
        }
    }
    (path, config)
}

/// The file's table at `section` (dotted), if any.
pub(super) fn table_at<'t>(file: &'t toml::Table, section: &[String]) -> Option<&'t toml::Table> {
    let mut table = file;
    for name in section {
        table = table.get(name)?.as_table()?;
    }
    Some(table)
}

/// A TOML value as the strings a flag takes.
pub(super) fn strings(value: &toml::Value) -> Result<Vec<String>, String> {
    Ok(match value {
        toml::Value::String(s) => vec![s.clone()],
        toml::Value::Integer(n) => vec![n.to_string()],
        toml::Value::Float(f) => vec![f.to_string()],
        toml::Value::Boolean(b) => vec![b.to_string()],
        toml::Value::Array(items) => {
            let mut out = Vec::new();
            for item in items {
                if item.is_array() || item.is_table() {
                    return Err("expected a list of plain values".to_string());
                }
                out.extend(strings(item)?);
            }
            out
        }
        toml::Value::Datetime(d) => vec![d.to_string()],
        toml::Value::Table(_) => return Err("expected a value, found a table".to_string()),
    })
}

/// Checks the file's `values` with `arg`'s own value parser (a command of that argument alone,
/// so its relations to other arguments do not apply); a flag without a value takes a boolean.
pub(super) fn check(arg: &Arg, values: &[String]) -> Result<(), String> {
    let long = arg.get_long().unwrap_or(arg.get_id().as_str()).to_string();
    if !arg.get_action().takes_values() {
        return match values {
            [v] if v == "true" || v == "false" => Ok(()),
            _ => Err(format!("--{long} takes true or false, not {values:?}")),
        };
    }
    if values.len() > 1
        && arg.get_value_delimiter().is_none()
        && !matches!(arg.get_action(), ArgAction::Append)
    {
        return Err(format!("--{long} takes one value, not a list"));
    }
    let mut probe = Arg::new("value")
        .long(long.clone())
        .action(ArgAction::Set)
        .value_parser(arg.get_value_parser().clone());
    if let Some(name) = arg.get_value_names().and_then(|n| n.first()) {
        probe = probe.value_name(name.clone());
    }
    let command = Command::new("check").arg(probe);
    for v in values {
        command
            .clone()
            .try_get_matches_from(["check".to_string(), format!("--{long}={v}")])
            .map_err(|e| clap_message(&e))?;
    }
    Ok(())
}

/// The first line of a clap error, without its `error: ` prefix.
pub(super) fn clap_message(e: &clap::Error) -> String {
    let text = e.to_string();
    let first = text.lines().next().unwrap_or_default();
    first.strip_prefix("error: ").unwrap_or(first).to_string()
}

/// The layering of one invocation: the binary's name and the file, and what it found.
pub(super) struct Layering<'f> {
    pub(super) binary: String,
    pub(super) file: Option<(&'f Path, &'f toml::Table)>,
    /// (section, key) of every value taken from the file, for `--print-config`.
    pub(super) from_file: RefCell<Vec<(String, String)>>,
    pub(super) error: RefCell<Option<ConfigError>>,
}

impl Layering<'_> {
    fn env_name(&self, path: &[String], key: &str) -> String {
        let mut name = String::from("PERCOLATOR_");
        if !SHARED_KEYS.contains(&key) {
            name.push_str(&self.binary);
            name.push('_');
            for p in path {
                name.push_str(p);
                name.push('_');
            }
        }
        name.push_str(key);
        name.to_ascii_uppercase().replace('-', "_")
    }

    /// Environment names and the file's defaults for the arguments of `cmd` (the command
    /// at `path`), then the same for its subcommand on the path.
    pub(super) fn layer(&self, mut cmd: Command, path: &[String], depth: usize) -> Command {
        let here = &path[..depth];
        let mut section = vec![self.binary.clone()];
        section.extend(here.iter().cloned());
        let args: Vec<Arg> = cmd.get_arguments().cloned().collect();
        let mut known: Vec<String> = Vec::new();
        for arg in args.iter().filter(|a| !skipped(a)) {
            let key = key_of(arg);
            known.push(key.clone());
            let env = arg
                .get_env()
                .map(|e| e.to_string_lossy().into_owned())
                .unwrap_or_else(|| self.env_name(here, &key));
            let mut found = None;
            if let Some((file_path, file)) = self.file {
                let mut tables = vec![(section.join("."), table_at(file, &section))];
                if SHARED_KEYS.contains(&key.as_str()) {
                    tables.push((self.binary.clone(), table_at(file, &section[..1])));
                    tables.push((String::new(), Some(file)));
                }
                for (name, table) in tables {
                    let Some(value) =
                        table.and_then(|t| t.get(&key).or_else(|| t.get(&key.replace('_', "-"))))
                    else {
                        continue;
                    };
                    let full = if name.is_empty() {
                        key.clone()
                    } else {
                        format!("{name}.{key}")
                    };
                    let bad = |message: String| ConfigError::BadValue {
                        path: file_path.to_path_buf(),
                        key: full.clone(),
                        message,
                    };
                    match strings(value) {
                        Ok(values) => {
                            if let Err(message) = check(arg, &values) {
                                self.fail(bad(message));
                            }
                            found = Some(values);
                            self.from_file.borrow_mut().push((name, key.clone()));
                        }
                        Err(message) => self.fail(bad(message)),
                    }
                    break;
                }
            }
            cmd = cmd.mut_arg(arg.get_id().as_str(), |a| {
                let a = on_off(a.env(env));
                match found {
                    // A required flag the file gives is no longer missing without the flag.
                    Some(values) => a.required(false).default_values(values),
                    None => a,
                }
            });
        }
        // Keys of this command's own table that no argument reads.
        if let Some((file_path, file)) = self.file {
            if let Some(table) = table_at(file, &section) {
                let subs: Vec<String> = cmd
                    .get_subcommands()
                    .map(|s| s.get_name().to_string())
                    .collect();
                for (k, v) in table {
                    let normal = k.replace('-', "_");
                    if known.contains(&normal) || (v.is_table() && subs.contains(k)) {
                        continue;
                    }
                    self.fail(ConfigError::UnknownKey {
                        path: file_path.to_path_buf(),
                        key: format!("{}.{k}", section.join(".")),
                        known: known.join(", "),
                    });
                }
            }
        }
        if let Some(next) = path.get(depth) {
            cmd = cmd.mut_subcommand(next, |sub| self.layer(sub, path, depth + 1));
        }
        cmd
    }

    fn fail(&self, e: ConfigError) {
        let mut error = self.error.borrow_mut();
        if error.is_none() {
            *error = Some(e);
        }
    }
}
