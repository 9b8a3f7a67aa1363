//! # Recent writes read from memory
//!
//! A process that loads events and joins them reads back, within milliseconds, the records
//! it just committed: a click join reads the click that notified it and the query it joins,
//! both usually loaded by the same process moments before. Each such read is a head read and a
//! scan of the cell's records (`super::once`, "Cost"): about a fifth of `photon demo`'s CPU.
//! A client can remember its own commits of chosen write-once columns
//! ([`crate::Client::remember_recent_writes`]) and answer them from memory
//! ([`crate::Transaction::get_many_recent`]).
//!
//! ## What a remembered answer is
//!
//! After a commit of this client returns committed at `c`, its writes of remembered columns
//! are remembered with `c` (a bounded map, `ClientConfig::recent_writes_bytes`, oldest
//! insertion evicted first; one entry per cell, which a commit returning later with a lower
//! commit_ts does not replace). A commit that fails or whose outcome is unknown forgets its
//! cells' entries. A read at snapshot `R` answers a remembered cell with its entry if
//! `c <= R`, else from the store.
//!
//! - **It is a committed write visible at `R`.** The entry is remembered only after the
//!   commit point succeeded (or the commit was found committed), with the commit_ts the
//!   commit drew, and `c <= R` makes it part of the snapshot (invariant 1 of
//!   [`super::commit`]). Nothing is remembered of a commit that failed or whose outcome is
//!   unknown.
//! - **It is not necessarily the newest.** Another client's write of the cell committed in
//!   `(c, R]`, or one of this client's not yet remembered (its commit point passed but the
//!   commit has not returned) or evicted before an older commit of the cell returned, is
//!   newer, and an exact read would answer it. So this is a different
//!   read, not a faster `get`: the answer of a snapshot in which that write had not
//!   happened, for the one cell. It is only for readers to whom every committed write of
//!   such a cell is as good as another: the deliveries of one event, every one of which
//!   carries the same event (write-once columns are written once, and a later write is a
//!   redelivery: `super::once`, "The contract"). What the reader decides on (an IdRegistry
//!   entry, an outcome) is read exactly, in the same snapshot, and its conflicts are checked
//!   at commit as always.
//! - **Deletes by other clients.** A delete of the cell by another client is such a newer
//!   write: a remembered value can outlive it in this client's answers for as long as the
//!   entry is remembered. That is the case above; a column whose cells are deleted while they
//!   are still read (a retention that deletes events a join may still read) must not be
//!   remembered. This client's own delete of a remembered cell is remembered as a delete
//!   once its commit returns; until then (its commit point passed, its secondaries are being
//!   committed) the value it replaces may still be answered, as any newer write may be
//!   unseen; a delete whose outcome is unknown forgets the entry.
//! - **GC.** GC deletes a record only under a newer committed write of the cell
//!   ([`super::once`], "GC and the evidence of a commit"); the remembered value was committed
//!   and stays an answer of the same kind. The answer needs no safe-point check: it is
//!   not read from the store.
//! - **The guard of write-once cells** holds: a remembered value read is recorded as read,
//!   so the transaction may not write the cell ([`crate::TxnError::WrittenOnce`]).
//! - **Memory only.** The map lives in the client; a crash loses it, and another process
//!   reads the store. A snapshot below `c` (a transaction started before the commit) reads
//!   the store.
//!
//! ## Cost
//!
//! One map insert per write of a remembered column at commit (the cell and value are moved
//! in, not copied), one lookup (under a read lock) and a copy of the value per read. `photon demo` counts the
//! reads answered and those that went to the store (`events_read_from_memory`,
//! `events_read_from_store`). Tests: `txn::recent` (the map) and
//! `tests/tests/txn_recent.rs` (reads through it against the store's answers).
