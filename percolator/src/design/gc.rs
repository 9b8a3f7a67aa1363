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
//! ([`super::notify`]). Heads are read a page (1,024) at a time, and one `scan_many` of the
//! page asks which of its cells have any `V` entry; only those are scanned (an entry spilled
//! after the probe waits for the next pass, as one spilled after a scan of the cell would).
//! A pass still reads every head and write-once record kept, so its cost grows with the
//! history, not with the writes since the last pass.
//!
//! Concurrent GCs are safe and supported (two passes at once are expected: the GC lease is
//! taken on each process's wall clock, and `percolator-ctl gc` runs beside the periodic pass;
//! `tests/tests/txn_gc_races.rs` and `txn_gc_concurrent.rs` run them): the safe point is
//! published by CAS and never moves back, lock resolution is idempotent, heads change only by
//! CAS from the exact head read, each pass deletes only versions invisible at every snapshot
//! at or above its own safe point, which is at or below the published one, and every removal
//! decided on a "rolled back" fate is conditional on the bytes it was decided on (below).
//! A pass never skips a key of a table id its client does not know: a record left unresolved
//! would read as `CommitUnknown` once its primary's evidence is trimmed. Such a key means the
//! namespace's map grew after the client opened the store, so the client reads the store's
//! map, adopts it if it only grew (`Client::reload_table_ids`), and runs the pass again; a
//! stored map that differs otherwise (`TableIdsError::Mismatch`) or lacks the id too
//! ([`crate::codec::TableIdsError::UnknownId`]) fails the pass.
//!
//! **Transient failures.** A pass makes calls per cell (a scan of the `V` of each cell that has
//! one, a read of the versions a hot head hides, a batched delete, a CAS of a head it trims), so a
//! store that fails one call in a few hundred failed almost every pass on a table of thousands of
//! cells, and GC never completed while the store was flaky (in the simulator no pass completed
//! while its faults were on). A pass retries on [`crate::kv::KvError::Unavailable`], up to
//! [`crate::kv::UNAVAILABLE_RETRIES`] times over about 5 s ([`crate::kv::retry_unavailable`],
//! `gc::retried`), every step that is safe to repeat: its scans and batched reads (a retried read
//! is a slower read); its deletes of versions, records and values nobody writes again (a repeated
//! delete deletes nothing more); the publication of the safe point (read, then CAS, again); and its
//! CASes from the exact bytes it read (of a pending record it rewrites, of a head it trims or
//! shrinks): one that applied but lost its reply either finds its own bytes (heads carry a `seq`,
//! so equal bytes are this CAS's) or fails as a race lost to another pass, which the pass already
//! handles. (A page's record rewrites go in batched CASes; a batch that fails goes again request by
//! request, each retried, since a batch retried whole fails while any one of its requests does.)
//! Not retried: the put of a committed notify key (a late repeat could land after a floor raise's
//! rescan moved the key, below `scan_from`, where nothing scans it again), status checks and lock
//! resolution; their failure ends the pass, and the next one repeats it (passes are safe to repeat,
//! as concurrent ones are). Transactions' own reads are not retried (an outage reaches the caller
//! at once). `tests/tests/txn_gc_retries.rs`: reads and deletes failing before they reach the
//! store, CASes whose replies are lost, and the calls a pass makes (batched rewrites, one
//! version probe per page of heads).
//!
//! ## Decisions on a "rolled back" fate
//!
//! A fate check answers "rolled back" exactly unless the evidence of the writer's commit (its
//! primary's version with that start_ts) was trimmed by GC; then it fences the primary and
//! answers "rolled back" wrongly. GC trims that evidence only after a pass at a safe point
//! above the commit rewrote, first, every strong notify key and write-once record of the
//! writer as `Committed { c }` (resolution before deletion, in every pass). Hence the rule for
//! every client that acts on "rolled back" for a key it read (GC's notification and record
//! passes, a worker's notify key): **re-read the key after the answer, and delete it only if it
//! still holds the bytes the decision was taken on** (`Shared::delete_if_unchanged`;
//! `Client::remove_rolled_back_notification` for workers). If the answer was wrong, the
//! evidence was gone when it was read, so the key had already been rewritten (or collected
//! under a newer committed write): the re-read sees other bytes, and the caller leaves it (a
//! worker decides again on what it found: `Committed { c }` runs the observer). If the key
//! still holds the bytes, the answer was exact, a rolled-back writer never commits, and nothing
//! rewrites the key as committed between the re-read and the delete. (The store has no
//! conditional delete, a CAS never deletes; the only write that could restore the old bytes is
//! a late repeat of the writer's own put, which lands within the store's request deadline, far
//! inside `gc_lag`.) The rewrite as `Committed { c }` is never wrong about the fate, but it
//! must not bring back a key another pass rewrote and then removed: a write-once record is
//! rewritten by a CAS from the pending bytes read (a record collected under a head's delete,
//! whose head that pass then shrank to a tombstone, would otherwise read again; found by the
//! simulator, `percolator-sim`). A notify key is rewritten by a plain put (`Q` keys are plain
//! on TiKV): a key it puts back after a worker removed it is covered by the acknowledgment
//! (a guarded observer's guard), so the observer does not run again with effects.
//!
//! ## Resolved below
//!
//! A pass publishes a second point, `M gc_resolved_below`, after its resolution steps
//! complete: every lock, strong notify key and write-once record with start_ts below the
//! pass's safe point is then decided and rewritten (or rolled forward or back), so none of
//! them needs its primary any more. Like the safe point it is published by CAS and never
//! moves back; a pass publishes its own safe point, below which it resolved everything itself,
//! so concurrent passes cannot publish a point nothing resolved. A write landing later below
//! it needs no primary either: a writer that started below a safe point `gc_lag` behind the
//! oracle is past `max_lifetime` and can no longer commit, so a late record of it is rolled
//! back, which is what a missing primary reads as. Transactions never delete a cell's head,
//! but a client may delete rows outright (raw deletes) once no transaction can write them
//! again; if a primary is among them, every transaction whose primary it was must be decided
//! and resolved first, or its pending records read as rolled back. Such a client deletes a
//! cell only when its head has no lock and every commit in it (its latest version, or for a
//! tombstone its floor) is at or below [`crate::Client::gc_resolved_below`]; a transaction's
//! start_ts is below its commit_ts, so all of the cell's writers started below the point.
//! The check and the delete are two steps (a CAS never deletes), and between them another
//! client may delete the cell and a transaction create it again, whose head a stale delete
//! would remove. So the client first fences the head it checked ([`crate::Client::fence_settled`]):
//! a CAS from exactly that head to the same head with `rollback_ts` at or above
//! [`crate::txn::FENCE_FLOOR`] (low bits random: unique to the caller), which every prewrite
//! refuses and every read ignores. Only the client whose fence landed deletes the cell (its
//! head last), and no transaction writes it until it is gone. A fence left by a client that
//! stopped before its delete stays (read as before, never written again). A fence is not a
//! rollback decision: a transaction whose primary it is may lock the cell once the delete
//! has run, so a status check answers `Pending` for it until its `max_lifetime` has passed
//! (drawn before the head is read again: any commit_ts it draws after locking the recreated
//! cell is later still, and its commit refuses it), and only then `RolledBack` (found by a
//! review: remembered at once, that answer made readers skip the records of a transaction
//! that then committed). For the same reason a cell whose rollback mark is above the point
//! (a transaction that may still be in flight) is not settled: deleted, the mark would no
//! longer stop it. Photon's
//! IdRegistry purge does this (`photon::design::join`); tests: `tests/tests/txn_fence.rs`.
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
//! - A write-once record whose fate reads "rolled back" while the safe point (read after) is
//!   above the writer's start_ts is read again: rewritten as committed, it is used; gone (rolled
//!   back, or collected under a newer committed write) it is skipped only if the safe point is
//!   at or below `start_ts` (the newer write is then visible too and is the answer), else the
//!   read fails with `SnapshotTooOld` ([`super::once`]).
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
