//! The commit path of a [`Transaction`]: prewrite of every written cell (conflict checks,
//! locks, strong notifications), the commit point on the primary, the secondaries, abort on
//! failure, and the heartbeat that keeps the primary's lock alive while a commit runs long.

#[cfg_attr(not(feature = "failpoints"), allow(unused_imports))]
use super::failpoint::{crash_point, CrashPoint};
use super::heads::{HeadSnapshot, HeadStep, HeadUpdate};
use super::locks::TxnStatus;
use super::transaction::Transaction;
use super::{Shared, TxnError, TxnResult};
use crate::codec::Cell;
use crate::record::{Head, Lock, Op};
use crate::ts::Timestamp;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
                #[cfg(feature = "failpoints")]
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
        if commit_ts.physical_ms() > start_ts.physical_ms() + lifetime_ms {
            self.abort(primary, cells).await?;
            return Err(self.too_old());
        }
        let primary_snap = locked_heads[0].take();
        self.commit_primary(primary, commit_ts, primary_snap)
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
                    match shared.roll_forward(cell, start_ts, commit_ts, snap).await {
                        Ok(Some(committed)) => shared.remember_committed_head(cell, committed),
                        Ok(None) => {}
                        Err(e) => {
                            tracing::debug!(%cell, %start_ts, error = %e, "secondary commit failed; readers will roll it forward");
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
        let op = match value {
            None => Op::Delete,
            Some(v) if v.len() > shared.config.inline_limit => Op::PutExternal(v.len() as u64),
            Some(v) => Op::Put(v.to_vec()),
        };
        // The expected head: the one this transaction read, else the one our client's last
        // commit of the cell left, else a guess that the cell is new (no head). A wrong
        // expectation costs nothing extra: the CAS fails and returns the current head, which
        // is what a read would have fetched (see ARCHITECTURE "Remembered heads").
        let expected = cached
            .or_else(|| shared.remembered_head(cell))
            .unwrap_or(HeadSnapshot {
                raw: None,
                head: Head::default(),
            });
        let s = start_ts.0;
        // What earlier attempts of the loop below already put (each is put once).
        let data_written = AtomicBool::new(false);
        let notify_written = AtomicBool::new(notify.is_empty());
        let (data_written, notify_written) = (&data_written, &notify_written);
        let (op, notify, primary) = (&op, &notify, &primary);
        let update = shared
            .update_head(cell, Some(expected), |snap: Arc<HeadSnapshot>| async move {
                let head = &snap.head;
                if let Some(lock) = &head.lock {
                    if lock.start_ts == s {
                        // Our own lock (a retried CAS that did apply).
                        return Ok(HeadStep::Keep(()));
                    }
                    let lock = lock.clone();
                    if shared.resolve_lock(cell, &lock).await? == TxnStatus::Pending {
                        return Err(TxnError::Conflict { cell: cell.clone() });
                    }
                    return Ok(HeadStep::Reread);
                }
                let newer_commit = head.latest.as_ref().is_some_and(|v| v.commit_ts >= s);
                if newer_commit || head.rollback_ts >= s {
                    return Err(TxnError::Conflict { cell: cell.clone() });
                }
                let mut puts = Vec::new();
                if let (Op::PutExternal(_), Some(v)) = (op, value) {
                    if !data_written.swap(true, Ordering::Relaxed) {
                        puts.push((shared.codec.data(cell, s), v.to_vec()));
                    }
                }
                // Invariant 4: the versions our commit would push out of the head are
                // durable in V before our lock exists. Our commit moves `latest` into
                // `recent`; when that would overflow, `recent` goes to V now and leaves
                // the head with our lock.
                let spill = super::heads::recent_full(head);
                if spill {
                    for v in &head.recent {
                        puts.push((shared.codec.version(cell, v.commit_ts), v.encode()));
                    }
                }
                let mut notify_entries = Vec::new();
                if !notify_written.swap(true, Ordering::Relaxed) {
                    let record = crate::record::Notification::Strong {
                        start_ts: s,
                        primary: notify_primary.clone(),
                        ttl_ms: self.lock_ttl_ms(),
                    }
                    .encode();
                    for dirty in notify {
                        let key = shared.codec.notify(dirty, s, notify_bucket);
                        puts.push((key, record.clone()));
                        notify_entries.push((dirty.clone(), s, record.clone()));
                    }
                }
                if !puts.is_empty() {
                    shared.kv.batch_put(puts).await?;
                }
                if !notify_entries.is_empty() {
                    // Before our lock: a notify key put below a floor raised meanwhile is
                    // moved above it, so it exists where scanners look before the commit
                    // point.
                    shared
                        .settle_notify_keys(notify_bucket, &notify_entries)
                        .await?;
                }
                let mut next: Head = head.next();
                if spill {
                    next.recent.clear();
                }
                next.lock = Some(Lock {
                    start_ts: s,
                    primary: primary.clone(),
                    op: op.clone(),
                    ttl_ms: self.lock_ttl_ms(),
                });
                Ok(HeadStep::Write(next))
            })
            .await?;
        let snap = match update {
            HeadUpdate::Kept((), snap) | HeadUpdate::Written(snap) => snap,
        };
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
                tracing::debug!(%start_ts, error = %e, "removing a secondary lock failed; readers will roll it back");
            }
        }
        Ok(())
    }
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
async fn heartbeat(shared: Arc<Shared>, primary: Cell, start_ts: Timestamp, started: Instant) {
    if !shared.config.heartbeat {
        return std::future::pending().await;
    }
    let ttl = shared.config.lock_ttl;
    let max = shared.config.max_lifetime;
    let s = start_ts.0;
    loop {
        tokio::time::sleep(ttl / 3).await;
        // Never extend beyond the transaction's maximum lifetime.
        let wanted = (started.elapsed() + ttl).min(max).as_millis() as u64;
        // Keeps `true` once the transaction is decided: nothing left to keep alive.
        let update = shared
            .update_head(&primary, None, |snap: Arc<HeadSnapshot>| async move {
                let Some(lock) = snap.head.lock.as_ref().filter(|l| l.start_ts == s) else {
                    // Not locked yet (a slow prewrite): keep watching; committed or
                    // fenced: done.
                    let decided = snap.head.committed_by(s).is_some() || snap.head.rollback_ts >= s;
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
        // A store error is retried at the next beat.
        if let Ok(HeadUpdate::Kept(true, _)) = update {
            return;
        }
    }
}
