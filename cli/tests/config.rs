//! The configuration file's layering on a command shaped like the binaries' (a subcommand
//! with flattened store flags): file < environment < flags, errors that name the key and the
//! file, and `--print-config`. Each test uses its own binary name, so its environment
//! variables are its own.

use clap::{Args, Parser, Subcommand};
use percolator_cli::config::{try_parse_from, ConfigError, Layered};
use std::ffi::OsString;
use std::io::Write;

#[derive(Parser, Debug)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    Work(WorkArgs),
    Load {
        #[command(flatten)]
        store: StoreArgs,
        input: String,
    },
}

#[derive(Args, Debug)]
struct StoreArgs {
    #[arg(long, default_value = "embedded:./data")]
    store: String,
    #[arg(long, value_delimiter = ',')]
    oracle: Vec<String>,
}

#[derive(Args, Debug)]
struct WorkArgs {
    #[command(flatten)]
    store: StoreArgs,
    #[arg(long, default_value = "main")]
    pipeline: String,
    #[arg(long, default_value_t = 64)]
    batch_size: usize,
    #[arg(long)]
    until_drained: bool,
}

fn file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new()
        .suffix(".toml")
        .tempfile()
        .expect("temp file");
    f.write_all(text.as_bytes()).expect("write");
    f
}

fn parse(binary: &str, args: &[&str]) -> Result<Layered<Cli>, ConfigError> {
    let args: Vec<OsString> = std::iter::once("bin")
        .chain(args.iter().copied())
        .map(OsString::from)
        .collect();
    try_parse_from::<Cli>(binary, args)
}

fn work(layered: Layered<Cli>) -> WorkArgs {
    match layered.cli.command {
        Command::Work(w) => w,
        other => panic!("not work: {other:?}"),
    }
}

const FILE: &str = r#"
store = "tikv:127.0.0.1:2379"
oracle = ["127.0.0.1:7707", "127.0.0.1:7708"]

[embedded]
cache_mb = 128

[tikv]
cas_concurrency = 16

[client]
recent_writes_mb = 0

[BIN.work]
pipeline = "from-file"
batch-size = 10
until_drained = true

[other.work]
anything = "not read by this binary"
"#;

#[test]
fn flags_win_over_the_environment_which_wins_over_the_file() {
    let f = file(&FILE.replace("BIN", "cfga"));
    let path = f.path().to_str().unwrap();

    // The file alone: its values over the defaults, shared keys from the top level.
    let w = work(parse("cfga", &["work", "--config", path]).expect("parse"));
    assert_eq!(w.pipeline, "from-file");
    assert_eq!(w.batch_size, 10);
    assert!(w.until_drained);
    assert_eq!(w.store.store, "tikv:127.0.0.1:2379");
    assert_eq!(w.store.oracle, ["127.0.0.1:7707", "127.0.0.1:7708"]);

    // The environment over the file.
    std::env::set_var("PERCOLATOR_CFGA_WORK_PIPELINE", "from-env");
    std::env::set_var("PERCOLATOR_CFGA_WORK_BATCH_SIZE", "20");
    let w = work(parse("cfga", &["work", "--config", path]).expect("parse"));
    assert_eq!((w.pipeline.as_str(), w.batch_size), ("from-env", 20));

    // Flags over both.
    let layered = parse(
        "cfga",
        &[
            "--config",
            path,
            "work",
            "--batch-size",
            "30",
            "--store",
            "memory",
        ],
    )
    .expect("parse");
    assert_eq!(layered.knobs.cache_mb, Some(128));
    assert_eq!(layered.knobs.cas_concurrency, Some(16));
    // 0 is a valid budget of remembered commits (none), unlike the store's knobs.
    assert_eq!(layered.knobs.recent_writes_mb, Some(0));
    let w = work(layered);
    assert_eq!(
        (w.pipeline.as_str(), w.batch_size, w.store.store.as_str()),
        ("from-env", 30, "memory")
    );

    // Without a file, the defaults.
    std::env::remove_var("PERCOLATOR_CFGA_WORK_PIPELINE");
    std::env::remove_var("PERCOLATOR_CFGA_WORK_BATCH_SIZE");
    let w = work(parse("cfga", &["work"]).expect("parse"));
    assert_eq!(
        (w.pipeline.as_str(), w.batch_size, w.until_drained),
        ("main", 64, false)
    );
}

#[test]
fn a_bad_value_names_its_key_and_the_file() {
    let f = file("[cfgb.work]\nbatch_size = \"many\"\n");
    let path = f.path().to_str().unwrap();
    let e = parse("cfgb", &["work", "--config", path]).expect_err("a bad value");
    let message = e.to_string();
    assert!(
        matches!(e, ConfigError::BadValue { ref key, .. } if key == "cfgb.work.batch_size"),
        "{e:?}"
    );
    assert!(
        message.contains(path)
            && message.contains("cfgb.work.batch_size")
            && message.contains("many"),
        "{message}"
    );

    let f = file("[cfgb.work]\nbatch_sise = 3\n");
    let e = parse("cfgb", &["work", "--config", f.path().to_str().unwrap()]).expect_err("a typo");
    assert!(
        e.to_string().contains("unknown key `cfgb.work.batch_sise`"),
        "{e}"
    );
    assert!(e.to_string().contains("batch_size"), "lists the keys: {e}");

    let f = file("[embedded]\ncache_mb = -1\n");
    let e =
        parse("cfgb", &["work", "--config", f.path().to_str().unwrap()]).expect_err("a bad knob");
    assert!(e.to_string().contains("embedded.cache_mb"), "{e}");

    let f = file("[client]\nrecent_writes_mb = -1\n");
    let e =
        parse("cfgb", &["work", "--config", f.path().to_str().unwrap()]).expect_err("a bad knob");
    assert!(e.to_string().contains("client.recent_writes_mb"), "{e}");

    let f = file("store = \n");
    let e = parse("cfgb", &["work", "--config", f.path().to_str().unwrap()]).expect_err("bad TOML");
    assert!(matches!(e, ConfigError::Syntax { .. }), "{e:?}");

    let e = parse(
        "cfgb",
        &["work", "--config", "/nonexistent/percolator.toml"],
    )
    .expect_err("no file");
    assert!(
        e.to_string().contains("/nonexistent/percolator.toml"),
        "{e}"
    );
}

#[test]
fn print_config_shows_each_value_with_its_source() {
    let f = file(&FILE.replace("BIN", "cfgc"));
    let path = f.path().to_str().unwrap();
    std::env::set_var("PERCOLATOR_CFGC_WORK_PIPELINE", "from-env");
    let layered = parse(
        "cfgc",
        &[
            "work",
            "--config",
            path,
            "--batch-size",
            "7",
            "--print-config",
        ],
    )
    .expect("parse");
    let text = layered.print_config.expect("--print-config");
    for line in [
        "store = \"tikv:127.0.0.1:2379\"  # file",
        "oracle = [\"127.0.0.1:7707\", \"127.0.0.1:7708\"]  # file",
        "[cfgc.work]",
        "pipeline = \"from-env\"  # env PERCOLATOR_CFGC_WORK_PIPELINE",
        "batch_size = 7  # flag",
        "until_drained = true  # file",
        "cache_mb = 128  # file",
        "[client]",
        "recent_writes_mb = 0  # file",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "{line:?} missing in\n{text}"
        );
    }
    // The write buffer, unset, shows the default this host gives it.
    let default_mb = percolator::kv::default_write_buffer_bytes() / (1024 * 1024);
    assert!(
        text.lines()
            .any(|l| l.starts_with(&format!("write_buffer_mb = {default_mb}  # default: "))),
        "no default write buffer in\n{text}"
    );
    // The effective configuration is itself a valid file (comments aside).
    text.parse::<toml::Table>()
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    // And the positional input of another subcommand is not configuration.
    let layered = parse("cfgc", &["load", "./logs", "--print-config"]).expect("parse");
    assert!(!layered.print_config.unwrap().contains("input"));
}

/// A bad value in an environment variable read for a flag is reported with the variable's
/// name, not as if the flag had been given it; a flag given on the command line is not
/// blamed on the variable.
#[test]
fn a_bad_environment_value_names_its_variable() {
    std::env::set_var("PERCOLATOR_CFGENV_WORK_BATCH_SIZE", "lots");
    let err = parse("cfgenv", &["work"]).expect_err("a bad variable");
    let text = err.to_string();
    assert!(
        matches!(&err, ConfigError::BadEnv { var, .. } if var == "PERCOLATOR_CFGENV_WORK_BATCH_SIZE"),
        "{text}"
    );
    assert!(text.contains("PERCOLATOR_CFGENV_WORK_BATCH_SIZE"), "{text}");
    assert!(text.contains("lots"), "{text}");
    // The flag wins over the variable, so the variable is not read at all.
    let w = work(parse("cfgenv", &["work", "--batch-size", "5"]).expect("the flag wins"));
    assert_eq!(w.batch_size, 5);
    // A bad flag beside it is the flag's error.
    let err = parse("cfgenv", &["work", "--batch-size=x"]).expect_err("a bad flag");
    assert!(matches!(err, ConfigError::Cli(_)), "{err}");
    std::env::remove_var("PERCOLATOR_CFGENV_WORK_BATCH_SIZE");
}

/// A switch the file (or the environment) turns on can be turned off by a flag:
/// `--until-drained=false`; alone the switch still means true.
#[test]
fn a_switch_on_in_the_file_is_turned_off_by_a_flag() {
    let f = file(&FILE.replace("BIN", "cfgoff"));
    let path = f.path().to_str().unwrap();
    let on = |args: &[&str]| work(parse("cfgoff", args).expect("parse")).until_drained;
    assert!(on(&["work", "--config", path]), "the file's true");
    assert!(!on(&["work", "--config", path, "--until-drained=false"]));
    assert!(on(&["work", "--config", path, "--until-drained=true"]));
    assert!(!on(&["work"]), "off by default");
    assert!(on(&["work", "--until-drained"]));
    std::env::set_var("PERCOLATOR_CFGOFF_WORK_UNTIL_DRAINED", "true");
    assert!(on(&["work"]), "the environment's true");
    assert!(!on(&["work", "--until-drained=false"]));
    std::env::remove_var("PERCOLATOR_CFGOFF_WORK_UNTIL_DRAINED");
    assert!(parse("cfgoff", &["work", "--until-drained=maybe"]).is_err());
}
