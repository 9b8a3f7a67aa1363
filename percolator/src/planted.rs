//! Planted bugs (feature `planted`, compiled only into the simulator `percolator-sim`): each
//! is a real bug this project once had (or one a change was checked against before it
//! landed), put back at the place it was, behind a runtime
//! switch that is off unless a simulation turns it on for its own thread. The simulator
//! proves it can find each class of bug by finding these (`percolator-sim planted`).
//!
//! The switch is thread-local: a simulated seed runs on one thread (a current-thread
//! runtime), so seeds on other threads, and every other caller, see no bug. Without the
//! feature this module does not exist and no call site is compiled.

use std::cell::Cell;

/// A bug that can be planted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Bug {
    /// `once::resolve_and_collect` / `gc::resolve_notifications_below`: a "rolled back" fate
    /// deletes the record or notify key unconditionally (issue 38, hole 1).
    GcUnconditionalDelete,
    /// `once::resolve_and_collect` keeps the newest committed record without looking at the
    /// head: a head delete of a write-once cell comes back after GC (issue 38, hole 2).
    GcCollectIgnoresHead,
    /// `observers::process` deletes a strong notify key on "rolled back" without re-reading
    /// it (issue 38, hole 3).
    WorkerDeletesRolledBack,
    /// `once::record_fate` takes a gone record for rolled back (issue 38, hole 4).
    RecordGoneIsRolledBack,
    /// `once::resolve_and_collect` rewrites a record decided committed by a plain put: a record
    /// another pass rewrote and collected under a head delete comes back (found by the
    /// simulator in the first fix of issue 38).
    GcRewriteByPut,
    /// `read::scan_page` stops each side after `limit` cells with a value: short pages
    /// (issue 38, hole 5).
    ScanPageShort,
    /// `commit`: the `WrittenOnce` check skips the head path (issue 38, hole 6).
    WrittenOnceSkipsHead,
    /// `Transaction` reads of a write-once cell: a read no record answers (the head's
    /// answer, or nothing) is not checked against the safe point, so a record committed
    /// at or below the snapshot and collected under a head version committed after it,
    /// which the head read came too early to see, is missed silently (issue 40, hole 7 of
    /// the write-once GC races: found by a review, not by the simulator, until it wrote
    /// cells through their heads after a record).
    OnceMissSkipsSafePoint,
    /// The worker counts store outages towards dead letters.
    OutageCountsTowardsDeadLetter,
    /// `RoundTrips::lease_margin` is zero: leases are `lock_ttl` alone, so a writer whose
    /// round trips are slower than a third of the TTL is fenced while it commits
    /// (`percolator::design::commit`, "leases carry twice the slowest recent round trip").
    LeaseIgnoresRoundTrips,
    /// `observers` membership: a worker whose heartbeat is held up keeps owning its share
    /// (no self-fencing), so another worker that took it for dead owns the share too (the
    /// "wasted joins" bug of photon's two pipelines).
    WorkerKeepsShareWhenHeldUp,
    /// `photon::join`: the click join answers IdRegistry lookups from its pipeline's memory
    /// of the lookups it made before (a cache never told of its own writes) instead of its
    /// transaction's snapshot, so a later run on a joined click trusts a stale "not
    /// registered" and joins it again; its write of the entry meets no conflict, the first
    /// join having committed before it began (the exactly-once bug class of Photon's
    /// IdRegistry: a lookup trusted past the transaction that wrote the entry).
    JoinTrustsStaleRegistry,
    /// `txn::notify`, the floor raise: `floor` and `scan_from` move together in one CAS
    /// and the raiser rescans the range it skipped from its memory of that CAS, so a raise
    /// cut short between the CAS and the end of its rescan (a failed scan, a crash) leaves
    /// no rescan owed in the record, and a notify key put there by a writer whose floor read
    /// came before the CAS (its put after the raiser's scan) is below every reader's start
    /// for good: a notification never observed (invariant N2, issue 25).
    FloorRaiseCutShort,
    /// `photon::schema::purge_settled_rows` (the IdRegistry purge): entries below the
    /// boundary are deleted without waiting for GC to resolve the transactions they are the
    /// primary of, so their pending records (joined outputs, index cells) read as rolled back
    /// (found by a review of the write-once index change: a boundary jump).
    RegistryPurgeIgnoresResolution,
    /// `observers::Worker::wait_until_quiescent`: the first transient failure of its store
    /// scan is returned instead of checked again, so a drain in the tail of an outage fails
    /// (found by the simulator's drain harness meeting the same in its own read, seed 19532).
    QuiescenceGivesUpOnTransient,
    /// `txn::prewrite`, a chunk whose extra writes ride in its locks' call
    /// (`batch_put_and_compare_and_swap`): a failed call is taken to have put them, so the
    /// per-cell loop locks a cell without its out-of-line value and the committed version
    /// points at nothing (checked against the riding change before it landed: the simulator
    /// wrote no out-of-line values until then).
    RidingExtrasTakenForWritten,
}

thread_local! {
    static ACTIVE: Cell<Option<Bug>> = const { Cell::new(None) };
}

/// Plants `bug` (or none) for the calling thread.
pub fn set(bug: Option<Bug>) {
    ACTIVE.with(|a| a.set(bug));
}

/// Whether `bug` is planted on the calling thread.
pub fn active(bug: Bug) -> bool {
    ACTIVE.with(|a| a.get()) == Some(bug)
}
