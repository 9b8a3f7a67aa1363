//! The exit statuses of `photon` and `percolator-ctl`, one per kind of failure, so a script
//! or supervisor can tell "the check found a problem" from "the tool could not run"
//! (`docs/operating.md`, "Exit status").

/// Success.
pub const OK: i32 = 0;
/// The check ran and found the output wrong: `photon verify` (and `demo`) found duplicates
/// or joins of clicks that are not joinable; `percolator-ctl dead-letters drop` refused
/// without `--yes`.
pub const CHECK_FAILED: i32 = 1;
/// The command line is wrong: an unknown flag, a bad value, a duration out of range (clap's
/// own status), or a name the store does not know (`percolator-ctl scan NOSUCH`).
pub const USAGE: i32 = 2;
/// Not finished: `photon verify` found joinable clicks not joined (with `--wait`, still at
/// the deadline); `percolator-ctl wait` timed out before the drain.
pub const INCOMPLETE: i32 = 3;
/// The input could not be read: a log file `photon verify` cannot open, a directory without
/// logs, a missing directory.
pub const INPUT: i32 = 4;
/// The store could not be opened: held by another process, no store at an embedded path a
/// reading command was given, unreachable, table ids refused.
pub const STORE_UNAVAILABLE: i32 = 5;
/// Any other failure while running (the store or the oracle failed mid-command, an I/O
/// error writing output).
pub const FAILED: i32 = 6;
/// A shutdown that could not finish in its bound (`photon work --shutdown-timeout-secs`):
/// the process stopped with work left that another worker takes over.
pub const SHUTDOWN_INCOMPLETE: i32 = 7;
