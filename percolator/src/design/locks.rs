//! # Status through the primary, lock resolution
//!
//! ## Status through the primary
//!
//! Status of transaction `s` with primary `P` (`txn_status`, [`crate::txn::TxnStatus`]),
//! checked in this order on one read of `P`'s head:
//!
//! 1. `P` locked by `s` → pending, or fenced (lock removed, `rollback_ts` raised, one CAS) once
//!    oracle time passes `physical(s) + ttl` ("now" is a fresh oracle timestamp);
//! 2. `latest` or a `recent` entry with `start_ts == s`, or a `V` entry of `P` newer than `s`
//!    with `start_ts == s` → committed at its commit_ts;
//! 3. `rollback_ts >= s` → rolled back (steps 1–2 found nothing, and the primary can no longer
//!    be locked: invariant 3);
//! 4. otherwise the primary may still be in flight (prewrites run in parallel): pending until
//!    the TTL of the lock we met (or the one in the notify key) has passed on oracle time, then
//!    fence with a CAS that raises `rollback_ts` to `s`, expecting exactly the bytes steps 1–2
//!    examined.
//!
//! A failed CAS means the head moved: steps 1–3 run again on the new head. After a successful
//! fence the transaction is rolled back for good.
//!
//! A decided fate (committed at `c`, rolled back) is remembered by the client, keyed by
//! `(s, P)`, and answers later questions without a read: a commit is final (the version at `c`
//! stays `s`'s, whatever GC later removes), and a rolled-back `s` can never lock `P` again
//! (invariant 3). Pending is never remembered. The notifications of one loader batch all name
//! one primary, so a worker reads it once per batch, not once per notification. The committing writer itself uses this check
//! when its lock is gone from the primary (`Aborted` only while no GC can have removed the
//! evidence: [`super::gc`]).
//!
//! ## Waiting on a writer of this client
//!
//! A reader that finds a transaction pending waits and asks again. When the transaction is a
//! commit of the reader's own client in flight (`txn::writers`: registered from before its
//! first prewrite until its commit point is decided), the reader waits for that commit in
//! memory, up to a recheck period (250 ms), instead of polling the primary with backoff
//! (1 ms doubling to 64 ms: with TiKV, where a commit takes several round trips, a reader
//! polled the primary about ten times per wait). The writer records `Committed(c)` in the
//! client's decided fates when its own commit-point CAS applied, then wakes its waiters, whose
//! next check is answered from that record.
//!
//! Safe because it changes only *when* a reader checks again, never what a check concludes:
//! `Committed(c)` is recorded only after the CAS that made it so (the same fact a read of the
//! primary returns, and the decided fates already hold facts read from the store); a writer
//! that rolls back, gives up or loses its outcome records nothing, so its readers read the
//! primary as before; and a writer stalled past its TTL is fenced by the first check after a
//! recheck period, as any writer is.
//!
//! ## Lock resolution
//!
//! A lock of transaction `s` met on cell `X` (by a read, a prewrite, GC or an observer) is
//! resolved through `s`'s status: committed at `c` → roll forward (CAS `X`: our lock → `latest`
//! at `c`; the commit point itself is this step on the primary); rolled back → roll back (CAS
//! `X`: remove the lock and raise `rollback_ts`, a defence: the primary already decides);
//! pending → readers back off and retry (a pending lock is never skipped), a prewrite reports
//! `Conflict` at once (two writers waiting on each other would deadlock until a TTL expires).
//! A committed secondary is rolled forward whatever its TTL. Every step is one CAS from the head
//! just read; a failed CAS re-reads and decides again.
//!
//! In the code (`percolator::txn::locks`: `txn_status`, `resolve_lock`, `roll_forward`,
//! `roll_back`, `fence_primary`), that loop is written once, `Shared::update_head`
//! (`txn/heads.rs`): a decision on the head seen, then one CAS from exactly those bytes, and on
//! a moved head the decision again on the head found. The prewrite and the heartbeat use it
//! too.
