//! 3 clients x 64 tasks against the real `oracle serve` binary: every timestamp distinct,
//! strictly increasing per caller, linearizable.

mod common;

use common::OracleProcess;
use oracle::testkit::{check_all, Load, OnError};
use oracle::{ClientConfig, OracleClient};
use percolator::TimestampSource;
use std::sync::Arc;

const CLIENTS: usize = 3;
const TASKS: usize = 64;
const CALLS: usize = 300;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_clients_sixty_four_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("embedded:{}", dir.path().join("store").display());
    let server = OracleProcess::start(&store, "127.0.0.1:0", &[]);
    let clients: Vec<Arc<dyn TimestampSource>> = (0..CLIENTS)
        .map(|_| {
            let client =
                OracleClient::new(vec![server.addr.clone()], ClientConfig::default()).unwrap();
            Arc::new(client) as Arc<dyn TimestampSource>
        })
        .collect();
    // Each requester makes its CALLS calls; finish() then only collects them.
    let load = Load::start(&clients, TASKS, Some(CALLS), OnError::Panic);
    while load.done() < (CLIENTS * TASKS * CALLS) as u64 {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let calls = load.finish().await;
    assert_eq!(calls.len(), CLIENTS * TASKS * CALLS);
    check_all(&calls);
    server.kill();
}
