//! Two oracle servers on one store (in one process, sharing one `Arc<dyn RawKv>`, each on
//! its own loopback socket): only one serves; kill it and the other takes over with no
//! overlap; freeze the leader (emulated SIGSTOP) until the standby has taken over and answered,
//! then resume it: it answers nothing below what the new leader gave.
//!
//! A multi-process version needs only `oracle serve --store tikv:...` for both servers.

mod common;

use common::{check_all, raw_request, wait_until, Call, Log};
use oracle::proto::Reply;
use oracle::{ClientConfig, OracleClient, ServerConfig, ServerHandle};
use percolator::kv::MemoryKv;
use percolator::RawKv;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
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
    }
}

struct Load {
    log: Log,
    done: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

fn load(addrs: Vec<String>, clients: usize, tasks_per: usize) -> Load {
    let log = Log::default();
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for c in 0..clients {
        let client = OracleClient::new(addrs.clone(), client_config()).unwrap();
        for t in 0..tasks_per {
            let (client, log, done, stop) =
                (client.clone(), log.clone(), done.clone(), stop.clone());
            let caller = c * tasks_per + t;
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
    }
    Load {
        log,
        done,
        stop,
        tasks,
    }
}

impl Load {
    async fn progress(&self, n: u64) {
        let target = self.done.load(Ordering::Relaxed) + n;
        wait_until("clients to make progress", GUARD, || {
            self.done.load(Ordering::Relaxed) >= target
        })
        .await;
    }

    async fn finish(self) -> Vec<Call> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await.unwrap();
        }
        self.log.take()
    }
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
    load.progress(2000).await;
    assert!(!b.is_leader());
    let epoch_a = a.epoch().unwrap();
    a.kill().await;
    wait_until("b to take over", GUARD, || b.is_leader()).await;
    assert!(b.epoch().unwrap() > epoch_a);
    load.progress(2000).await;
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
    load.progress(2000).await;
    // SIGSTOP: requests already read by a, and requests sent to it from now on, wait.
    a.pause();
    let in_flight = tokio::spawn(raw_request(a.local_addr()));
    wait_until("b to take over", GUARD, || b.is_leader()).await;
    load.progress(2000).await;
    // The new leader has answered; now ask the frozen one, then let it run again.
    let late = tokio::spawn(raw_request(a.local_addr()));
    tokio::time::sleep(Duration::from_millis(50)).await;
    load.progress(500).await;
    // Worst schedule after SIGCONT: requests are served before the heartbeat runs.
    a.resume_serving_only();
    let (late_reply, late_start, late_end) = late.await.unwrap();
    let (early_reply, early_start, early_end) = in_flight.await.unwrap();
    a.resume();
    load.progress(500).await;
    let mut calls = load.finish().await;
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
    // Stricter than linearizability: the deposed leader answers nothing at all.
    assert!(
        matches!(late_reply, Reply::NotLeader { .. }),
        "{late_reply:?}"
    );
    assert!(
        matches!(early_reply, Reply::NotLeader { .. }),
        "{early_reply:?}"
    );
    assert!(!a.is_leader());
    a.shutdown().await;
    b.shutdown().await;
}
