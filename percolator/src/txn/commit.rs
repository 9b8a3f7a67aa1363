//! The commit path of a [`Transaction`]: prewrite of every written cell (conflict checks,
//! locks, strong notifications), the commit point on the primary, the secondaries, abort on
//! failure, and the heartbeat that keeps the primary's lock alive while a commit runs long.

#[cfg_attr(not(feature = "failpoints"), allow(unused_imports))]
use super::failpoint::{crash_point, CrashPoint};
use super::heads::{HeadSnapshot, HeadStep, HeadUpdate};
use super::locks::TxnStatus;
use super::prewrite::Prewrite;
use super::transaction::Transaction;
use super::{Shared, TxnError, TxnResult};
use crate::codec::Cell;
use crate::ts::Timestamp;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How many times the commit-point CAS is retried on storage errors before the outcome is
/// reported as unknown.
const COMMIT_STORAGE_RETRIES: u32 = 5;

impl Transaction {
    /// Commits: prewrites every written cell (primary first in key order, all in parallel),
    /// draws commit_ts, commits the primary (the commit point), then the secondaries.
    /// Returns the commit timestamp (start_ts for a read-only transaction).
    pub async fn commit(&self) -> TxnResult<Timestamp> {
        let writes = {
            let mut state = self.state();
            if state.finished {
                return Err(TxnError::Finished {
                    start_ts: self.inner.start_ts.0,
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
        // Whether the commit puts notify keys, and the cells they name for the in-process
        // hint.
        let (notified, hinted) = {
            let columns = self.shared().columns();
            let notified =
                !notifies.is_empty() || writes.keys().any(|cell| columns.is_observed(cell));
            let hinted: Vec<Cell> = if notified && self.shared().wants_hints() {
                let observed = writes
                    .keys()
                    .filter(|cell| columns.is_observed(cell) && !notifies.contains(*cell));
                notifies.iter().chain(observed).cloned().collect()
            } else {
                Vec::new()
            };
            (notified, hinted)
        };
        // One bucket for every notify key of the commit, so one hint names them all.
        let bucket = self.shared().notify_bucket();
        let result = self.commit_writes(writes, notifies, bucket).await;
        if notified {
            if let Ok(commit_ts) = &result {
                self.shared().publish_hint(super::CommittedNotify {
                    notify_ts: self.inner.start_ts.0,
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
        // Write-once cells become records decided by the primary (`percolator::design::once`);
        // the primary is an ordinary cell: the first one, or the first write-once cell
        // written through its head when there is no other.
        // The guard covers every write-once cell written, the one that goes through its head
        // below included.
        let (mut cells, mut once_cells): (Vec<_>, Vec<_>) = {
            let columns = shared.columns();
            let state = self.state();
            // Planted bug `WrittenOnceSkipsHead` (`crate::planted`): the cell written through
            // its head (the first, when every cell is write-once) is not checked.
            #[cfg(feature = "planted")]
            let head_path = (crate::planted::active(crate::planted::Bug::WrittenOnceSkipsHead)
                && writes.keys().all(|c| columns.is_write_once(c)))
            .then(|| writes.keys().next().cloned())
            .flatten();
            #[cfg(not(feature = "planted"))]
            let head_path: Option<Cell> = None;
            if let Some((cell, _)) = writes.iter().find(|(cell, value)| {
                value.is_some()
                    && state.once_read.contains(*cell)
                    && columns.is_write_once(cell)
                    && head_path.as_ref() != Some(*cell)
            }) {
                return Err(TxnError::WrittenOnce { cell: cell.clone() });
            }
            writes
                .into_iter()
                .partition(|(cell, _)| !columns.is_write_once(cell))
        };
        if cells.is_empty() {
            cells.push(once_cells.remove(0));
        }
        let primary = cells[0].0.clone();
        // Invariant 5: a transaction already past its lifetime must not lock anything, and no
        // lock may outlive the lifetime.
        self.check_lifetime()?;
        let cached = std::mem::take(&mut self.state().heads);

        // Keep the primary's lock alive while the commit takes long. The heartbeat is its own
        // task, not a future polled beside the commit in this task: the commit has
        // synchronous stretches that grow with the write set (building the prewrite plans,
        // collecting the locked heads; an in-process store yields only once the task's
        // budget is spent), and a heartbeat polled only between them missed its beats on a
        // loaded machine, so a reader fenced a live 320,000-cell commit. Its own task runs
        // on another worker thread meanwhile. It is aborted when the commit returns or is
        // dropped; an extension it has in flight then only fails its CAS (the head moved on)
        // or lengthens our own lock's TTL, which the lifetime still bounds.
        let primary_head = PrimaryHead::default();
        let _heartbeat = shared.config.heartbeat.then(|| {
            AbortOnDrop(tokio::spawn(heartbeat(
                shared.clone(),
                primary.clone(),
                start_ts,
                self.inner.started,
                primary_head.clone(),
                cells.len() > super::prewrite::PRIMARY_ALONE_ABOVE,
            )))
        });
        // (A task spawned from a worker waits in that worker's LIFO slot, which other
        // workers cannot steal, until this task yields. The prewrite yields after each round
        // of `PREWRITE_CHUNK` cells, the first one the primary's, so the heartbeat's timer is
        // set before any long stretch; a smaller write set has no stretch worth a beat.)
        let committed = self
            .prewrite_and_commit(
                &cells,
                &once_cells,
                &primary,
                cached,
                notifies,
                notify_bucket,
                &primary_head,
            )
            .await;
        // Committed: the writes of remembered columns are this client's to answer. Failed,
        // or of unknown outcome: what was remembered of those cells may be older than a
        // write that did commit, so it is forgotten (`percolator::design::recent`).
        if let Some(recent) = &shared.recent {
            let columns = shared.columns();
            let remembered = once_cells
                .into_iter()
                .chain(cells)
                .filter(|(cell, _)| columns.is_remembered(cell));
            match &committed {
                Ok(commit_ts) => recent.remember(remembered.collect(), commit_ts.0),
                Err(_) => recent.forget(remembered.map(|(cell, _)| cell)),
            }
        }
        committed
    }

    /// Both phases of [`Self::commit_writes`]: prewrites, the commit point, secondaries.
    #[allow(clippy::too_many_arguments)]
    async fn prewrite_and_commit(
        &self,
        cells: &[(Cell, Option<Vec<u8>>)],
        once_cells: &[(Cell, Option<Vec<u8>>)],
        primary: &Cell,
        mut cached: super::heads::ReadHeads,
        notifies: std::collections::BTreeSet<Cell>,
        notify_bucket: u64,
        primary_head: &PrimaryHead,
    ) -> TxnResult<Timestamp> {
        let shared = self.inner.shared.clone();
        let start_ts = self.inner.start_ts;
        // Readers of this client that meet our locks or records wait on this, not on polls
        // of the primary, until we are decided (`txn::writers`).
        let in_flight = shared.writers.begin(start_ts.0);
        // Phase 1: prewrite every cell, batched (see `prewrite.rs`).
        let locked = AtomicUsize::new(0);
        // Explicit notifications of cells not written ride with the primary's prewrite.
        let extra_notifies: Vec<Cell> = notifies
            .iter()
            .filter(|cell| !cells.iter().chain(once_cells).any(|(c, _)| c == *cell))
            .cloned()
            .collect();
        // The records ride in the primary's round, before its lock.
        let once = self.once_writes(once_cells, primary, &notifies, notify_bucket);
        let plans: Vec<Prewrite<'_>> = {
            let columns = shared.columns();
            cells
                .iter()
                .enumerate()
                .map(|(i, (cell, value))| {
                    let mut notify: Vec<Cell> = if i == 0 {
                        extra_notifies.clone()
                    } else {
                        Vec::new()
                    };
                    if notifies.contains(cell) || columns.is_observed(cell) {
                        notify.push(cell.clone());
                    }
                    // The expected head: the one this transaction read, else the one our
                    // client's last commit of the cell left, else a guess that the cell is new
                    // (no head). A wrong expectation costs nothing extra: the CAS fails and
                    // returns the current head, which is what a read would have fetched (see
                    // `percolator::design::commit`).
                    let expected = cached
                        .take(&shared.codec.head(cell))
                        .map(Arc::new)
                        .or_else(|| shared.remembered_head(cell))
                        .unwrap_or_else(|| Arc::new(HeadSnapshot::absent()));
                    Prewrite {
                        cell,
                        primary: (i > 0).then(|| primary.clone()),
                        value: value.as_deref(),
                        notify,
                        notify_primary: primary,
                        notify_bucket,
                        expected,
                    }
                })
                .collect()
        };
        let wrote = AtomicBool::new(false);
        let mut locked_heads = match self
            .prewrite_all(plans, once, &locked, &wrote, primary_head)
            .await
        {
            Ok(snaps) => snaps,
            #[cfg(feature = "failpoints")]
            Err(e @ TxnError::InjectedCrash(_)) => return Err(e),
            Err(e) => {
                // Nothing reached the store (a conflict seen on the expected heads): nothing
                // to undo. Otherwise some locks may exist: fence and remove them.
                if wrote.load(Ordering::SeqCst) {
                    self.abort(primary, cells).await?;
                    self.delete_once_records(once_cells).await;
                }
                return Err(e);
            }
        };
        crash_point!(self, CrashPoint::AllPrewritten);

        // Phase 2: commit_ts, then the commit point.
        let commit_ts = shared.oracle.get_timestamp().await?;
        let lifetime_ms = shared.config.max_lifetime.as_millis() as u64;
        if commit_ts.physical_ms() > start_ts.physical_ms() + lifetime_ms {
            self.abort(primary, cells).await?;
            self.delete_once_records(once_cells).await;
            return Err(self.too_old());
        }
        let secondary_heads = locked_heads.split_off(1);
        // The primary's head as last written: by the heartbeat if it renewed the lease (so
        // the commit point's CAS expects the right bytes), else by the prewrite.
        let primary_snap = primary_head.take().or(locked_heads.pop());
        self.commit_primary(primary, commit_ts, primary_snap)
            .await?;
        shared.remember_committed(primary, start_ts, commit_ts);
        drop(in_flight);
        crash_point!(self, CrashPoint::Committed);

        // Secondaries in one batched round: failures are harmless (readers roll them
        // forward).
        let secondaries: Vec<(&Cell, HeadSnapshot)> = cells[1..]
            .iter()
            .map(|(cell, _)| cell)
            .zip(secondary_heads)
            .collect();
        let committed = shared
            .roll_forward_many(secondaries, start_ts, commit_ts)
            .await;
        for (_done, cell) in (1..).zip(committed) {
            tracing::trace!(%cell, %start_ts, "secondary committed");
            crash_point!(self, CrashPoint::SecondaryCommitted { committed: _done });
        }
        Ok(commit_ts)
    }

    /// The commit point: CAS of the primary from our lock to our version at `commit_ts`.
    async fn commit_primary(
        &self,
        primary: &Cell,
        commit_ts: Timestamp,
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
                    tracing::warn!(%start_ts, error = %e, "commit-point CAS failed; retrying");
                    if storage_failures >= COMMIT_STORAGE_RETRIES {
                        return Err(TxnError::CommitUnknown {
                            start_ts: start_ts.0,
                        });
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
                Ok(safe_point) if safe_point <= start_ts => Err(TxnError::Aborted {
                    start_ts: start_ts.0,
                }),
                _ => Err(TxnError::CommitUnknown {
                    start_ts: start_ts.0,
                }),
            },
            Ok(TxnStatus::Pending) => Err(TxnError::CommitUnknown {
                start_ts: start_ts.0,
            }),
            Err(TxnError::Storage(_)) => Err(TxnError::CommitUnknown {
                start_ts: start_ts.0,
            }),
            Err(e) => Err(e),
        }
    }

    /// Rolls back after a failed prewrite: fence the primary first, then remove our locks
    /// (one batched read and one batched CAS for the secondaries; failures are harmless,
    /// readers roll the leftovers back).
    async fn abort(&self, primary: &Cell, cells: &[(Cell, Option<Vec<u8>>)]) -> TxnResult<()> {
        let shared = self.shared();
        let start_ts = self.inner.start_ts;
        shared.fence_primary(primary, start_ts).await?;
        let secondaries: Vec<&Cell> = cells[1..].iter().map(|(cell, _)| cell).collect();
        if let Err(e) = shared.roll_back_many(&secondaries, start_ts).await {
            tracing::debug!(%start_ts, error = %e, "removing secondary locks failed; readers will roll them back");
        }
        Ok(())
    }
}

/// Aborts a spawned task when dropped (the commit's heartbeat ends with the commit).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The primary's head as our prewrite or our last heartbeat wrote it, so that a beat is one
/// CAS from known bytes (a read only when the head moved). A beat that must read first takes
/// two round trips, more than the lease margin (twice the slowest one) is sized for.
#[derive(Clone, Default)]
pub(super) struct PrimaryHead(Arc<(std::sync::Mutex<Option<HeadSnapshot>>, tokio::sync::Notify)>);

impl PrimaryHead {
    /// Records the primary's head as just written (and wakes a heartbeat waiting for it).
    pub(super) fn set(&self, snap: HeadSnapshot) {
        *self.0 .0.lock().unwrap_or_else(|p| p.into_inner()) = Some(snap);
        self.0 .1.notify_one();
    }

    fn take(&self) -> Option<HeadSnapshot> {
        self.0 .0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Waits until the prewrite locked the primary.
    async fn locked(&self) {
        self.0 .1.notified().await;
    }
}

/// Extends the primary's lock TTL while a commit runs long (spawned only when heartbeats
/// are on); runs until the transaction is decided unless aborted with the commit.
async fn heartbeat(
    shared: Arc<Shared>,
    primary: Cell,
    start_ts: Timestamp,
    started: Instant,
    known: PrimaryHead,
    beat_at_once: bool,
) {
    let ttl = shared.config.lock_ttl;
    let max = shared.config.max_lifetime;
    let s = start_ts.0;
    // Whether the next beat must read the head (the last one failed).
    let mut reread = false;
    // A large write set (its primary locked alone first) renews the primary's lease as soon
    // as it is locked, with the margin that round measured: its other rounds may take long.
    let mut at_once = beat_at_once;
    loop {
        if at_once {
            known.locked().await;
            at_once = false;
        } else {
            tokio::time::sleep(ttl / 3).await;
        }
        // Never extend beyond the transaction's maximum lifetime. The lease covers the TTL
        // plus twice the slowest recent round trip (this beat's own included, once it is
        // measured): a beat that is slow because the machine is loaded must still land
        // before the lease it renews runs out.
        // Until the prewrite locked the primary there is nothing to extend (the primary is
        // locked before any later chunk, see `prewrite_all`); from then on a beat is one CAS
        // from the head last written.
        let head = known.take();
        if head.is_none() && !reread {
            continue;
        }
        let beat = Instant::now();
        let wanted = (beat.saturating_duration_since(started) + shared.lease_at(beat))
            .min(max)
            .as_millis() as u64;
        // Keeps `true` once the transaction is decided: nothing left to keep alive.
        let update = shared
            .update_head(&primary, head, |snap: Arc<HeadSnapshot>| async move {
                let Some(lock) = snap.head.lock.as_ref().filter(|l| l.start_ts == s) else {
                    // Not locked yet (a slow prewrite): keep watching; committed or
                    // fenced: done.
                    // A fence for a raw delete is no decision: the cell may be recreated.
                    let fenced = snap.head.rollback_ts >= s
                        && !super::fence::is_fence(snap.head.rollback_ts);
                    let decided = snap.head.committed_by(s).is_some() || fenced;
                    return Ok(HeadStep::Keep(decided));
                };
                if lock.ttl_ms >= wanted {
                    return Ok(HeadStep::Keep(false));
                }
                // Only the TTL of our own lock changes, from the exact head read.
                let mut next = snap.head.next();
                if let Some(l) = next.lock.as_mut() {
                    l.ttl_ms = wanted;
                }
                Ok(HeadStep::Write(next))
            })
            .await;
        if update.is_ok() {
            // Failed calls are not round trips (a timeout would widen every lease).
            shared.round_trips.note_since(beat);
        }
        match update {
            Ok(HeadUpdate::Kept(true, _)) => return,
            Ok(HeadUpdate::Kept(false, snap) | HeadUpdate::Written(snap)) => {
                known.set(snap);
                reread = false;
            }
            // A store error: the next beat reads the head first.
            Err(e) => {
                tracing::debug!(%start_ts, error = %e, "heartbeat failed; retried at the next beat");
                reread = true;
            }
        }
    }
}
