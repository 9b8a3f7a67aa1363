//! A test harness for observer authors: [`Harness`] runs a [`Registry`] on an in-memory store
//! ([`MemoryKv`]) with a local timestamp source, until nothing is left to do, and says what
//! ran, what failed and what was dead-lettered. No server, no files, no sleeps.
//!
//! ```
//! use observers::testing::Harness;
//! use observers::{observer_fn, Registry};
//! use percolator::Cell;
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut registry = Registry::new();
//! // Keeps docs/<row>/len the length of docs/<row>/body.
//! registry.strong("docs", "body", "length", observer_fn(|txn, cell: Cell| async move {
//!     let body = txn.get(&cell).await?.unwrap_or_default();
//!     txn.set(Cell::new("docs", &cell.row, "len"), body.len().to_string());
//!     Ok(())
//! }))?;
//! let harness = Harness::new(registry);
//! harness.write(Cell::new("docs", "a", "body"), "hello").await?;
//! let quiet = harness.run_until_quiet().await?;
//! assert_eq!(quiet.ran, 1);
//! assert!(quiet.dead_letters.is_empty());
//! assert_eq!(harness.read_string(&Cell::new("docs", "a", "len")).await?.as_deref(), Some("5"));
//! harness.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! The worker runs all along (as in production, a commit of the harness's client reaches it
//! at once), so several writes to one cell before [`Harness::run_until_quiet`] may be seen by
//! one run or by several: assert end states, not numbers of runs, unless each change is to
//! its own cell. docs/observers.md ("Testing an observer") shows more.

use crate::deadletter::DeadLetter;
use crate::error::WorkerError;
use crate::metrics::MetricsSnapshot;
use crate::registry::Registry;
use crate::worker::{Worker, WorkerConfig};
use percolator::codec::Key;
use percolator::kv::{MemoryKv, RawKv};
use percolator::ts::LocalClock;
use percolator::{Cell, Client, ClientConfig, TxnError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What happened since the previous [`Harness::run_until_quiet`] (or the start), once
/// nothing is left to do; and the dead letters in the store now.
#[derive(Clone, Debug, Default)]
pub struct Quiet {
    /// Observer runs that committed.
    pub ran: u64,
    /// Notifications already covered by an earlier run (nothing ran).
    pub duplicates: u64,
    /// Observer runs that failed (errors and panics; each retry counts).
    pub failures: u64,
    /// Notifications moved to the dead-letter space.
    pub dead_lettered: u64,
    /// Every dead letter in the store now (from earlier rounds too, unless replayed).
    pub dead_letters: Vec<Parked>,
}

/// A dead letter with the cell it is about.
#[derive(Clone, Debug)]
pub struct Parked {
    /// The notified cell (`None` if the notify key does not decode).
    pub cell: Option<Cell>,
    /// The last error of the observer.
    pub error: String,
    /// The letter itself (for [`DeadLetter::replay`]).
    pub letter: DeadLetter,
}

/// How long [`Harness::run_until_quiet`] waits by default before it gives up.
pub const QUIET_TIMEOUT: Duration = Duration::from_secs(60);

/// A registry running on a worker over an in-memory store (see the [module](self) docs).
pub struct Harness {
    client: Client,
    worker: Worker,
    seen: Mutex<MetricsSnapshot>,
    timeout: Duration,
}

impl Harness {
    /// Starts `registry` on a worker with [`Harness::worker_config`]. Needs a Tokio runtime.
    pub fn new(registry: Registry) -> Harness {
        Harness::with_config(registry, Harness::worker_config())
    }

    /// Starts `registry` on a worker with `config` (e.g. another `max_failures`).
    pub fn with_config(registry: Registry, config: WorkerConfig) -> Harness {
        Harness::on_store(Arc::new(MemoryKv::new()), registry, config)
    }

    /// Starts `registry` on a worker with `config` over `store` (e.g. a [`MemoryKv`] wrapped
    /// to inject faults: `percolator::kv::intercept`).
    pub fn on_store(store: Arc<dyn RawKv>, registry: Registry, config: WorkerConfig) -> Harness {
        let client = Client::with_config(
            store,
            Arc::new(LocalClock::new()),
            ClientConfig::with_namespace("test"),
        );
        let worker = Worker::start(client.clone(), Arc::new(registry), config);
        Harness {
            client,
            worker,
            seen: Mutex::new(MetricsSnapshot::default()),
            timeout: QUIET_TIMEOUT,
        }
    }

    /// The harness's worker settings: [`WorkerConfig::default`] with short scan periods,
    /// heartbeats and retry backoff, so that a test takes milliseconds, and 3 failures before
    /// a notification is dead-lettered.
    pub fn worker_config() -> WorkerConfig {
        WorkerConfig {
            idle_interval: Duration::from_millis(10),
            max_idle_interval: Duration::from_millis(50),
            retry_backoff: Duration::from_millis(2),
            heartbeat: Duration::from_millis(20),
            hint_grace: Duration::from_millis(20),
            max_failures: 3,
            ..WorkerConfig::default()
        }
    }

    /// `config` with its scans a minute apart: within a test's bound only hints bring a
    /// change to the worker, and only the test's own calls scan the notify space.
    pub fn scans_a_minute_apart(config: WorkerConfig) -> WorkerConfig {
        WorkerConfig {
            idle_interval: Duration::from_secs(60),
            max_idle_interval: Duration::from_secs(60),
            ..config
        }
    }

    /// Gives up [`Harness::run_until_quiet`] after `timeout` (default [`QUIET_TIMEOUT`]): an
    /// observer chain that never ends (each run notifying again) fails the test instead of
    /// hanging it.
    pub fn with_timeout(mut self, timeout: Duration) -> Harness {
        self.timeout = timeout;
        self
    }

    /// The client of the store the worker runs on: write with it as the application would.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The worker (its metrics, for instance).
    pub fn worker(&self) -> &Worker {
        &self.worker
    }

    /// Writes `value` into `cell` in a transaction of its own.
    pub async fn write(&self, cell: Cell, value: impl Into<Vec<u8>>) -> Result<(), TxnError> {
        let txn = self.client.begin().await?;
        txn.set(cell, value.into());
        txn.commit().await?;
        Ok(())
    }

    /// Reads `cell` at a fresh snapshot.
    pub async fn read(&self, cell: &Cell) -> Result<Option<Vec<u8>>, TxnError> {
        let txn = self.client.begin().await?;
        let value = txn.get(cell).await?;
        txn.commit().await?;
        Ok(value)
    }

    /// [`Harness::read`] as text (invalid UTF-8 replaced).
    pub async fn read_string(&self, cell: &Cell) -> Result<Option<String>, TxnError> {
        Ok(self
            .read(cell)
            .await?
            .map(|v| String::from_utf8_lossy(&v).into_owned()))
    }

    /// Waits until no notification with an observer is left and no run is in flight (every
    /// change handled, failing ones dead-lettered), then reports what happened since the
    /// previous call. Fails with [`WorkerError::NotQuiet`] after the timeout.
    pub async fn run_until_quiet(&self) -> Result<Quiet, WorkerError> {
        let quiet = async {
            self.worker.wait_until_settled().await;
            self.worker.wait_until_quiescent().await
        };
        tokio::time::timeout(self.timeout, quiet)
            .await
            .map_err(|_| WorkerError::NotQuiet {
                waited: self.timeout,
            })??;
        let now = self.worker.metrics().snapshot();
        let before = std::mem::replace(
            &mut *self.seen.lock().unwrap_or_else(|p| p.into_inner()),
            now.clone(),
        );
        Ok(Quiet {
            ran: now.processed - before.processed,
            duplicates: now.duplicates - before.duplicates,
            failures: now.failures - before.failures,
            dead_lettered: now.dead_lettered - before.dead_lettered,
            dead_letters: self.dead_letters().await?,
        })
    }

    /// Every dead letter in the store, with its cell.
    pub async fn dead_letters(&self) -> Result<Vec<Parked>, WorkerError> {
        Ok(DeadLetter::list(&self.client)
            .await?
            .into_iter()
            .map(|letter| Parked {
                cell: match self.client.codec().decode(&letter.notify_key) {
                    Ok(Key::Notify { cell, .. }) => Some(cell),
                    _ => None,
                },
                error: letter.error.clone(),
                letter,
            })
            .collect())
    }

    /// Replays every dead letter (the observer runs again on the next
    /// [`Harness::run_until_quiet`]); returns how many.
    pub async fn replay_dead_letters(&self) -> Result<usize, WorkerError> {
        let letters = DeadLetter::list(&self.client).await?;
        for letter in &letters {
            letter.replay(&self.client).await?;
        }
        Ok(letters.len())
    }

    /// Stops the worker (waits for runs in flight).
    pub async fn shutdown(self) {
        self.worker.shutdown().await;
    }
}
