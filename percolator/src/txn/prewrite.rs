//! Phase 1 of a commit: the prewrite of every written cell, batched (`percolator::design::commit`).
//!
//! One round for the whole write set when nothing stands in the way:
//! 1. decide on each cell's *expected* head (read by the transaction, remembered from this
//!    client's last commit of the cell, or guessed absent), without a store call: a conflict
//!    seen there ends the commit before anything is written;
//! 2. one `batch_put` of every cell's extra writes (out-of-line values, versions spilled from
//!    full heads, notify keys), then the notify-floor settling of every notify key;
//! 3. one `batch_compare_and_swap` of every head from its expected bytes to the locked head
//!    (with no notify key to settle and no record, steps 2 and 3 are one
//!    `batch_put_and_compare_and_swap`: one fjall batch on the embedded store).
//!
//! (Write sets larger than [`PREWRITE_CHUNK`] cells take one such round per chunk, the
//! primary's first; write sets larger than [`PRIMARY_ALONE_ABOVE`] cells lock the primary
//! alone first. A primary whose batched CAS did not apply is locked cell by cell right after
//! its round, before any later chunk. Either way the primary is locked, and the heartbeat
//! renews it, before any other lock or notify key of a large write set exists.)
//!
//! Cells whose swap did not apply (the head was not the one expected, or the batch failed)
//! and cells whose expected head holds a lock go through the per-cell loop, [`prewrite_one`]
//! (conflict checks and lock resolution on the head actually found), as every cell did
//! before batching.
//!
//! [`prewrite_one`]: Transaction::prewrite_one

use super::commit::PrimaryHead;
#[cfg_attr(not(feature = "failpoints"), allow(unused_imports))]
use super::failpoint::{crash_point, CrashPoint};
use super::heads::{HeadSnapshot, HeadStep, HeadUpdate};
use super::locks::TxnStatus;
use super::notify::NotifyEntry;
use super::once::OnceWrites;
use super::transaction::Transaction;
use super::{TxnError, TxnResult};
use crate::codec::Cell;
use crate::kv::{CasRequest, KvPair};
use crate::record::{Head, Lock, Op};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// Cells per batched round: bounds the time between drawing a lock's TTL and writing the
/// lock, the size of one store call, and the work between two yields to the heartbeat.
const PREWRITE_CHUNK: usize = 256;

/// Write sets larger than this (more than one round) lock their primary alone, in a round
/// of its own, before any other cell: their rounds of many CASes can take longer than a TTL
/// (on TiKV each is an RPC, a few in flight at once), and until the primary's round returns
/// the heartbeat cannot renew its lease. Write sets of one round save the extra round (the
/// lease margin covers their one round).
pub(super) const PRIMARY_ALONE_ABOVE: usize = PREWRITE_CHUNK;

/// The rounds of a write set of `cells` cells, as index ranges: the primary alone first when
/// the set is larger than [`PRIMARY_ALONE_ABOVE`], then chunks of [`PREWRITE_CHUNK`].
fn rounds(cells: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut first = 0;
    if cells > PRIMARY_ALONE_ABOVE {
        out.push((0, 1));
        first = 1;
    }
    while first < cells {
        let last = (first + PREWRITE_CHUNK).min(cells);
        out.push((first, last));
        first = last;
    }
    out
}

/// What one cell's prewrite writes besides its lock.
pub(super) struct Prewrite<'a> {
    /// The cell.
    pub(super) cell: &'a Cell,
    /// The primary, or `None` when prewriting the primary itself.
    pub(super) primary: Option<Cell>,
    /// The new value (`None`: delete).
    pub(super) value: Option<&'a [u8]>,
    /// Cells whose notify keys are put before the lock.
    pub(super) notify: Vec<Cell>,
    /// The transaction's primary, recorded in the notify keys.
    pub(super) notify_primary: &'a Cell,
    /// The bucket of the notify keys.
    pub(super) notify_bucket: u64,
    /// The head the prewrite expects (read, remembered, or guessed absent); shared with the
    /// client's cache of committed heads when remembered, not copied.
    pub(super) expected: Arc<HeadSnapshot>,
}

/// What the per-cell loop of one cell starts from.
struct Fallback {
    /// The cell's index in the write set.
    index: usize,
    /// The head to decide on first (`None`: read it).
    start: Option<HeadSnapshot>,
    /// Whether the batch already put the cell's extra writes (out-of-line value, notify
    /// keys; spilled versions are decided again on the head found).
    extras_written: bool,
}

impl Transaction {
    /// Prewrites every cell of `plans` (the primary first); returns the locked heads in the
    /// same order. `wrote` is set once anything may have reached the store, so that a
    /// failure before that needs no abort.
    pub(super) async fn prewrite_all(
        &self,
        plans: Vec<Prewrite<'_>>,
        once: OnceWrites,
        locked: &AtomicUsize,
        wrote: &AtomicBool,
        primary_head: &PrimaryHead,
    ) -> TxnResult<Vec<HeadSnapshot>> {
        let mut snaps: Vec<Option<HeadSnapshot>> = vec![None; plans.len()];
        let mut fallbacks: Vec<Fallback> = Vec::new();
        let mut once = Some(once);
        for (first, last) in rounds(plans.len()) {
            self.prewrite_chunk(
                &plans,
                first..last,
                once.take(),
                &mut snaps,
                &mut fallbacks,
                locked,
                wrote,
            )
            .await?;
            if first == 0 {
                // The primary first: when its batched CAS did not apply (a stale
                // expectation, a lock to resolve), it is locked now, before any later
                // chunk's locks and notify keys exist, so the heartbeat keeps the whole
                // commit alive from here on (a reader that meets an expired secondary
                // finds the primary locked and waits).
                if let Some(at) = fallbacks.iter().position(|f| f.index == 0) {
                    let f = fallbacks.swap_remove(at);
                    wrote.store(true, Ordering::SeqCst);
                    let snap = self
                        .prewrite_one(&plans[0], f.start, f.extras_written, locked)
                        .await?;
                    snaps[0] = Some(snap);
                }
                if let Some(snap) = &snaps[0] {
                    primary_head.set(snap.clone());
                }
            }
            if last < plans.len() {
                // Let other tasks of this worker run, the commit's heartbeat first (spawned
                // into this worker's LIFO slot, which other workers cannot steal): an
                // in-process store yields only once the task's budget is spent, which a few
                // batched calls never do.
                tokio::task::yield_now().await;
            }
        }
        if !fallbacks.is_empty() {
            wrote.store(true, Ordering::SeqCst);
            let plans = &plans;
            let slow = fallbacks.into_iter().map(|f| async move {
                let snap = self
                    .prewrite_one(&plans[f.index], f.start, f.extras_written, locked)
                    .await;
                (f.index, snap)
            });
            let mut failure = None;
            for (index, result) in futures::future::join_all(slow).await {
                match result {
                    Ok(snap) => snaps[index] = Some(snap),
                    #[cfg(feature = "failpoints")]
                    Err(e @ TxnError::InjectedCrash(_)) => return Err(e),
                    Err(e) => {
                        if failure.is_none() || matches!(e, TxnError::Conflict { .. }) {
                            failure = Some(e);
                        }
                    }
                }
            }
            if let Some(error) = failure {
                return Err(error);
            }
        }
        Ok(snaps.into_iter().flatten().collect())
    }

    /// Steps 1-3 of the batched prewrite for the cells `range` of `plans`: their locks
    /// land in `snaps`, the cells left to the per-cell loop in `fallbacks`. `once` (the
    /// primary's round only) are the write-once records and their notify keys, put with the
    /// round's extra writes, before any lock of the round.
    #[allow(clippy::too_many_arguments)]
    async fn prewrite_chunk(
        &self,
        plans: &[Prewrite<'_>],
        range: std::ops::Range<usize>,
        once: Option<OnceWrites>,
        snaps: &mut [Option<HeadSnapshot>],
        fallbacks: &mut Vec<Fallback>,
        locked: &AtomicUsize,
        wrote: &AtomicBool,
    ) -> TxnResult<()> {
        let shared = self.shared();
        let s = self.inner.start_ts.0;
        let mut puts: Vec<KvPair> = Vec::new();
        let mut notify_entries: Vec<NotifyEntry> = Vec::new();
        // The locked heads; their TTL is drawn after step 2.
        let mut batched: Vec<(usize, Head)> = Vec::new();
        // 1. Decide on the expected heads (no store call).
        for index in range {
            let plan = &plans[index];
            let head = &plan.expected.head;
            if head.lock.is_some() {
                // A lock to resolve first: the per-cell loop does that.
                fallbacks.push(Fallback {
                    index,
                    start: Some(HeadSnapshot::clone(&plan.expected)),
                    extras_written: false,
                });
                continue;
            }
            if conflicts(head, s) {
                return Err(TxnError::Conflict {
                    cell: plan.cell.clone(),
                });
            }
            let op = lock_op(plan.value, shared.config.inline_limit);
            let (next, spilled) = locked_head(head, self.lock(plan, op, 0));
            self.extra_writes(plan, &spilled, true, &mut puts, &mut notify_entries);
            batched.push((index, next));
        }
        let records = once.as_ref().is_some_and(|o| !o.puts.is_empty());
        if let Some(once) = once {
            puts.extend(once.puts);
            notify_entries.extend(once.notify_entries);
        }
        if batched.is_empty() && !records {
            return Ok(());
        }
        // With no notify key to settle and no record (whose loss a failed call would hide
        // from the per-cell loop), the extra writes ride in the locks' call (step 3): one
        // fjall batch on the embedded store, so no lock is seen, or survives a crash,
        // without them.
        let puts_with_locks = notify_entries.is_empty() && !records && !batched.is_empty();
        // 2. Extra writes, durable (and notify keys settled above the floor) before any lock
        //    of the batch exists: invariant 4 and the notify-floor argument.
        wrote.store(true, Ordering::SeqCst);
        let step = tokio::time::Instant::now();
        if !puts.is_empty() && !puts_with_locks {
            shared.kv.batch_put(std::mem::take(&mut puts)).await?;
        }
        if let Some((plan, _)) = plans.first().zip(notify_entries.first()) {
            shared
                .settle_notify_keys(plan.notify_bucket, &notify_entries)
                .await?;
        }
        if !notify_entries.is_empty() {
            shared.round_trips.note_since(step);
        }
        if records {
            crash_point!(self, CrashPoint::RecordsWritten);
        }
        if batched.is_empty() {
            return Ok(());
        }
        // 3. Every lock of the chunk in one round, its TTL drawn now (a lock is written
        //    moments after its TTL is drawn, with the margin the last round trips measured).
        let ttl_ms = self.lock_ttl_ms();
        let requests: Vec<CasRequest> = batched
            .iter_mut()
            .map(|(index, next)| {
                if let Some(lock) = next.lock.as_mut() {
                    lock.ttl_ms = ttl_ms;
                }
                CasRequest::new(
                    shared.codec.head(plans[*index].cell),
                    plans[*index].expected.raw.clone(),
                    next.encode(),
                )
            })
            .collect();
        let news: Vec<Vec<u8>> = requests.iter().map(|r| r.new.clone()).collect();
        let mut confirmed = Vec::with_capacity(batched.len());
        let step = tokio::time::Instant::now();
        // Extra writes not yet put go with the locks; whether they applied is unknown when
        // the call fails, so the per-cell loop then puts them again (the same keys, the same
        // bytes).
        let extras_in_call = !puts.is_empty();
        let swapped = if extras_in_call {
            shared
                .kv
                .batch_put_and_compare_and_swap(puts, requests)
                .await
        } else {
            shared.kv.batch_compare_and_swap(requests).await
        };
        if swapped.is_ok() {
            shared.round_trips.note_since(step);
        }
        match swapped {
            Ok(outcomes) => {
                for (((index, next), new), out) in batched.into_iter().zip(news).zip(outcomes) {
                    // Not swapped but holding exactly our bytes: the retry hazard, ours.
                    if out.swapped || out.previous.as_deref() == Some(new.as_slice()) {
                        snaps[index] = Some(HeadSnapshot {
                            raw: Some(new),
                            head: next,
                        });
                        confirmed.push(index);
                    } else {
                        let key = shared.codec.head(plans[index].cell);
                        fallbacks.push(Fallback {
                            index,
                            start: Some(HeadSnapshot::decode(&key, out.previous)?),
                            extras_written: true,
                        });
                    }
                }
            }
            Err(e) => {
                // Any subset may have applied: each cell is decided again on its head as
                // read now (our own lock found there is kept).
                tracing::debug!(start_ts = s, error = %e, "batched prewrite failed; prewriting cell by cell");
                // Planted bug `RidingExtrasTakenForWritten` (`crate::planted`): the riding
                // extra writes taken for written.
                #[cfg(feature = "planted")]
                let extras_in_call = extras_in_call
                    && !crate::planted::active(crate::planted::Bug::RidingExtrasTakenForWritten);
                fallbacks.extend(batched.into_iter().map(|(index, _)| Fallback {
                    index,
                    start: None,
                    extras_written: !extras_in_call,
                }));
            }
        }
        for _index in confirmed {
            let _locked = locked.fetch_add(1, Ordering::SeqCst) + 1;
            crash_point!(
                self,
                CrashPoint::Prewrote {
                    primary: _index == 0,
                    locked: _locked
                }
            );
        }
        Ok(())
    }

    /// Our lock for `plan`'s cell.
    fn lock(&self, plan: &Prewrite<'_>, op: Op, ttl_ms: u64) -> Lock {
        Lock {
            start_ts: self.inner.start_ts.0,
            primary: plan.primary.clone(),
            op,
            ttl_ms,
        }
    }

    /// Appends the writes that must be durable before `plan`'s lock: the out-of-line value
    /// and the notify keys (when `extras` is set: not put yet), and the `spilled` versions.
    fn extra_writes(
        &self,
        plan: &Prewrite<'_>,
        spilled: &[crate::record::Version],
        extras: bool,
        puts: &mut Vec<KvPair>,
        notify_entries: &mut Vec<NotifyEntry>,
    ) {
        let shared = self.shared();
        let s = self.inner.start_ts.0;
        if extras {
            if let Some(v) = plan.value.filter(|v| v.len() > shared.config.inline_limit) {
                puts.push((shared.codec.data(plan.cell, s), v.to_vec()));
            }
            if !plan.notify.is_empty() {
                let record = crate::record::Notification::Strong {
                    start_ts: s,
                    primary: plan.notify_primary.clone(),
                    ttl_ms: self.lock_ttl_ms(),
                }
                .encode();
                for dirty in &plan.notify {
                    let key = shared.codec.notify(dirty, s, plan.notify_bucket);
                    puts.push((key, record.clone()));
                    notify_entries.push((dirty.clone(), s, record.clone()));
                }
            }
        }
        for v in spilled {
            puts.push((shared.codec.version(plan.cell, v.commit_ts), v.encode()));
        }
    }

    /// Prewrites one cell with the read-modify-CAS loop: checks for conflicts (resolving
    /// locks met), writes the extra writes not written yet (`extras_written`: the batch put
    /// them already), then CASes our lock into the head, deciding again on every head found.
    async fn prewrite_one(
        &self,
        plan: &Prewrite<'_>,
        start: Option<HeadSnapshot>,
        extras_written: bool,
        locked: &AtomicUsize,
    ) -> TxnResult<HeadSnapshot> {
        let shared = self.shared();
        let cell = plan.cell;
        let s = self.inner.start_ts.0;
        let op = lock_op(plan.value, shared.config.inline_limit);
        // Extra writes are put once, by the first attempt that gets that far.
        let extras_written = AtomicBool::new(extras_written);
        let (extras_written, op) = (&extras_written, &op);
        let update = shared
            .update_head(cell, start, |snap: Arc<HeadSnapshot>| async move {
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
                if conflicts(head, s) {
                    return Err(TxnError::Conflict { cell: cell.clone() });
                }
                let (mut next, spilled) =
                    locked_head(head, self.lock(plan, op.clone(), self.lock_ttl_ms()));
                let extras = !extras_written.swap(true, Ordering::Relaxed);
                let (mut puts, mut notify_entries) = (Vec::new(), Vec::new());
                self.extra_writes(plan, &spilled, extras, &mut puts, &mut notify_entries);
                if !puts.is_empty() {
                    shared.kv.batch_put(puts).await?;
                }
                if !notify_entries.is_empty() {
                    // Before our lock: a notify key put below a floor raised meanwhile is
                    // moved above it, so it exists where scanners look before the commit
                    // point.
                    shared
                        .settle_notify_keys(plan.notify_bucket, &notify_entries)
                        .await?;
                }
                // The lease is drawn again now, after those round trips, as the batched
                // round draws it just before its CAS: drawn before them, it had run out by
                // up to three round trips when the lock landed.
                if let Some(lock) = next.lock.as_mut() {
                    lock.ttl_ms = self.lock_ttl_ms();
                }
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
                primary: plan.primary.is_none(),
                locked: _locked
            }
        );
        Ok(snap)
    }
}

/// Whether a lock-free `head` forbids a prewrite at `start_ts` (first committer wins, and a
/// rolled-back transaction never locks again).
fn conflicts(head: &Head, start_ts: u64) -> bool {
    let newer_commit = head
        .latest
        .as_ref()
        .is_some_and(|v| v.commit_ts >= start_ts);
    newer_commit || head.rollback_ts >= start_ts
}

/// The lock's operation for a new value (`None`: delete).
fn lock_op(value: Option<&[u8]>, inline_limit: usize) -> Op {
    match value {
        None => Op::Delete,
        Some(v) if v.len() > inline_limit => Op::PutExternal(v.len() as u64),
        Some(v) => Op::Put(v.to_vec()),
    }
}

/// The head holding `lock` on top of lock-free `head`, and the versions that must be in `V`
/// before it is written. Invariant 4: the versions our commit would push out of the head
/// are durable in `V` before our lock exists. Our commit moves `latest` into `recent`; when
/// that would overflow, `recent` goes to `V` now and leaves the head with our lock.
fn locked_head(head: &Head, lock: Lock) -> (Head, Vec<crate::record::Version>) {
    let mut next = head.next();
    let spilled = if super::heads::recent_full(head) {
        std::mem::take(&mut next.recent)
    } else {
        Vec::new()
    };
    next.lock = Some(lock);
    (next, spilled)
}
