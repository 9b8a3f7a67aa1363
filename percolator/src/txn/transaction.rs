//! A snapshot-isolation transaction: reads at start_ts, buffered writes, two-phase commit.

#[cfg_attr(not(feature = "failpoints"), allow(unused_imports))]
use super::failpoint::{crash_point, CrashPoint};
use super::heads::{HeadSnapshot, ValueFetch};
use super::status::TxnStatus;
use super::{Shared, TxnError, TxnResult};
use crate::codec::Cell;
use crate::kv::{KvError, RangePager, ScanOrder};
use crate::record::{Head, Lock, Op};
use crate::ts::Timestamp;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How many times the commit-point CAS is retried on storage errors before the outcome is
/// reported as unknown.
const COMMIT_STORAGE_RETRIES: u32 = 5;

/// A transaction. Cheap to clone (clones share the transaction), so it can be moved into
/// the closure of [`super::Client::run`].
///
/// Reads see the snapshot at `start_ts` plus the transaction's own buffered writes. Writes
/// are buffered until [`Transaction::commit`].
#[derive(Clone)]
pub struct Transaction {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Arc<Shared>,
    start_ts: u64,
    started: Instant,
    read_only: bool,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Buffered writes: `Some(value)` to put, `None` to delete.
    writes: BTreeMap<Cell, Option<Vec<u8>>>,
    /// Heads read by this transaction by head key, reused as the expectation of its
    /// prewrite CAS.
    heads: HashMap<Vec<u8>, HeadSnapshot>,
    /// Cells explicitly notified (strong notifications) by this transaction.
    notifies: std::collections::BTreeSet<Cell>,
    finished: bool,
    #[cfg(feature = "failpoints")]
    crash_hook: Option<super::failpoint::CrashHook>,
}

impl std::fmt::Debug for Transaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transaction")
            .field("start_ts", &self.inner.start_ts)
            .finish_non_exhaustive()
    }
}

impl Transaction {
    pub(crate) fn new(shared: Arc<Shared>, start_ts: Timestamp, started: Instant) -> Self {
        Transaction {
            inner: Arc::new(Inner {
                shared,
                start_ts: start_ts.0,
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
                start_ts: ts.0,
                started,
                read_only: true,
                state: Mutex::new(State::default()),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // State updates are single assignments; a panic elsewhere cannot leave them torn.
        self.inner
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn shared(&self) -> &Shared {
        &self.inner.shared
    }

    /// The snapshot timestamp of the transaction.
    pub fn start_ts(&self) -> Timestamp {
        Timestamp(self.inner.start_ts)
    }

    /// Installs a crash hook (feature `failpoints`, tests only).
    #[cfg(feature = "failpoints")]
    pub fn set_crash_hook(&self, hook: super::failpoint::CrashHook) {
        self.state().crash_hook = Some(hook);
    }

    #[cfg(feature = "failpoints")]
    fn crash_hook(&self) -> Option<super::failpoint::CrashHook> {
        self.state().crash_hook.clone()
    }

    /// After a read that looked beyond the head (in `V` or `D`): GC removes those versions
    /// only after publishing a safe point above every snapshot that could see them, so a
    /// safe point read *after* the read that is still at or below start_ts proves the read
    /// saw everything the snapshot needs. Otherwise refuse rather than answer wrongly
    /// (ARCHITECTURE.md "Snapshots and GC"). Timestamps only: no local clock is involved.
    async fn ensure_not_collected(&self) -> TxnResult<()> {
        let safe_point = super::gc::read_safe_point(self.shared()).await?;
        if safe_point > self.inner.start_ts {
            return Err(self.too_old());
        }
        Ok(())
    }

    fn check_lifetime(&self) -> TxnResult<()> {
        let max = self.shared().config.max_lifetime;
        if self.inner.started.elapsed() > max {
            return Err(self.too_old());
        }
        Ok(())
    }

    /// The TTL (ms after the physical time of start_ts) of a lock or strong notify record
    /// written now: `lock_ttl` from this moment, capped by the lifetime (invariant 5: no lock
    /// outlives it). Measured when the record is written, not when the commit began: a large
    /// write set (or a stalled process) can reach a cell long after the commit began, and a
    /// lock born with a TTL counted from then could already be expired when it appears, so a
    /// reader meeting it before the first heartbeat would fence a live commit.
    fn lock_ttl_ms(&self) -> u64 {
        let shared = self.shared();
        (self.inner.started.elapsed() + shared.config.lock_ttl)
            .min(shared.config.max_lifetime)
            .as_millis() as u64
    }

    fn too_old(&self) -> TxnError {
        TxnError::SnapshotTooOld {
            start_ts: self.inner.start_ts,
            max_lifetime_ms: self.shared().config.max_lifetime.as_millis() as u64,
        }
    }

    fn check_open(&self) -> TxnResult<()> {
        if self.state().finished {
            return Err(TxnError::Finished {
                start_ts: self.inner.start_ts,
            });
        }
        Ok(())
    }

    /// Buffers a write of `value` to `cell`.
    pub fn set(&self, cell: Cell, value: impl Into<Vec<u8>>) {
        self.state().writes.insert(cell, Some(value.into()));
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

    /// Like [`Transaction::get`], also returning the commit_ts of the version read
    /// (`None` for the transaction's own buffered write or an absent cell).
    pub async fn get_versioned(&self, cell: &Cell) -> TxnResult<(Option<Vec<u8>>, Option<u64>)> {
        let (key, snap) = match self.local_read(cell)? {
            LocalRead::Written(value) => return Ok((value, None)),
            LocalRead::Head(key, Some(snap)) => (key, snap),
            LocalRead::Head(key, None) => {
                let snap = self.shared().read_head_at(&key).await?;
                (key, snap)
            }
        };
        let read = self.read_versioned(cell, key, snap).await?;
        if read.beyond_head {
            self.ensure_not_collected().await?;
        }
        self.check_lifetime()?;
        Ok((read.value, read.commit_ts))
    }

    /// The value of `cell` in this transaction's snapshot (its own writes included).
    pub async fn get(&self, cell: &Cell) -> TxnResult<Option<Vec<u8>>> {
        Ok(self.get_versioned(cell).await?.0)
    }

    /// What the transaction itself knows about `cell` (one lock of its state): its buffered
    /// write, or the head key and the head it already read, if any. Reusing that head is
    /// exact under SI: a cached head holds no lock at or below our start_ts, and anything
    /// written to the cell since commits above our start_ts (its commit_ts is drawn after its
    /// prewrite, which came after our read).
    fn local_read(&self, cell: &Cell) -> TxnResult<LocalRead> {
        let key = self.shared().codec.head(cell);
        let state = self.state();
        if state.finished {
            return Err(TxnError::Finished {
                start_ts: self.inner.start_ts,
            });
        }
        if let Some(write) = state.writes.get(cell) {
            return Ok(LocalRead::Written(write.clone()));
        }
        let cached = state.heads.get(&key).cloned();
        Ok(LocalRead::Head(key, cached))
    }

    /// Reads `cell` (head key `key`) at start_ts starting from an already-read head: resolves
    /// locks that may hide a version visible to us (waiting on live ones), remembers the head
    /// for a later prewrite, then returns the visible value and its commit_ts.
    ///
    /// An answer found in the head needs no further check: one head read is atomic and the
    /// head holds a contiguous newest-first run of versions, which GC only shortens from the
    /// old end. An answer from `V` (or an absent one after looking there) is exact only if GC
    /// had not passed start_ts when `V` was read: the caller checks that with
    /// [`Self::ensure_not_collected`] when `beyond_head` is set, after its last read.
    async fn read_versioned(
        &self,
        cell: &Cell,
        key: Vec<u8>,
        mut snap: HeadSnapshot,
    ) -> TxnResult<VersionedRead> {
        let start_ts = self.inner.start_ts;
        let mut backoff = Duration::from_millis(1);
        while let Some(lock) = snap.head.lock.clone().filter(|l| l.start_ts <= start_ts) {
            self.check_lifetime()?;
            if self.shared().resolve_lock(cell, &lock).await? == TxnStatus::Pending {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(50));
            }
            snap = self.shared().read_head_at(&key).await?;
        }
        // No head at all: the cell was never prewritten, so nothing is in `V` either (heads
        // are created by the first prewrite and GC never deletes one).
        let never_written = snap.raw.is_none();
        let beyond_head = !never_written && snap.head.visible_at(start_ts).is_none();
        let version = if never_written {
            None
        } else {
            self.shared()
                .visible_version(cell, &snap.head, start_ts)
                .await?
        };
        // Kept as the expectation of a later prewrite; a read-only snapshot never prewrites,
        // so it keeps nothing (a long scan would otherwise hold every head it read).
        if !self.inner.read_only {
            self.state().heads.insert(key, snap);
        }
        let Some(version) = version else {
            return Ok(VersionedRead {
                value: None,
                commit_ts: None,
                beyond_head,
            });
        };
        let commit_ts = version.commit_ts;
        match self.shared().version_value(cell, version).await? {
            ValueFetch::Value(value) => Ok(VersionedRead {
                value,
                commit_ts: Some(commit_ts),
                beyond_head,
            }),
            // GC removed it (we outlived our snapshot) or the store lost it: only the
            // safe point tells which.
            ValueFetch::Missing { key } => {
                self.ensure_not_collected().await?;
                Err(TxnError::Corrupt {
                    key: key.escape_ascii().to_string(),
                    source: crate::record::RecordError::Truncated {
                        field: "out-of-line value (missing)",
                    },
                })
            }
        }
    }

    /// Every cell of `table` whose row lies in `[row_start, row_end)` (`row_end: None`: to the
    /// end of the table) with its value in this snapshot, in (row, column) order. Own writes
    /// are included; cells deleted or absent in the snapshot are not.
    pub async fn scan(
        &self,
        table: &[u8],
        row_start: &[u8],
        row_end: Option<&[u8]>,
    ) -> TxnResult<Vec<(Cell, Vec<u8>)>> {
        use crate::codec::{Key, Space};
        self.check_open()?;
        let range = self
            .shared()
            .codec
            .rows_range(Space::Head, table, row_start, row_end);
        let mut result: BTreeMap<Cell, Vec<u8>> = BTreeMap::new();
        let kv = self.shared().kv.clone();
        let mut pager = RangePager::new(kv.as_ref(), range, ScanOrder::Forward, 1024);
        let mut beyond_head = false;
        while let Some(page) = pager.next_page().await? {
            for (key, raw) in page {
                let cell = match self.shared().codec.decode(&key) {
                    Ok(Key::Head(cell)) => cell,
                    other => {
                        return Err(TxnError::Storage(KvError::Engine {
                            op: "scan",
                            message: format!(
                                "key {} in the head range decodes as {other:?}",
                                key.escape_ascii()
                            ),
                        }))
                    }
                };
                let snap = HeadSnapshot::decode(&key, Some(raw))?;
                let read = self.read_versioned(&cell, key, snap).await?;
                beyond_head |= read.beyond_head;
                if let Some(value) = read.value {
                    result.insert(cell, value);
                }
            }
        }
        for (cell, write) in self.state().writes.iter() {
            let in_range = cell.table == table
                && cell.row.as_slice() >= row_start
                && row_end.is_none_or(|end| cell.row.as_slice() < end);
            if in_range {
                match write {
                    Some(value) => result.insert(cell.clone(), value.clone()),
                    None => result.remove(cell),
                };
            }
        }
        // One check after the last read covers every read of the scan.
        if beyond_head {
            self.ensure_not_collected().await?;
        }
        self.check_lifetime()?;
        Ok(result.into_iter().collect())
    }

    /// One page of a scan of a read-only snapshot ([`super::Client::snapshot_at`]): at most
    /// `limit` cells of `table` with rows in `[row_start, row_end)` that hold a value, in
    /// (row, column) order, starting after cell `after` if given (the last cell of the
    /// previous page). Memory stays bounded by the page however large the table; each page
    /// is checked against GC like [`Transaction::scan`]. A transaction that is not a
    /// read-only snapshot gets `InvalidArgument` (its own writes are not paged).
    pub async fn scan_page(
        &self,
        table: &[u8],
        row_start: &[u8],
        row_end: Option<&[u8]>,
        after: Option<&Cell>,
        limit: usize,
    ) -> TxnResult<Vec<(Cell, Vec<u8>)>> {
        use crate::codec::{Key, Space};
        self.check_open()?;
        if !self.inner.read_only {
            return Err(TxnError::InvalidArgument(
                "scan_page needs a read-only snapshot (Client::snapshot_at)".to_string(),
            ));
        }
        let mut range = self
            .shared()
            .codec
            .rows_range(Space::Head, table, row_start, row_end);
        if let Some(after) = after {
            let mut next = self.shared().codec.head(after);
            next.push(0);
            range.start = range.start.max(next);
        }
        let limit = limit.max(1);
        let mut out = Vec::with_capacity(limit.min(4096));
        let mut beyond_head = false;
        let kv = self.shared().kv.clone();
        let mut pager = RangePager::new(kv.as_ref(), range, ScanOrder::Forward, limit.min(1024));
        'pages: while let Some(page) = pager.next_page().await? {
            for (key, raw) in page {
                let Ok(Key::Head(cell)) = self.shared().codec.decode(&key) else {
                    return Err(TxnError::Storage(KvError::Engine {
                        op: "scan_page",
                        message: format!(
                            "key {} in the head range is not a head",
                            key.escape_ascii()
                        ),
                    }));
                };
                let snap = HeadSnapshot::decode(&key, Some(raw))?;
                let read = self.read_versioned(&cell, key, snap).await?;
                beyond_head |= read.beyond_head;
                if let Some(value) = read.value {
                    out.push((cell, value));
                    if out.len() >= limit {
                        break 'pages;
                    }
                }
            }
        }
        if beyond_head {
            self.ensure_not_collected().await?;
        }
        Ok(out)
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

    /// Commits: prewrites every written cell (primary first in key order, all in parallel),
    /// draws commit_ts, commits the primary (the commit point), then the secondaries.
    /// Returns the commit timestamp (start_ts for a read-only transaction).
    pub async fn commit(&self) -> TxnResult<Timestamp> {
        let writes = {
            let mut state = self.state();
            if state.finished {
                return Err(TxnError::Finished {
                    start_ts: self.inner.start_ts,
                });
            }
            state.finished = true;
            (
                std::mem::take(&mut state.writes),
                std::mem::take(&mut state.notifies),
            )
        };
        let (writes, notifies) = writes;
        if writes.is_empty() && notifies.is_empty() {
            self.check_lifetime()?;
            return Ok(self.start_ts());
        }
        if self.inner.read_only {
            return Err(TxnError::InvalidArgument(format!(
                "snapshot at {} is read-only but has {} buffered writes",
                self.inner.start_ts,
                writes.len()
            )));
        }
        if writes.is_empty() {
            // Nothing to lock, so nothing can roll back: the notifications are committed now.
            self.check_lifetime()?;
            let ts = self.shared().oracle.get_timestamp().await?;
            let record = crate::record::Notification::Committed { commit_ts: ts.0 }.encode();
            let entries: Vec<_> = notifies
                .iter()
                .map(|cell| (cell.clone(), ts.0, record.clone()))
                .collect();
            let bucket = self.shared().put_notify_keys(&entries).await?;
            self.shared().publish_hint(super::CommittedNotify {
                notify_ts: ts.0,
                notification: crate::record::Notification::Committed { commit_ts: ts.0 },
                bucket,
                cells: notifies.into_iter().collect(),
            });
            return Ok(ts);
        }
        let notified =
            !notifies.is_empty() || writes.keys().any(|cell| self.shared().is_observed(cell));
        // The cells whose notify keys this commit puts, for the in-process hint.
        let hinted: Vec<Cell> = if notified && self.shared().wants_hints() {
            let observed = writes
                .keys()
                .filter(|cell| self.shared().is_observed(cell) && !notifies.contains(*cell));
            notifies.iter().chain(observed).cloned().collect()
        } else {
            Vec::new()
        };
        // One bucket for every notify key of the commit, so one hint names them all.
        let bucket = self.shared().notify_bucket();
        let result = self.commit_writes(writes, notifies, bucket).await;
        if notified {
            if let Ok(commit_ts) = &result {
                self.shared().publish_hint(super::CommittedNotify {
                    notify_ts: self.inner.start_ts,
                    notification: crate::record::Notification::Committed {
                        commit_ts: commit_ts.0,
                    },
                    bucket,
                    cells: hinted,
                });
            }
        }
        result
    }

    async fn commit_writes(
        &self,
        writes: BTreeMap<Cell, Option<Vec<u8>>>,
        notifies: std::collections::BTreeSet<Cell>,
        notify_bucket: u64,
    ) -> TxnResult<Timestamp> {
        let shared = self.inner.shared.clone();
        let start_ts = self.inner.start_ts;
        let cells: Vec<(Cell, Option<Vec<u8>>)> = writes.into_iter().collect();
        let primary = cells[0].0.clone();
        // Invariant 5: a transaction already past its lifetime must not lock anything, and no
        // lock may outlive the lifetime.
        self.check_lifetime()?;
        let cached: HashMap<Vec<u8>, HeadSnapshot> = std::mem::take(&mut self.state().heads);

        // Keep the primary's lock alive while the commit takes long: the heartbeat runs in
        // this task beside the commit (no task spawned per commit) and stops with it.
        let work = std::pin::pin!(self.prewrite_and_commit(
            &cells,
            &primary,
            cached,
            notifies,
            notify_bucket
        ));
        // Unconstrained by tokio's cooperative budget: the commit work is polled first and
        // can spend the task's whole budget on every poll (in-process stores yield through
        // `consume_budget`), which would keep the heartbeat's timer from ever firing.
        let heartbeat = std::pin::pin!(tokio::task::unconstrained(heartbeat(
            shared.clone(),
            primary.clone(),
            start_ts,
            self.inner.started,
        )));
        match futures::future::select(work, heartbeat).await {
            futures::future::Either::Left((result, _)) => result,
            futures::future::Either::Right(((), work)) => work.await,
        }
    }

    /// Both phases of [`Self::commit_writes`]: prewrites, the commit point, secondaries.
    async fn prewrite_and_commit(
        &self,
        cells: &[(Cell, Option<Vec<u8>>)],
        primary: &Cell,
        cached: HashMap<Vec<u8>, HeadSnapshot>,
        notifies: std::collections::BTreeSet<Cell>,
        notify_bucket: u64,
    ) -> TxnResult<Timestamp> {
        let shared = self.inner.shared.clone();
        let start_ts = self.inner.start_ts;
        // Phase 1: prewrite every cell in parallel.
        let locked = AtomicUsize::new(0);
        // Explicit notifications of cells not written ride with the primary's prewrite.
        let extra_notifies: Vec<Cell> = notifies
            .iter()
            .filter(|cell| !cells.iter().any(|(c, _)| c == *cell))
            .cloned()
            .collect();
        let prewrites = cells.iter().enumerate().map(|(i, (cell, value))| {
            let primary_ref = if i == 0 { None } else { Some(primary.clone()) };
            let mut notify: Vec<Cell> = if i == 0 {
                extra_notifies.clone()
            } else {
                Vec::new()
            };
            if notifies.contains(cell) || shared.is_observed(cell) {
                notify.push(cell.clone());
            }
            self.prewrite(
                cell,
                Prewrite {
                    primary: primary_ref,
                    value: value.as_deref(),
                    notify,
                    notify_primary: primary,
                    notify_bucket,
                },
                cached.get(&shared.codec.head(cell)).cloned(),
                &locked,
            )
        });
        let results = futures::future::join_all(prewrites).await;
        let mut locked_heads = Vec::with_capacity(results.len());
        let mut failure = None;
        for result in results {
            match result {
                Ok(snap) => locked_heads.push(Some(snap)),
                Err(e @ TxnError::InjectedCrash(_)) => return Err(e),
                Err(e) => {
                    locked_heads.push(None);
                    if failure.is_none() || matches!(e, TxnError::Conflict { .. }) {
                        failure = Some(e);
                    }
                }
            }
        }
        if let Some(error) = failure {
            self.abort(primary, cells).await?;
            return Err(error);
        }
        crash_point!(self, CrashPoint::AllPrewritten);

        // Phase 2: commit_ts, then the commit point.
        let commit_ts = shared.oracle.get_timestamp().await?;
        let lifetime_ms = shared.config.max_lifetime.as_millis() as u64;
        if commit_ts.physical_ms() > Timestamp(start_ts).physical_ms() + lifetime_ms {
            self.abort(primary, cells).await?;
            return Err(self.too_old());
        }
        let primary_snap = locked_heads[0].take();
        self.commit_primary(primary, commit_ts.0, primary_snap)
            .await?;
        crash_point!(self, CrashPoint::Committed);

        // Secondaries: failures are harmless (readers roll them forward).
        let committed = AtomicUsize::new(0);
        let secondaries = cells[1..]
            .iter()
            .zip(locked_heads[1..].iter_mut())
            .map(|((cell, _), snap)| {
                let snap = snap.take();
                let committed = &committed;
                let shared = shared.clone();
                async move {
                    match shared.roll_forward(cell, start_ts, commit_ts.0, snap).await {
                        Ok(Some(committed)) => shared.remember_committed_head(cell, committed),
                        Ok(None) => {}
                        Err(e) => {
                            tracing::debug!(%cell, start_ts, error = %e, "secondary commit failed; readers will roll it forward");
                        }
                    }
                    let _done = committed.fetch_add(1, Ordering::SeqCst) + 1;
                    crash_point!(self, CrashPoint::SecondaryCommitted { committed: _done });
                    Ok::<(), TxnError>(())
                }
            });
        for result in futures::future::join_all(secondaries).await {
            result?;
        }
        Ok(commit_ts)
    }

    /// Prewrites one cell: checks for conflicts, writes the out-of-line value and the
    /// previous version, then CASes our lock into the head.
    async fn prewrite(
        &self,
        cell: &Cell,
        args: Prewrite<'_>,
        cached: Option<HeadSnapshot>,
        locked: &AtomicUsize,
    ) -> TxnResult<HeadSnapshot> {
        let shared = self.shared();
        let start_ts = self.inner.start_ts;
        let Prewrite {
            primary,
            value,
            notify,
            notify_primary,
            notify_bucket,
        } = args;
        let mut notify_written = notify.is_empty();
        let op = match value {
            None => Op::Delete,
            Some(v) if v.len() > shared.config.inline_limit => Op::PutExternal(v.len() as u64),
            Some(v) => Op::Put(v.to_vec()),
        };
        // The expected head: the one this transaction read, else the one our client's last
        // commit of the cell left, else a guess that the cell is new (no head). A wrong
        // expectation costs nothing extra: the CAS fails and returns the current head, which
        // is what a read would have fetched (see ARCHITECTURE "Remembered heads").
        let mut snap = cached
            .or_else(|| shared.remembered_head(cell))
            .unwrap_or(HeadSnapshot {
                raw: None,
                head: Head::default(),
            });
        let mut data_written = false;
        loop {
            let head = &snap.head;
            if let Some(lock) = &head.lock {
                if lock.start_ts == start_ts {
                    break; // Our own lock (a retried CAS that did apply).
                }
                let lock = lock.clone();
                if shared.resolve_lock(cell, &lock).await? == TxnStatus::Pending {
                    return Err(TxnError::Conflict { cell: cell.clone() });
                }
                snap = shared.read_head(cell).await?;
                continue;
            }
            let newer_commit = head
                .latest
                .as_ref()
                .is_some_and(|v| v.commit_ts >= start_ts);
            if newer_commit || head.rollback_ts >= start_ts {
                return Err(TxnError::Conflict { cell: cell.clone() });
            }
            let mut puts = Vec::new();
            if let (Op::PutExternal(_), false, Some(v)) = (&op, data_written, value) {
                puts.push((shared.codec.data(cell, start_ts), v.to_vec()));
                data_written = true;
            }
            // Invariant 4: the versions our commit would push out of the head are durable in
            // V before our lock exists. Our commit moves `latest` into `recent`; when that
            // would overflow, `recent` goes to V now and leaves the head with our lock.
            let spill = super::heads::recent_full(head);
            if spill {
                for v in &head.recent {
                    puts.push((shared.codec.version(cell, v.commit_ts), v.encode()));
                }
            }
            let mut notify_entries = Vec::new();
            if !notify_written {
                let record = crate::record::Notification::Strong {
                    start_ts,
                    primary: notify_primary.clone(),
                    ttl_ms: self.lock_ttl_ms(),
                }
                .encode();
                for dirty in &notify {
                    let key = shared.codec.notify(dirty, start_ts, notify_bucket);
                    puts.push((key, record.clone()));
                    notify_entries.push((dirty.clone(), start_ts, record.clone()));
                }
                notify_written = true;
            }
            if !puts.is_empty() {
                shared.kv.batch_put(puts).await?;
            }
            if !notify_entries.is_empty() {
                // Before our lock: a notify key put below a floor raised meanwhile is moved
                // above it, so it exists where scanners look before the commit point.
                shared
                    .settle_notify_keys(notify_bucket, &notify_entries)
                    .await?;
            }
            let mut next: Head = head.next();
            if spill {
                next.recent.clear();
            }
            next.lock = Some(Lock {
                start_ts,
                primary: primary.clone(),
                op: op.clone(),
                ttl_ms: self.lock_ttl_ms(),
            });
            match shared.cas_head(cell, &snap, next).await? {
                Ok(new) => {
                    snap = new;
                    break;
                }
                Err(current) => snap = current,
            }
        }
        let _locked = locked.fetch_add(1, Ordering::SeqCst) + 1;
        crash_point!(
            self,
            CrashPoint::Prewrote {
                primary: primary.is_none(),
                locked: _locked
            }
        );
        Ok(snap)
    }

    /// The commit point: CAS of the primary from our lock to our version at `commit_ts`.
    async fn commit_primary(
        &self,
        primary: &Cell,
        commit_ts: u64,
        known: Option<HeadSnapshot>,
    ) -> TxnResult<()> {
        let shared = self.shared();
        let start_ts = self.inner.start_ts;
        let mut known = known;
        let mut storage_failures = 0;
        loop {
            match shared
                .roll_forward(primary, start_ts, commit_ts, known.take())
                .await
            {
                Ok(Some(committed)) => {
                    shared.remember_committed_head(primary, committed);
                    return Ok(());
                }
                Ok(None) => break, // Our lock is gone: find out why below.
                Err(TxnError::Storage(e)) => {
                    storage_failures += 1;
                    tracing::warn!(start_ts, error = %e, "commit-point CAS failed; retrying");
                    if storage_failures >= COMMIT_STORAGE_RETRIES {
                        return Err(TxnError::CommitUnknown { start_ts });
                    }
                    tokio::time::sleep(Duration::from_millis(10 << storage_failures)).await;
                }
                Err(e) => return Err(e),
            }
        }
        // Our lock is not there: committed (by us, through a CAS reported failed) or fenced.
        match shared.txn_status(primary, start_ts, 0).await {
            Ok(TxnStatus::Committed(_)) => Ok(()),
            // GC may have removed the evidence of our commit once its safe point passed our
            // start_ts (a writer stalled for longer than the GC lag): do not guess. A safe
            // point read after the status check that is still at or below start_ts proves
            // the check saw every version GC could later remove.
            Ok(TxnStatus::RolledBack) => match super::gc::read_safe_point(shared).await {
                Ok(safe_point) if safe_point <= start_ts => Err(TxnError::Aborted { start_ts }),
                _ => Err(TxnError::CommitUnknown { start_ts }),
            },
            Ok(TxnStatus::Pending) => Err(TxnError::CommitUnknown { start_ts }),
            Err(TxnError::Storage(_)) => Err(TxnError::CommitUnknown { start_ts }),
            Err(e) => Err(e),
        }
    }

    /// Rolls back after a failed prewrite: fence the primary first, then remove our locks.
    async fn abort(&self, primary: &Cell, cells: &[(Cell, Option<Vec<u8>>)]) -> TxnResult<()> {
        let shared = self.shared();
        let start_ts = self.inner.start_ts;
        shared.fence_primary(primary, start_ts).await?;
        let secondaries = cells[1..]
            .iter()
            .map(|(cell, _)| shared.roll_back(cell, start_ts, None));
        for result in futures::future::join_all(secondaries).await {
            if let Err(e) = result {
                tracing::debug!(start_ts, error = %e, "removing a secondary lock failed; readers will roll it back");
            }
        }
        Ok(())
    }
}

/// What [`Transaction::read_versioned`] found.
struct VersionedRead {
    /// The visible value (`None`: absent or deleted).
    value: Option<Vec<u8>>,
    /// The commit_ts of the version read.
    commit_ts: Option<u64>,
    /// Whether the answer came from beyond the head (`V`), so GC could have changed it.
    beyond_head: bool,
}

/// What a read finds in the transaction itself.
// Returned once per read and consumed at once: boxing the large variant would only add an
// allocation to the common case.
#[allow(clippy::large_enum_variant)]
enum LocalRead {
    /// The transaction's own buffered write (`None`: a delete).
    Written(Option<Vec<u8>>),
    /// The cell's head key, and the head the transaction already read, if any.
    Head(Vec<u8>, Option<HeadSnapshot>),
}

/// What one prewrite writes besides its lock.
struct Prewrite<'a> {
    /// The primary, or `None` when prewriting the primary itself.
    primary: Option<Cell>,
    /// The new value (`None`: delete).
    value: Option<&'a [u8]>,
    /// Cells whose notify keys are put before the lock.
    notify: Vec<Cell>,
    /// The transaction's primary, recorded in the notify keys.
    notify_primary: &'a Cell,
    /// The bucket of the notify keys.
    notify_bucket: u64,
}

/// Extends the primary's lock TTL while a commit runs long; runs until the transaction is
/// decided (or forever if heartbeats are off), so it is raced against the commit and
/// dropped with it.
async fn heartbeat(shared: Arc<Shared>, primary: Cell, start_ts: u64, started: Instant) {
    if !shared.config.heartbeat {
        return std::future::pending().await;
    }
    let ttl = shared.config.lock_ttl;
    let max = shared.config.max_lifetime;
    loop {
        tokio::time::sleep(ttl / 3).await;
        // Never extend beyond the transaction's maximum lifetime.
        let wanted = (started.elapsed() + ttl).min(max).as_millis() as u64;
        let Ok(snap) = shared.read_head(&primary).await else {
            continue;
        };
        let Some(lock) = snap.head.lock.as_ref().filter(|l| l.start_ts == start_ts) else {
            // Not locked yet (a slow prewrite): keep watching; committed or fenced:
            // nothing left to keep alive.
            let decided =
                snap.head.committed_by(start_ts).is_some() || snap.head.rollback_ts >= start_ts;
            if decided {
                return;
            }
            continue;
        };
        if lock.ttl_ms >= wanted {
            continue;
        }
        let mut next = snap.head.next();
        if let Some(l) = next.lock.as_mut() {
            l.ttl_ms = wanted;
        }
        let _ = shared.cas_head(&primary, &snap, next).await;
    }
}
