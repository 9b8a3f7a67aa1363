//! Two oracle servers on one store (in one process, sharing one `Arc<dyn RawKv>`, each on
//! its own loopback socket): only one serves; kill it and the other takes over with no
//! overlap; freeze the leader (emulated SIGSTOP) until the standby has taken over and answered,
//! then resume it: it answers nothing below what the new leader gave.
//!
//! A multi-process version needs only `oracle serve --store tikv:...` for both servers.

use oracle::proto::Reply;
use oracle::testkit::{check_all, raw_request, wait_until, Load, OnError};
use oracle::{ClientConfig, OracleClient, ServerConfig, ServerHandle};
use percolator::kv::MemoryKv;
use percolator::{RawKv, TimestampSource};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

const GUARD: Duration = Duration::from_secs(30);

fn config() -> ServerConfig {
    ServerConfig {
        heartbeat_interval: Duration::from_millis(50),
        lease_timeout: Duration::from_millis(400),
        exclusive: false,
        ..ServerConfig::default()
    }
}

async fn start(kv: &Arc<dyn RawKv>) -> ServerHandle {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    ServerHandle::start(config(), kv.clone(), listener).unwrap()
}

fn client_config() -> ClientConfig {
    ClientConfig {
        rpc_timeout: Duration::from_millis(200),
        connect_timeout: Duration::from_millis(200),
        request_timeout: Duration::from_secs(20),
        retry_backoff: Duration::from_millis(10),
        give_up_refused: None,
    }
}

/// `tasks_per` requesters on each of `clients` clients of `addrs`; every call must succeed.
fn load(addrs: Vec<String>, clients: usize, tasks_per: usize) -> Load {
    let clients: Vec<Arc<dyn TimestampSource>> = (0..clients)
        .map(|_| {
            let client = OracleClient::new(addrs.clone(), client_config()).unwrap();
            Arc::new(client) as Arc<dyn TimestampSource>
        })
        .collect();
    Load::start(&clients, tasks_per, None, OnError::Panic)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standby_takes_over_when_leader_dies() {
    let kv: Arc<dyn RawKv> = Arc::new(MemoryKv::new());
    let a = start(&kv).await;
    wait_until("a to lead", GUARD, || a.is_leader()).await;
    let b = start(&kv).await;
    // Only one serves: the standby refuses.
    let (reply, ..) = raw_request(b.local_addr()).await;
    assert!(
        matches!(&reply, Reply::NotLeader { hint, .. } if *hint == a.local_addr().to_string()),
        "standby answered {reply:?}"
    );
    assert!(!b.is_leader());
    // Standby listed first: clients follow its "not leader" hint.
    let addrs = vec![b.local_addr().to_string(), a.local_addr().to_string()];
    let load = load(addrs, 2, 16);
    load.progress(2000, GUARD).await;
    assert!(!b.is_leader());
    let epoch_a = a.epoch().unwrap();
    a.kill().await;
    wait_until("b to take over", GUARD, || b.is_leader()).await;
    assert!(b.epoch().unwrap() > epoch_a);
    load.progress(2000, GUARD).await;
    let calls = load.finish().await;
    check_all(&calls);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_leader_does_not_answer_after_takeover() {
    let kv: Arc<dyn RawKv> = Arc::new(MemoryKv::new());
    let a = start(&kv).await;
    wait_until("a to lead", GUARD, || a.is_leader()).await;
    let b = start(&kv).await;
    let addrs = vec![a.local_addr().to_string(), b.local_addr().to_string()];
    let load = load(addrs, 2, 16);
    load.progress(2000, GUARD).await;
    // SIGSTOP: requests already read by a, and requests sent to it from now on, wait.
    a.pause();
    let in_flight = tokio::spawn(raw_request(a.local_addr()));
    wait_until("b to take over", GUARD, || b.is_leader()).await;
    load.progress(2000, GUARD).await;
    // The new leader has answered; now ask the frozen one, then let it run again.
    let late = tokio::spawn(raw_request(a.local_addr()));
    tokio::time::sleep(Duration::from_millis(50)).await;
    load.progress(500, GUARD).await;
    // Worst schedule after SIGCONT: requests are served before the heartbeat runs.
    a.resume_serving_only();
    let late = late.await.unwrap();
    let early = in_flight.await.unwrap();
    a.resume();
    load.progress(500, GUARD).await;
    load.finish_and_check(&[&late, &early]).await;
    // Stricter than linearizability: the deposed leader answers nothing at all.
    assert!(matches!(late.0, Reply::NotLeader { .. }), "{:?}", late.0);
    assert!(matches!(early.0, Reply::NotLeader { .. }), "{:?}", early.0);
    assert!(!a.is_leader());
    a.shutdown().await;
    b.shutdown().await;
}
