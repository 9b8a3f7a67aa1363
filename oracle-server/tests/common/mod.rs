//! The real `oracle` binary as a child process, for the tests of `oracle-server` (the
//! recorded calls and their checks are in `oracle::testkit`).
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

/// A client of the servers at `addrs` that gives up on one quickly (300 ms RPC and connect
/// timeouts, retrying every `retry_backoff`) and on a request after 30 s.
pub fn quick_client(
    addrs: Vec<String>,
    retry_backoff: Duration,
) -> Arc<dyn percolator::TimestampSource> {
    let config = oracle::ClientConfig {
        rpc_timeout: Duration::from_millis(300),
        connect_timeout: Duration::from_millis(300),
        request_timeout: Duration::from_secs(30),
        retry_backoff,
        give_up_refused: None,
    };
    Arc::new(oracle::OracleClient::new(addrs, config).unwrap())
}

/// The real `oracle serve` binary, started and ready (it printed its address).
pub struct OracleProcess {
    pub child: Child,
    pub addr: String,
}

impl OracleProcess {
    pub fn start(store: &str, listen: &str, extra: &[&str]) -> OracleProcess {
        let mut child = Command::new(env!("CARGO_BIN_EXE_oracle"))
            .args(["serve", "--store", store, "--listen", listen])
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawning oracle serve");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("reading the readiness line");
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        OracleProcess { child, addr }
    }

    /// SIGKILL, and reap.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for OracleProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
