//! Exactly-once across what the deliveries of a click say about themselves, as processes:
//! a click delivered twice with event times on two UTC days (1 ms before and 1 ms after
//! midnight, in two files, the second loaded after the first was joined) is joined once and
//! `photon verify` says OK (issue 39, item 1).

mod common;
use common::{photon, run_until_drained, text};

#[test]
fn a_click_delivered_on_both_sides_of_midnight_is_joined_once() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir(&logs).unwrap();
    let rejects = dir.path().join("rejects.txt");
    let store = format!("embedded:{}", dir.path().join("store").display());
    let now = photon::schema::now_ms();
    let midnight = now / 86_400_000 * 86_400_000;
    std::fs::write(
        logs.join("queries.jsonl"),
        format!(
            "{{\"query_id\":\"q1\",\"event_time\":{}}}\n",
            midnight - 5_000
        ),
    )
    .unwrap();
    let click =
        |at: u64| format!("{{\"click_id\":\"c1\",\"query_id\":\"q1\",\"event_time\":{at}}}\n");
    std::fs::write(logs.join("clicks.jsonl"), click(midnight - 1)).unwrap();
    run_until_drained(&store, &logs, &rejects);
    // The second delivery, in another file, loaded after the first one was joined.
    std::fs::write(logs.join("clicks-b.jsonl"), click(midnight + 1)).unwrap();
    run_until_drained(&store, &logs, &rejects);
    let export = photon(&["export", "--store", &store]);
    assert!(export.status.success(), "{}", text(&export.stderr));
    let joined = text(&export.stdout);
    assert_eq!(joined.lines().count(), 1, "one joined event: {joined}");
    let verify = photon(&["verify", "--store", &store, logs.to_str().unwrap()]);
    let stdout = text(&verify.stdout);
    assert!(
        verify.status.success(),
        "{stdout}\n{}",
        text(&verify.stderr)
    );
    assert!(stdout.contains("duplicates        0"), "{stdout}");
    assert!(stdout.contains("joined once       1"), "{stdout}");
}
