//! The protocol corner cases (`common/protocol.rs`) on the in-memory store; on TiKV in
//! `txn_tikv.rs`.

#[macro_use]
mod common;
use common::*;
use percolator::kv::MemoryKv;
use std::sync::Arc;

macro_rules! on_memory {
    ($($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                protocol::$name(Arc::new(MemoryKv::new())).await;
            }
        )*
    };
}

for_each_protocol_check!(on_memory);

/// A commit whose prewrite phase outlasts the lock TTL many times over keeps its primary
/// alive by heartbeats: a reader that meets the primary's lock meanwhile waits instead of
/// fencing it, and the commit succeeds. (The prewrite here is CPU-bound on the in-memory
/// store, the case in which a heartbeat sharing the committing task could starve.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_keeps_a_long_prewrite_alive() {
    use percolator::txn::ClientConfig;
    use std::time::{Duration, Instant};
    let ttl = Duration::from_millis(300);
    let c = client_on(
        Arc::new(MemoryKv::new()),
        ClientConfig {
            lock_ttl: ttl,
            ..test_config()
        },
    );
    // Grow the write set until one prewrite phase takes well over 4 TTLs on this machine and
    // the reader met the lock (began before the commit point).
    let mut cells = 5_000usize;
    for round in 0..12 {
        let writer = c.begin().await.unwrap();
        for i in 0..cells {
            writer.set(cell(&format!("bulk{round}-{i:07}")), "v");
        }
        let primary = cell(&format!("bulk{round}-{:07}", 0));
        let reader_client = c.clone();
        let reader = tokio::spawn(async move {
            // Meet the primary's lock after its original TTL has long expired.
            tokio::time::sleep(ttl * 3).await;
            let t = reader_client.begin().await.unwrap();
            (t.start_ts(), t.get(&primary).await.unwrap())
        });
        let started = Instant::now();
        let outcome = writer.commit().await;
        let took = started.elapsed();
        let (read_ts, read) = reader.await.unwrap();
        let commit_ts = match outcome {
            Ok(ts) => ts,
            Err(e) => panic!("a {cells}-cell commit taking {took:?} failed: {e:?}"),
        };
        // Snapshot isolation either way: the value exactly when committed before the read.
        let expected = (commit_ts < read_ts).then(|| b"v".to_vec());
        assert_eq!(read, expected, "round {round}");
        if took >= ttl * 4 && read_ts < commit_ts {
            return;
        }
        // Too short, or the prewrite phase ended before the reader began (batched
        // prewrites are fast; the secondaries took the time): a larger write set.
        if took < ttl * 4 {
            cells *= 4;
        } else if read_ts >= commit_ts {
            cells *= 2;
        }
    }
    panic!(
        "no round had a commit longer than {:?} met by the reader",
        ttl * 4
    );
}

/// The heartbeat does not depend on the committing task being polled: a commit whose thread
/// is blocked (as a long synchronous stretch of a large write set blocks it) for three TTLs
/// after its prewrites keeps its primary alive, so a reader that meets the lock meanwhile
/// waits instead of fencing it, and the commit succeeds. A heartbeat polled beside the
/// commit in the committing task (the design before) misses every beat here and fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_outlives_a_blocked_commit_task() {
    use percolator::txn::{ClientConfig, CrashPoint};
    use std::time::Duration;
    let ttl = Duration::from_millis(300);
    let c = client_on(
        Arc::new(MemoryKv::new()),
        ClientConfig {
            lock_ttl: ttl,
            ..test_config()
        },
    );
    // More cells than one prewrite round: the size at which the commit's own stretches
    // can outlast a TTL.
    let writer = c.begin().await.unwrap();
    for i in 0..300 {
        writer.set(cell(&format!("blocked-{i:04}")), "v");
    }
    let primary = cell("blocked-0000");
    let (blocked_tx, blocked_rx) = tokio::sync::oneshot::channel::<()>();
    let blocked_tx = std::sync::Mutex::new(Some(blocked_tx));
    writer.set_crash_hook(Arc::new(move |point| {
        if point == CrashPoint::AllPrewritten {
            if let Some(tx) = blocked_tx.lock().unwrap().take() {
                let _ = tx.send(());
            }
            // Blocks this worker thread, not just this task.
            std::thread::sleep(ttl * 3);
        }
        false
    }));
    let reader_client = c.clone();
    let reader = tokio::spawn(async move {
        blocked_rx.await.unwrap();
        // Meet the primary's lock once its original TTL has expired.
        tokio::time::sleep(ttl * 3 / 2).await;
        let t = reader_client.begin().await.unwrap();
        (t.start_ts(), t.get(&primary).await.unwrap())
    });
    let commit_ts = writer
        .commit()
        .await
        .expect("a commit kept alive by its heartbeat");
    let (read_ts, read) = reader.await.unwrap();
    // The reader began while the commit was blocked before its commit point.
    assert!(
        read_ts < commit_ts,
        "read at {read_ts}, commit at {commit_ts}"
    );
    assert_eq!(read, None);
}
