//! Two real `oracle serve` processes on one shared store (an in-process `minitikv`, reached
//! through `--store tikv:...`): SIGSTOP the leader until the standby has taken over and
//! answered, then SIGCONT it: nothing it answers afterwards breaks linearizability (it
//! answers "not leader"). Then SIGKILL the new leader: the old one takes over again.

mod common;

use common::OracleProcess;
use oracle::proto::Reply;
use oracle::testkit::{raw_request, Load, OnError};
use percolator_cli::testkit::{send_signal, SIGCONT, SIGSTOP};
use std::time::{Duration, Instant};

const GUARD: Duration = Duration::from_secs(60);

fn signal(process: &OracleProcess, sig: i32) {
    send_signal(process.child.id(), sig).expect("sending the signal");
}

/// Asks `addr` until it answers with timestamps (it has become the leader).
async fn until_serving(addr: &str) {
    let start = Instant::now();
    loop {
        if let (Reply::Timestamps { .. }, ..) = raw_request(addr).await {
            return;
        }
        assert!(start.elapsed() < GUARD, "{addr} never served");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigstop_leader_then_takeover() {
    let tikv = minitikv::start(minitikv::ServerConfig::in_memory())
        .await
        .expect("start minitikv");
    let store = format!("tikv:{}", tikv.endpoint());
    let knobs = ["--heartbeat-ms=100", "--lease-timeout-ms=1000"];
    let a = OracleProcess::start(&store, "127.0.0.1:0", &knobs);
    until_serving(&a.addr).await;
    let b = OracleProcess::start(&store, "127.0.0.1:0", &knobs);
    // Only one serves.
    let (reply, ..) = raw_request(b.addr.as_str()).await;
    assert!(matches!(reply, Reply::NotLeader { .. }), "{reply:?}");

    let addrs = vec![a.addr.clone(), b.addr.clone()];
    let client = common::quick_client(addrs, Duration::from_millis(10));
    let load = Load::start(&[client], 16, None, OnError::Panic);
    load.progress(500, GUARD).await;

    signal(&a, SIGSTOP);
    let a_addr = a.addr.clone();
    let early = tokio::spawn(async move { raw_request(a_addr.as_str()).await });
    until_serving(&b.addr).await;
    load.progress(500, GUARD).await;
    // The new leader has answered; now ask the stopped one, then continue it.
    let a_addr = a.addr.clone();
    let late = tokio::spawn(async move { raw_request(a_addr.as_str()).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    signal(&a, SIGCONT);
    let late = late.await.unwrap();
    let early = early.await.unwrap();
    load.progress(500, GUARD).await;

    // SIGKILL the new leader: the old one takes over again.
    b.kill();
    load.progress(500, GUARD).await;
    load.finish_and_check(&[&late, &early]).await;
    assert!(matches!(late.0, Reply::NotLeader { .. }), "{:?}", late.0);
    a.kill();
    tikv.shutdown().await;
}
