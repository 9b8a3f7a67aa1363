//! The `oracle` binary's library part: its command line ([`cli`]), public so that tests (and
//! `tests/tests/docker_files.rs`) parse command lines exactly as the binary does.

#![warn(missing_docs)]

pub mod cli;
pub mod metrics;
