//! Settled cells, and the fence on one before a raw delete (`percolator::design::gc`, "Resolved below").
//!
//! A client that deletes cells outright checks first that no transaction needs them, but a
//! raw delete cannot be made conditional (a CAS never deletes), so between the check and the
//! delete a transaction may create the cell again (after another client's delete) and lose
//! its head to the stale delete. The fence closes that gap: a CAS from the head the check
//! read to the same head refusing every lock, unique to this caller. Only the caller whose
//! fence landed deletes the cell, and until it does no transaction can write it; readers
//! still see its versions. A status check does not take a fence for a rollback of a
//! transaction that may still commit after the delete (`Shared::txn_status`).

use super::Client;
use crate::codec::Cell;
use crate::kv::retry_unavailable;
use crate::record::Head;
use crate::ts::Timestamp;
use crate::txn::TxnResult;

/// `rollback_ts` at or above this is a fence: above every timestamp an oracle hands out
/// (physical milliseconds in the high bits reach it in about 2^46 ms), so every lock is
/// refused. The low bits make each fence unique to its caller.
pub const FENCE_FLOOR: u64 = u64::MAX - u32::MAX as u64;

/// Whether a head's `rollback_ts` is a fence for a raw delete, not a transaction's rollback
/// mark.
pub(super) fn is_fence(rollback_ts: u64) -> bool {
    rollback_ts >= FENCE_FLOOR
}

/// What [`Client::settlement`] found of a cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settlement {
    /// A lock, a commit or a rollback mark above the point asked about (or a fence): a
    /// transaction whose primary the cell is may still need it.
    Unsettled,
    /// No lock, and every commit and rollback mark at or below the point: the cell may be
    /// deleted outright by a caller that knows no transaction can write it again.
    Settled {
        /// The start_ts of the transaction that wrote the newest version (`None`: the cell
        /// holds none: never written, or a tombstone).
        latest_writer: Option<Timestamp>,
    },
}

/// [`Settlement`] of `head` at `resolved_below`. A rollback mark above the point is of a
/// transaction that may still be in flight: deleted, the mark would no longer stop it
/// locking the cell.
fn settlement_of(head: &Head, resolved_below: Timestamp) -> Settlement {
    let newest = head.latest.as_ref().map_or(head.floor, |v| v.commit_ts);
    if head.lock.is_some() || newest > resolved_below.0 || head.rollback_ts > resolved_below.0 {
        return Settlement::Unsettled;
    }
    Settlement::Settled {
        latest_writer: head.latest.as_ref().map(|v| Timestamp(v.start_ts)),
    }
}

/// What [`Client::fence_settled`] found and did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fence {
    /// The head now refuses every lock; the caller, and no one else, deletes the cell.
    Fenced,
    /// The cell has no head.
    Absent,
    /// Another caller fenced it (a purge in flight, or one that stopped before its delete):
    /// left alone, its versions still read.
    FencedByAnother,
    /// A lock, or a commit above the point asked about: a transaction whose primary the
    /// cell is may still need it.
    Unsettled,
    /// The newest version is another transaction's than the one named.
    Rewritten,
}

impl Client {
    /// Whether `cell` may be deleted outright without changing the fate of a transaction
    /// whose primary it was, and which transaction wrote its latest version: its head has
    /// no lock, and every commit it holds (its latest version; a tombstone's floor) and its
    /// rollback mark are at or below `resolved_below`, a point read from
    /// [`Client::gc_resolved_below`]. A cell with no head qualifies (never written). A caller
    /// that deletes a cell on behalf of one writer (an index entry that names the cell)
    /// checks that the version is that writer's. A read only: [`Client::fence_settled`]
    /// decides the same and fences the head for the delete.
    pub async fn settlement(
        &self,
        cell: &Cell,
        resolved_below: Timestamp,
    ) -> TxnResult<Settlement> {
        let head = self.shared.read_head(cell).await?.head;
        Ok(settlement_of(&head, resolved_below))
    }

    /// Fences `cell` for a raw delete if it may be deleted now: its head has no lock, every
    /// commit in it is at or below `resolved_below` (as [`Client::settlement`] decides),
    /// and, with `written_by`, its newest version was written by that transaction. A caller
    /// deletes the cell (its head last) only after [`Fence::Fenced`].
    pub async fn fence_settled(
        &self,
        cell: &Cell,
        resolved_below: Timestamp,
        written_by: Option<Timestamp>,
    ) -> TxnResult<Fence> {
        let shared = &self.shared;
        let key = shared.codec.head(cell);
        loop {
            let snap = shared.read_head_at(&key).await?;
            let Some(raw) = snap.raw else {
                return Ok(Fence::Absent);
            };
            let head = snap.head;
            if is_fence(head.rollback_ts) {
                return Ok(Fence::FencedByAnother);
            }
            let Settlement::Settled { latest_writer } = settlement_of(&head, resolved_below) else {
                return Ok(Fence::Unsettled);
            };
            if written_by.is_some_and(|w| latest_writer != Some(w)) {
                return Ok(Fence::Rewritten);
            }
            let mut fenced = head.next();
            // Never FENCE_FLOOR itself: 1 to u32::MAX above it.
            fenced.rollback_ts =
                FENCE_FLOOR + 1 + shared.config.random.next_u64() % u32::MAX as u64;
            let new = fenced.encode();
            let outcome = retry_unavailable(|| {
                shared
                    .kv
                    .compare_and_swap(key.clone(), Some(raw.clone()), new.clone())
            })
            .await?
            .own_write_decided(Some(raw.clone()), &new);
            if outcome.swapped {
                return Ok(Fence::Fenced);
            }
            // The head changed since it was read: decide again on the new one.
        }
    }
}
