//! `oracle serve --metrics-addr`: the real binary serves its counters on `/metrics`, and they
//! count the timestamps it hands out and its takeover.

mod common;

use common::OracleProcess;
use percolator_cli::testkit::scrape_metrics as scrape;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The value of the sample `series` (name and labels, exactly) in `text`.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_timestamps_served_and_leader_changes() {
    let dir = tempfile::tempdir().unwrap();
    let metrics: SocketAddr = {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        free.local_addr().unwrap()
    };
    let store = format!("embedded:{}", dir.path().join("store").display());
    let oracle = OracleProcess::start(
        &store,
        "127.0.0.1:0",
        &["--metrics-addr", &metrics.to_string()],
    );
    let client = oracle::OracleClient::new(vec![oracle.addr.clone()], Default::default()).unwrap();
    for _ in 0..10 {
        client.get_timestamp().await.unwrap();
    }
    // Polled: the counters are read at each scrape; the deadline only ends a hung run.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(text) = scrape(metrics).await {
            let ns = "{namespace=\"default\"}";
            let served = value(
                &text,
                &format!("percolator_oracle_timestamps_served_total{ns}"),
            );
            let took_over = value(
                &text,
                "percolator_oracle_leader_changes_total{namespace=\"default\",change=\"took_over\"}",
            );
            let leads = value(&text, &format!("percolator_oracle_leader{ns}"));
            if served.is_some_and(|n| n >= 10.0) {
                assert_eq!(took_over, Some(1.0), "{text}");
                assert_eq!(leads, Some(1.0), "{text}");
                assert!(
                    text.contains("# TYPE percolator_oracle_timestamps_served counter"),
                    "{text}"
                );
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no metrics counting the timestamps"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    oracle.kill();
}
