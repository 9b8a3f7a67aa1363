//! # Write-once records: cells without heads
//!
//! Most cells of an event pipeline are written once under a unique key (an event, a joined
//! output) and never contended. A head costs such a cell two CASes (the lock, then its
//! commit) and, on TiKV, two RPCs each. A column declared write-once
//! ([`crate::Client::write_once_column`]) skips the head: each write is an immutable
//! **record** put in the prewrite's `batch_put`, beside the notify keys, and its fate is that
//! of the transaction's primary.
//!
//! ## Layout
//!
//! `W ‖ cell ‖ !start_ts` ([`crate::codec::Space::Once`]; newest writer first) holds
//! [`crate::record::OnceRecord`]: `Pending { primary, ttl_ms, op }` as the prewrite puts it,
//! or `Committed { commit_ts, op }` once resolved (GC rewrites records below its safe point).
//! Values are inline (a record is written once, not rewritten on every CAS as a head is).
//!
//! ## The contract
//!
//! A write-once column is meant for cells written once. Records carry no write-write conflict
//! check of their own, so concurrent writers of one cell must also write a common ordinary
//! cell (a head), so that all but one conflict there: a loader's offset cell, a join's
//! registry entry. A later transaction may write the cell again (an event delivered twice
//! through the same loader, a retention delete): reads answer the newest committed write,
//! and GC keeps only that one below its safe point. The API refuses what it can see: a
//! transaction that read a value in a write-once cell cannot write it, through a record or
//! through the cell's head ([`crate::TxnError::WrittenOnce`]). A column must be declared by every client that reads or
//! writes it (as observed columns are), and a transaction needs at least one ordinary cell
//! (its primary); when it writes only write-once cells, the first one is written through its
//! head instead. Reads of a write-once cell therefore look at both its head and its records.
//!
//! ## Why snapshot isolation still holds
//!
//! - **A record exists before its commit_ts is drawn.** Records are put in the primary's
//!   round, acknowledged before that round's CAS, so before commit_ts (as locks: invariant
//!   2). A reader at `R` that scans the cell's records and finds none from a writer `s <= R`
//!   misses no commit below `R`: a writer whose record appears later draws its commit_ts
//!   after that, above `R` (invariant 1). A record with `s > R` has `commit_ts > s > R` and
//!   is skipped unread.
//! - **A record's fate is its primary's** (invariant 3: one CAS decides). A reader resolves a
//!   `Pending` record as it resolves a lock ([`super::locks`]): committed at `c` (visible if
//!   `c <= R`), rolled back (skipped), pending (it waits; past the record's TTL or the
//!   primary lock's, it fences the primary). A record put before the primary was locked is
//!   case 4 there, exactly as a strong notify key. Decided fates are cached per client, so
//!   the records of one loader batch cost one status read.
//! - **The answer** is the record of the newest committed writer at or below `R` (by
//!   commit_ts), compared with what the cell's head holds at `R`: the newer wins.
//! - **Aborts** delete the transaction's records after fencing its primary; a record left
//!   behind (a crash, a failed delete) is rolled back through its primary by anyone who
//!   meets it, and deleted by GC.
//!
//! ## GC and the evidence of a commit
//!
//! A `Pending` record is decided by the primary's version with its start_ts, which GC may
//! delete once a newer version of the primary is below the safe point. So GC, in the pass
//! that resolves locks (before it deletes anything), rewrites every `Pending` record below
//! its safe point as `Committed { c }` (by a CAS from the pending bytes, so a record another
//! pass rewrote and collected meanwhile stays gone; a page's rewrites go in batched CASes of
//! 256, and a batch that fails goes again request by request, since a whole batch retried
//! fails while any one of its requests does) or, if its writer rolled back, deletes it when a
//! re-read finds it still pending (a "rolled back" answer read after another pass trimmed the
//! evidence is wrong, and that pass rewrote the record first: [`super::gc`], "Decisions on a
//! rolled-back fate"). In the same walk of `W` (one read of each record per pass) it deletes,
//! once a cell's records are all read and their rewrites sent, the cell's committed records
//! older than its newest committed write at or below the safe point (a record decided
//! committed counts at its commit_ts, whichever pass's rewrite landed; records are never
//! primaries, so deleting one early trims no evidence). That write is the newest such
//! record, which stays, a delete too (a tombstone, as a head's: a cell with no record was
//! never written), or a version in the cell's head (a transaction of write-once cells only
//! writes its first through the head), and then every record below it goes. Records are
//! collected before heads in a pass, so a record hidden under a head's delete is gone before
//! that head may shrink to a tombstone, which would otherwise show the record again; a
//! concurrent pass that finds the head already a tombstone finds those records already
//! gone (they lay below that pass's safe point).
//!
//! A reader that decided "rolled back" for a record below the published safe point (read
//! after the status) re-reads the record. Rewritten as committed: GC rewrote it meanwhile, and
//! the reader uses it. Gone: rolled back and deleted, or committed and collected under a
//! newer committed write at or below the safe point. If the safe point is at or below the
//! reader's start_ts, that newer write is visible to the reader too and is the answer (its
//! record existed before its commit_ts was drawn, so before the reader's scan, or it is a
//! head version the reader read), so skipping the gone record is exact; otherwise the reader
//! cannot tell and refuses with `SnapshotTooOld`. Still pending: a late repeat of the
//! writer's own put (a write repeated after a transient error; it lands within the store's
//! request deadline, far inside `gc_lag`), which the reader reports as `CommitUnknown` rather
//! than guess.
//!
//! **Snapshots under GC.** GC deletes a record only below a newer committed write that it
//! keeps: a newer record, or a newer version in the cell's head (`hidden_records`). A read
//! reads the head first, then the records. When a record gives the answer, it is the answer
//! (a collected record is older than one kept). When none does (the head's answer, or
//! nothing), a record committed at or below `R` may have been collected under a head version
//! committed after `R` that the head read came too early to see (hole 7 of
//! `tests/tests/txn_gc_races.rs`: the read answered an older head version, or nothing). So
//! such a read checks the published safe point, read after its last read, against `R`, and
//! refuses with `SnapshotTooOld` if GC passed it (the rule of [`super::gc`] for answers from
//! beyond a head): if the safe point read then is at or below `R`, every pass that deleted a
//! record had a safe point at or below `R`, so the newer write it kept was committed at or
//! below `R` and the read saw it (a record is found; a head version's lock was placed before
//! `R` was drawn, so the head read saw or resolved it). Scans and pages check once after their
//! last read, always. A read answered by a record is never checked. A read whose record scan
//! found one committed above `R`, or one of a writer after `R`, is checked as before.
//! (`tests/tests/txn_once.rs::a_snapshot_gc_passed_is_refused_...`.)
//!
//! ## Cost
//!
//! A write-once cell costs no store call of its own at commit (its record rides in the
//! `batch_put` the prewrite makes for notify keys anyway) and no secondary commit. GC pays
//! later: the first pass above a record's writer rewrites it (a batched CAS), and every pass
//! scans the whole space once, so a pass costs in proportion to the records kept, not to those
//! written since the last one (`docs/perf/photon.md`, "GC passes"). A read
//! costs one scan of the cell's records besides its head (in the same `batch_get` as the
//! other heads), and a read no record answers (a miss) one read of the safe point per
//! `get`, `get_many`, scan or page. Tests: `tests/tests/txn_once.rs` (readers meeting records of running,
//! committed and rolled-back writers; crashes between the records and the primary; GC meeting
//! unresolved records; the bank and model histories with write-once cells).
