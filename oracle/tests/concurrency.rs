//! 3 clients x 64 tasks against the real `oracle serve` binary: every timestamp distinct,
//! strictly increasing per caller, linearizable.

mod common;

use common::{check_all, Call, Log, OracleProcess};
use oracle::{ClientConfig, OracleClient};
use percolator::TimestampSource;
use std::sync::Arc;
use std::time::Instant;

const CLIENTS: usize = 3;
const TASKS: usize = 64;
const CALLS: usize = 300;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_clients_sixty_four_tasks() {
    let server = OracleProcess::start("memory", "127.0.0.1:0", &[]);
    let log = Log::default();
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let client = OracleClient::new(vec![server.addr.clone()], ClientConfig::default()).unwrap();
        // One client is used through the TimestampSource trait, as transactions will.
        let source: Arc<dyn TimestampSource> = Arc::new(client.clone());
        for t in 0..TASKS {
            let (client, source, log) = (client.clone(), source.clone(), log.clone());
            let caller = c * TASKS + t;
            tasks.push(tokio::spawn(async move {
                let mut calls = Vec::with_capacity(CALLS);
                for _ in 0..CALLS {
                    let start = Instant::now();
                    let ts = if c == 0 {
                        source.get_timestamp().await.unwrap().0
                    } else {
                        client.get_timestamp().await.unwrap().0
                    };
                    calls.push(Call {
                        caller,
                        start,
                        end: Instant::now(),
                        ts,
                    });
                }
                log.push(calls);
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let calls = log.take();
    assert_eq!(calls.len(), CLIENTS * TASKS * CALLS);
    check_all(&calls);
    server.kill();
}
