//! Two real `oracle serve` processes on one shared store (an in-process `minitikv`, reached
//! through `--store tikv:...`): SIGSTOP the leader until the standby has taken over and
//! answered, then SIGCONT it: nothing it answers afterwards breaks linearizability (it
//! answers "not leader"). Then SIGKILL the new leader: the old one takes over again.

mod common;

use common::{check_all, raw_request, wait_until, Call, Log, OracleProcess};
use oracle::proto::Reply;
use oracle::{ClientConfig, OracleClient};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const GUARD: Duration = Duration::from_secs(60);

fn signal(process: &OracleProcess, sig: &str) {
    let status = std::process::Command::new("kill")
        .args([sig, &process.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {sig}");
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

    let config = ClientConfig {
        rpc_timeout: Duration::from_millis(300),
        connect_timeout: Duration::from_millis(300),
        request_timeout: Duration::from_secs(30),
        retry_backoff: Duration::from_millis(10),
    };
    let client = OracleClient::new(vec![a.addr.clone(), b.addr.clone()], config).unwrap();
    let log = Log::default();
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for caller in 0..16 {
        let (client, log, done, stop) = (client.clone(), log.clone(), done.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut calls = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let start = Instant::now();
                let ts = client.get_timestamp().await.unwrap();
                calls.push(Call {
                    caller,
                    start,
                    end: Instant::now(),
                    ts: ts.0,
                });
                done.fetch_add(1, Ordering::Relaxed);
            }
            log.push(calls);
        }));
    }
    let progress = |n: u64| {
        let done = done.clone();
        async move {
            let target = done.load(Ordering::Relaxed) + n;
            wait_until("clients to make progress", GUARD, || {
                done.load(Ordering::Relaxed) >= target
            })
            .await;
        }
    };
    progress(500).await;

    signal(&a, "-STOP");
    let a_addr = a.addr.clone();
    let early = tokio::spawn(async move { raw_request(a_addr.as_str()).await });
    until_serving(&b.addr).await;
    progress(500).await;
    // The new leader has answered; now ask the stopped one, then continue it.
    let a_addr = a.addr.clone();
    let late = tokio::spawn(async move { raw_request(a_addr.as_str()).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    signal(&a, "-CONT");
    let (late_reply, late_start, late_end) = late.await.unwrap();
    let (early_reply, early_start, early_end) = early.await.unwrap();
    progress(500).await;

    // SIGKILL the new leader: the old one takes over again.
    b.kill();
    progress(500).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let mut calls = log.take();
    for (reply, start, end, caller) in [
        (&late_reply, late_start, late_end, 10_000),
        (&early_reply, early_start, early_end, 10_001),
    ] {
        if let Reply::Timestamps { first, .. } = reply {
            calls.push(Call {
                caller,
                start,
                end,
                ts: *first,
            });
        }
    }
    check_all(&calls);
    assert!(
        matches!(late_reply, Reply::NotLeader { .. }),
        "{late_reply:?}"
    );
    a.kill();
    tikv.shutdown().await;
}
