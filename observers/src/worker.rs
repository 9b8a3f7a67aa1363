//! The worker runtime: scanners over the notify space, bounded observer runs, per-cell
//! exclusion, in-process wake-ups, a hash split among live workers, graceful shutdown.

use crate::deadletter::DeadLetter;
use crate::error::WorkerError;
use crate::metrics::Metrics;
use crate::process::{handle, Outcome};
use crate::registry::Registry;
use percolator::codec::Key;
use percolator::kv::{RangePager, ScanOrder};
use percolator::{Cell, Client};
use rand::Rng;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;

/// Tunables of a [`Worker`].
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// Identity in the worker registry (default: random).
    pub id: String,
    /// Scanner tasks.
    pub scanners: usize,
    /// Observer runs in flight at most (scanners wait beyond that: backpressure).
    pub max_in_flight: usize,
    /// Rescan period when nothing wakes the worker; it doubles after each pass that finds
    /// nothing, up to `max_idle_interval`, and drops back once a pass finds work.
    pub idle_interval: Duration,
    /// Longest rescan period of an idle worker.
    pub max_idle_interval: Duration,
    /// Failures of one notification before it is dead-lettered.
    pub max_failures: u32,
    /// First retry delay after a failure or an undecided writer (doubles per failure).
    pub retry_backoff: Duration,
    /// Heartbeat period in the worker registry.
    pub heartbeat: Duration,
    /// Every this many passes a scanner sweeps: it also takes notifications outside its
    /// share of the hash split that are older than `orphan_age` and whose owner has made no
    /// progress for `orphan_age` (a stuck worker, or a dead one the split has not caught up
    /// with). An owner that is busy with a backlog keeps its share.
    pub sweep_every: u32,
    /// How old a notification outside this worker's share must be, and how long its owner
    /// must have made no progress, before a sweep takes it.
    pub orphan_age: Duration,
    /// Scanners leave notifications younger than this to the in-process hint path (a commit
    /// of this process hands its notify keys straight to the worker); a notification written
    /// by another process waits at most this much longer for a scanner.
    pub hint_grace: Duration,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            id: format!("worker-{:016x}", rand::thread_rng().gen::<u64>()),
            scanners: 2,
            max_in_flight: 64,
            idle_interval: Duration::from_millis(200),
            max_idle_interval: Duration::from_secs(1),
            max_failures: 5,
            retry_backoff: Duration::from_millis(20),
            heartbeat: Duration::from_millis(500),
            sweep_every: 8,
            orphan_age: Duration::from_secs(30),
            hint_grace: Duration::from_millis(250),
        }
    }
}

/// Per cell, hinted notify keys with their values, waiting for the run on the cell to end.
type DeferredKeys = HashMap<Cell, Vec<(Vec<u8>, Vec<u8>)>>;

struct Inner {
    client: Client,
    registry: Arc<Registry>,
    config: WorkerConfig,
    metrics: Arc<Metrics>,
    in_flight: Mutex<HashSet<Cell>>,
    /// Observer runs started so far (a quiescence check compares it before and after).
    runs_started: std::sync::atomic::AtomicU64,
    /// Hinted notify keys (key, value) of cells that were in flight when their hint came:
    /// the run on the cell takes them next, instead of leaving them to a scan. Locked after
    /// `in_flight`, never before.
    deferred: Mutex<DeferredKeys>,
    permits: Arc<Semaphore>,
    /// Per notify key: failures so far and when it may be tried again.
    retry: Mutex<HashMap<Vec<u8>, (u32, Instant)>>,
    /// Notify keys this worker handled recently, so that a scanner holding a stale page does
    /// not handle them again (pruned after `RECENT_FOR`).
    recent: Mutex<HashMap<Vec<u8>, Instant>>,
    /// (my index, live workers) of the hash split.
    share: Mutex<(u64, u64)>,
    /// Per index of the hash split: whether that worker has made no progress (handled no
    /// notification) for `orphan_age`, so sweeps may take its share.
    stalled: Mutex<Vec<bool>>,
    /// Per worker key: the last progress count seen and when it last changed.
    progress_seen: Mutex<HashMap<Vec<u8>, (u64, Instant)>>,
    /// Notifications this worker finished handling (whatever the outcome): its progress,
    /// published with its heartbeat.
    handled: std::sync::atomic::AtomicU64,
    /// From when the worker takes its share: a heartbeat period (at most `SETTLE_MAX`)
    /// after its first heartbeat, when the others have seen it, so that its share does not
    /// overlap theirs as it joins. `None` before the first heartbeat.
    owns_from: Mutex<Option<Instant>>,
    /// Observer runs in flight (so that [`Worker::kill`] can stop them dead).
    runs: Mutex<tokio::task::JoinSet<()>>,
    shutdown: watch::Receiver<bool>,
    /// Wakes the scanners early (hints were lost: scan for what they carried).
    rescan: tokio::sync::Notify,
    /// While commit hints wait to be dispatched: the notify ts of the one being dispatched
    /// (newer keys are most likely queued as hints, so scanners leave them); `u64::MAX`
    /// when no hint waits.
    hint_floor: std::sync::atomic::AtomicU64,
}

/// A running worker. Dropping it does not stop it; call [`Worker::shutdown`].
pub struct Worker {
    inner: Arc<Inner>,
    stop: watch::Sender<bool>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn stable_hash(cell: &Cell) -> u64 {
    #[allow(deprecated)]
    let mut h = std::hash::SipHasher::new();
    cell.hash(&mut h);
    h.finish()
}

const WORKERS_META: &[u8] = b"workers/";
/// Longest wait of a new worker before it takes its share (see `Inner::owns_from`).
const SETTLE_MAX: Duration = Duration::from_secs(1);
/// How long a handled notify key is remembered.
const RECENT_FOR: Duration = Duration::from_secs(5);

impl Worker {
    /// Starts a worker on `client` running `registry`'s observers. Declares the observed
    /// columns to `client`.
    pub fn start(client: Client, registry: Arc<Registry>, config: WorkerConfig) -> Worker {
        registry.declare(&client);
        let (stop, shutdown) = watch::channel(false);
        let inner = Arc::new(Inner {
            permits: Arc::new(Semaphore::new(config.max_in_flight.max(1))),
            client,
            registry,
            config,
            metrics: Arc::new(Metrics::default()),
            in_flight: Mutex::new(HashSet::new()),
            deferred: Mutex::new(HashMap::new()),
            runs_started: std::sync::atomic::AtomicU64::new(0),
            retry: Mutex::new(HashMap::new()),
            recent: Mutex::new(HashMap::new()),
            share: Mutex::new((0, 1)),
            stalled: Mutex::new(Vec::new()),
            progress_seen: Mutex::new(HashMap::new()),
            handled: std::sync::atomic::AtomicU64::new(0),
            owns_from: Mutex::new(None),
            runs: Mutex::new(tokio::task::JoinSet::new()),
            shutdown,
            rescan: tokio::sync::Notify::new(),
            hint_floor: std::sync::atomic::AtomicU64::new(u64::MAX),
        });
        let mut tasks = Vec::new();
        tasks.push(tokio::spawn(heartbeat_loop(inner.clone())));
        tasks.push(tokio::spawn(hint_loop(inner.clone())));
        for n in 0..inner.config.scanners.max(1) {
            tasks.push(tokio::spawn(scanner_loop(inner.clone(), n as u32)));
        }
        tracing::info!(id = %inner.config.id, "worker started");
        Worker {
            inner,
            stop,
            tasks: Mutex::new(tasks),
        }
    }

    /// The worker's counters and histograms.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.inner.metrics.clone()
    }

    /// The worker's id in the registry.
    pub fn id(&self) -> &str {
        &self.inner.config.id
    }

    /// Stops scanning, waits for the observer runs in flight, leaves the worker registry.
    pub async fn shutdown(&self) {
        let _ = self.stop.send(true);
        let tasks: Vec<_> = std::mem::take(&mut *lock(&self.tasks));
        for t in tasks {
            let _ = t.await;
        }
        let all = self.inner.config.max_in_flight.max(1) as u32;
        if let Ok(permits) = self.inner.permits.acquire_many(all).await {
            drop(permits);
        }
        let key = self.inner.worker_key();
        let _ = self.inner.client.store().delete(key).await;
        tracing::info!(id = %self.inner.config.id, "worker stopped");
    }

    /// Stops the worker dead, as a crash would: scanners and observer runs in flight are
    /// aborted wherever they are (possibly between protocol steps, leaving locks and notify
    /// keys for others to resolve), and the worker stays in the registry until its heartbeat
    /// expires. For crash tests; use [`Worker::shutdown`] otherwise.
    pub fn kill(&self) {
        let _ = self.stop.send(true);
        for t in lock(&self.tasks).drain(..) {
            t.abort();
        }
        lock(&self.inner.runs).abort_all();
    }

    /// Runs until `stop` resolves, then shuts down gracefully. Binaries pass the future of
    /// `percolator_cli::shutdown_signal()`, created (handlers installed) before they announce
    /// readiness.
    pub async fn run_until(&self, stop: impl std::future::Future<Output = ()>) {
        stop.await;
        tracing::info!("stopping, shutting down");
        self.shutdown().await;
    }

    /// Waits until the worker has taken its share of the hash split (about one heartbeat
    /// period after start; before that it runs nothing, so that its share never overlaps
    /// the share of workers that have not seen it yet). Batch jobs call it before loading.
    pub async fn wait_until_settled(&self) {
        while !self.inner.settled() && !self.inner.stopping() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until no notify key with a registered observer is left in the store and no
    /// observer run is in flight in this worker.
    pub async fn wait_until_quiescent(&self) -> Result<(), WorkerError> {
        use std::sync::atomic::Ordering::SeqCst;
        loop {
            let started = self.inner.runs_started.load(SeqCst);
            let idle = lock(&self.inner.in_flight).is_empty();
            // A run that started during the scan may have put a key behind it and deleted
            // its own ahead of it: only a scan with no run started meanwhile counts.
            if idle
                && !self.inner.has_pending_notifications().await?
                && lock(&self.inner.in_flight).is_empty()
                && self.inner.runs_started.load(SeqCst) == started
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Inner {
    fn worker_key(&self) -> Vec<u8> {
        let mut name = WORKERS_META.to_vec();
        name.extend_from_slice(self.config.id.as_bytes());
        self.client.codec().meta(name)
    }

    fn stopping(&self) -> bool {
        *self.shutdown.borrow()
    }

    fn owns(&self, cell: &Cell) -> bool {
        if !self.settled() {
            return false;
        }
        let (index, live) = *lock(&self.share);
        live <= 1 || stable_hash(cell) % live == index
    }

    /// Whether the owner of `cell` in the hash split has made no progress for `orphan_age`.
    fn owner_stalled(&self, cell: &Cell) -> bool {
        let (_, live) = *lock(&self.share);
        let owner = (stable_hash(cell) % live.max(1)) as usize;
        lock(&self.stalled).get(owner).copied().unwrap_or(true)
    }

    /// Whether this worker handled notify key `key` less than `RECENT_FOR` ago (a key put
    /// again later, e.g. rewritten by GC, is handled again).
    fn handled_recently(&self, key: &[u8]) -> bool {
        lock(&self.recent)
            .get(key)
            .is_some_and(|at| at.elapsed() < RECENT_FOR)
    }

    fn settled(&self) -> bool {
        lock(&self.owns_from).is_some_and(|from| Instant::now() >= from)
    }

    async fn has_pending_notifications(&self) -> Result<bool, WorkerError> {
        let floor = self.client.notify_floor().await?;
        let range = self.client.codec().notify_from(floor);
        let kv = self.client.store().clone();
        let mut pager = RangePager::new(kv.as_ref(), range, ScanOrder::Forward, 1024);
        while let Some(page) = pager.next_page().await? {
            for (key, _) in page {
                if let Ok(Key::Notify { cell, .. }) = self.client.codec().decode(&key) {
                    if self.registry.get(&cell).is_some() {
                        return Ok(true);
                    }
                }
            }
        }
        Ok(false)
    }
}

/// Registers the worker with heartbeats and recomputes the hash split among live workers.
async fn heartbeat_loop(inner: Arc<Inner>) {
    let mut shutdown = inner.shutdown.clone();
    loop {
        if let Err(e) = heartbeat_once(&inner).await {
            tracing::warn!(error = %e, "worker heartbeat failed");
        }
        tokio::select! {
            _ = tokio::time::sleep(inner.config.heartbeat) => {}
            _ = shutdown.changed() => return,
        }
    }
}

async fn heartbeat_once(inner: &Inner) -> Result<(), WorkerError> {
    let now = inner
        .client
        .oracle()
        .get_timestamp()
        .await
        .map_err(percolator::TxnError::from)?;
    let key = inner.worker_key();
    // The beat (oracle ms) and the progress (notifications handled so far).
    let mut record = now.physical_ms().to_be_bytes().to_vec();
    let handled = inner.handled.load(std::sync::atomic::Ordering::Relaxed);
    record.extend_from_slice(&handled.to_be_bytes());
    inner.client.store().put(key, record).await?;
    let pairs = percolator::kv::scan_all(
        inner.client.store().as_ref(),
        inner.client.codec().meta_prefix_range(WORKERS_META),
        ScanOrder::Forward,
    )
    .await?;
    let horizon = 3 * inner.config.heartbeat.as_millis() as u64;
    let word = |v: &[u8], at: usize| {
        v.get(at..at + 8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(u64::from_be_bytes)
    };
    // (key, progress) of the live workers; a record without progress (an older worker)
    // counts as always progressing.
    let mut live: Vec<(Vec<u8>, Option<u64>)> = pairs
        .into_iter()
        .filter(|(_, v)| {
            (v.len() == 8 || v.len() == 16)
                && word(v, 0).is_some_and(|beat| beat.saturating_add(horizon) >= now.physical_ms())
        })
        .map(|(k, v)| {
            let progress = word(&v, 8);
            (k, progress)
        })
        .collect();
    live.sort();
    let me = inner.worker_key();
    let index = live.iter().position(|(k, _)| *k == me).unwrap_or(0) as u64;
    let stalled: Vec<bool> = {
        let mut seen = lock(&inner.progress_seen);
        seen.retain(|k, _| live.iter().any(|(l, _)| l == k));
        live.iter()
            .map(|(key, progress)| {
                let Some(progress) = *progress else {
                    return false;
                };
                let entry = seen
                    .entry(key.clone())
                    .or_insert((progress, Instant::now()));
                if entry.0 != progress {
                    *entry = (progress, Instant::now());
                }
                *key != me && entry.1.elapsed() >= inner.config.orphan_age
            })
            .collect()
    };
    *lock(&inner.share) = (index, live.len().max(1) as u64);
    *lock(&inner.stalled) = stalled;
    lock(&inner.owns_from)
        .get_or_insert_with(|| Instant::now() + inner.config.heartbeat.min(SETTLE_MAX));
    Ok(())
}

/// Handles the hints of this process's commits: each notify key this worker observes and
/// owns is dispatched at once, without waiting for a scan. Lost hints wake the scanners.
async fn hint_loop(inner: Arc<Inner>) {
    use tokio::sync::broadcast::error::RecvError;
    let mut hints = inner.client.notify_hints();
    let mut shutdown = inner.shutdown.clone();
    while !inner.stopping() {
        let hint = tokio::select! {
            hint = hints.recv() => hint,
            _ = shutdown.changed() => return,
        };
        match hint {
            Ok(hint) => {
                inner
                    .hint_floor
                    .store(hint.notify_ts, std::sync::atomic::Ordering::Relaxed);
                let value = hint.notification.encode();
                for cell in &hint.cells {
                    if inner.registry.get(cell).is_none() || !inner.owns(cell) {
                        continue;
                    }
                    let key = inner
                        .client
                        .codec()
                        .notify(cell, hint.notify_ts, hint.bucket);
                    // The committer knows the fate: no earlier "undecided" backoff applies.
                    lock(&inner.retry).remove(&key);
                    match dispatch(&inner, cell, &key, &value, true).await {
                        Dispatch::Started => Metrics::add(&inner.metrics.hinted),
                        Dispatch::Busy => {}
                        Dispatch::Stopped => return,
                    }
                }
            }
            Err(RecvError::Lagged(lost)) => {
                tracing::debug!(lost, "notify hints lost; scanning instead");
                inner.rescan.notify_waiters();
            }
            Err(RecvError::Closed) => return,
        }
        if hints.is_empty() {
            inner
                .hint_floor
                .store(u64::MAX, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

async fn scanner_loop(inner: Arc<Inner>, scanner: u32) {
    let mut shutdown = inner.shutdown.clone();
    let mut pass: u32 = scanner;
    let mut idle = inner.config.idle_interval;
    let mut hinted_before = 0;
    while !inner.stopping() {
        pass = pass.wrapping_add(1);
        let sweep = inner.config.sweep_every > 0 && pass.is_multiple_of(inner.config.sweep_every);
        let dispatched = match scan_pass(&inner, sweep).await {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "notify scan failed");
                0
            }
        };
        // A pass walks the whole notify space (deleted keys included): when this process's
        // own commit hints carry most of the work, scanning is only the safety net for other
        // processes' writes and lost hints, so back off as when a pass finds nothing.
        let hinted = inner
            .metrics
            .hinted
            .load(std::sync::atomic::Ordering::Relaxed);
        let hinted_since = hinted.saturating_sub(hinted_before);
        hinted_before = hinted;
        if dispatched == 0 || hinted_since as usize >= dispatched {
            wait(&inner, &mut shutdown, idle).await;
            let longest = inner
                .config
                .max_idle_interval
                .max(inner.config.idle_interval);
            idle = (idle * 2).min(longest);
        } else {
            idle = inner.config.idle_interval;
        }
    }
}

/// Waits `period`, or less if hints were lost or the worker stops.
async fn wait(inner: &Inner, shutdown: &mut watch::Receiver<bool>, period: Duration) {
    tokio::select! {
        _ = inner.rescan.notified() => {}
        _ = tokio::time::sleep(period) => {}
        _ = shutdown.changed() => {}
    }
}

/// One pass over the notify space from the notify floor, oldest bucket first; at its end,
/// raises the floor to the oldest bucket that still holds a notification (at most the
/// previous second), so the next pass skips what this one found handled. Returns how many
/// notifications were dispatched to observer runs.
async fn scan_pass(inner: &Arc<Inner>, sweep: bool) -> Result<usize, WorkerError> {
    let floor = inner.client.notify_floor().await?;
    let range = inner.client.codec().notify_from(floor);
    // The bucket of the first key met: every notification that existed when the pass
    // began at `floor` is in it or later.
    let mut oldest_left: Option<u64> = None;
    let kv = inner.client.store().clone();
    let mut dispatched = 0;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64;
    {
        let mut recent = lock(&inner.recent);
        if recent.len() > 10_000 {
            recent.retain(|_, at| at.elapsed() < RECENT_FOR);
        }
    }
    {
        let mut pager = RangePager::new(kv.as_ref(), range, ScanOrder::Forward, 256);
        while let Some(page) = pager.next_page().await? {
            let mut clumped = 0;
            for (key, value) in page {
                if inner.stopping() {
                    return Ok(dispatched);
                }
                Metrics::add(&inner.metrics.scanned);
                let Ok(Key::Notify { bucket, cell, ts }) = inner.client.codec().decode(&key) else {
                    // Not ours to judge (another codec version?): keep the floor below it.
                    oldest_left.get_or_insert(floor);
                    continue;
                };
                oldest_left.get_or_insert(bucket);
                if inner.registry.get(&cell).is_none() {
                    continue;
                }
                let age_ms = now_ms.saturating_sub(percolator::Timestamp(ts).physical_ms());
                if !inner.owns(&cell) {
                    // Another live worker's share: taken only from an owner that made no
                    // progress for `orphan_age` (one busy with a backlog keeps it).
                    if !sweep
                        || age_ms < inner.config.orphan_age.as_millis() as u64
                        || !inner.owner_stalled(&cell)
                    {
                        continue;
                    }
                } else if age_ms < inner.config.hint_grace.as_millis() as u64
                    || ts >= inner.hint_floor.load(std::sync::atomic::Ordering::Relaxed)
                {
                    // Most likely waiting in the hint queue: leave it to the hint path.
                    continue;
                }
                if inner.handled_recently(&key) {
                    continue;
                }
                if lock(&inner.retry)
                    .get(&key)
                    .is_some_and(|(_, after)| *after > Instant::now())
                {
                    continue;
                }
                match dispatch(inner, &cell, &key, &value, false).await {
                    Dispatch::Started => {
                        clumped = 0;
                        dispatched += 1;
                    }
                    Dispatch::Busy => {
                        // Another task of this process is on this cell: after a few in a
                        // row, stop following it (anti-clumping) and let the next pass jump.
                        clumped += 1;
                        if clumped >= 4 {
                            break;
                        }
                    }
                    Dispatch::Stopped => return Ok(dispatched),
                }
            }
        }
    }
    // Keys still being put in the current second stay above the floor.
    let to = oldest_left
        .unwrap_or(u64::MAX)
        .min(percolator::txn::wall_bucket().saturating_sub(1));
    if to > floor {
        let raise = inner.client.raise_notify_floor(floor, to).await?;
        if raise.relocated > 0 {
            tracing::debug!(
                relocated = raise.relocated,
                "notify keys moved above the floor"
            );
        }
    }
    Ok(dispatched)
}

/// What [`dispatch`] did with a notify key.
#[derive(Debug, PartialEq, Eq)]
enum Dispatch {
    /// An observer run started.
    Started,
    /// The cell is already in flight in this worker, or the key was handled recently.
    Busy,
    /// The worker is stopping.
    Stopped,
}

/// Starts an observer run for notify key `key` of `cell`, waiting for a free slot first
/// (backpressure instead of an unbounded queue). With `defer_if_busy` (hints), a key whose
/// cell is in flight is queued for the run on that cell to take next (reported `Started`).
async fn dispatch(
    inner: &Arc<Inner>,
    cell: &Cell,
    key: &[u8],
    value: &[u8],
    defer_if_busy: bool,
) -> Dispatch {
    let defer = |in_flight: &HashSet<Cell>| {
        if defer_if_busy && in_flight.contains(cell) {
            lock(&inner.deferred)
                .entry(cell.clone())
                .or_default()
                .push((key.to_vec(), value.to_vec()));
            true
        } else {
            false
        }
    };
    if inner.handled_recently(key) {
        return Dispatch::Busy;
    }
    {
        let in_flight = lock(&inner.in_flight);
        if in_flight.contains(cell) {
            return if defer(&in_flight) {
                Dispatch::Started
            } else {
                Dispatch::Busy
            };
        }
    }
    Metrics::add(&inner.metrics.found);
    let Ok(permit) = inner.permits.clone().acquire_owned().await else {
        return Dispatch::Stopped;
    };
    if inner.stopping() {
        return Dispatch::Stopped;
    }
    if inner.handled_recently(key) {
        return Dispatch::Busy;
    }
    {
        let mut in_flight = lock(&inner.in_flight);
        if !in_flight.insert(cell.clone()) {
            return if defer(&in_flight) {
                Dispatch::Started
            } else {
                Dispatch::Busy
            };
        }
    }
    inner
        .runs_started
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let task_inner = inner.clone();
    let (cell, key, value) = (cell.clone(), key.to_vec(), value.to_vec());
    let mut runs = lock(&inner.runs);
    // Reap finished runs so the set stays small.
    while runs.try_join_next().is_some() {}
    runs.spawn(async move {
        let inner = task_inner;
        let (mut key, mut value) = (key, value);
        loop {
            let outcome = handle(
                &inner.client,
                &inner.registry,
                &inner.metrics,
                &cell,
                &key,
                &value,
            )
            .await;
            after_handle(&inner, &key, &value, outcome).await;
            // Keys hinted while this run was on the cell: take the next one now, in the same
            // slot; release the cell only when none is left (one lock: none can slip in).
            let next = {
                let mut in_flight = lock(&inner.in_flight);
                let mut deferred = lock(&inner.deferred);
                let next = loop {
                    let Some(queue) = deferred.get_mut(&cell) else {
                        break None;
                    };
                    let next = queue.pop();
                    if queue.is_empty() {
                        deferred.remove(&cell);
                    }
                    match next {
                        Some((k, _)) if inner.handled_recently(&k) => continue,
                        other => break other,
                    }
                };
                if next.is_none() || inner.stopping() {
                    in_flight.remove(&cell);
                }
                next
            };
            match next {
                Some((k, v)) if !inner.stopping() => (key, value) = (k, v),
                _ => break,
            }
        }
        drop(permit);
    });
    Dispatch::Started
}

async fn after_handle(
    inner: &Inner,
    key: &[u8],
    value: &[u8],
    outcome: Result<Outcome, percolator::TxnError>,
) {
    inner
        .handled
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let backoff = inner.config.retry_backoff;
    let retry_later = |failures: u32| {
        let delay = backoff * 2u32.saturating_pow(failures.min(8));
        lock(&inner.retry).insert(key.to_vec(), (failures, Instant::now() + delay));
    };
    match outcome {
        Ok(Outcome::Ran | Outcome::Covered | Outcome::RolledBack) => {
            lock(&inner.retry).remove(key);
            lock(&inner.recent).insert(key.to_vec(), Instant::now());
        }
        Ok(Outcome::Pending) => retry_later(0),
        Ok(Outcome::Unobserved) => {}
        Ok(Outcome::Failed { error, resolved }) => {
            let value = resolved.as_deref().unwrap_or(value);
            fail(inner, key, value, error, &retry_later).await;
        }
        Err(percolator::TxnError::User(error)) => {
            fail(inner, key, value, error, &retry_later).await;
        }
        Err(e) if e.is_retryable() => retry_later(1),
        // A busy or unreachable store or oracle is not the observer's fault: retry with
        // backoff, without counting towards the dead letter.
        Err(e) if e.is_transient() => {
            tracing::debug!(error = %e, "transient error; notification retried later");
            let failures = lock(&inner.retry).get(key).map_or(0, |(f, _)| *f);
            retry_later(failures);
        }
        Err(e) => {
            // Anything else (a corrupt record met on the way, a storage error) counts as a
            // failure too, so a notification that can never be handled ends as a dead letter
            // instead of being retried forever.
            tracing::debug!(error = %e, "notification handling failed");
            fail(inner, key, value, e.to_string(), &retry_later).await;
        }
    }
}

async fn fail(
    inner: &Inner,
    key: &[u8],
    value: &[u8],
    error: String,
    retry_later: &(dyn Fn(u32) + Sync),
) {
    {
        {
            let failures = lock(&inner.retry).get(key).map_or(0, |(f, _)| *f) + 1;
            tracing::warn!(key = %key.escape_ascii(), failures, %error, "observer failed");
            if failures >= inner.config.max_failures {
                let letter = DeadLetter {
                    notify_key: key.to_vec(),
                    notification: value.to_vec(),
                    error,
                };
                match DeadLetter::park(&inner.client, &letter).await {
                    Ok(()) => {
                        Metrics::add(&inner.metrics.dead_lettered);
                        lock(&inner.retry).remove(key);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "dead-lettering failed");
                        retry_later(failures);
                    }
                }
            } else {
                retry_later(failures);
            }
        }
    }
}
