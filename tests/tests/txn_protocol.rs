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
/// store; `heartbeat_outlives_a_blocked_commit_task` below blocks the committing thread
/// outright.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_keeps_a_long_prewrite_alive() {
    use std::time::Instant;
    // The common test configuration's lock TTL (300 ms).
    let c = memory_client();
    let ttl = c.config().lock_ttl;
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

/// The heartbeat does not depend on the committing task being polled: a commit whose worker
/// thread is blocked (as a long synchronous stretch of a large write set blocks it) for three
/// TTLs after its prewrites keeps its primary alive, so a reader that meets the lock meanwhile
/// waits instead of fencing it, and the commit succeeds. The commit runs in a task of its
/// own, so its heartbeat is spawned into that worker's LIFO slot (which the other worker
/// cannot steal) and runs only because the prewrite yields after the primary's round. A
/// heartbeat polled beside the commit in the committing task (the design before) misses
/// every beat here and fails, and so would a prewrite that never yields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_outlives_a_blocked_commit_task() {
    use percolator::txn::CrashPoint;
    use std::time::{Duration, Instant};
    // The common test configuration's lock TTL (300 ms).
    let c = memory_client();
    let ttl = c.config().lock_ttl;
    // More cells than one prewrite round (256): the size at which the commit's own
    // stretches can outlast a TTL, and the prewrite yields between rounds.
    let writer = c.begin().await.unwrap();
    for i in 0..300 {
        writer.set(cell(&format!("blocked-{i:04}")), "v");
    }
    let primary = cell("blocked-0000");
    // When the commit's thread was blocked and unblocked. The reader polls these on its
    // own timer: a waker called from the blocked thread would put the reader in that
    // worker's LIFO slot, behind the block.
    type At = Arc<std::sync::Mutex<Option<Instant>>>;
    let (blocked_at, unblocked_at): (At, At) = (Arc::default(), Arc::default());
    let (blocked, unblocked) = (blocked_at.clone(), unblocked_at.clone());
    writer.set_crash_hook(Arc::new(move |point| {
        if point == CrashPoint::AllPrewritten {
            *blocked.lock().unwrap() = Some(Instant::now());
            // Blocks the worker thread running the commit, not just its task.
            std::thread::sleep(ttl * 3);
            *unblocked.lock().unwrap() = Some(Instant::now());
        }
        false
    }));
    let reader_client = c.clone();
    let reader = tokio::spawn(async move {
        let since = loop {
            if let Some(at) = *blocked_at.lock().unwrap() {
                break at;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        // Meet the primary's lock once its original TTL has expired.
        tokio::time::sleep_until((since + ttl * 3 / 2).into()).await;
        let t = reader_client.begin().await.unwrap();
        let reading_at = Instant::now();
        (t.start_ts(), reading_at, t.get(&primary).await.unwrap())
    });
    let commit_ts = tokio::spawn(async move { writer.commit().await })
        .await
        .unwrap()
        .expect("a commit kept alive by its heartbeat");
    let (read_ts, reading_at, read) = reader.await.unwrap();
    // The reader met the lock while the commit was blocked before its commit point: not a
    // read that came after the commit and proved nothing.
    let unblocked_at = unblocked_at
        .lock()
        .unwrap()
        .expect("the commit was blocked");
    assert!(
        reading_at < unblocked_at,
        "the reader began after the commit was unblocked"
    );
    assert!(
        read_ts < commit_ts,
        "read at {read_ts}, commit at {commit_ts}"
    );
    assert_eq!(read, None);
}
