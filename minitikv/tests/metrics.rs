//! `minitikv serve --metrics-addr`: the real binary serves its RPC counts and layout on
//! `/metrics`, and they count a client's requests.

use percolator_cli::testkit::scrape_metrics as scrape;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Kills the server when the test ends, however it ends.
struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_request_counts_and_regions() {
    let metrics: SocketAddr = {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        free.local_addr().unwrap()
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_minitikv"))
        .args(["serve", "--listen", "127.0.0.1:0", "--metrics-addr"])
        .arg(metrics.to_string())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _server = Server(child);
    let endpoint = line.trim().strip_prefix("minitikv listening on ").unwrap();
    let spec: percolator_cli::StoreSpec = format!("tikv:{endpoint}").parse().unwrap();
    let kv = percolator_cli::store::open_store(&spec, percolator::kv::Durability::Process)
        .await
        .unwrap();
    kv.put(b"k".to_vec(), b"v".to_vec()).await.unwrap();
    // Polled: the counts are read at each scrape; the deadline only ends a hung run.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(text) = scrape(metrics).await {
            let puts = text.lines().any(|l| {
                l.starts_with("percolator_minitikv_requests_total{method=\"")
                    && l.to_ascii_lowercase().contains("put")
                    && !l.ends_with(" 0")
            });
            if puts {
                assert!(text.contains("\npercolator_minitikv_regions "), "{text}");
                assert!(
                    text.contains("# TYPE percolator_minitikv_faults counter"),
                    "{text}"
                );
                break;
            }
        }
        assert!(Instant::now() < deadline, "no metrics counting the put");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
