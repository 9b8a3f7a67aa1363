//! # Handling a notification
//!
//! ## One notify key (`observers::process`)
//!
//! The value arrives decoded (a scanner decodes it once where it reads it, a hint carries it
//! typed; a value that does not decode is dead-lettered).
//!
//! - `Strong` → the writer's status via its primary (`Client::txn_status_with_ttl`, the TTL from
//!   the key; `percolator::design::locks`): pending → keep, retry later; rolled back → delete
//!   the key if it still holds that strong record, read again after the answer
//!   (`Client::remove_rolled_back_notification`), run nothing: the answer is wrong only when a
//!   GC pass trimmed the evidence of the commit, and GC rewrites the key as `Committed { c }`
//!   before it trims (`percolator::design::gc`, "Decisions on a rolled-back fate"), so a key
//!   found changed is decided again on what it holds now (`Committed { c }` runs the
//!   observer; gone: handled elsewhere); committed at `c` (or a `Committed { c }` key written by GC, or a
//!   hint's `Committed { c }`: the committer knows its fate) → in a fresh transaction (start_ts
//!   drawn after the status, so above `c`): read the cell (rolling a still-locked secondary
//!   forward), read the acknowledgment cell `(table, row, "_ack/<observer>/<column>")`, `m =
//!   max(c, commit_ts of the visible version)`, run the observer iff `m > ack`, write `ack = m`.
//!   Two concurrent runs for one change conflict on the acknowledgment, so at most one commits
//!   per change; after the commit the exact notify key is deleted.
//! - `Weak` keys run the observer without the acknowledgment check (at least once).
//! - A *guarded* observer ([`crate::Registry::guarded`]) is triggered like a strong one (its
//!   column notifies on every committed write; the writer's fate is decided as above) but runs
//!   without the acknowledgment: its own transaction reads a guard cell and writes nothing
//!   when the change is already handled there, and writes the guard with its effects. Two
//!   concurrent runs that both find the guard empty both write it, so only one commits; a
//!   later run sees it. At most one committed run *with effects* per change holds, for one read
//!   and one written cell (a lock and a commit) fewer per change. Every branch that has an
//!   effect must write the guard, and two runs that could both have an effect must write a
//!   common cell (photon's click join: its IdRegistry entry and outcome, `photon::design::join`).
//!
//! ## Batches
//!
//! [`crate::WorkerConfig::batch_size`] (default 32; 1 disables them): the notify keys of one
//! observer found together (a scan page, the hints that queued up while runs were busy, the
//! cells of one loader commit) go to one run, up to `batch_size` keys of distinct cells
//! (per-cell exclusion keeps a second key of a cell out of the batch); a burst of hinted or
//! relayed keys of more than [`crate::BURST_RUNS`] batches' worth is run a
//! [`crate::BURST_RUNS`]th at a time instead, up to [`crate::WorkerConfig::max_batch_size`]
//! keys a run, when that is above `batch_size`. Each key's fate is
//! decided as above (status lookups at once); the committed ones share **one** transaction that
//! reads every cell and its acknowledgment (at once), computes each cell's `m`, calls
//! [`crate::Observer::observe_batch`] for the cells with `m > ack` (its default calls `observe`
//! for each in order), writes each of those cells' `ack = m`, and commits once; the handled
//! keys are then deleted with one `batch_delete`. Cells of a batch see each other's writes (one
//! transaction): code run for a later cell reads what the run for an earlier one wrote, exactly
//! as if the changes had been handled one after the other, and a write to an observed cell of
//! the same batch puts a new notify key, handled later.
//!
//! A batch that fails (a conflict, the observer's error or panic, any other error but an
//! outage, below) is split in halves and each half handled the same way, down to single cells,
//! which run in `Client::run` (retried on conflicts; an observer failure counts towards the dead
//! letter of that key alone). So one hot cell that always conflicts costs its batch `log2`
//! of the batch's size in extra attempts (up to `max_batch_size` in a burst) and never holds
//! the others back, and a failing cell is dead-lettered alone. Weak observers are batched the
//! same way without acknowledgments: a weak cell whose batch fails runs again in a half, which
//! at-least-once allows. Metrics: `batches` (committed batch transactions of two or more
//! cells), `splits`.
//!
//! ## Why the strong guarantee holds per cell in a batch
//!
//! The argument above is about one cell and the transaction that commits its acknowledgment,
//! and it does not care what else that transaction writes. A batch transaction reads cell `x`'s
//! acknowledgment at its start_ts and writes it iff it runs the observer for `x`; any other run
//! for the same change of `x` (another worker, another batch, a retry or half of this one) also
//! reads and writes `ack(x)`, so snapshot isolation lets at most one of them commit
//! (write-write conflict on `ack(x)`), and a run that starts after one committed reads
//! `ack(x) >= m` and does not run. The batch commits atomically, so for every cell of it either the run
//! and its `ack` are both visible or neither is. A split reruns the halves in fresh
//! transactions that read the acks again, so even after an error whose outcome is unknown (the
//! batch may have committed, or crashed leaving locks) a half finds the committed cells covered
//! and runs only the others. Notify keys are deleted only after the commit, so a crash between
//! the commit and `batch_delete` leaves keys whose acks cover them (handled later as
//! duplicates).
//!
//! Tests (`tests/tests/observer_batches.rs`): a conflict inside a batch, a crash at each step of
//! a batch's commit (worker killed, another finishes: each change's committed runs counted in
//! the store), a hot cell that always conflicts, a failing cell dead-lettered alone.
//!
//! ## Errors
//!
//! [`crate::ObserverError`] is the error type of the observer's transaction body (it implements
//! `percolator::txn::RunError`), so `Client::run` retries the transaction errors inside it and
//! hands `ObserverError::Failed { message, source }` back as the author built it
//! (`ObserverError::failed_with(message, source)` keeps a boxed cause); a dead letter keeps the
//! rendered chain (`ObserverError::render`).
