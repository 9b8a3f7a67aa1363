//! # Garbage collection
//!
//! [`crate::Client::gc`] (a safe point): refuses a safe point less than `gc_lag` behind the
//! oracle; publishes it in `M gc_safe_point` (never decreases); resolves every lock older than
//! it (nothing is deleted before this pass completes); per cell deletes `V` entries older than
//! the newest version at or below the safe point (and their `D` keys), and drops such versions
//! from the head's `recent` with one CAS (their `D` keys then go as orphans); shrinks heads
//! whose latest is a delete below the safe point to tombstones `{seq+1, rollback_ts, floor =
//! sp}` and drops their `V`/`D`; deletes orphan `D` keys below it. `snapshot_at(ts)` refuses
//! `ts` below the published safe point. GC also resolves strong notify keys below the safe point
//! ([`super::notify`]).
//!
//! Concurrent GCs are safe (an application's lease that takes turns saves work only): the safe
//! point is published by CAS and never moves back, lock resolution is idempotent, heads change
//! only by CAS from the exact head read, and each pass deletes only versions invisible at every
//! snapshot at or above its own safe point, which is at or below the published one.
//!
//! ## Snapshots and GC
//!
//! A reader's start_ts may arrive late (a slow oracle reply, a paused process, oracle time
//! running ahead of the reader's clock after a takeover), so no local clock can prove that GC
//! has not passed a snapshot. The check is on timestamps instead: *a read at `start_ts` returns
//! only answers that were exact when read*, by this rule.
//!
//! - An answer found in one head read (the first of `latest, recent...` with `commit_ts <=
//!   start_ts`) is exact whatever GC does: the head is read atomically, it holds a contiguous
//!   newest-first run of versions, and GC only shortens that run from its old end (a version it
//!   keeps is kept with every newer one). A cell with no head at all was never prewritten and
//!   has nothing in `V` (heads are created by the first prewrite and never deleted by
//!   transactions).
//! - An answer from beyond the head (a `V` scan, found or not) is followed by a read of the
//!   published safe point; if it is above `start_ts` the read fails with `SnapshotTooOld`.
//!   Sound because GC publishes its safe point before it deletes anything and deletes only
//!   versions invisible at every snapshot at or above it: a safe point read *after* the `V`
//!   read that is still `<= start_ts` means no GC that could remove a version visible at
//!   `start_ts` had started deleting when `V` was read. A scan does one such check after its
//!   last read.
//! - An out-of-line value (`D`) that is missing is `SnapshotTooOld` if the safe point (read
//!   after) is above `start_ts`, and `Corrupt` only otherwise: `D` keys are immutable, and GC
//!   deletes the value of a version only when a newer version at or below its safe point
//!   exists.
//! - A commit whose primary lock is gone and whose status reads "rolled back" reports
//!   `Aborted` only if the safe point, read after the status check, is still `<= start_ts`;
//!   otherwise GC may have removed the evidence of its commit and the outcome is
//!   `CommitUnknown`.
//!
//! The local clock is kept only where it errs on the safe side: it starts *before* the start_ts
//! request, bounds how long a transaction may wait on locks and when it gives up
//! (`max_lifetime`), and sizes lock TTLs; the commit itself is refused on timestamps
//! (`commit_ts` more than `max_lifetime` after `start_ts`). The cost is one safe point read per
//! read that goes beyond the head (rare: the head keeps the newest versions), none for the rest.
//! `tests/tests/txn_gc_stall.rs` stalls a reader's start_ts behind GC (inline and out-of-line
//! values, get and scan) and stalls a scan between a head and its value.
