//! Locks met on cells and the fate of their transactions: status through the primary, roll
//! forward (on the primary: the commit point), roll back, fencing (`percolator::design::locks`).
//!
//! Every change here is one CAS of a head from the exact bytes just read, through
//! [`Shared::update_head`]: when the head moved meanwhile the CAS fails, and the decision is
//! taken again on the head found. Each step may therefore race any other client taking the
//! same or the opposite step: exactly one CAS wins, and the loser sees its effect.

use super::heads::{HeadSnapshot, HeadStep, HeadUpdate, RECENT_MAX};
use super::{Shared, TxnError, TxnResult};
use crate::codec::{Cell, Space};
use crate::kv::{CasRequest, KeyRange, RangePager, ScanOrder};
use crate::record::{Head, Lock, Version};
use crate::ts::Timestamp;
use std::sync::Arc;

/// The fate of a transaction, as decided by its primary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnStatus {
    /// Committed at this commit_ts.
    Committed(Timestamp),
    /// Rolled back for good: it can never commit.
    RolledBack,
    /// Still undecided and not expired: wait.
    Pending,
}

/// The key of transaction `s` with primary `primary` in the client's cache of decided fates.
fn decided_key(primary: &Cell, s: u64) -> (u64, u64) {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    primary.hash(&mut h);
    (s, h.finish())
}

impl Shared {
    /// Records that this client's transaction `start_ts` with primary `primary` committed at
    /// `commit_ts` (its own commit-point CAS applied), for the status checks of its readers.
    pub(crate) fn remember_committed(
        &self,
        primary: &Cell,
        start_ts: Timestamp,
        commit_ts: Timestamp,
    ) {
        self.decided.insert(
            decided_key(primary, start_ts.0),
            TxnStatus::Committed(commit_ts),
        );
    }

    /// Whether oracle time has passed `physical(start_ts) + ttl_ms`.
    async fn expired(&self, start_ts: Timestamp, ttl_ms: u64) -> TxnResult<bool> {
        let now = self.oracle.get_timestamp().await?;
        // Saturating: a TTL decoded from the store must not overflow into "expired".
        Ok(now.physical_ms() > start_ts.physical_ms().saturating_add(ttl_ms))
    }

    /// The commit_ts of transaction `start_ts` if a `V` entry of `primary` records its commit.
    async fn committed_in_versions(
        &self,
        primary: &Cell,
        start_ts: Timestamp,
    ) -> TxnResult<Option<Timestamp>> {
        // Versions newer than start_ts: from the newest down to (excluded) !start_ts.
        let all = self.codec.cell_range(Space::Version, primary);
        let range = KeyRange::new(all.start, self.codec.version(primary, start_ts.0));
        let mut pager = RangePager::new(self.kv.as_ref(), range, ScanOrder::Forward, 256);
        while let Some(page) = pager.next_page().await? {
            for (key, bytes) in page {
                let v = Version::decode(&bytes).map_err(|why| TxnError::corrupt(&key, why))?;
                if v.start_ts == start_ts.0 {
                    return Ok(Some(Timestamp(v.commit_ts)));
                }
            }
        }
        Ok(None)
    }

    /// The status of transaction `start_ts` with primary `primary`, fencing it (rolling it
    /// back for good) if it is expired. `ttl_ms` is the TTL of the lock that led us here,
    /// used when the primary holds no lock of the transaction (it may still be in flight).
    pub(crate) async fn txn_status(
        &self,
        primary: &Cell,
        start_ts: Timestamp,
        ttl_ms: u64,
    ) -> TxnResult<TxnStatus> {
        let s = start_ts.0;
        // A decided fate never changes (a commit is final; a rolled-back transaction can
        // never lock its primary again): asked before, it is answered without a read.
        let decided_key = decided_key(primary, s);
        if let Some(status) = self.decided.get(&decided_key) {
            return Ok(status);
        }
        let status = self
            .primary_status(primary, start_ts, ttl_ms, false)
            .await?;
        let status = match status {
            // The primary is fenced for a raw delete (`Client::fence_settled`): no decision
            // while the transaction may still lock the cell once it is gone. Past its
            // lifetime, drawn before the head is read again, it cannot: any commit_ts it drew
            // after locking the recreated cell would be later still.
            PrimaryStatus::Fenced => {
                let now = self.oracle.get_timestamp().await?;
                let lifetime = self.config.max_lifetime.as_millis() as u64;
                if now.physical_ms() <= start_ts.physical_ms().saturating_add(lifetime) {
                    TxnStatus::Pending
                } else {
                    match self.primary_status(primary, start_ts, ttl_ms, true).await? {
                        PrimaryStatus::Known(status) => status,
                        PrimaryStatus::Fenced => TxnStatus::RolledBack,
                    }
                }
            }
            PrimaryStatus::Known(status) => status,
        };
        if status != TxnStatus::Pending {
            self.decided.insert(decided_key, status);
        }
        Ok(status)
    }

    /// One read (and maybe fence) of `primary` for [`Self::txn_status`]; `lifetime_over`:
    /// the transaction's lifetime had passed before this read began, so a fence for a raw
    /// delete decides it.
    async fn primary_status(
        &self,
        primary: &Cell,
        start_ts: Timestamp,
        ttl_ms: u64,
        lifetime_over: bool,
    ) -> TxnResult<PrimaryStatus> {
        let s = start_ts.0;
        let update = self
            .update_head(primary, None, |snap: Arc<HeadSnapshot>| async move {
                let head = &snap.head;
                // 1. The primary is locked by the transaction: pending unless expired;
                //    expired, it is fenced: lock removed and rollback mark raised in one
                //    CAS (invariant 3).
                if let Some(lock) = head.lock.as_ref().filter(|l| l.start_ts == s) {
                    if !self.expired(start_ts, lock.ttl_ms).await? {
                        return Ok(HeadStep::Keep(PrimaryStatus::Known(TxnStatus::Pending)));
                    }
                    let mut fenced = head.next();
                    fenced.lock = None;
                    fenced.rollback_ts = fenced.rollback_ts.max(s);
                    return Ok(HeadStep::Write(fenced));
                }
                // 2. Committed: one of the primary's versions (in the head or in V) says so.
                if let Some(version) = head.committed_by(s) {
                    let commit_ts = Timestamp(version.commit_ts);
                    return Ok(HeadStep::Keep(PrimaryStatus::Known(TxnStatus::Committed(
                        commit_ts,
                    ))));
                }
                if let Some(commit_ts) = self.committed_in_versions(primary, start_ts).await? {
                    return Ok(HeadStep::Keep(PrimaryStatus::Known(TxnStatus::Committed(
                        commit_ts,
                    ))));
                }
                // 3. No lock, no commit: rolled back if the mark covers it, else maybe in
                //    flight (prewrites run in parallel): wait out its TTL, then fence with
                //    a CAS expecting exactly the head steps 1-2 examined, so a lock or a
                //    commit that lands meanwhile fails it and is decided on again.
                if super::fence::is_fence(head.rollback_ts) && !lifetime_over {
                    return Ok(HeadStep::Keep(PrimaryStatus::Fenced));
                }
                if head.rollback_ts >= s {
                    return Ok(HeadStep::Keep(PrimaryStatus::Known(TxnStatus::RolledBack)));
                }
                if !self.expired(start_ts, ttl_ms).await? {
                    return Ok(HeadStep::Keep(PrimaryStatus::Known(TxnStatus::Pending)));
                }
                let mut fenced = head.next();
                fenced.rollback_ts = s;
                Ok(HeadStep::Write(fenced))
            })
            .await?;
        Ok(match update {
            HeadUpdate::Kept(status, _) => status,
            HeadUpdate::Written(_) => {
                tracing::debug!(%start_ts, %primary, "fenced an expired transaction");
                PrimaryStatus::Known(TxnStatus::RolledBack)
            }
        })
    }

    /// [`Self::txn_status`], waiting (with backoff) while the transaction is pending: its
    /// decided fate, `Committed` or `RolledBack` (a live one is fenced once its TTL passes).
    /// For passes that must settle what they meet (GC), not for readers bound by a lifetime.
    pub(crate) async fn decided_status(
        &self,
        primary: &Cell,
        start_ts: Timestamp,
        ttl_ms: u64,
    ) -> TxnResult<TxnStatus> {
        let mut attempt = 0;
        loop {
            match self.txn_status(primary, start_ts, ttl_ms).await? {
                TxnStatus::Pending => {
                    self.writers
                        .wait(start_ts.0, super::lock_wait(attempt))
                        .await;
                    attempt += 1;
                }
                decided => return Ok(decided),
            }
        }
    }

    /// Resolves `lock`, met on `cell`: rolls it forward if its transaction committed, back if
    /// it rolled back. Returns the status; `Pending` means the lock is live and still there.
    pub(crate) async fn resolve_lock(&self, cell: &Cell, lock: &Lock) -> TxnResult<TxnStatus> {
        let primary = lock.primary.as_ref().unwrap_or(cell);
        let start_ts = Timestamp(lock.start_ts);
        let status = self.txn_status(primary, start_ts, lock.ttl_ms).await?;
        match status {
            TxnStatus::Committed(commit_ts) => {
                self.roll_forward(cell, start_ts, commit_ts, None).await?;
            }
            TxnStatus::RolledBack => {
                self.roll_back(cell, start_ts, None).await?;
            }
            TxnStatus::Pending => {}
        }
        Ok(status)
    }

    /// Turns the lock of transaction `start_ts` on `cell` (if still there) into the latest
    /// version at `commit_ts`. `known` is the head if the caller has just read or written it.
    /// Returns the head after the change, or `None` if the lock was no longer there.
    ///
    /// On the primary, by its own writer, this CAS is the commit point (invariant 3): the
    /// one write that turns the transaction from undecided into committed. It applies only
    /// while our lock is still in the head, so it can never follow a fence (which removes
    /// the lock in its own CAS); once it applied, every status check finds the version.
    pub(crate) async fn roll_forward(
        &self,
        cell: &Cell,
        start_ts: Timestamp,
        commit_ts: Timestamp,
        known: Option<HeadSnapshot>,
    ) -> TxnResult<Option<HeadSnapshot>> {
        let update = self
            .update_head(cell, known, |snap: Arc<HeadSnapshot>| async move {
                let Some(mut next) = committed_head(&snap.head, start_ts, commit_ts) else {
                    return Ok(HeadStep::Keep(()));
                };
                // The prewrite made room in `recent`; a head that still overflows (not
                // written by this protocol version) spills its oldest versions to V
                // before they leave it (invariant 4).
                if next.recent.len() > RECENT_MAX {
                    let overflow = next.recent.split_off(RECENT_MAX);
                    self.spill_versions(cell, &overflow).await?;
                }
                Ok(HeadStep::Write(next))
            })
            .await?;
        Ok(match update {
            HeadUpdate::Kept((), _) => None,
            HeadUpdate::Written(new) => Some(new),
        })
    }

    /// [`Shared::roll_forward`] of many secondaries at once, from the locked heads their
    /// prewrite left (`known`): one batched CAS. A cell whose CAS did not apply (a reader
    /// resolved it meanwhile, or the head holds more versions than fit) goes through
    /// [`Shared::roll_forward`] from the head found. Failures are only logged: a lock left
    /// behind is rolled forward by the next reader. Returns the cells committed by this
    /// call, in order.
    pub(crate) async fn roll_forward_many<'c>(
        &self,
        known: Vec<(&'c Cell, HeadSnapshot)>,
        start_ts: Timestamp,
        commit_ts: Timestamp,
    ) -> Vec<&'c Cell> {
        let mut committed = Vec::with_capacity(known.len());
        let mut requests = Vec::new();
        let mut batched = Vec::new();
        let mut slow = Vec::new();
        for (cell, snap) in known {
            match committed_head(&snap.head, start_ts, commit_ts) {
                Some(next) if next.recent.len() <= RECENT_MAX => {
                    let bytes = next.encode();
                    requests.push(CasRequest::new(
                        self.codec.head(cell),
                        snap.raw,
                        bytes.clone(),
                    ));
                    batched.push((cell, next, bytes));
                }
                _ => slow.push((cell, Some(snap))),
            }
        }
        if !requests.is_empty() {
            match self.kv.batch_compare_and_swap(requests).await {
                Ok(outcomes) => {
                    for ((cell, next, bytes), out) in batched.into_iter().zip(outcomes) {
                        if out.swapped || out.previous.as_deref() == Some(bytes.as_slice()) {
                            self.remember_committed_head(
                                cell,
                                HeadSnapshot {
                                    raw: Some(bytes),
                                    head: next,
                                },
                            );
                            committed.push(cell);
                        } else {
                            match HeadSnapshot::decode(&self.codec.head(cell), out.previous) {
                                Ok(found) => slow.push((cell, Some(found))),
                                Err(e) => {
                                    tracing::debug!(%cell, %start_ts, error = %e, "secondary commit failed; readers will roll it forward")
                                }
                            }
                        }
                    }
                }
                Err(e) => {
                    tracing::debug!(%start_ts, error = %e, "batched secondary commit failed; readers will roll the rest forward");
                }
            }
        }
        let rolls = slow.into_iter().map(|(cell, snap)| async move {
            (
                cell,
                self.roll_forward(cell, start_ts, commit_ts, snap).await,
            )
        });
        for (cell, result) in futures::future::join_all(rolls).await {
            match result {
                Ok(Some(head)) => {
                    self.remember_committed_head(cell, head);
                    committed.push(cell);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(%cell, %start_ts, error = %e, "secondary commit failed; readers will roll it forward");
                }
            }
        }
        committed
    }

    /// [`Shared::roll_back`] of many cells at once: one batched read of their heads, one
    /// batched CAS removing the locks of `start_ts` found; a cell whose CAS did not apply
    /// goes through [`Shared::roll_back`] from the head found.
    pub(crate) async fn roll_back_many(
        &self,
        cells: &[&Cell],
        start_ts: Timestamp,
    ) -> TxnResult<()> {
        let s = start_ts.0;
        if cells.is_empty() {
            return Ok(());
        }
        let keys: Vec<Vec<u8>> = cells.iter().map(|cell| self.codec.head(cell)).collect();
        let raws = self.kv.batch_get(&keys).await?;
        let mut requests = Vec::new();
        let mut batched = Vec::new();
        for ((cell, key), raw) in cells.iter().zip(keys).zip(raws) {
            let snap = HeadSnapshot::decode(&key, raw)?;
            if snap.head.lock.as_ref().is_none_or(|l| l.start_ts != s) {
                continue;
            }
            let mut next = snap.head.next();
            next.lock = None;
            next.rollback_ts = next.rollback_ts.max(s);
            let bytes = next.encode();
            requests.push(CasRequest::new(key, snap.raw, bytes.clone()));
            batched.push((*cell, bytes));
        }
        if requests.is_empty() {
            return Ok(());
        }
        let outcomes = self.kv.batch_compare_and_swap(requests).await?;
        let mut slow = Vec::new();
        for ((cell, bytes), out) in batched.into_iter().zip(outcomes) {
            if !out.swapped && out.previous.as_deref() != Some(bytes.as_slice()) {
                let found = HeadSnapshot::decode(&self.codec.head(cell), out.previous)?;
                slow.push(self.roll_back(cell, start_ts, Some(found)));
            }
        }
        for result in futures::future::join_all(slow).await {
            result?;
        }
        Ok(())
    }

    /// Removes the lock of transaction `start_ts` from `cell` (if still there), raising the
    /// rollback mark so it can never lock the cell again.
    pub(crate) async fn roll_back(
        &self,
        cell: &Cell,
        start_ts: Timestamp,
        known: Option<HeadSnapshot>,
    ) -> TxnResult<()> {
        let s = start_ts.0;
        self.update_head(cell, known, |snap: Arc<HeadSnapshot>| async move {
            if snap.head.lock.as_ref().is_none_or(|l| l.start_ts != s) {
                return Ok(HeadStep::Keep(()));
            }
            let mut next = snap.head.next();
            next.lock = None;
            next.rollback_ts = next.rollback_ts.max(s);
            Ok(HeadStep::Write(next))
        })
        .await?;
        Ok(())
    }

    /// Fences transaction `start_ts` on its primary: removes its lock if present and raises
    /// the rollback mark to at least `start_ts`, creating the head if needed. Afterwards the
    /// transaction can never commit. Returns `Committed` status if it already committed.
    pub(crate) async fn fence_primary(
        &self,
        primary: &Cell,
        start_ts: Timestamp,
    ) -> TxnResult<TxnStatus> {
        let s = start_ts.0;
        let update = self
            .update_head(primary, None, |snap: Arc<HeadSnapshot>| async move {
                let head = &snap.head;
                if let Some(version) = head.committed_by(s) {
                    let commit_ts = Timestamp(version.commit_ts);
                    return Ok(HeadStep::Keep(TxnStatus::Committed(commit_ts)));
                }
                let ours = head.lock.as_ref().is_some_and(|l| l.start_ts == s);
                if !ours && head.rollback_ts >= s {
                    return Ok(HeadStep::Keep(TxnStatus::RolledBack));
                }
                let mut next = head.next();
                if ours {
                    next.lock = None;
                }
                next.rollback_ts = next.rollback_ts.max(s);
                Ok(HeadStep::Write(next))
            })
            .await?;
        Ok(match update {
            HeadUpdate::Kept(status, _) => status,
            HeadUpdate::Written(_) => TxnStatus::RolledBack,
        })
    }
}

/// What one read of a transaction's primary tells [`Shared::txn_status`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PrimaryStatus {
    /// The transaction's status as the head decides it.
    Known(TxnStatus),
    /// No lock or commit of the transaction, and the head fenced for a raw delete: not a
    /// decision while the transaction may lock the cell once it is gone.
    Fenced,
}

/// The head after committing the lock of `start_ts` in `head` at `commit_ts` (the lock
/// becomes `latest`, the previous `latest` moves to the front of `recent`), or `None` if
/// `head` holds no lock of that transaction. `recent` may then hold more than
/// [`RECENT_MAX`] versions (a head the prewrite did not make room in): the caller spills.
fn committed_head(head: &Head, start_ts: Timestamp, commit_ts: Timestamp) -> Option<Head> {
    let lock = head.lock.as_ref().filter(|l| l.start_ts == start_ts.0)?;
    let mut next = head.next();
    let superseded = next.latest.replace(Version {
        commit_ts: commit_ts.0,
        start_ts: start_ts.0,
        op: lock.op.clone(),
    });
    next.lock = None;
    if let Some(previous) = superseded {
        next.recent.insert(0, previous);
    }
    Some(next)
}
