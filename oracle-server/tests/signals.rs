//! `oracle serve` terminated by SIGTERM the instant it announces readiness: the handler must
//! already be installed, so the server exits cleanly (status 0) and hands leadership over
//! (the record names no leader) every time, instead of dying from the signal's default
//! action. Its logs, written to a pipe, carry no ANSI colour codes.

use percolator_cli::testkit::{
    logging_command, sigterm_at_readiness, sigterm_at_readiness_rounds, Stream,
};
use std::process::Command;

/// Restarts of the server, each terminated at its readiness line.
const ROUNDS: usize = 50;

fn serve(store: &str) -> Command {
    logging_command(
        env!("CARGO_BIN_EXE_oracle"),
        ["serve", "--store", store, "--listen", "127.0.0.1:0"],
    )
}

#[test]
fn sigterm_at_readiness_exits_cleanly_and_releases_leadership() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let store = format!("embedded:{}", path.display());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    sigterm_at_readiness_rounds(
        ROUNDS,
        || serve(&store),
        Stream::Stdout,
        "listening on ",
        |round, _| {
            let rec = runtime.block_on(async {
                let kv = percolator::txn::open_embedded(&path, Default::default())
                    .expect("opening the store");
                let bytes = percolator::RawKv::get(&kv, &oracle::record_key("default"))
                    .await
                    .expect("reading the record");
                bytes.map(|b| oracle::OracleRecord::decode(&b).expect("decoding the record"))
            });
            // No record only if the signal came before the server first wrote one.
            if let Some(rec) = rec {
                assert!(
                    rec.leader.is_none(),
                    "round {round}: leadership not handed over: {rec:?}"
                );
            }
        },
    );
}

/// Logs redirected to a pipe (not a terminal) are plain text.
#[test]
fn logs_to_a_pipe_have_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("embedded:{}", dir.path().join("store").display());
    let run = sigterm_at_readiness(&mut serve(&store), Stream::Stdout, "listening on ");
    run.assert_plain_log("oracle listening");
}
