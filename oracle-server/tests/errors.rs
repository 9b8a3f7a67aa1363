//! How `oracle` fails, as a process (issue 39, friction list): an ordinary error prints its
//! message and each cause once, without a backtrace even with `RUST_BACKTRACE=1`; and `oracle
//! get` fails at once, not at its timeout, when every address refuses the connection.

use std::process::Command;
use std::time::{Duration, Instant};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn an_ordinary_error_prints_each_cause_once_and_no_backtrace() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"not a directory").unwrap();
    let store = format!("embedded:{}", file.join("store").display());
    let out = Command::new(env!("CARGO_BIN_EXE_oracle"))
        .args(["serve", "--store", &store, "--listen", "127.0.0.1:0"])
        .env("RUST_BACKTRACE", "1")
        .env_remove("RUST_LIB_BACKTRACE")
        .output()
        .expect("oracle runs");
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        !stderr.to_lowercase().contains("backtrace"),
        "no backtrace for an ordinary error: {stderr}"
    );
    assert!(!stderr.contains("Caused by"), "{stderr}");
    assert_eq!(
        stderr.matches("Not a directory").count(),
        1,
        "the cause once: {stderr}"
    );
    assert!(stderr.contains(&store), "{stderr}");
}

#[test]
fn get_fails_fast_when_every_address_refuses() {
    // Two ports nothing listens on (bound, then closed).
    let free = || {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().to_string()
    };
    let addrs = format!("{},{}", free(), free());
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_oracle"))
        .args(["get", "--oracle", &addrs, "--timeout-ms", "120000"])
        .output()
        .expect("oracle runs");
    let elapsed = started.elapsed();
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        elapsed < Duration::from_secs(30),
        "gave up after {elapsed:?}, not at the 120 s timeout: {stderr}"
    );
    assert!(stderr.contains("refused"), "{stderr}");
    assert!(stderr.contains("no oracle is listening"), "{stderr}");
}
