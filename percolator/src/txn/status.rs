//! Transaction status through the primary and lock resolution (ARCHITECTURE.md, "Status
//! through the primary" and "Lock resolution").

use super::heads::HeadSnapshot;
use super::{Shared, TxnError, TxnResult};
use crate::codec::Cell;
use crate::kv::{RangePager, ScanOrder};
use crate::record::{Lock, Version};
use crate::ts::Timestamp;

/// The fate of a transaction, as decided by its primary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnStatus {
    /// Committed at this commit_ts.
    Committed(u64),
    /// Rolled back for good: it can never commit.
    RolledBack,
    /// Still undecided and not expired: wait.
    Pending,
}

impl Shared {
    /// Whether oracle time has passed `physical(start_ts) + ttl_ms`.
    async fn expired(&self, start_ts: u64, ttl_ms: u64) -> TxnResult<bool> {
        let now = self.oracle.get_timestamp().await?;
        // Saturating: a TTL decoded from the store must not overflow into "expired".
        Ok(now.physical_ms() > Timestamp(start_ts).physical_ms().saturating_add(ttl_ms))
    }

    /// The commit_ts of transaction `start_ts` if a `V` entry of `primary` records its commit.
    async fn committed_in_versions(&self, primary: &Cell, start_ts: u64) -> TxnResult<Option<u64>> {
        // Versions newer than start_ts: from the newest down to (excluded) !start_ts.
        let all = self.codec.cell_range(crate::codec::Space::Version, primary);
        let range = crate::kv::KeyRange::new(all.start, self.codec.version(primary, start_ts));
        let mut pager = RangePager::new(self.kv.as_ref(), range, ScanOrder::Forward, 256);
        while let Some(page) = pager.next_page().await? {
            for (key, bytes) in page {
                let v = Version::decode(&bytes).map_err(|source| TxnError::Corrupt {
                    key: key.escape_ascii().to_string(),
                    source,
                })?;
                if v.start_ts == start_ts {
                    return Ok(Some(v.commit_ts));
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
        start_ts: u64,
        ttl_ms: u64,
    ) -> TxnResult<TxnStatus> {
        let mut snap = self.read_head(primary).await?;
        loop {
            let head = &snap.head;
            // 1. The primary is locked by the transaction: pending unless expired.
            if let Some(lock) = head.lock.as_ref().filter(|l| l.start_ts == start_ts) {
                if !self.expired(start_ts, lock.ttl_ms).await? {
                    return Ok(TxnStatus::Pending);
                }
                let mut fenced = head.next();
                fenced.lock = None;
                fenced.rollback_ts = fenced.rollback_ts.max(start_ts);
                match self.cas_head(primary, &snap, fenced).await? {
                    Ok(_) => {
                        tracing::debug!(start_ts, %primary, "rolled back an expired primary");
                        return Ok(TxnStatus::RolledBack);
                    }
                    Err(current) => {
                        snap = current;
                        continue;
                    }
                }
            }
            // 2. Committed: one of the primary's versions (in the head or in V) says so.
            if let Some(version) = head.committed_by(start_ts) {
                return Ok(TxnStatus::Committed(version.commit_ts));
            }
            if let Some(commit_ts) = self.committed_in_versions(primary, start_ts).await? {
                return Ok(TxnStatus::Committed(commit_ts));
            }
            // 3. No lock, no commit: rolled back if the mark covers it, else maybe in flight.
            if head.rollback_ts >= start_ts {
                return Ok(TxnStatus::RolledBack);
            }
            if !self.expired(start_ts, ttl_ms).await? {
                return Ok(TxnStatus::Pending);
            }
            let mut fenced = head.next();
            fenced.rollback_ts = start_ts;
            match self.cas_head(primary, &snap, fenced).await? {
                Ok(_) => return Ok(TxnStatus::RolledBack),
                Err(current) => snap = current,
            }
        }
    }

    /// Resolves `lock`, met on `cell`: rolls it forward if its transaction committed, back if
    /// it rolled back. Returns the status; `Pending` means the lock is live and still there.
    pub(crate) async fn resolve_lock(&self, cell: &Cell, lock: &Lock) -> TxnResult<TxnStatus> {
        let primary = lock.primary.as_ref().unwrap_or(cell);
        let status = self.txn_status(primary, lock.start_ts, lock.ttl_ms).await?;
        match status {
            TxnStatus::Committed(commit_ts) => {
                self.roll_forward(cell, lock.start_ts, commit_ts, None)
                    .await?;
            }
            TxnStatus::RolledBack => {
                self.roll_back(cell, lock.start_ts, None).await?;
            }
            TxnStatus::Pending => {}
        }
        Ok(status)
    }

    /// Turns the lock of transaction `start_ts` on `cell` (if still there) into the latest
    /// version at `commit_ts`. `known` is the head if the caller has just read or written it.
    /// Returns the head after the change, or `None` if the lock was no longer there.
    pub(crate) async fn roll_forward(
        &self,
        cell: &Cell,
        start_ts: u64,
        commit_ts: u64,
        known: Option<HeadSnapshot>,
    ) -> TxnResult<Option<HeadSnapshot>> {
        let mut snap = match known {
            Some(s) => s,
            None => self.read_head(cell).await?,
        };
        loop {
            let Some(lock) = snap.head.lock.as_ref().filter(|l| l.start_ts == start_ts) else {
                return Ok(None);
            };
            let mut next = snap.head.next();
            let superseded = next.latest.replace(Version {
                commit_ts,
                start_ts,
                op: lock.op.clone(),
            });
            next.lock = None;
            if let Some(previous) = superseded {
                next.recent.insert(0, previous);
            }
            // The prewrite made room in `recent`; a head that still overflows (not written
            // by this protocol version) spills its oldest versions to V before they leave it.
            if next.recent.len() > super::heads::RECENT_MAX {
                let overflow = next.recent.split_off(super::heads::RECENT_MAX);
                self.spill_versions(cell, &overflow).await?;
            }
            match self.cas_head(cell, &snap, next).await? {
                Ok(new) => return Ok(Some(new)),
                Err(current) => snap = current,
            }
        }
    }

    /// Removes the lock of transaction `start_ts` from `cell` (if still there), raising the
    /// rollback mark so it can never lock the cell again.
    pub(crate) async fn roll_back(
        &self,
        cell: &Cell,
        start_ts: u64,
        known: Option<HeadSnapshot>,
    ) -> TxnResult<()> {
        let mut snap = match known {
            Some(s) => s,
            None => self.read_head(cell).await?,
        };
        loop {
            if snap
                .head
                .lock
                .as_ref()
                .is_none_or(|l| l.start_ts != start_ts)
            {
                return Ok(());
            }
            let mut next = snap.head.next();
            next.lock = None;
            next.rollback_ts = next.rollback_ts.max(start_ts);
            match self.cas_head(cell, &snap, next).await? {
                Ok(_) => return Ok(()),
                Err(current) => snap = current,
            }
        }
    }

    /// Fences transaction `start_ts` on its primary: removes its lock if present and raises
    /// the rollback mark to at least `start_ts`, creating the head if needed. Afterwards the
    /// transaction can never commit. Fails with `Committed` status if it already committed.
    pub(crate) async fn fence_primary(
        &self,
        primary: &Cell,
        start_ts: u64,
    ) -> TxnResult<TxnStatus> {
        let mut snap = self.read_head(primary).await?;
        loop {
            let head = &snap.head;
            if let Some(version) = head.committed_by(start_ts) {
                return Ok(TxnStatus::Committed(version.commit_ts));
            }
            let ours = head.lock.as_ref().is_some_and(|l| l.start_ts == start_ts);
            if !ours && head.rollback_ts >= start_ts {
                return Ok(TxnStatus::RolledBack);
            }
            let mut next = head.next();
            if ours {
                next.lock = None;
            }
            next.rollback_ts = next.rollback_ts.max(start_ts);
            match self.cas_head(primary, &snap, next).await? {
                Ok(_) => return Ok(TxnStatus::RolledBack),
                Err(current) => snap = current,
            }
        }
    }
}
