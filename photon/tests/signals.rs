//! `photon work` terminated by SIGTERM the instant it announces readiness: the handler must
//! already be installed, so the worker shuts down gracefully (status 0) every time instead of
//! dying from the signal's default action. Its logs, written to a pipe, carry no ANSI colour
//! codes.

use percolator_cli::testkit::{
    exits_cleanly_at_readiness, logging_command, sigterm_at_readiness, Stream,
};
use std::process::Command;

/// Starts, each terminated at its readiness line.
const ROUNDS: usize = 50;

/// The readiness line of `photon work` (on stderr).
const READY: &str = "photon worker running";

fn work(store: &std::path::Path) -> Command {
    let store = format!("embedded:{}", store.display());
    logging_command(env!("CARGO_BIN_EXE_photon"), ["work", "--store", &store])
}

#[test]
fn sigterm_at_readiness_exits_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    exits_cleanly_at_readiness(ROUNDS, || work(&store), Stream::Stderr, READY);
}

/// Logs redirected to a pipe (not a terminal) are plain text.
#[test]
fn logs_to_a_pipe_have_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let run = sigterm_at_readiness(&mut work(&dir.path().join("store")), Stream::Stderr, READY);
    run.assert_plain_log("shutting down");
}
