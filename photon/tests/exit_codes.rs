//! `photon`'s exit statuses and refusals as processes (issue 39, items 4, 12 and 13): each
//! kind of failure has its own status (`percolator_cli::exit`), verify fails on input it did
//! not read (or warns with `--partial-input`), its summary says why it failed, read-only
//! commands refuse an embedded path that holds no store, and durations out of range are
//! refused when the command line is parsed.

use percolator_cli::exit;
use std::path::Path;

mod common;
use common::{photon, run_until_drained, text};

/// A directory of logs: one query, two clicks of it and one malformed line.
fn logs(dir: &Path) -> std::path::PathBuf {
    let logs = dir.join("logs");
    std::fs::create_dir(&logs).unwrap();
    let now = photon::schema::now_ms();
    std::fs::write(
        logs.join("queries.jsonl"),
        format!("{{\"query_id\":\"q1\",\"event_time\":{now}}}\n"),
    )
    .unwrap();
    std::fs::write(
        logs.join("clicks.jsonl"),
        format!(
            "{{\"click_id\":\"c1\",\"query_id\":\"q1\",\"event_time\":{now}}}\n\
             {{\"click_id\":\"c2\",\"query_id\":\"q1\",\"event_time\":{now}}}\n\
             not json\n"
        ),
    )
    .unwrap();
    logs
}

#[test]
fn read_only_commands_refuse_a_path_that_holds_no_store() {
    let dir = tempfile::tempdir().unwrap();
    let logs = logs(dir.path());
    let typo = dir.path().join("photon-dat");
    let store = format!("embedded:{}", typo.display());
    for args in [
        vec!["verify", "--store", &store, logs.to_str().unwrap()],
        vec!["export", "--store", &store],
        vec!["gc", "--store", &store],
    ] {
        let out = photon(&args);
        let stderr = text(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(exit::STORE_UNAVAILABLE),
            "{args:?}: {stderr}"
        );
        assert!(stderr.contains("no store at"), "{args:?}: {stderr}");
        assert!(!typo.exists(), "{args:?} created {}", typo.display());
    }
}

#[test]
fn verify_fails_on_logs_it_cannot_read_and_on_a_directory_without_logs() {
    let dir = tempfile::tempdir().unwrap();
    let logs = logs(dir.path());
    let store = format!("embedded:{}", dir.path().join("store").display());
    run_until_drained(&store, &logs, &dir.path().join("rejects.txt"));
    let verify = |input: &Path, more: &[&str]| {
        let mut args = vec!["verify", "--store", &store, input.to_str().unwrap()];
        args.extend(more);
        photon(&args)
    };
    let ok = verify(&logs, &[]);
    assert_eq!(ok.status.code(), Some(exit::OK), "{}", text(&ok.stdout));

    // A log-named file it cannot open (a dangling link: unreadable even for root).
    std::os::unix::fs::symlink(dir.path().join("gone.jsonl"), logs.join("clicks-2.jsonl")).unwrap();
    let out = verify(&logs, &[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(exit::INPUT), "{stderr}");
    assert!(stderr.contains("clicks-2.jsonl"), "{stderr}");
    let partial = verify(&logs, &["--partial-input"]);
    let stdout = text(&partial.stdout);
    assert_eq!(partial.status.code(), Some(exit::OK), "{stdout}");
    assert!(
        stdout.contains("WARNING: not read") && stdout.contains("clicks-2.jsonl"),
        "{stdout}"
    );

    // A directory with no queries*.jsonl or clicks*.jsonl (the wrong directory).
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let out = verify(&empty, &[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(exit::INPUT), "{stderr}");
    assert!(
        stderr.contains("no queries*.jsonl or clicks*.jsonl"),
        "{stderr}"
    );
    let partial = verify(&empty, &["--partial-input"]);
    assert_eq!(partial.status.code(), Some(exit::OK));
    assert!(text(&partial.stdout).contains("WARNING: not read"));
}

#[test]
fn verify_tells_failures_apart_by_status_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let logs = logs(dir.path());
    let store_dir = dir.path().join("store");
    let store = format!("embedded:{}", store_dir.display());
    // Loaded, never joined: clicks missing (3), and the summary says so.
    let rejects = dir.path().join("rejects.txt");
    let load = photon(&[
        "load",
        "--store",
        &store,
        logs.to_str().unwrap(),
        "--rejects",
        rejects.to_str().unwrap(),
    ]);
    assert!(load.status.success(), "{}", text(&load.stderr));
    let out = photon(&["verify", "--store", &store, logs.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(exit::INCOMPLETE), "{stdout}");
    assert!(
        stdout.contains("FAILED: 2 joinable clicks not joined"),
        "{stdout}"
    );
    assert!(stdout.contains("unexpected        0"), "{stdout}");
    assert!(stdout.contains("malformed lines   1"), "{stdout}");

    // Joined, then a second output for c1 written behind the join's back: duplicates (1).
    run_until_drained(&store, &logs, &dir.path().join("rejects.txt"));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let spec: percolator_cli::StoreSpec = store.parse().unwrap();
        let client = percolator_cli::store::open_client(
            &spec,
            "photon",
            &[],
            percolator::kv::Durability::Process,
            Some(&photon::schema::table_ids()),
        )
        .await
        .unwrap();
        photon::schema::declare_columns(&client);
        let joined = photon::verify::joined_events(&client).await.unwrap();
        let first = joined["c1"][0].clone();
        let txn = client.begin().await.unwrap();
        txn.set(
            photon::schema::joined_cell("c1", "another/token"),
            serde_json::to_vec(&first).unwrap(),
        );
        txn.commit().await.unwrap();
    });
    // Its tasks go with it, and the store's directory lock with them.
    drop(runtime);
    let out = photon(&["verify", "--store", &store, logs.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(exit::CHECK_FAILED), "{stdout}");
    assert!(
        stdout.contains("FAILED: 1 clicks joined more than once"),
        "{stdout}"
    );

    // The store held by another process (here, this one): not a failed check (5).
    let held =
        percolator::txn::open_embedded(&store_dir, percolator::kv::EmbeddedOptions::default())
            .unwrap();
    let out = photon(&["verify", "--store", &store, logs.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(exit::STORE_UNAVAILABLE),
        "{}",
        text(&out.stderr)
    );
    drop(held);
}

#[test]
fn durations_out_of_range_are_refused_at_parse_time() {
    let dir = tempfile::tempdir().unwrap();
    let logs = logs(dir.path());
    let store = format!("embedded:{}", dir.path().join("store").display());
    for (flag, value) in [
        ("--gc-lag-secs", "18446744073709551615"),
        ("--gc-every-secs", "18446744073709551615"),
        ("--horizon-secs", "18446744073709551615"),
        ("--sweep-ms", "0"),
        ("--poll-ms", "18446744073709551615"),
    ] {
        let out = photon(&[
            "run",
            "--store",
            &store,
            "--input",
            logs.to_str().unwrap(),
            "--until-drained",
            flag,
            value,
        ]);
        let stderr = text(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(exit::USAGE),
            "{flag} {value}: {stderr}"
        );
        assert!(stderr.contains(flag), "{flag}: {stderr}");
    }
    assert!(
        !dir.path().join("store").exists(),
        "refused before the store was opened"
    );
}

/// A bad value in an environment variable read for a flag names the variable (exit status
/// 2), and a switch the configuration file turns on is turned off by `--X=false`.
#[test]
fn a_bad_variable_is_named_and_a_switch_of_the_file_is_turned_off_by_a_flag() {
    let dir = tempfile::tempdir().unwrap();
    let logs = logs(dir.path());
    let store = format!("embedded:{}", dir.path().join("store").display());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_photon"))
        .args(["load", "--store", &store, logs.to_str().unwrap()])
        .env("PERCOLATOR_PHOTON_LOAD_BATCH", "many")
        .env_remove("RUST_LOG")
        .output()
        .expect("photon runs");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(exit::USAGE), "{stderr}");
    assert!(
        stderr.contains("environment variable PERCOLATOR_PHOTON_LOAD_BATCH"),
        "{stderr}"
    );
    assert!(stderr.contains("many"), "{stderr}");

    let config = dir.path().join("percolator.toml");
    std::fs::write(&config, "[photon.load]\nfollow = true\n").unwrap();
    let config = config.to_str().unwrap();
    let printed = |more: &[&str]| {
        let mut args = vec!["--config", config, "load", "--store", &store];
        args.extend(more);
        args.extend(["--print-config", logs.to_str().unwrap()]);
        let out = photon(&args);
        assert!(out.status.success(), "{args:?}: {out:?}");
        text(&out.stdout)
    };
    assert!(printed(&[]).contains("follow = true"), "{}", printed(&[]));
    let off = printed(&["--follow=false"]);
    assert!(off.contains("follow = false  # flag"), "{off}");
    // Turned off, the load ends instead of tailing the files.
    let out = photon(&[
        "--config",
        config,
        "load",
        "--store",
        &store,
        "--rejects",
        dir.path().join("rejects.txt").to_str().unwrap(),
        "--follow=false",
        logs.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    assert!(text(&out.stdout).contains("loaded 3 events"), "{out:?}");
}
