//! The configuration file example of `docs/operating.md` ("One configuration file"), read by
//! every binary's own command line (`percolator_cli::config` over their clap types): each
//! takes its table and the shared keys without an unknown key or a bad value.

use clap::{CommandFactory, FromArgMatches};
use percolator_cli::config::try_parse_from;
use std::ffi::OsString;
use std::io::Write;
use std::path::Path;

/// The first TOML block after the section's heading.
fn documented_example() -> String {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operating.md"))
            .expect("docs/operating.md");
    let section = doc
        .split_once("## One configuration file")
        .expect("the section")
        .1;
    let block = section.split_once("```toml\n").expect("a toml block").1;
    block
        .split_once("```")
        .expect("the block's end")
        .0
        .to_string()
}

/// `--print-config` of `binary ARGS` with the file.
fn effective<C: CommandFactory + FromArgMatches>(
    binary: &str,
    file: &Path,
    args: &[&str],
) -> String {
    let mut argv: Vec<OsString> = vec![binary.into(), "--config".into(), file.into()];
    argv.extend(args.iter().map(OsString::from));
    argv.push("--print-config".into());
    try_parse_from::<C>(binary, argv)
        .unwrap_or_else(|e| panic!("{binary} {args:?}: {e}"))
        .print_config
        .expect("--print-config")
}

fn has(text: &str, lines: &[&str]) {
    for line in lines {
        assert!(
            text.lines().any(|l| l == *line),
            "{line:?} missing in\n{text}"
        );
    }
}

#[test]
fn every_binary_reads_the_documented_example() {
    let mut file = tempfile::Builder::new()
        .suffix(".toml")
        .tempfile()
        .expect("temp file");
    file.write_all(documented_example().as_bytes())
        .expect("write");
    let path = file.path();
    let shared = ["store = \"tikv:127.0.0.1:2379\"  # file"];

    let work = effective::<photon::cli::Cli>("photon", path, &["work"]);
    has(&work, &shared);
    has(
        &work,
        &[
            "pipeline = \"A\"  # file",
            "metrics_addr = \"127.0.0.1:9101\"  # file",
            "cache_mb = 256  # file",
        ],
    );
    has(
        &effective::<photon::cli::Cli>("photon", path, &["load", "./logs"]),
        &["batch = 1000  # file"],
    );
    // `--store` is required by `oracle serve`: the file's value stands for it.
    let oracle = effective::<oracle_server::cli::Cli>("oracle-server", path, &["serve"]);
    has(&oracle, &shared);
    has(&oracle, &["listen = \"127.0.0.1:7707\"  # file"]);
    // The oracle's record stays in `default` (where `percolator-ctl --oracle` reads it),
    // while the shared `namespace` gives photon its own.
    has(&oracle, &["namespace = \"default\"  # file"]);
    has(&work, &["namespace = \"photon\"  # file"]);
    let ctl = effective::<percolator_ctl::cli::Cli>("ctl", path, &["serve"]);
    has(&ctl, &shared);
    has(
        &ctl,
        &[
            "listen = \"127.0.0.1:7780\"  # file",
            "sample_ms = 2000  # file",
        ],
    );
    has(
        &effective::<minitikv::cli::Cli>("minitikv", path, &["serve"]),
        &["data = \"./mt-data\"  # file"],
    );
}
