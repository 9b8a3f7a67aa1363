//! The worker runtime: scanners over the notify space, bounded observer runs, per-cell
//! exclusion, in-process wake-ups, a hash split among live workers, graceful shutdown.
//!
//! This module holds the public [`Worker`] (start, shutdown, kill, the waits) and its
//! [`WorkerConfig`]; the state of a running worker ([`Inner`]) is made of one part per
//! concern, each in its own module with the invariants it keeps:
//! - [`membership`]: heartbeats in the worker registry, the hash split, stalled owners;
//! - [`hints`]: the in-process hint path of this process's commits;
//! - [`relayed`]: the keys other processes' commits relay to this one ([`crate::relay`]);
//! - [`scan`]: the scanners over the notify space and the notify floor;
//! - [`dispatch`]: observer runs (batches of one strong observer's notifications), per-cell
//!   exclusion, the queue of hints per busy cell;
//! - [`retry`]: backoff, keys handled recently, dead letters.
//!
//! Each notification is decoded once, where it is read (a scan) or made (a hint), and
//! travels typed ([`crate::process::Payload`]) through dispatch, handling and retry.

mod dispatch;
mod hints;
pub(crate) mod membership;
mod relayed;
mod retry;
mod scan;

use crate::error::WorkerError;
use crate::metrics::Metrics;
use crate::registry::Registry;
use crate::telemetry::{Telemetry, WorkerMetrics};
use dispatch::Flights;
pub use dispatch::BURST_RUNS;
use hints::HintState;
use membership::Membership;
use percolator::Client;
use rand::Rng;
use retry::Ledger;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The default period of [`WorkerConfig::follow_shared_counts`], ms.
pub const DEFAULT_FOLLOW_MS: u64 = 50;

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
    /// must have made no progress, before a sweep takes it. At least
    /// `2 x (max_idle_interval + 2 x heartbeat)` (a shorter one is raised to that, with a
    /// warning): an idle owner needs up to `max_idle_interval + 2 x heartbeat` to show the
    /// others that it is at work on new notifications.
    pub orphan_age: Duration,
    /// While the worker's own client has put notify keys within this long (a commit of this
    /// process hands its notify keys straight to the worker as hints), scanners leave
    /// notifications younger than this to the hint path; a notification written by another
    /// process then waits at most this much longer for a scanner. A worker whose client
    /// put none takes young keys at once (hints carry only its own client's keys).
    pub hint_grace: Duration,
    /// Idle scanners read the store's shared count of notify keys put
    /// (`percolator::Client::shared_notify_counts`, one point read) this often, and pass
    /// once another process has published puts beyond what they read before their last
    /// pass (passes that find work read nothing; at most one pass per scanner per
    /// period, however often the count moves): a worker beside a loader in another process
    /// then follows its commits within about twice this period (plus the loader's
    /// `ClientConfig::publish_notify_counts`) instead of an idle period that has backed off
    /// to `max_idle_interval`. `None`: only the idle periods.
    pub follow_shared_counts: Option<Duration>,
    /// Notifications of one observer (strong or weak) handed to one transaction at most (a batch; see
    /// [`crate::Observer::observe_batch`]). 1 disables batches. Batches form from what is
    /// found together (a scan page, the hints that queued up while runs were busy), so an
    /// idle worker still handles a lone notification at once. A burst of hinted or relayed
    /// keys of more than [`BURST_RUNS`] batches' worth (a loader's commit at saturation) is
    /// run a [`BURST_RUNS`]th at a time instead, up to `max_batch_size` keys a run.
    pub batch_size: usize,
    /// The largest batch a burst of hinted notifications grows runs to (see `batch_size`).
    /// At or below `batch_size` (the default), batches never grow. Worth raising for
    /// observers whose `observe_batch` reads and writes a batch's cells together (photon's
    /// join: four times its batch size); an observer that handles cells one by one only
    /// loses parallelism to larger batches.
    pub max_batch_size: usize,
    /// Where this worker takes the notify keys that loaders in other processes relay to it
    /// ([`crate::relay`]): one listener per process, shared by its workers. `None`: such
    /// commits are found by scanning only.
    pub hint_listener: Option<Arc<crate::relay::HintListener>>,
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
            follow_shared_counts: Some(Duration::from_millis(DEFAULT_FOLLOW_MS)),
            batch_size: 32,
            max_batch_size: 32,
            hint_listener: None,
        }
    }
}

/// The shared state of a running worker: one part per concern.
struct Inner {
    client: Client,
    registry: Arc<Registry>,
    config: WorkerConfig,
    metrics: Arc<Metrics>,
    /// Worker registry, hash split, stalled owners.
    membership: Membership,
    /// Observer runs in flight and hints queued per busy cell.
    flights: Flights,
    /// Backoff, recently handled keys, failure counts.
    ledger: Ledger,
    /// The hint floor and the scanners' wake-up.
    hints: HintState,
    /// Passes of this worker's scanners that found no work beyond the hints' (idle
    /// scanners take turns by it).
    idle_passes: std::sync::atomic::AtomicU64,
    /// When the store's table ids were last read on meeting a key of an unknown table id
    /// ([`Inner::decode_notify`]).
    table_ids_read: Mutex<Option<tokio::time::Instant>>,
    shutdown: watch::Receiver<bool>,
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

impl Worker {
    /// Starts a worker on `client` running `registry`'s observers. Declares the observed
    /// columns to `client`. Its Prometheus series go to families no registry reads; see
    /// [`Worker::start_with_metrics`].
    pub fn start(client: Client, registry: Arc<Registry>, config: WorkerConfig) -> Worker {
        Self::start_with_metrics(client, registry, config, WorkerMetrics::new())
    }

    /// [`Worker::start`], counting into `families` (registered in the process's registry,
    /// shared by its workers) under this worker's namespace and id.
    pub fn start_with_metrics(
        client: Client,
        registry: Arc<Registry>,
        mut config: WorkerConfig,
        families: WorkerMetrics,
    ) -> Worker {
        registry.declare(&client);
        let min_orphan_age = membership::min_orphan_age(config.max_idle_interval, config.heartbeat);
        if config.orphan_age < min_orphan_age {
            tracing::warn!(
                orphan_age = ?config.orphan_age,
                raised_to = ?min_orphan_age,
                "orphan_age is shorter than an idle owner takes to show progress; raised"
            );
            config.orphan_age = min_orphan_age;
        }
        let (stop, shutdown) = watch::channel(false);
        let telemetry = Telemetry::new(
            families,
            String::from_utf8_lossy(&client.codec().namespace()).into_owned(),
            config.id.clone(),
        );
        telemetry.init(&registry.columns());
        let metrics = Arc::new(Metrics::with_telemetry(telemetry));
        let inner = Arc::new(Inner {
            flights: Flights::new(config.max_in_flight),
            client,
            registry,
            config,
            metrics,
            membership: Membership::new(),
            ledger: Ledger::default(),
            hints: HintState::new(),
            idle_passes: std::sync::atomic::AtomicU64::new(0),
            table_ids_read: Mutex::new(None),
            shutdown,
        });
        let mut tasks = Vec::new();
        tasks.push(tokio::spawn(membership::heartbeat_loop(inner.clone())));
        let hint_receiver = inner.client.notify_hints();
        tasks.push(tokio::spawn(hints::hint_loop(inner.clone(), hint_receiver)));
        if let Some(listener) = &inner.config.hint_listener {
            let datagrams = listener.route(inner.client.codec().namespace());
            tasks.push(tokio::spawn(relayed::relayed_loop(
                inner.clone(),
                listener.advertised().to_string(),
                datagrams,
            )));
        }
        for n in 0..inner.config.scanners.max(1) {
            tasks.push(tokio::spawn(scan::scanner_loop(inner.clone(), n as u32)));
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

    /// The client the worker runs on.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// A test of whether a row is this worker's to handle, as its scanners take notify
    /// keys: in its share of the hash split (once settled, never while fenced; a worker
    /// that leaves or stops heartbeating hands its share over), or in the share of an owner
    /// that made no progress for `orphan_age` (one alive that does not handle them). What
    /// `observers::time::TimerDriver::start_on` fires timers by (rows hashed as cells of
    /// the timer table).
    pub fn share_of_rows(&self) -> crate::time::RowFilter {
        let inner = self.inner.clone();
        Arc::new(move |row: &[u8]| {
            let cell = percolator::Cell::new(crate::time::TIMER_TABLE, row, "");
            inner.membership.owns(&cell) || inner.membership.owner_stalled(&cell)
        })
    }

    /// Whether `cell` is in this worker's share now: as its last heartbeat split the notify
    /// space among the live workers, never before it settled nor while it is fenced (its
    /// last completed heartbeat started too long ago). Two live workers own one cell at once
    /// only briefly, until a change of the split is seen by both (`observers::design::worker`).
    pub fn owns(&self, cell: &percolator::Cell) -> bool {
        self.inner.membership.owns(cell)
    }

    /// [`Worker::owns`] for each of `cells`, in order, all as of one moment: one view of
    /// the split and one reading of the clock (asked one by one, a heartbeat completing or
    /// the fence passing between two cells shows a share that never existed).
    pub fn owns_each<'a>(
        &self,
        cells: impl IntoIterator<Item = &'a percolator::Cell>,
    ) -> Vec<bool> {
        self.inner.membership.owns_each(cells)
    }

    /// The worker's id in the registry.
    pub fn id(&self) -> &str {
        &self.inner.config.id
    }

    /// A mark of this worker's runs, for a check in its own process that needs no heartbeat:
    /// `Some(runs started so far)` when no run is in flight, `None` when one is. Two equal
    /// `Some` marks mean no run was in flight at any moment between them: a run marks its
    /// cells in flight before it counts itself, and the count is read before the cells, so
    /// a run under way at the first mark is seen there and one that started after it moved
    /// the count by the second (`observers::design::operators`).
    pub fn runs_mark(&self) -> Option<u64> {
        let flights = &self.inner.flights;
        let started = flights.runs_started();
        flights.idle().then_some(started)
    }

    /// Observer runs this worker has started so far; each run's ordinal is this count just
    /// after it started (the first run is 1).
    pub fn runs_started(&self) -> u64 {
        self.inner.flights.runs_started()
    }

    /// The ordinal ([`Worker::runs_started`]) of the oldest run in flight, `None` when none
    /// is: a run is in flight from its start until it releases its last cell. For checkers
    /// (the simulator reads it of its own worker as a drain check begins).
    pub fn oldest_run_in_flight(&self) -> Option<u64> {
        self.inner.flights.oldest_run()
    }

    /// Stops scanning, waits for the observer runs in flight, leaves the worker registry.
    pub async fn shutdown(&self) {
        if let Err(error) = self.shutdown_checked().await {
            tracing::warn!(id = %self.inner.config.id, %error, "leaving the worker registry failed");
        }
    }

    /// [`Worker::shutdown`], saying whether the worker left the registry: an error when its
    /// record could not be deleted (the store is down; others take its share once its
    /// heartbeat is stale). It can take as long as the runs in flight and the store do:
    /// binaries bound it with a timeout.
    pub async fn shutdown_checked(&self) -> Result<(), WorkerError> {
        let _ = self.stop.send(true);
        let tasks: Vec<_> = std::mem::take(&mut *lock(&self.tasks));
        for t in tasks {
            let _ = t.await;
        }
        self.inner
            .flights
            .drain(self.inner.config.max_in_flight)
            .await;
        let key = self.inner.worker_key();
        self.inner.client.store().delete(key).await?;
        // Best-effort: relays ignore an address whose worker has no record.
        if self.inner.config.hint_listener.is_some() {
            let addr = self.inner.hint_addr_key();
            if let Err(error) = self.inner.client.store().delete(addr).await {
                tracing::warn!(id = %self.inner.config.id, %error, "deleting the worker's hint address failed");
            }
        }
        tracing::info!(id = %self.inner.config.id, "worker stopped");
        Ok(())
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
        self.inner.flights.abort_all();
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
    /// the share of workers that have not seen it yet). A run that times from its first
    /// load calls it before loading (commits made before are hinted once it has settled).
    pub async fn wait_until_settled(&self) {
        self.inner.wait_until_settled().await
    }

    /// Waits until no notify key with a registered observer is left in the store and no
    /// observer run is in flight in this worker.
    ///
    /// A transient failure of the store scan that checks (a conflict or an unknown outcome
    /// while resolving a lock it met, the store unavailable past its adapter's retries) is
    /// not an answer: the check is made again, until failures have lasted
    /// [`QUIESCENCE_RETRY_FOR`] in a row; any other error is returned at once (a drain
    /// that waits on it failed on the first such error before).
    pub async fn wait_until_quiescent(&self) -> Result<(), WorkerError> {
        let flights = &self.inner.flights;
        let mut failing_since: Option<tokio::time::Instant> = None;
        loop {
            let started = flights.runs_started();
            let idle = flights.idle();
            // A run that started during the scan may have put a key behind it and deleted
            // its own ahead of it: only a scan with no run started meanwhile counts.
            if idle {
                match self.inner.has_pending_notifications().await {
                    Ok(pending) => {
                        failing_since = None;
                        if !pending && flights.idle() && flights.runs_started() == started {
                            return Ok(());
                        }
                    }
                    Err(e) if is_transient(&e) => {
                        let since = *failing_since.get_or_insert_with(tokio::time::Instant::now);
                        if since.elapsed() >= QUIESCENCE_RETRY_FOR {
                            return Err(e);
                        }
                        tracing::debug!(error = %e, "quiescence check failed; checking again");
                    }
                    Err(e) => return Err(e),
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Whether `error` of a store scan may pass if the scan is made again: a transient
/// transaction error ([`percolator::TxnError::is_transient`]), or the store unavailable.
fn is_transient(error: &WorkerError) -> bool {
    // Planted bug `QuiescenceGivesUpOnTransient` (`percolator::planted`).
    #[cfg(feature = "planted")]
    if percolator::planted::active(percolator::planted::Bug::QuiescenceGivesUpOnTransient) {
        return false;
    }
    match error {
        WorkerError::Txn(e) => e.is_transient(),
        WorkerError::Storage(e) => matches!(e, percolator::KvError::Unavailable { .. }),
        _ => false,
    }
}

/// How long [`Worker::wait_until_quiescent`] checks again after transient failures in a row
/// before it returns the last one.
pub const QUIESCENCE_RETRY_FOR: Duration = Duration::from_secs(60);

/// How often at most a worker reads the store's table ids on meeting keys of a table id its
/// client does not know.
const TABLE_IDS_READ_EVERY: Duration = Duration::from_secs(1);

impl Inner {
    fn stopping(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// [`Worker::wait_until_settled`] (also returns once the worker stops).
    async fn wait_until_settled(&self) {
        while !self.membership.settled() && !self.stopping() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Decodes notify key `key` (`None`: not one this worker can read). A key of a table id
    /// the client does not know means the namespace's map grew after the client opened the
    /// store (an application declared its tables after this worker started, or a newer build
    /// added tables): the client reads the store's map and adopts it if it only grew
    /// ([`percolator::Client::reload_table_ids`]; once per [`TABLE_IDS_READ_EVERY`] at most),
    /// then decodes the key again. A map that differs is refused, loudly, and its keys stay
    /// unread.
    async fn decode_notify(&self, key: &[u8]) -> Option<percolator::codec::Key> {
        match self.client.codec().decode(key) {
            Ok(decoded) => return Some(decoded),
            Err(percolator::codec::CodecError::UnknownTableId(_)) => {}
            Err(_) => return None,
        }
        let now = tokio::time::Instant::now();
        {
            let mut last = lock(&self.table_ids_read);
            if last.is_some_and(|at| now.duration_since(at) < TABLE_IDS_READ_EVERY) {
                return None;
            }
            *last = Some(now);
        }
        match self.client.reload_table_ids().await {
            Ok(true) => {
                tracing::info!(id = %self.config.id, "worker keys tables by the store's grown table ids")
            }
            Ok(false) => {}
            Err(error) => {
                tracing::error!(id = %self.config.id, %error, "the store's table ids are refused; notifications of unknown table ids are left unread");
                return None;
            }
        }
        self.client.codec().decode(key).ok()
    }
}
