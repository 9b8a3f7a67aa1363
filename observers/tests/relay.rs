//! Relayed hints (`observers::relay`): a worker in one process runs what a client in another
//! commits without scanning for it, and a datagram that names nothing real runs nothing.
//! Two clients on one store stand for the two processes: each has its own hint channel, so
//! the worker's client never sees the loader's commits but through the relay.

use observers::relay::wire;
use observers::{observer_fn, HintListener, HintRelay, Registry, Worker, WorkerConfig};
use percolator::kv::MemoryKv;
use percolator::ts::LocalClock;
use percolator::{Cell, Client, ClientConfig};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

const BOUND: Duration = Duration::from_secs(30);

/// Polls `done` every 10 ms until it holds, failing the test after [`BOUND`].
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + BOUND;
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {BOUND:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A registry whose observer on `t/c` sends each cell it runs on to the returned receiver.
fn seen_registry() -> (Registry, mpsc::UnboundedReceiver<Cell>) {
    let (ran, runs) = mpsc::unbounded_channel();
    let mut registry = Registry::new();
    registry
        .strong(
            "t",
            "c",
            "seen",
            observer_fn(move |_txn, cell: Cell| {
                let ran = ran.clone();
                async move {
                    let _ = ran.send(cell);
                    Ok(())
                }
            }),
        )
        .expect("register");
    (registry, runs)
}

/// A client of namespace `test` on `store`.
fn client_on(store: &Arc<MemoryKv>, clock: &Arc<LocalClock>) -> Client {
    Client::with_config(
        store.clone(),
        clock.clone(),
        ClientConfig::with_namespace("test"),
    )
}

/// A worker process and a loader process on one store: a worker scanning once an hour, with
/// a listener; a loader client. Returns the worker, the loader's client, the listener and
/// the cells the observer ran on.
async fn two_processes() -> (
    Worker,
    Client,
    Arc<HintListener>,
    mpsc::UnboundedReceiver<Cell>,
) {
    let store = Arc::new(MemoryKv::new());
    let clock = Arc::new(LocalClock::new());
    let (registry, runs) = seen_registry();
    let loader = client_on(&store, &clock);
    // The loader declares what it writes as observed, as a loader process does.
    registry.declare(&loader);
    // Seeded before the worker starts: its scanners' first pass meets this key, so once
    // the worker counts a scanned key that pass is under way (and it began before any
    // later commit), and the next is an hour away.
    write(&loader, "seed").await;
    let listener = HintListener::bind("127.0.0.1:0".parse().unwrap(), None)
        .await
        .expect("bind");
    let worker = Worker::start(
        client_on(&store, &clock),
        Arc::new(registry),
        WorkerConfig {
            idle_interval: Duration::from_secs(3600),
            max_idle_interval: Duration::from_secs(3600),
            follow_shared_counts: None,
            heartbeat: Duration::from_millis(50),
            hint_listener: Some(listener.clone()),
            ..WorkerConfig::default()
        },
    );
    worker.wait_until_settled().await;
    let metrics = worker.metrics();
    until("the scanners' first pass", || {
        metrics.snapshot().scanned >= 1
    })
    .await;
    (worker, loader, listener, runs)
}

async fn write(client: &Client, row: &str) {
    let txn = client.begin().await.expect("begin");
    txn.set(Cell::new("t", row, "c"), b"v".to_vec());
    txn.commit().await.expect("commit");
}

/// Waits for the observer's run on `row` (runs on other rows pass by).
async fn ran_on(runs: &mut mpsc::UnboundedReceiver<Cell>, row: &str) {
    let want = Cell::new("t", row, "c");
    tokio::time::timeout(BOUND, async {
        while let Some(cell) = runs.recv().await {
            if cell == want {
                return;
            }
        }
        panic!("the worker stopped");
    })
    .await
    .unwrap_or_else(|_| panic!("no run on {row} within {BOUND:?}: the relay did not bring it"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_runs_another_process_commits_relayed_not_scanned() {
    let (worker, loader, listener, mut runs) = two_processes().await;
    let relay = HintRelay::spawn(&loader, Duration::from_millis(20));
    until("the relay knows the worker", || {
        relay.targets() == vec![listener.local_addr()]
    })
    .await;
    // Operators see where it listens (`percolator-ctl status`).
    let infos = observers::admin::workers(&loader, Duration::from_secs(60))
        .await
        .expect("the worker registry");
    assert_eq!(infos.len(), 1);
    assert_eq!(infos[0].hint_addr.as_deref(), Some(listener.advertised()));
    let hinted_before = worker.metrics().snapshot().hinted;
    write(&loader, "relayed").await;
    ran_on(&mut runs, "relayed").await;
    assert!(relay.keys_relayed() >= 1);
    assert!(worker.metrics().snapshot().hinted > hinted_before);
    // Leaving, the worker deletes its address: the relay stops sending to it.
    worker.shutdown().await;
    until("the relay forgets the worker", || {
        relay.targets().is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_datagram_that_names_nothing_real_runs_nothing() {
    let (worker, loader, listener, mut runs) = two_processes().await;
    let forger = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let to = listener.local_addr();
    // A well-formed datagram of the worker's namespace naming a notify key of an observed
    // cell that no one wrote, then one of another namespace, then no datagram at all.
    let forged = loader
        .codec()
        .notify(&Cell::new("t", "forged", "c"), 1 << 40, 0);
    for d in wire::encode(&loader.codec().namespace(), [forged.as_slice()], 1400) {
        forger.send_to(&d, to).await.unwrap();
    }
    for d in wire::encode(b"elsewhere", [forged.as_slice()], 1400) {
        forger.send_to(&d, to).await.unwrap();
    }
    forger.send_to(b"GET / HTTP/1.1\r\n\r\n", to).await.unwrap();
    until("the garbage received", || listener.malformed() == 1).await;
    assert_eq!(
        listener.dropped(),
        1,
        "the other namespace's datagram has no route here"
    );
    // A real commit relayed after them is run: the listener and the worker go on, and by
    // then the forged key (routed first, taken in order) has been handled.
    let relay = HintRelay::spawn(&loader, Duration::from_millis(20));
    until("the relay knows the worker", || !relay.targets().is_empty()).await;
    write(&loader, "real").await;
    ran_on(&mut runs, "real").await;
    until("the runs ended", || worker.oldest_run_in_flight().is_none()).await;
    while let Ok(cell) = runs.try_recv() {
        assert_ne!(cell.row, b"forged".to_vec(), "a forged key ran");
    }
    assert_eq!(
        worker.metrics().snapshot().hinted,
        1,
        "only the real key was dispatched from a datagram"
    );
    worker.shutdown().await;
}

/// A process that loads beside its own listening workers relays only to other processes'
/// (its own get its commits as in-process hints).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_beside_its_own_listener_leaves_it_out() {
    let store = Arc::new(MemoryKv::new());
    let clock = Arc::new(LocalClock::new());
    let mut workers = Vec::new();
    let mut listeners = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..2 {
        let client = client_on(&store, &clock);
        let (registry, _runs) = seen_registry();
        let listener = HintListener::bind("127.0.0.1:0".parse().unwrap(), None)
            .await
            .expect("bind");
        workers.push(Worker::start(
            client.clone(),
            Arc::new(registry),
            WorkerConfig {
                heartbeat: Duration::from_millis(50),
                hint_listener: Some(listener.clone()),
                ..WorkerConfig::default()
            },
        ));
        listeners.push(listener);
        clients.push(client);
    }
    let relay =
        HintRelay::spawn_beside(&clients[0], Duration::from_millis(20), Some(&listeners[0]));
    until("the relay knows the other process's worker alone", || {
        relay.targets() == vec![listeners[1].local_addr()]
    })
    .await;
    for worker in &workers {
        worker.shutdown().await;
    }
}

/// A worker whose observer on `t/c` fails every run, its first run held until `release`
/// is notified; the worker scans once an hour and retries a failure after an hour, so
/// only datagrams start runs. Returns the worker, the client, the listener, the calls
/// counter, a receiver told when the first call began, and the release.
async fn failing_worker(
    max_failures: u32,
) -> (
    Worker,
    Client,
    Arc<HintListener>,
    Arc<std::sync::atomic::AtomicU64>,
    mpsc::UnboundedReceiver<()>,
    Arc<tokio::sync::Notify>,
) {
    use std::sync::atomic::{AtomicU64, Ordering};
    let store = Arc::new(MemoryKv::new());
    let clock = Arc::new(LocalClock::new());
    let client = client_on(&store, &clock);
    let calls = Arc::new(AtomicU64::new(0));
    let release = Arc::new(tokio::sync::Notify::new());
    let (began, first) = mpsc::unbounded_channel();
    let mut registry = Registry::new();
    {
        let (calls, release) = (calls.clone(), release.clone());
        registry
            .strong(
                "t",
                "c",
                "fails",
                observer_fn(move |_txn, _cell: Cell| {
                    let (calls, release, began) = (calls.clone(), release.clone(), began.clone());
                    async move {
                        if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                            let _ = began.send(());
                            release.notified().await;
                        }
                        Err(observers::ObserverError::failed("export endpoint down"))
                    }
                }),
            )
            .expect("register");
    }
    let listener = HintListener::bind("127.0.0.1:0".parse().unwrap(), None)
        .await
        .expect("bind");
    let worker = Worker::start(
        client.clone(),
        Arc::new(registry),
        WorkerConfig {
            idle_interval: Duration::from_secs(3600),
            max_idle_interval: Duration::from_secs(3600),
            follow_shared_counts: None,
            heartbeat: Duration::from_millis(50),
            retry_backoff: Duration::from_secs(3600),
            max_failures,
            batch_size: 1,
            hint_listener: Some(listener.clone()),
            ..WorkerConfig::default()
        },
    );
    worker.wait_until_settled().await;
    (worker, client, listener, calls, first, release)
}

/// Writes `t/r/c` through a client of another process (no hint reaches the worker) and
/// returns its notify key as a datagram naming it.
async fn written_elsewhere(client: &Client) -> Vec<u8> {
    let other = Client::with_config(
        client.store().clone(),
        Arc::new(LocalClock::new()),
        ClientConfig::with_namespace("test"),
    );
    // The other process declares the observed column, as a loader process does.
    let mut declared = Registry::new();
    declared
        .strong(
            "t",
            "c",
            "fails",
            observer_fn(|_txn, _cell: Cell| async { Ok(()) }),
        )
        .expect("register");
    declared.declare(&other);
    let txn = other.begin().await.expect("begin");
    txn.set(Cell::new("t", "r", "c"), b"v".to_vec());
    txn.commit().await.expect("commit");
    let keys = percolator::kv::scan_all(
        client.store().as_ref(),
        client.codec().notify_from(0),
        percolator::kv::ScanOrder::Forward,
    )
    .await
    .expect("scan");
    assert_eq!(keys.len(), 1, "one notify key");
    wire::encode(&client.codec().namespace(), [keys[0].0.as_slice()], 1400).remove(0)
}

/// Runs the failing worker's scenario: a datagram starts the first run, a second one naming
/// the same key while it runs is queued for the run on that cell; then the run fails.
/// Returns (observer calls, failures, dead letters) once no run is in flight.
async fn a_repeat_queued_behind_a_failing_run(max_failures: u32) -> (u64, u64, u64) {
    let (worker, client, listener, calls, mut first, release) = failing_worker(max_failures).await;
    let datagram = written_elsewhere(&client).await;
    let sender = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sender
        .send_to(&datagram, listener.local_addr())
        .await
        .unwrap();
    tokio::time::timeout(BOUND, first.recv())
        .await
        .expect("the first run began")
        .expect("a call");
    sender
        .send_to(&datagram, listener.local_addr())
        .await
        .unwrap();
    let metrics = worker.metrics();
    // Started, then queued behind it.
    until("the repeat queued", || metrics.snapshot().hinted == 2).await;
    release.notify_one();
    until("the runs ended", || {
        metrics.snapshot().failures >= 1 && worker.oldest_run_in_flight().is_none()
    })
    .await;
    let snapshot = worker.metrics().snapshot();
    worker.shutdown().await;
    (
        calls.load(std::sync::atomic::Ordering::SeqCst),
        snapshot.failures,
        snapshot.dead_lettered,
    )
}

/// A key parked as a dead letter is handled: a copy of it queued behind the run that parked
/// it does not run again (it ran from a failure count of zero, and was parked twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_lettered_key_queued_again_does_not_run_again() {
    assert_eq!(a_repeat_queued_behind_a_failing_run(1).await, (1, 1, 1));
}

/// A copy queued behind a run that failed waits for the key's backoff (an hour here)
/// instead of running at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeat_of_a_failed_key_waits_for_its_backoff() {
    assert_eq!(a_repeat_queued_behind_a_failing_run(3).await, (1, 1, 0));
}
