//! `observers::admin::is_drained` from another process's point of view, with the worker
//! registry written by hand: a worker whose published progress moves during the check is
//! busy, one that stops heartbeating is silent, one whose progress stands still is idle, and
//! any notify key is a backlog. Beside workers of its own process (`is_drained_beside`) the
//! check reads their counters instead of waiting for their heartbeats.

use observers::admin::{is_drained, is_drained_beside, NotDrained};
use percolator::kv::MemoryKv;
use percolator::ts::LocalClock;
use percolator::{Cell, Client};
use std::sync::Arc;
use std::time::Duration;

const LIVENESS: Duration = Duration::from_millis(300);

fn client() -> Client {
    Client::new(Arc::new(MemoryKv::new()), Arc::new(LocalClock::new()))
}

/// Writes worker `id`'s record as a worker's heartbeat does: beat (oracle ms), progress.
async fn beat(client: &Client, id: &str, handled: u64) {
    let now = client.oracle().get_timestamp().await.expect("ts");
    let mut record = now.physical_ms().to_be_bytes().to_vec();
    record.extend_from_slice(&handled.to_be_bytes());
    let key = client.codec().meta(format!("workers/{id}"));
    client.store().put(key, record).await.expect("put");
}

/// A fake worker that has beaten once and goes on heartbeating every 20 ms until aborted;
/// `busy` makes its progress move on every beat.
async fn heartbeating(
    client: &Client,
    id: &'static str,
    busy: bool,
) -> tokio::task::JoinHandle<()> {
    beat(client, id, 7).await;
    let client = client.clone();
    tokio::spawn(async move {
        let mut handled = 7;
        loop {
            tokio::time::sleep(Duration::from_millis(20)).await;
            if busy {
                handled += 1;
            }
            beat(&client, id, handled).await;
        }
    })
}

#[tokio::test]
async fn an_idle_worker_and_no_backlog_is_drained() {
    let client = client();
    let idle = heartbeating(&client, "idle", false).await;
    assert_eq!(is_drained(&client, LIVENESS).await.expect("check"), Ok(()));
    idle.abort();
}

#[tokio::test]
async fn a_worker_whose_progress_moves_during_the_check_is_busy() {
    let client = client();
    let idle = heartbeating(&client, "idle", false).await;
    let busy = heartbeating(&client, "busy", true).await;
    assert_eq!(
        is_drained(&client, LIVENESS).await.expect("check"),
        Err(NotDrained::Busy {
            worker: "busy".to_string()
        })
    );
    idle.abort();
    busy.abort();
}

#[tokio::test]
async fn a_live_worker_that_stops_heartbeating_is_silent() {
    let client = client();
    beat(&client, "quiet", 3).await;
    assert_eq!(
        is_drained(&client, LIVENESS).await.expect("check"),
        Err(NotDrained::Silent {
            worker: "quiet".to_string()
        })
    );
    // Once its heartbeat is older than the liveness horizon it counts as dead.
    tokio::time::sleep(LIVENESS * 2).await;
    assert_eq!(is_drained(&client, LIVENESS).await.expect("check"), Ok(()));
}

#[tokio::test]
async fn any_notification_left_is_a_backlog() {
    let client = client();
    let cell = Cell::new("t", "r", "c");
    client.weak_notify(&cell).await.expect("notify");
    assert_eq!(
        is_drained(&client, LIVENESS).await.expect("check"),
        Err(NotDrained::Backlog { cell })
    );
}

/// A worker of this process whose heartbeat is far off (30 s).
fn local_worker(client: &Client, id: &str, registry: observers::Registry) -> observers::Worker {
    let config = observers::WorkerConfig {
        id: id.to_string(),
        heartbeat: Duration::from_secs(30),
        ..observers::WorkerConfig::default()
    };
    observers::Worker::start(client.clone(), Arc::new(registry), config)
}

/// The worker's record is in the registry (its first heartbeat), so a check that took it for
/// a worker of another process would wait for two more of its heartbeats.
async fn registered(client: &Client, id: &str) {
    while !observers::admin::workers(client, Duration::from_secs(60))
        .await
        .expect("workers")
        .iter()
        .any(|w| w.id == id)
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn an_idle_local_worker_is_drained_without_waiting_for_its_heartbeats() {
    let client = client();
    let local = local_worker(&client, "local", observers::Registry::new());
    registered(&client, "local").await;
    let liveness = Duration::from_secs(60);
    // As a worker of another process, it would need two heartbeats 30 s apart.
    assert!(
        tokio::time::timeout(Duration::from_secs(1), is_drained(&client, liveness))
            .await
            .is_err(),
        "answered before the worker's heartbeats"
    );
    let beside = tokio::time::timeout(
        Duration::from_secs(20),
        is_drained_beside(&client, liveness, &[&local]),
    )
    .await
    .expect("answered without heartbeats");
    assert_eq!(beside.expect("check"), Ok(()));
    local.shutdown().await;
}

#[tokio::test]
async fn a_local_worker_with_a_run_in_flight_is_busy() {
    let client = client();
    let started = Arc::new(tokio::sync::Notify::new());
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let mut registry = observers::Registry::new();
    registry
        .strong(
            "t",
            "c",
            "held",
            observers::observer_fn_with(
                (started.clone(), release.clone()),
                |(started, release), _txn, _cell| async move {
                    started.notify_one();
                    let _permit = release.acquire().await;
                    Ok(())
                },
            ),
        )
        .expect("register");
    let local = local_worker(&client, "local", registry);
    local.wait_until_settled().await;
    let txn = client.begin().await.expect("begin");
    txn.set(Cell::new("t", "r", "c"), "v");
    txn.commit().await.expect("commit");
    started.notified().await;
    // The run's ordinal: the count of runs started when it started.
    let run = local.runs_started();
    assert_eq!(local.oldest_run_in_flight(), Some(run));
    assert_eq!(
        is_drained_beside(&client, Duration::from_secs(60), &[&local])
            .await
            .expect("check"),
        Err(NotDrained::Busy {
            worker: "local".to_string()
        })
    );
    release.add_permits(1);
    local.wait_until_quiescent().await.expect("quiescent");
    assert_eq!(local.oldest_run_in_flight(), None, "the run is over");
    assert_eq!(
        is_drained_beside(&client, Duration::from_secs(60), &[&local])
            .await
            .expect("check"),
        Ok(())
    );
    local.shutdown().await;
}

#[tokio::test]
async fn a_busy_worker_of_another_process_beside_a_local_one_is_busy() {
    let client = client();
    let local = local_worker(&client, "local", observers::Registry::new());
    registered(&client, "local").await;
    let busy = heartbeating(&client, "busy", true).await;
    assert_eq!(
        is_drained_beside(&client, LIVENESS, &[&local])
            .await
            .expect("check"),
        Err(NotDrained::Busy {
            worker: "busy".to_string()
        })
    );
    busy.abort();
    local.shutdown().await;
}

/// A writer of this process that is not a worker run (as a sweep is) puts a key and removes
/// it again and again: a scan can pass between the two, the put count cannot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_put_by_another_writer_during_the_check_are_not_drained() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let client = client();
    let local = local_worker(&client, "local", observers::Registry::new());
    registered(&client, "local").await;
    let puts = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let churn = {
        let (client, puts, stop) = (client.clone(), puts.clone(), stop.clone());
        tokio::spawn(async move {
            let cell = Cell::new("unobserved", "r", "c");
            while !stop.load(Ordering::Relaxed) {
                client.weak_notify(&cell).await.expect("notify");
                let keys: Vec<Vec<u8>> = client
                    .store()
                    .scan(
                        client.codec().notify_from(0),
                        64,
                        percolator::kv::ScanOrder::Forward,
                    )
                    .await
                    .expect("scan")
                    .into_iter()
                    .map(|(k, _)| k)
                    .collect();
                client.remove_notify_keys(keys).await.expect("remove");
                puts.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    // Checks that exercised the case: a check returns at once when its scan meets the writer's
    // key (a backlog), so on a loaded machine many do; check until three had a put inside them
    // (the deadline only bounds a writer that never runs).
    let mut exercised = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while exercised < 3 && std::time::Instant::now() < deadline {
        let before = puts.load(Ordering::SeqCst);
        let answer = is_drained_beside(&client, Duration::from_secs(60), &[&local])
            .await
            .expect("check");
        // Two puts counted during the check: at least one began and ended inside it.
        if puts.load(Ordering::SeqCst) >= before + 2 {
            exercised += 1;
            assert!(
                matches!(
                    answer,
                    Err(NotDrained::Put { .. }) | Err(NotDrained::Backlog { .. })
                ),
                "{answer:?}"
            );
        }
    }
    assert!(exercised > 0, "the writer never ran during a check");
    stop.store(true, Ordering::Relaxed);
    churn.await.expect("churn");
    local.shutdown().await;
}
