//! One configuration file for every binary: a TOML file (`--config FILE`, or
//! [`CONFIG_ENV`]) under environment variables under flags, on the binaries' own clap types.
//!
//! The layering is clap's own precedence: each key of the file becomes the *default* of the
//! flag of the same name (so a flag given on the command line wins), and each flag reads an
//! environment variable (so a variable wins over the file). The file's values are checked
//! with the flag's own value parser before anything runs, and a bad one is reported with
//! its key and the file. `--print-config` prints the effective configuration (as TOML, each
//! value with where it came from) and exits.
//!
//! Layout of the file (keys are the long flag names, `-` or `_` alike):
//!
//! ```toml
//! # Shared by every binary that has the flag (see SHARED_KEYS).
//! store = "tikv:127.0.0.1:2379"
//! oracle = ["127.0.0.1:7707"]
//! namespace = "photon"
//!
//! [embedded]            # the embedded store's memory knobs, in MiB
//! cache_mb = 256
//! write_buffer_mb = 64
//!
//! [tikv]
//! cas_concurrency = 64
//!
//! [photon.work]         # one table per binary and subcommand
//! pipeline = "A"
//!
//! [oracle.serve]
//! listen = "127.0.0.1:7707"
//!
//! [ctl.serve]
//! listen = "127.0.0.1:7780"
//! ```
//!
//! Environment variables: `PERCOLATOR_<KEY>` for the shared keys (`PERCOLATOR_STORE`), and
//! `PERCOLATOR_<BINARY>_<SUBCOMMAND>_<KEY>` for the others (`PERCOLATOR_PHOTON_WORK_PIPELINE`);
//! a flag that already names its variable keeps it (`MINITIKV_SEED`). The `[embedded]` and
//! `[tikv]` knobs stand under their variables (`PERCOLATOR_EMBEDDED_CACHE_MB`,
//! `PERCOLATOR_EMBEDDED_WRITE_BUFFER_MB`, `PERCOLATOR_TIKV_CAS_CONCURRENCY`), which win.

use clap::{Arg, ArgAction, ArgMatches, Command, CommandFactory, FromArgMatches};
use std::cell::RefCell;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Environment variable naming the configuration file when `--config` is not given.
pub const CONFIG_ENV: &str = "PERCOLATOR_CONFIG";

/// Keys shared by every binary: read from the top level of the file (or a binary's tables),
/// from `PERCOLATOR_<KEY>`.
pub const SHARED_KEYS: &[&str] = &[
    "store",
    "namespace",
    "oracle",
    "durability",
    "oracle_namespace",
];

const CONFIG_ID: &str = "config";
const PRINT_ID: &str = "print_config";

/// Why the configuration could not be built. Every message names the file (and the key).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("reading the configuration file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML.
    #[error("configuration file {path}: {message}")]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The parser's message (with line and column).
        message: String,
    },
    /// A key's value is not one its flag accepts.
    #[error("configuration file {path}: key `{key}`: {message}")]
    BadValue {
        /// The file.
        path: PathBuf,
        /// The key, with its table (`photon.work.batch_size`).
        key: String,
        /// What is wrong.
        message: String,
    },
    /// A key that no flag of this command reads.
    #[error("configuration file {path}: unknown key `{key}` (keys here: {known})")]
    UnknownKey {
        /// The file.
        path: PathBuf,
        /// The key, with its table.
        key: String,
        /// The keys the table takes.
        known: String,
    },
    /// The command line itself is wrong (or asks for help): clap's error.
    #[error(transparent)]
    Cli(#[from] clap::Error),
}

/// The embedded and TiKV store knobs of the file (`[embedded]`, `[tikv]`), for
/// [`crate::store`]: each applies only where its environment variable is unset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreKnobs {
    /// `[embedded] cache_mb`.
    pub cache_mb: Option<u64>,
    /// `[embedded] write_buffer_mb`.
    pub write_buffer_mb: Option<u64>,
    /// `[tikv] cas_concurrency`.
    pub cas_concurrency: Option<usize>,
}

static KNOBS: OnceLock<StoreKnobs> = OnceLock::new();

/// The store knobs of the configuration file this process was started with (all `None`
/// without one).
pub fn store_knobs() -> StoreKnobs {
    KNOBS.get().cloned().unwrap_or_default()
}

/// A parsed command line with its configuration.
#[derive(Debug)]
pub struct Layered<C> {
    /// The binary's command line, with the file and environment underneath.
    pub cli: C,
    /// With `--print-config`: the effective configuration, as TOML.
    pub print_config: Option<String>,
    /// The store knobs of the file.
    pub knobs: StoreKnobs,
}

/// Parses the process's command line as [`try_parse_from`] does, for a binary's `main`:
/// prints the effective configuration and exits for `--print-config`, prints the error and
/// exits with status 2 on a bad file or command line (clap's help and version as usual).
pub fn parse<C: CommandFactory + FromArgMatches>(binary: &str) -> C {
    match try_parse_from::<C>(binary, std::env::args_os().collect()) {
        Ok(layered) => {
            if let Some(text) = layered.print_config {
                print!("{text}");
                std::process::exit(0);
            }
            let _ = KNOBS.set(layered.knobs);
            layered.cli
        }
        Err(ConfigError::Cli(e)) => e.exit(),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    }
}

/// The TOML key of an argument: its long name (else its id), with `_` for `-`.
fn key_of(arg: &Arg) -> String {
    arg.get_long()
        .unwrap_or(arg.get_id().as_str())
        .replace('-', "_")
}

/// Arguments the layering leaves alone: help, version, its own, positionals (the input a
/// command works on, not configuration) and required flags (clap allows no default there).
fn skipped(arg: &Arg) -> bool {
    let id = arg.get_id().as_str();
    matches!(id, "help" | "version" | CONFIG_ID | PRINT_ID)
        || arg.is_positional()
        || arg.is_required_set()
        || matches!(
            arg.get_action(),
            ArgAction::Help | ArgAction::Version | ArgAction::HelpShort | ArgAction::HelpLong
        )
}

/// The subcommand names the arguments select, and the `--config` value, from the raw
/// arguments (before the file can change what they mean).
fn scan_args(cmd: &Command, args: &[OsString]) -> (Vec<String>, Option<PathBuf>) {
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
fn table_at<'t>(file: &'t toml::Table, section: &[String]) -> Option<&'t toml::Table> {
    let mut table = file;
    for name in section {
        table = table.get(name)?.as_table()?;
    }
    Some(table)
}

/// A TOML value as the strings a flag takes.
fn strings(value: &toml::Value) -> Result<Vec<String>, String> {
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
fn check(arg: &Arg, values: &[String]) -> Result<(), String> {
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
fn clap_message(e: &clap::Error) -> String {
    let text = e.to_string();
    let first = text.lines().next().unwrap_or_default();
    first.strip_prefix("error: ").unwrap_or(first).to_string()
}

struct Layering<'f> {
    binary: String,
    file: Option<(&'f Path, &'f toml::Table)>,
    /// (section, key) of every value taken from the file, for `--print-config`.
    from_file: RefCell<Vec<(String, String)>>,
    error: RefCell<Option<ConfigError>>,
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
    fn layer(&self, mut cmd: Command, path: &[String], depth: usize) -> Command {
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
                let a = a.env(env);
                match found {
                    Some(values) => a.default_values(values),
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

/// Reads `path` as TOML.
fn read_file(path: &Path) -> Result<toml::Table, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    text.parse::<toml::Table>()
        .map_err(|e| ConfigError::Syntax {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })
}

/// The `[embedded]` and `[tikv]` knobs, checked; unknown top-level plain keys are errors.
fn knobs(path: &Path, file: &toml::Table) -> Result<StoreKnobs, ConfigError> {
    for (k, v) in file {
        if !v.is_table() && !SHARED_KEYS.contains(&k.replace('-', "_").as_str()) {
            return Err(ConfigError::UnknownKey {
                path: path.to_path_buf(),
                key: k.clone(),
                known: SHARED_KEYS.join(", "),
            });
        }
    }
    let number = |table: &str, key: &str| -> Result<Option<u64>, ConfigError> {
        let Some(value) = file
            .get(table)
            .and_then(|t| t.as_table())
            .and_then(|t| t.get(key))
        else {
            return Ok(None);
        };
        match value.as_integer() {
            Some(n) if n > 0 => Ok(Some(n as u64)),
            _ => Err(ConfigError::BadValue {
                path: path.to_path_buf(),
                key: format!("{table}.{key}"),
                message: format!("expected a positive whole number, found {value}"),
            }),
        }
    };
    for (table, keys) in [
        ("embedded", &["cache_mb", "write_buffer_mb"][..]),
        ("tikv", &["cas_concurrency"][..]),
    ] {
        let Some(t) = file.get(table).and_then(|t| t.as_table()) else {
            continue;
        };
        if let Some(k) = t.keys().find(|k| !keys.contains(&k.as_str())) {
            return Err(ConfigError::UnknownKey {
                path: path.to_path_buf(),
                key: format!("{table}.{k}"),
                known: keys.join(", "),
            });
        }
    }
    Ok(StoreKnobs {
        cache_mb: number("embedded", "cache_mb")?,
        write_buffer_mb: number("embedded", "write_buffer_mb")?,
        cas_concurrency: number("tikv", "cas_concurrency")?.map(|n| n as usize),
    })
}

/// Parses `args` (with the program name first) for `binary` (the file's table and the
/// variables' prefix: `photon`, `oracle`, `ctl`), with the file `--config` (or
/// [`CONFIG_ENV`]) names and the environment underneath.
pub fn try_parse_from<C: CommandFactory + FromArgMatches>(
    binary: &str,
    args: Vec<OsString>,
) -> Result<Layered<C>, ConfigError> {
    let cmd = C::command()
        .arg(
            Arg::new(CONFIG_ID)
                .long("config")
                .value_name("FILE")
                .global(true)
                .env(CONFIG_ENV)
                .help("Configuration file (TOML): under environment variables and flags"),
        )
        .arg(
            Arg::new(PRINT_ID)
                .long("print-config")
                .global(true)
                .action(ArgAction::SetTrue)
                .help("Print the effective configuration (TOML, with where each value came from) and exit"),
        );
    let (path, flag_file) = scan_args(&cmd, &args);
    let file_path = flag_file.or_else(|| std::env::var_os(CONFIG_ENV).map(PathBuf::from));
    let file = file_path.as_deref().map(read_file).transpose()?;
    let knobs = match (&file_path, &file) {
        (Some(p), Some(f)) => knobs(p, f)?,
        _ => StoreKnobs::default(),
    };
    let layering = Layering {
        binary: binary.to_string(),
        file: file_path.as_deref().zip(file.as_ref()),
        from_file: RefCell::new(Vec::new()),
        error: RefCell::new(None),
    };
    let cmd = layering.layer(cmd, &path, 0);
    if let Some(e) = layering.error.take() {
        return Err(e);
    }
    let matches = cmd.clone().try_get_matches_from(&args)?;
    let print_config = deepest(&matches)
        .get_flag(PRINT_ID)
        .then(|| effective(&cmd, &matches, &layering, file_path.as_deref(), &knobs));
    let cli = C::from_arg_matches(&matches)?;
    Ok(Layered {
        cli,
        print_config,
        knobs,
    })
}

fn deepest(matches: &ArgMatches) -> &ArgMatches {
    match matches.subcommand() {
        Some((_, sub)) => deepest(sub),
        None => matches,
    }
}

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
fn effective(
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
    for (name, lines) in tables {
        out.push_str(&format!("\n[{name}]\n{lines}"));
    }
    out
}
