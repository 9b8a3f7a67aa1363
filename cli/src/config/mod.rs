//! One configuration file for every binary (the layering itself in `layer`, `--print-config`
//! in `print`): a TOML file (`--config FILE`, or
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
//! write_buffer_mb = 256
//!
//! [tikv]
//! cas_concurrency = 64
//!
//! [client]              # every transaction client a binary opens, in MiB
//! recent_writes_mb = 64  # 0: remember none of its commits
//!
//! [photon.work]         # one table per binary and subcommand
//! pipeline = "A"
//!
//! [oracle-server.serve]  # the `oracle` binary (`oracle` is the shared key above)
//! listen = "127.0.0.1:7707"
//!
//! [ctl.serve]
//! listen = "127.0.0.1:7780"
//! ```
//!
//! Environment variables: `PERCOLATOR_<KEY>` for the shared keys (`PERCOLATOR_STORE`), and
//! `PERCOLATOR_<BINARY>_<SUBCOMMAND>_<KEY>` for the others (`PERCOLATOR_PHOTON_WORK_PIPELINE`);
//! a flag that already names its variable keeps it (`MINITIKV_SEED`). The `[embedded]`,
//! `[tikv]` and `[client]` knobs stand under their variables (`PERCOLATOR_EMBEDDED_CACHE_MB`,
//! `PERCOLATOR_EMBEDDED_WRITE_BUFFER_MB`, `PERCOLATOR_TIKV_CAS_CONCURRENCY`,
//! `PERCOLATOR_CLIENT_RECENT_WRITES_MB`), which win.

mod layer;
mod print;

use clap::{Arg, ArgAction, ArgMatches, CommandFactory, FromArgMatches};
use layer::{scan_args, Layering};
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
    /// An environment variable read for a flag holds a value the flag does not accept.
    #[error("environment variable {var}: {message}")]
    BadEnv {
        /// The variable.
        var: String,
        /// What is wrong (as for the flag it stands for).
        message: String,
    },
    /// The command line itself is wrong (or asks for help): clap's error.
    #[error(transparent)]
    Cli(#[from] clap::Error),
}

/// The embedded store's, TiKV's and the clients' knobs of the file (`[embedded]`, `[tikv]`,
/// `[client]`), for [`crate::store`]: each applies only where its environment variable is
/// unset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreKnobs {
    /// `[embedded] cache_mb`.
    pub cache_mb: Option<u64>,
    /// `[embedded] write_buffer_mb`.
    pub write_buffer_mb: Option<u64>,
    /// `[tikv] cas_concurrency`.
    pub cas_concurrency: Option<usize>,
    /// `[client] recent_writes_mb` (0 allowed: nothing remembered).
    pub recent_writes_mb: Option<u64>,
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

/// The `[embedded]`, `[tikv]` and `[client]` knobs, checked; unknown top-level plain keys are
/// errors.
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
    let number = |table: &str, key: &str, least: i64| -> Result<Option<u64>, ConfigError> {
        let Some(value) = file
            .get(table)
            .and_then(|t| t.as_table())
            .and_then(|t| t.get(key))
        else {
            return Ok(None);
        };
        match value.as_integer() {
            Some(n) if n >= least => Ok(Some(n as u64)),
            _ => Err(ConfigError::BadValue {
                path: path.to_path_buf(),
                key: format!("{table}.{key}"),
                message: format!(
                    "expected a {} whole number, found {value}",
                    if least > 0 {
                        "positive"
                    } else {
                        "non-negative"
                    }
                ),
            }),
        }
    };
    for (table, keys) in [
        ("embedded", &["cache_mb", "write_buffer_mb"][..]),
        ("tikv", &["cas_concurrency"][..]),
        ("client", &["recent_writes_mb"][..]),
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
        cache_mb: number("embedded", "cache_mb", 1)?,
        write_buffer_mb: number("embedded", "write_buffer_mb", 1)?,
        cas_concurrency: number("tikv", "cas_concurrency", 1)?.map(|n| n as usize),
        recent_writes_mb: number("client", "recent_writes_mb", 0)?,
    })
}

/// Parses `args` (with the program name first) for `binary` (the file's table and the
/// variables' prefix: `photon`, `oracle-server`, `ctl`, `minitikv`), with the file `--config` (or
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
    let matches = match cmd.clone().try_get_matches_from(&args) {
        Ok(matches) => matches,
        // Clap reports a bad value from the environment as if the flag had it.
        Err(e) => return Err(bad_env(&cmd, &path, &args, &e).unwrap_or(ConfigError::Cli(e))),
    };
    let print_config = deepest(&matches)
        .get_flag(PRINT_ID)
        .then(|| print::effective(&cmd, &matches, &layering, file_path.as_deref(), &knobs));
    let cli = C::from_arg_matches(&matches)?;
    Ok(Layered {
        cli,
        print_config,
        knobs,
    })
}

/// For clap's error `e` about a value: the environment variable, read for a flag of the
/// commands on `path` that the command line does not give, whose value that flag refuses.
fn bad_env(
    cmd: &clap::Command,
    path: &[String],
    args: &[OsString],
    e: &clap::Error,
) -> Option<ConfigError> {
    use clap::error::ErrorKind;
    if !matches!(
        e.kind(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation | ErrorKind::InvalidUtf8
    ) {
        return None;
    }
    let given = |arg: &Arg| {
        let long = arg.get_long().map(|l| format!("--{l}"));
        let short = arg.get_short().map(|c| format!("-{c}"));
        args.iter().skip(1).any(|token| {
            let token = token.to_string_lossy();
            long.as_deref().is_some_and(|l| {
                token == l || token.strip_prefix(l).is_some_and(|r| r.starts_with('='))
            }) || short.as_deref().is_some_and(|s| token.starts_with(s))
        })
    };
    let mut commands = vec![cmd];
    let mut current = cmd;
    for name in path {
        current = current.find_subcommand(name)?;
        commands.push(current);
    }
    for arg in commands
        .iter()
        .flat_map(|c| c.get_arguments())
        .filter(|a| !layer::skipped(a) && !given(a))
    {
        let Some(var) = arg.get_env() else {
            continue;
        };
        let Some(raw) = std::env::var_os(var) else {
            continue;
        };
        let var = var.to_string_lossy().into_owned();
        let Some(value) = raw.to_str() else {
            return Some(ConfigError::BadEnv {
                var,
                message: "not valid UTF-8".to_string(),
            });
        };
        let values = match arg.get_value_delimiter() {
            Some(d) => value.split(d).map(str::to_string).collect(),
            None => vec![value.to_string()],
        };
        if let Err(message) = layer::check(arg, &values) {
            return Some(ConfigError::BadEnv { var, message });
        }
    }
    None
}

fn deepest(matches: &ArgMatches) -> &ArgMatches {
    match matches.subcommand() {
        Some((_, sub)) => deepest(sub),
        None => matches,
    }
}
