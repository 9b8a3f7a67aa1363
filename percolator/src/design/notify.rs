//! # Notifications: notify keys, hints, the notify space and its floor
//!
//! The transaction side of observers (the runtime that consumes notifications is the
//! `observers` crate: `observers::design`).
//!
//! ## Writers
//!
//! [`crate::Client::observe_column`] (done by `observers::Registry::declare`; every client
//! that writes an observed column must declare it) makes each write of that column put
//! `Q(bucket, cell, start_ts) = Strong { start_ts, primary, ttl }` in the same `batch_put` as
//! the prewrite's `V`/`D` keys, before the lock CAS, so before the commit point: a committed
//! change always has its notify key, even if the writer dies right after committing.
//! [`crate::Transaction::notify`] does the same for cells it does not write (carried by the
//! primary's prewrite; a notify-only transaction writes `Committed { commit_ts }` keys at a
//! fresh timestamp). [`crate::Client::weak_notify`] puts `Weak` with a fresh timestamp. The
//! declaration lives in the `Client`, not in the store: a writer in another process declares
//! the columns itself, or its writes carry no notify keys and no worker ever sees them.
//!
//! ## Hints
//!
//! After a commit that put notify keys, the client publishes a hint on
//! [`crate::Client::notify_hints`] (a `broadcast` channel): the notified cells, the timestamp
//! inside their keys (the writer's start_ts, or the commit_ts of a notify-only commit), the
//! bucket ([`crate::txn::CommittedNotify`]) and the fate (`Committed { commit_ts }`, or
//! `Weak`). A hint is sent only after `commit` returned `Ok`, so it never names a change that
//! can still roll back. Hints are best-effort: a receiver more than 4,096 commits behind gets
//! `Lagged` and falls back to scanning; the notify space stays the source of truth. Hints follow
//! the order in which commits return, which is close to but not exactly commit_ts order.
//!
//! ## Why a bucket: the notify space
//!
//! Handled notify keys are deleted, and an LSM store keeps each delete marker until compaction
//! (fjall, and RocksDB under TiKV alike), so a space scanned from its start costs O(everything
//! ever handled). Notify keys are therefore ordered by a **bucket** first: the wall-clock second
//! they were put in. A meta record `M notify_floor` says below which bucket no notification is
//! left; every scan of the notify space (workers, quiescence and drain checks, backlog counts,
//! GC's notification pass) starts there (at its `scan_from`, below; `KeyCodec::notify_from`),
//! so a pass walks the live notifications plus the markers of the buckets since the oldest live
//! one, and nothing older: its cost is bounded by the backlog's age, not the history.
//!
//! - Writers put notify keys in bucket `b = max(this second, the highest floor this client has
//!   seen)` and then, *after* the put, read the floor; while the floor is above `b` they put the
//!   keys again at or above it and delete the old copies (`settle_notify_keys`). For a strong
//!   notification this happens in the prewrite, before the lock CAS, so before the commit
//!   point. One bucket per commit, carried by its hint.
//! - The floor record holds two buckets ([`crate::txn::NotifyFloor`]): the **floor** `F`
//!   writers settle against, and **`scan_from`** `L <= F`, where every reader starts. `L < F`
//!   says a raise still owes a rescan of `[L, F)`.
//! - A scanner reads the record, scans from `L`, and notes the bucket `o` of the first key it
//!   meets (any key, whoever owns it or whether it is handled). At the end of a complete pass
//!   ([`crate::Client::raise_notify_floor`]) it raises the floor to `t = min(o, this second −
//!   1, e)`, `e` the bucket where its range ended (a worker's scanner may stop short of the
//!   newest buckets, whose keys its hints carry), with a CAS `(F, L) -> (t, L)` that keeps
//!   `L`, then rescans `[L, t)` and moves every key found there above `t` (put the copy, then
//!   delete the old key), then raises `scan_from` with a second CAS `(F', L) -> (F', t)`
//!   (`F'` the floor found then). Both moves share one CAS loop. Any pass that finds
//!   `L < F` in the record does the owed rescan (the rescan is idempotent).
//!
//! ## Why nothing is missed
//!
//! A key that existed when the pass began at `L` is at or above `o` (scans are in key order),
//! so at or above `t`. A key put below `t` after that is put by a writer that reads the floor
//! after its put. If that read comes after the raise CAS, the writer sees `t` and moves its key
//! above it. If it comes before, its put came before the CAS too; until a rescan that began
//! after the CAS has finished and moved `scan_from` up, every reader starts at `L`, at or below
//! the key, and that rescan finds it. Moving is "put the copy, then delete": at every moment one
//! copy is where readers look. A notification moved twice (by its writer and by a rescan) runs
//! its observer once more at most, which the acknowledgment column absorbs (strong) or the
//! at-least-once contract allows (weak).
//!
//! **A raise cut short** anywhere (the process dies, a call of the rescan fails, a CAS whose
//! outcome is unknown) leaves the record saying what is owed: readers keep starting at `L` and
//! the next pass redoes the rescan. Nothing depends on the raiser's memory of its CAS: a raiser
//! whose CAS applied with its reply lost, followed by another raise `t -> t2`, finds `(t2, L)`
//! and rescans `[L, t2)`. A record in the first layout (the floor alone, 8 bytes) reads as
//! `scan_from = 0`: one rescan of everything below it, once. The two-bucket record is refused as
//! corrupt by binaries that know only the first layout: do not run such workers or writers on
//! one store beside current ones. Every pass that finds a rescan owed does it, so several
//! scanners may copy one key (duplicates, absorbed as above).
//!
//! What keeps the floor low: any notification left (pending writers, failing observers until
//! dead-lettered, columns no running worker observes). The floor then stays at that
//! notification's bucket and passes walk from there (never worse than scanning from the start).
//! Dead letters replay through [`crate::Client::put_notification`] (a fresh bucket: the
//! letter's own is below the floor by then).
//!
//! **On TiKV** the design is the same code: the floor is a meta record changed by a raw CAS
//! (the retry hazard applies and is covered above), the bucket is the first component of the
//! key, so the scan from the floor is a range scan that TiKV answers from the floor's region on
//! and never reads a drained region's delete markers; RocksDB drops those markers at
//! compaction.
//!
//! **GC** resolves strong notify keys below its safe point: rewritten as `Committed { c }` (a
//! plain put: a resurrected key is covered by its acknowledgment) or, if their writer rolled
//! back, deleted only if a re-read finds the strong record still there (a "rolled back" read
//! after another pass trimmed the evidence is wrong, and that pass rewrote the key first:
//! [`super::gc`], "Decisions on a rolled-back fate"). A worker removes a rolled-back writer's
//! key by the same rule.
//!
//! ## The backlog counters
//!
//! How many notifications wait is a count of the notify space from the floor, which walks
//! every waiting key: loaders that pace themselves on the backlog (`app::load::backlog`) make
//! it rarely and follow the backlog between counts by counters. Each client counts the notify
//! keys it puts (every put is followed by its settle, which counts it once) and removes
//! ([`crate::Client::remove_notify_keys`]): [`crate::Client::notify_counts`], exact and in
//! memory. Shortly after it moves them ([`crate::ClientConfig::publish_notify_counts`], 50 ms
//! by default) it adds what it moved since its last publication to the meta record `M
//! notify_counts` (two sums, put and removed, changed by a CAS that is repeated while other
//! clients add theirs). A reader gets the record and this client's published share under one
//! lock, so [`crate::txn::SharedNotifyCounts::others`] is exactly what the other clients added;
//! the backlog between two counts moved by the differences of both.
//!
//! The counters are an estimate and only pace loaders, never decide what runs or what is
//! deleted. They miss keys moved by a client that stopped before publishing, or by one that
//! does not publish; a CAS whose reply was lost may add a client's counts twice, or (if another
//! client wrote the same sums meanwhile) not at all; a removal made just before a count but
//! published after it is subtracted again. Each of these errs by at most one publication and
//! lasts until the next count of the notify space, which the loader makes at least every few
//! seconds. The record's sums only grow (wrapping at 2^64; other clients' shares are taken with
//! wrapping differences, and a reader's differences over time saturate at zero): no
//! reader compares them with the count itself.
//!
//! ## Tests
//!
//! `tests/tests/notify_floor.rs` fails every call of a raise in turn (each get, CAS, scan, put
//! and delete, before it reaches the store and after it applied) on the memory store and on
//! minitikv, and races two raisers with lost replies; a worker afterwards runs the observer
//! exactly once each time. It also races writers on separate clients against a raiser that
//! pushes the floor ahead of their clocks and checks that nothing is lost or left below it (it
//! fails if writers do not re-check the floor or the raiser does not rescan), on the memory
//! store, on TiKV (`minitikv` through `TikvKv`) and in TiKV's weather (regions split, merged and
//! moved under the scans, busy servers, replies lost after apply).
//! `tests/tests/observers.rs::scans_skip_handled_notifications` models an LSM's delete markers
//! and checks that after 20,000 handled notifications (5,000 on TiKV) a worker's scans of 10
//! live ones visit O(10) entries. The cost on the real LSM:
//! `cargo bench -p percolator-observers --bench notify_history` (`docs/benchmarks.md`).
