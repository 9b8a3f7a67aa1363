//! # The commit protocol
//!
//! Google Percolator's protocol (the primary lock is the commit point, secondary locks point at
//! it, whoever meets a stale lock rolls it forward or back) with single-key CAS in place of
//! Bigtable's single-row transactions: one head record per cell, written only by CAS, carries
//! the newest committed version, at most one lock and the rollback mark; older versions live in
//! `V`, with one refinement: the head also keeps the few versions just older than `latest`.
//! There is no one-phase and no async commit: without a lock placed before commit_ts is drawn
//! (or server-side read-timestamp tracking, which a raw store lacks), a reader with a larger
//! start_ts could miss the write.
//!
//! ## Protocol invariants
//!
//! 1. **The oracle is linearizable**: every timestamp it returns is larger than every timestamp
//!    returned (to anyone) before the request began (how across leaders: `oracle::design`).
//! 2. **Every lock of a transaction is confirmed** (CAS success, or a re-read showing it)
//!    **before its commit_ts is drawn.** With 1: a reader got the lock and `latest` of a cell
//!    from one key; any transaction that locks the cell after that read draws a commit_ts above
//!    the reader's start_ts, so a read never misses a commit below its snapshot.
//! 3. **One CAS on the primary's head decides a transaction**: commit (our lock → `latest`) or
//!    rollback. Every removal of a lock that is not its commit raises `rollback_ts` to at least
//!    its start_ts in the same CAS (primaries and secondaries alike), a rollback with no lock
//!    present raises `rollback_ts` alone, and a prewrite with `start_ts <= rollback_ts`
//!    conflicts. So a rolled back transaction can never lock that cell again: commit and
//!    rollback exclude each other and are permanent. `latest.commit_ts` and `rollback_ts` never
//!    decrease. `rollback_ts >= s` alone is *not* evidence that `s` rolled back (it may have been
//!    raised for another transaction): a status is decided only as in [`super::locks`].
//! 4. **Every committed version not yet collected by GC is in its head (`latest` or `recent`)
//!    or in `V`, at every moment** (this replaces Percolator's "`V(prev)` is durable before the
//!    lock that will supersede `prev` exists"; see "Versions kept in the head" below).
//! 5. **Bounded lifetime**: a transaction lives at most `max_lifetime` (default 2 min, on oracle
//!    time from physical(start_ts)); an older one aborts with `SnapshotTooOld` instead of
//!    committing. Heartbeats never extend a lock beyond it. GC safe points lag the oracle by
//!    `gc_lag > max_lifetime` (default 10 min), so a lock below a completed safe point belongs to
//!    a transaction that can no longer commit.
//!
//! ## Records
//!
//! [`crate::record::Head`] `{ seq, latest: Option<Version>, recent: Vec<Version>, lock:
//! Option<Lock>, rollback_ts, floor }`, [`crate::record::Version`] `{ commit_ts, start_ts, op
//! }`, [`crate::record::Lock`] `{ start_ts, primary: Option<Cell>, op, ttl_ms }`, `op =
//! Put(inline) | PutExternal(len) | Delete`. Binary encoding with a magic byte and format
//! version; every decode returns `RecordError` on corrupt or truncated input (property-tested
//! with garbage, truncation and bit flips). `seq` grows on every CAS, so a head's bytes never
//! repeat: a CAS reported failed whose current value equals the bytes we sent is our own applied
//! swap (the retry hazard, [`super::kv`]), never someone else's. Heads that carry `recent` have
//! a flag bit, so binaries that do not know `recent` reject them with a typed error instead of
//! silently dropping it.
//!
//! ## The commit path
//!
//! Data flow of [`crate::Transaction::commit`] (writes are buffered until then; reads cache the
//! head they saw, which becomes the expectation of the prewrite CAS, saving a read):
//!
//! 1. Prewrite every written cell, batched (below; the first cell in key order is the primary):
//!    resolve a decided or expired lock and retry; a live lock, `latest.commit_ts >= start_ts`
//!    or `rollback_ts >= start_ts` is `Conflict`; `batch_put` the `D` value (values over
//!    `inline_limit`, default 1 KiB) and, if our commit would overflow `recent` (more than 4
//!    versions or about 512 bytes with `latest`), every version of `recent` into `V`; CAS the
//!    head to add our lock with `ttl = elapsed + lock_ttl + margin` (the lease margin, below;
//!    and `recent` emptied if spilled). `elapsed` is taken when the lock is written, not when
//!    the commit began: a large write set or a stall can reach a cell long after the commit
//!    began, and a lock born with a TTL counted from then would appear already expired, so a
//!    reader meeting it before the first heartbeat would fence a live commit. The expected head
//!    is the one this transaction read, else the one this client's last commit of the cell left
//!    (`head_cache_bytes`, default 16 MiB), else "no head" (a new cell). A head read absent
//!    is kept by its key alone (`ReadHeads`: wake checks read thousands of absent cells). A
//!    wrong guess fails the CAS, which returns the current head, so it costs what the read it
//!    replaces would have cost (in a batched prewrite, the cell then takes the per-cell path:
//!    one CAS more than a right guess).
//! 2. Any failure: fence the primary (remove our lock / raise `rollback_ts >= start_ts`,
//!    creating the head if absent), then remove our secondary locks (one `batch_get` of their
//!    heads, one batched CAS; a CAS that lost goes through the per-cell roll-back). A conflict
//!    seen on the expected heads before anything was written needs no abort at all.
//! 3. Draw commit_ts (all locks confirmed first: invariant 2). Older than `max_lifetime` →
//!    abort with `SnapshotTooOld`.
//! 4. Commit point: CAS the primary, lock → `latest = Version{commit_ts}`, the previous
//!    `latest` moving to the front of `recent`. On a lost lock, decide by the status check
//!    ([`super::locks`]): committed (our CAS applied) → OK, rolled back → `Aborted`, storage
//!    errors or a GC safe point above start_ts → `CommitUnknown`.
//! 5. Commit the secondaries in one batched CAS from the locked heads the prewrite left; a
//!    request that lost goes through the per-cell roll-forward from the head it found; failures
//!    are left to readers (roll forward).
//!
//! ## Batched prewrite and commit
//!
//! (`txn/prewrite.rs`, `Shared::roll_forward_many`.) The prewrite takes one round per 256 cells
//! (the primary's chunk first): (i) decide on each cell's *expected* head (read, remembered or
//! guessed absent, as above) without a store call: a conflict there ends the commit before
//! anything is written; a cell whose expected head holds a lock goes to the per-cell loop;
//! (ii) one `batch_put` of every extra write of the chunk (out-of-line values, versions spilled
//! from full heads, notify keys), then `settle_notify_keys` of every notify key of the chunk
//! ([`super::notify`]); (iii) one `batch_compare_and_swap` of every head from its expected bytes
//! to its locked head. A chunk with no notify key and no write-once record sends (ii) and
//! (iii) as one `batch_put_and_compare_and_swap`: the embedded store writes the extra writes
//! and the swapped heads in one fjall batch (one journal write, so no lock is seen or
//! survives a crash without them); other backends make the two calls in order. A request that did not swap (the head was not the expected one) sends its
//! cell to the per-cell loop (read-modify-CAS: lock resolution, conflict checks on the head
//! found, spills decided again) from the head the CAS returned; a batch that failed sends every
//! cell of the chunk there from a fresh read (our own lock found there is kept). The TTL of a
//! chunk's locks is drawn when the chunk is built, and the prewrite yields between chunks so
//! other tasks run. Why this is safe:
//!
//! - *The commit point is unchanged*: still the one CAS of the primary from our lock to our
//!   version, after every lock is confirmed (a swap, a returned head holding exactly our bytes,
//!   or the per-cell loop's confirmation; invariant 2). Batching changes how many locks one
//!   round trip places, not what decides the transaction.
//! - *A partly applied batch is a partial prewrite*: each request is atomic for its key, so
//!   after a batch (failed, half-applied, or the process killed mid-batch) every cell either
//!   holds our complete lock or its old head, the state a crash between two per-cell prewrites
//!   leaves. Abort (fence the primary, roll back what is ours) and lock resolution (status
//!   through the primary) already handle it; a lock left without its primary's lock points at a
//!   primary that is fenced or expires.
//! - *Invariant 4 and the notify floor*: the `batch_put` of the chunk's spilled versions and
//!   notify keys, and the settling of its notify keys above the floor, are acknowledged before
//!   the batched CAS is sent, so every lock of the chunk is born after everything it needs; a
//!   cell that falls back decides its spill again on the head it found and puts it before its
//!   own CAS. When the extra writes ride in the locks' call, they apply with the locks (one
//!   atomic batch) or before them (the default's two calls); a call that failed may have
//!   applied any part, so each cell of the chunk goes to the per-cell loop, which puts its
//!   extra writes again (the same keys and bytes) before its own CAS. Records and notify keys
//!   never ride: a failed call would leave the per-cell loop without the records, and notify
//!   keys must be settled between the two steps. Notify keys put for a cell that then conflicts belong to a transaction that rolls
//!   back, which observers ignore (status through the primary).
//! - *Secondaries*: each request is the roll-forward of one lock of ours from the exact bytes we
//!   wrote; one that lost means someone resolved the lock already (or the head changed), and
//!   the per-cell roll-forward decides on the head found. A failed batch leaves locks behind for
//!   readers to roll forward, as a failed per-cell commit does.
//!
//! [`crate::Transaction::get_many`] (and `get_many_versioned`) reads like `get` for each cell:
//! own writes first, heads already read by the transaction reused, the others fetched in one
//! `batch_get`; each head then goes through the same lock resolution as `get` and is kept as
//! the expectation of the prewrite; one GC check covers every answer from beyond a head. Raw
//! store calls per transaction (a batched CAS counting one; the txn bench prints them): a read
//! transaction 1, a blind one-cell write 2 (its spill, every few commits, rides in the
//! prewrite's call on the embedded store and is one more call elsewhere), a
//! ten-cell read-modify-write with `get_many` 4 (`batch_get`, batched prewrite CAS, commit
//! point, batched secondaries).
//!
//! ## Leases and heartbeats: no reader fences a live commit
//!
//! A heartbeat extends the primary's TTL every `lock_ttl/3` while a commit runs (never beyond
//! `max_lifetime`). It is a task of its own, spawned by the commit and aborted when the commit
//! returns or is dropped, so a stalled or crashed writer stops heartbeating, while a committing
//! task whose synchronous stretches outlast the TTL (they grow with the write set) does not
//! starve it (`txn_protocol::heartbeat_outlives_a_blocked_commit_task` blocks the committing
//! thread for three TTLs).
//!
//! - The primary is locked before any other lock or notify key of a large write set exists:
//!   above `PRIMARY_ALONE_ABOVE` (one round, 256) cells it is CASed alone in a round of its own,
//!   and a primary whose batched CAS did not apply (a stale expectation, a lock to resolve) is
//!   locked cell by cell right after its round, before any later chunk. A reader that meets an
//!   expired secondary (or a strong notify record) therefore finds the primary locked, and its
//!   lease is the heartbeat's.
//! - The heartbeat knows the head it last wrote (`PrimaryHead`, set by the prewrite), so a beat
//!   is one CAS, and a large write set renews the lease as soon as the primary is locked.
//! - Every lease (a lock's TTL drawn when the batched lock round is sent, a heartbeat's
//!   extension) is `lock_ttl` plus twice the slowest successful round trip `R` the client
//!   measured in the last 5-10 s (`RoundTrips`: oracle calls, batched prewrite rounds, beats,
//!   and every answered single-head CAS: a per-cell prewrite, the commit point, a lock
//!   resolution), the margin capped at eight TTLs. Measuring only some kinds of call left a
//!   gap the simulator found (seed 1198 at e0d19f4): on a machine slow for seconds, the one
//!   batched round measured failed in an outage, the rest of its commits went through the
//!   per-cell path and the commit point, unmeasured, and its next lease carried no margin. (A strong notify record's
//!   TTL is drawn a little earlier, before its puts; a per-cell fallback's lock TTL after
//!   them, just before its CAS, as the batched round's.) A beat computed at `t` lands at
//!   `t + R` and the next lands at `t + R + lock_ttl/3 + R`, inside `t + lock_ttl + 2R`. A
//!   crashed writer's locks expire at most `2R` (at most eight TTLs) later than `lock_ttl`
//!   alone would, always within `max_lifetime`. What is left: a machine that turns slower than
//!   half the lease between the lease's draw and its first renewal.
//! - Tests: `tests/tests/txn_lease.rs` (a primary that falls back while batched CASes take two
//!   TTLs; every call slower than the TTL).
//!
//! ## Versions kept in the head (`recent`), and why it is safe
//!
//! Percolator's plain scheme writes `V(prev)` in every prewrite: one extra store write per
//! committed cell. Here a commit moves `latest` into `recent` instead, and a prewrite spills
//! `recent` to `V` only when the commit would overflow it, so small values cost one `V` batch
//! per four commits. Invariant 4 holds because versions leave a head only through (a) a
//! prewrite's CAS that empties `recent`, which happens after its `batch_put` of exactly those
//! versions was acknowledged; (b) a roll-forward that would overflow `recent` (a head not
//! written by this protocol), which puts the overflow into `V` before its CAS; (c) GC, which
//! drops only versions older than the newest one at or below the safe point. `recent` entries
//! are the contiguous run of versions just older than `latest`, so a reader at `ts` takes the
//! first of `latest, recent...` with `commit_ts <= ts` and only otherwise scans `V` (the newest
//! entry at or below `ts` there is then the right one: anything newer is in the head). Status
//! checks look for the writer's `start_ts` in `latest`, `recent`, then `V`. A stale copy of a
//! version in `V` (a spill whose CAS then lost) is identical to the head's and harmless.
//!
//! ## Remembered heads (blind writes)
//!
//! A client caches, per cell, the lock-free head its own commit left (`quick_cache`, bounded by
//! an estimate of the bytes held), only for cells written before that commit (the head's
//! `recent` holds the version it superseded): most cells are written once (events, outputs,
//! registry entries), and remembering those would cost a cache insert each and push out the
//! heads worth keeping. A cell's second write then guesses it absent; the CAS fails and returns
//! the head (what the read it replaces would have cost, but one store call more than a
//! remembered head: the cell leaves the batched prewrite for the per-cell path), and that
//! commit remembers it. A prewrite of a cell the transaction did not read uses the remembered
//! head as the CAS expectation instead of reading it (and, with nothing remembered, expects no
//! head at all: right for every new cell, e.g. a loader's events). It is only an expectation:
//! if anyone else wrote the cell, the CAS fails and returns the current head, and the prewrite
//! goes on from it as after any lost CAS. Conflict checks on a stale lock-free head are sound
//! because a head's `latest.commit_ts` and `rollback_ts` only grow (a GC tombstone drops only
//! versions below a safe point, which every live transaction's start_ts is above), so a conflict
//! seen on the stale head is also one on the current head; the guessed empty head passes every
//! check, and its CAS succeeds only if the head is in fact absent, where those checks are exact.
//! Reads never use either.
//!
//! ## Reads
//!
//! Reads at `start_ts`: a lock with `lock.start_ts <= start_ts` is resolved (status via the
//! primary, roll forward or back) or waited on with backoff, never skipped; then the first of
//! `latest, recent...` with `commit_ts <= start_ts`, else the first `V` entry from `!start_ts`
//! (ignoring entries below `floor`). An answer from beyond the head is checked against GC
//! ([`super::gc`]). `scan(table, rows)` pages through the table's heads and applies the same
//! rule per cell, then overlays the transaction's own writes.
