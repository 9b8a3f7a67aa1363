//! `minitikv serve` terminated by SIGTERM the instant it announces readiness: the handler
//! must already be installed, so it exits cleanly (status 0) every time instead of dying
//! from the signal's default action. Its logs, written to a pipe, carry no ANSI colour codes.

use percolator_cli::testkit::{
    exits_cleanly_at_readiness, logging_command, sigterm_at_readiness, Stream,
};
use std::process::Command;

/// Starts, each terminated at its readiness line.
const ROUNDS: usize = 50;

/// The readiness line of `minitikv serve` (on stdout).
const READY: &str = "minitikv listening on ";

fn serve(data: &std::path::Path) -> Command {
    let mut cmd = logging_command(
        env!("CARGO_BIN_EXE_minitikv"),
        ["serve", "--listen", "127.0.0.1:0", "--data"],
    );
    cmd.arg(data);
    cmd
}

#[test]
fn sigterm_at_readiness_exits_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    exits_cleanly_at_readiness(ROUNDS, || serve(&data), Stream::Stdout, READY);
}

/// Logs redirected to a pipe (not a terminal) are plain text.
#[test]
fn logs_to_a_pipe_have_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let run = sigterm_at_readiness(&mut serve(&dir.path().join("data")), Stream::Stdout, READY);
    run.assert_plain_log("shutting down");
}
