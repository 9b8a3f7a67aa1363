//! Design note (no code): deleted notify keys on TiKV, what they cost and what the product
//! and an operator do about them (issue 26, item 5).
//!
//! **What TiKV does with a deleted notify key.** A handled notification's key is deleted by
//! the plain client (notify keys are plain: [`crate::AtomicKeys::PercolatorLayout`]) in a
//! `RawBatchDelete`. In API v1 a raw key lives in RocksDB's `default` column family as
//! `z ‖ key`, and a delete writes a tombstone there; the key's bytes stay until a compaction
//! rewrites the files holding both. TiKV's own compaction checks
//! (`raftstore.region-compact-check-interval`, `region-compact-min-tombstones`,
//! `region-compact-tombstones-percent`) score regions by the tombstones of the `write`
//! column family, which raw mode does not use (tikv/tikv#11575, #7870), so raw tombstones are
//! only dropped by RocksDB's size-driven level compactions (eventually, as the files reach
//! the bottom level; slowly when the store is mostly quiet) or by a manual compaction.
//!
//! **What a scan pays.** `RawScan`/`RawBatchScan` iterate the `default` column family from
//! their seek key: reaching the seek key is an index lookup per level (tombstones before it
//! cost nothing), but every tombstone between the seek key and the keys returned is read and
//! stepped over. A scan's cost is the live keys it returns plus the tombstones among and
//! before them in its range.
//!
//! **What the product does: no tombstone in front of a scan's seek key.** Notify keys are
//! ordered by their bucket (the second they were put in) before the cell
//! (`KeyCodec::notify`), and every reader of the notify space (workers, quiescence and drain
//! checks, backlog counts, GC's notification pass) starts at the notify floor's `scan_from`
//! bucket (`KeyCodec::notify_from`), which rises past every bucket left empty. Tombstones
//! below the floor are never walked, however many there are; a pass walks the live
//! notifications plus the tombstones of the buckets since the oldest live one, which in a
//! steady state is the last second or two of handled notifications. The cost is bounded by
//! the backlog's age, not by the history, on TiKV as on the embedded store (the same code;
//! measured on fjall, which keeps delete markers the same way: after 1,000,000 handled
//! notifications with 10 live, a scan from the floor took 4 us and one from the start of the
//! space 384 ms; `cargo bench -p percolator-observers --bench notify_history`). Bucket-first keys were
//! chosen over the alternatives: a scheduled compaction cannot keep up with a hot space (it
//! rewrites the whole range each time, and scans slow down between two runs), and a
//! `RawDeleteRange` of drained buckets would only replace point tombstones below the floor,
//! which no scan walks anyway, by a range tombstone.
//!
//! **What remains, and what an operator does.**
//! - A floor held low (a notification no worker can finish: a failing observer before it is
//!   dead-lettered, a column no running worker observes, a writer stuck before its commit)
//!   makes every pass walk the tombstones of everything handled since. The cure is the
//!   notification, not the store: dead-letter or observe it (`percolator-ctl`), and the
//!   floor moves on. A growing "keys scanned" per pass (`Worker::metrics()`) with a small
//!   backlog is the sign.
//! - Disk space: tombstones and the deleted values occupy the `default` column family until
//!   RocksDB compacts them. If a busy notify space's files grow, compact it on a schedule
//!   (daily is plenty: scans do not depend on it) with
//!   `tikv-ctl --host TIKV:20160 compact -c default --bottommost force --from Z_START --to
//!   Z_END` on each TiKV (or `tikv-ctl --pd PD:2379 compact-cluster -c default ...`), where
//!   `Z_START`/`Z_END` are `z` followed by the bounds of
//!   `KeyCodec::new(namespace).space_range(Space::Notify)`, in tikv-ctl's escaped form.
//! - minitikv cannot measure any of this: its memory store keeps no tombstones, and its
//!   embedded store is fjall (the benchmark above), not RocksDB.
