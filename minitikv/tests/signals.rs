//! `minitikv serve` terminated by SIGTERM the instant it announces readiness: the handler
//! must already be installed, so it exits cleanly (status 0) every time instead of dying
//! from the signal's default action. Its logs, written to a pipe, carry no ANSI colour codes.

use percolator_cli::testkit::{sigterm_at_readiness, sigterm_at_readiness_rounds, Stream};
use std::process::Command;

/// Starts, each terminated at its readiness line.
const ROUNDS: usize = 50;

fn serve(data: &std::path::Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_minitikv"));
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(data)
        .env("RUST_LOG", "info")
        .env_remove("NO_COLOR");
    cmd
}

#[test]
fn sigterm_at_readiness_exits_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    sigterm_at_readiness_rounds(
        ROUNDS,
        || serve(&dir.path().join("data")),
        Stream::Stdout,
        "minitikv listening on ",
        |_, _| {},
    );
}

/// Logs redirected to a pipe (not a terminal) are plain text.
#[test]
fn logs_to_a_pipe_have_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let run = sigterm_at_readiness(
        &mut serve(&dir.path().join("data")),
        Stream::Stdout,
        "minitikv listening on ",
    );
    run.assert_plain_log("shutting down");
}
