//! `percolator-ctl`'s exit statuses and refusals as a process (issue 39, items 12 and 13): a
//! mistyped embedded path is refused (5) and not created, a flag typo is a usage error (2,
//! clap's) and not "timed out" (3), a timeout out of range is refused at parse time.

use percolator_cli::exit;
use std::process::Command;

fn ctl(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_percolator-ctl"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("percolator-ctl runs")
}

#[test]
fn a_path_that_holds_no_store_is_refused_and_not_created() {
    let dir = tempfile::tempdir().expect("dir");
    let typo = dir.path().join("photon-dta");
    let store = format!("embedded:{}", typo.display());
    for verb in [
        &["status"][..],
        &["scan", "clicks"],
        &["wait", "--timeout", "1"],
    ] {
        let mut args = vec!["--store", store.as_str()];
        args.extend(verb);
        let out = ctl(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(exit::STORE_UNAVAILABLE),
            "{verb:?}: {stderr}"
        );
        assert!(stderr.contains("no store at"), "{verb:?}: {stderr}");
        assert!(!typo.exists(), "{verb:?} created {}", typo.display());
    }
}

#[test]
fn usage_errors_and_timeouts_have_their_own_statuses() {
    for args in [
        &["--store", "memory", "wait", "--timout", "5"][..],
        &["--store", "memory", "wait", "--timeout", "1e300"],
        &["--store", "memory", "wait", "--timeout", "-1"],
        &["--store", "memory", "wait", "--poll-ms", "0"],
    ] {
        let out = ctl(args);
        assert_eq!(
            out.status.code(),
            Some(exit::USAGE),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_ne!(exit::USAGE, percolator_ctl::verbs::wait::TIMED_OUT);
    // A drained store: 0.
    let out = ctl(&["--store", "memory", "wait", "--timeout", "5"]);
    assert_eq!(out.status.code(), Some(exit::OK));
}
