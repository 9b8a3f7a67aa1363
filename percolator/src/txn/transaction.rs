//! A snapshot-isolation transaction: its state (start_ts, buffered writes, the heads it
//! read), the buffering API (`set`, `delete`, `notify`, `rollback`) and the checks shared by
//! both paths (open, lifetime, lock TTL). The read path (`get`, `scan`, `scan_page`) is in
//! [`super::read`], the two-phase commit in [`super::commit`].

use super::heads::ReadHeads;
use super::{Shared, TxnError, TxnResult};
use crate::codec::Cell;
use crate::ts::Timestamp;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::time::Instant;

/// A transaction. Cheap to clone (clones share the transaction), so it can be moved into
/// the closure of [`super::Client::run`].
///
/// Reads see the snapshot at `start_ts` plus the transaction's own buffered writes. Writes
/// are buffered until [`Transaction::commit`].
#[derive(Clone)]
pub struct Transaction {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) shared: Arc<Shared>,
    pub(super) start_ts: Timestamp,
    pub(super) started: Instant,
    pub(super) read_only: bool,
    state: Mutex<State>,
}

#[derive(Default)]
pub(super) struct State {
    /// Buffered writes: `Some(value)` to put, `None` to delete.
    pub(super) writes: BTreeMap<Cell, Option<Vec<u8>>>,
    /// Heads read by this transaction by head key, reused as the expectation of its
    /// prewrite CAS and as the answer to a later read.
    pub(super) heads: ReadHeads,
    /// Write-once cells this transaction read a value in (it may not write them).
    pub(super) once_read: crate::FastSet<Cell>,
    /// Cells explicitly notified (strong notifications) by this transaction.
    pub(super) notifies: std::collections::BTreeSet<Cell>,
    pub(super) finished: bool,
    #[cfg(feature = "failpoints")]
    crash_hook: Option<super::failpoint::CrashHook>,
}

impl std::fmt::Debug for Transaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transaction")
            .field("start_ts", &self.inner.start_ts.0)
            .finish_non_exhaustive()
    }
}

impl Transaction {
    pub(crate) fn new(shared: Arc<Shared>, start_ts: Timestamp, started: Instant) -> Self {
        Transaction {
            inner: Arc::new(Inner {
                shared,
                start_ts,
                started,
                read_only: false,
                state: Mutex::new(State::default()),
            }),
        }
    }

    pub(crate) fn new_read_only(shared: Arc<Shared>, ts: Timestamp, started: Instant) -> Self {
        Transaction {
            inner: Arc::new(Inner {
                shared,
                start_ts: ts,
                started,
                read_only: true,
                state: Mutex::new(State::default()),
            }),
        }
    }

    pub(super) fn state(&self) -> MutexGuard<'_, State> {
        // State updates are single assignments; a panic elsewhere cannot leave them torn.
        self.inner
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(super) fn shared(&self) -> &Shared {
        &self.inner.shared
    }

    /// The snapshot timestamp of the transaction.
    pub fn start_ts(&self) -> Timestamp {
        self.inner.start_ts
    }

    /// The latest physical time (ms since the epoch) at which this transaction can commit:
    /// a commit whose commit_ts is physically later than start_ts plus `max_lifetime` is
    /// refused (invariant 5). Anything this transaction writes is therefore visible to every
    /// snapshot whose start_ts is physically later than this, or never written at all.
    pub fn commit_deadline_ms(&self) -> u64 {
        self.inner.start_ts.physical_ms() + self.shared().config.max_lifetime.as_millis() as u64
    }

    /// Milliseconds since the Unix epoch on the wall clock of the client that began this
    /// transaction ([`crate::ClientConfig::wall_clock`]): what an observer reads as "now"
    /// (a click's horizon, the time of an output), so it follows the client's clock seam.
    pub fn wall_ms(&self) -> u64 {
        self.shared().config.wall_clock.now_ms()
    }

    /// Installs a crash hook (feature `failpoints`, tests only).
    #[cfg(feature = "failpoints")]
    pub fn set_crash_hook(&self, hook: super::failpoint::CrashHook) {
        self.state().crash_hook = Some(hook);
    }

    #[cfg(feature = "failpoints")]
    pub(super) fn crash_hook(&self) -> Option<super::failpoint::CrashHook> {
        self.state().crash_hook.clone()
    }

    pub(super) fn check_lifetime(&self) -> TxnResult<()> {
        let max = self.shared().config.max_lifetime;
        if self.inner.started.elapsed() > max {
            return Err(self.too_old());
        }
        Ok(())
    }

    /// The TTL (ms after the physical time of start_ts) of a lock or strong notify record
    /// written now: `lock_ttl` plus the client's lease margin (twice its slowest recent round
    /// trip, at most eight TTLs; see `Shared::lease_at`) from this moment, capped by the lifetime (invariant 5: no lock
    /// outlives it). Measured when the record is written, not when the commit began: a large
    /// write set (or a stalled process) can reach a cell long after the commit began, and a
    /// lock born with a TTL counted from then could already be expired when it appears, so a
    /// reader meeting it before the first heartbeat would fence a live commit.
    pub(super) fn lock_ttl_ms(&self) -> u64 {
        let shared = self.shared();
        let now = Instant::now();
        (now.saturating_duration_since(self.inner.started) + shared.lease_at(now))
            .min(shared.config.max_lifetime)
            .as_millis() as u64
    }

    pub(super) fn too_old(&self) -> TxnError {
        TxnError::SnapshotTooOld {
            start_ts: self.inner.start_ts.0,
            max_lifetime_ms: self.shared().config.max_lifetime.as_millis() as u64,
        }
    }

    pub(super) fn check_open(&self) -> TxnResult<()> {
        if self.state().finished {
            return Err(TxnError::Finished {
                start_ts: self.inner.start_ts.0,
            });
        }
        Ok(())
    }

    /// Buffers a write of `value` to `cell`.
    pub fn set(&self, cell: Cell, value: impl Into<Vec<u8>>) {
        self.state().writes.insert(cell, Some(value.into()));
    }

    /// Buffers the writes of `writes`, as [`Transaction::set`] would one after the other (a
    /// later write of a cell replaces an earlier one, here or before). For a loader's batch
    /// of thousands of cells: they are sorted once and merged into the buffer, instead of
    /// each walking it and taking its lock.
    pub fn set_many(&self, writes: impl IntoIterator<Item = (Cell, Vec<u8>)>) {
        let mut batch: Vec<(Cell, Option<Vec<u8>>)> = writes
            .into_iter()
            .map(|(cell, value)| (cell, Some(value)))
            .collect();
        // Stable: writes of one cell stay in their order, and the last one's value is kept.
        batch.sort_by(|a, b| a.0.cmp(&b.0));
        batch.dedup_by(|later, earlier| {
            let same = later.0 == earlier.0;
            if same {
                std::mem::swap(&mut later.1, &mut earlier.1);
            }
            same
        });
        let mut merged: BTreeMap<Cell, Option<Vec<u8>>> = batch.into_iter().collect();
        // `append` keeps the appended value of a cell already buffered.
        self.state().writes.append(&mut merged);
    }

    /// Buffers a delete of `cell`.
    pub fn delete(&self, cell: Cell) {
        self.state().writes.insert(cell, None);
    }

    /// Marks `cell` dirty for its observers when this transaction commits (a strong
    /// notification: written before the commit point, so it cannot be lost). Writes to
    /// observed columns notify on their own; this is for cells the transaction does not
    /// change or columns nobody registered as observed.
    pub fn notify(&self, cell: Cell) {
        self.state().notifies.insert(cell);
    }

    /// Abandons the transaction. Nothing was written to the store before commit, so nothing
    /// needs undoing.
    pub fn rollback(&self) {
        let mut state = self.state();
        state.finished = true;
        state.writes.clear();
    }

    /// Whether the transaction was committed or rolled back.
    pub fn is_finished(&self) -> bool {
        self.state().finished
    }
}
