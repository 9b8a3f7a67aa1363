//! 20 SIGKILL-and-restart cycles of a real `oracle serve` on an embedded store while clients
//! keep asking: no timestamp repeats or goes back. Every restart also shifts the server's
//! wall clock backwards by up to 2 s, so only the persisted window keeps timestamps fresh.

mod common;

use common::OracleProcess;
use oracle::testkit::{check_all, free_port, wait_until, Load, OnError};
use oracle::{ClientConfig, OracleClient};
use std::time::Duration;

const CYCLES: usize = 20;
const TASKS: usize = 16;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_restart_cycles() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("embedded:{}", dir.path().join("store").display());
    let listen = format!("127.0.0.1:{}", free_port());
    let client = common::quick_client(vec![listen.clone()], Duration::from_millis(5));
    // Calls that fail while no server runs are simply retried.
    let load = Load::start(&[client], TASKS, None, OnError::Retry);
    for cycle in 0..CYCLES {
        let skew = format!("--clock-skew-ms=-{}", (cycle % 3) * 1000);
        let server = OracleProcess::start(&store, &listen, &[&skew]);
        let target = load.done() + 300 + (cycle as u64 * 37) % 500;
        wait_until("clients to be served", Duration::from_secs(30), || {
            load.done() >= target
        })
        .await;
        server.kill();
    }
    // The last requests are pending against a dead server; bring one up to finish them.
    let server = OracleProcess::start(&store, &listen, &[]);
    let calls = load.finish().await;
    server.kill();
    assert!(calls.len() >= CYCLES * 300);
    check_all(&calls);
}

/// SIGTERM: the server exits cleanly and leaves the record released (no leader), so a
/// standby would take over at once; the next server starts above the released window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_releases_leadership() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let store = format!("embedded:{}", path.display());
    let mut server = OracleProcess::start(&store, "127.0.0.1:0", &[]);
    let client = OracleClient::new(vec![server.addr.clone()], ClientConfig::default()).unwrap();
    let before = client.get_timestamp().await.unwrap();
    percolator_cli::testkit::sigterm(server.child.id()).unwrap();
    assert!(server.child.wait().unwrap().success());
    let kv = percolator::txn::open_embedded(&path, Default::default()).unwrap();
    let bytes = percolator::RawKv::get(&kv, &oracle::record_key("default"))
        .await
        .unwrap()
        .expect("oracle record");
    let rec = oracle::OracleRecord::decode(&bytes).unwrap();
    assert!(rec.leader.is_none(), "{rec:?}");
    assert!(rec.window_end >= before.0);
    drop(kv);
    let server = OracleProcess::start(&store, "127.0.0.1:0", &[]);
    let client = OracleClient::new(vec![server.addr.clone()], ClientConfig::default()).unwrap();
    assert!(client.get_timestamp().await.unwrap().0 > rec.window_end);
    server.kill();
}
