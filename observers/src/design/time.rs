//! # Event time: low watermarks and timers
//!
//! What [`crate::time`] promises, and why it holds. State lives in ordinary transactional
//! cells (`_watermarks`, `_pending`, `_timers`), so every step below is a snapshot-isolated
//! transaction: nothing here relies on clocks, on the order of raw store calls, or on a scan
//! racing writers.
//!
//! ## Definitions
//!
//! - A **timed change** of column `c` is a committed write of a cell of `c` made in a
//!   transaction that also wrote the cell's **pending mark** (`_pending`, keyed by column and
//!   row, holding the least event time written there and not yet observed). Writers:
//!   loaders (for the columns their mapping declares timed) and observers
//!   ([`crate::time::set_timed`]).
//! - An observer's run **takes** the mark ([`crate::time::take`]): it reads and deletes it in
//!   the run's transaction. The run commits, or the deletion does not happen.
//! - A **source** (a loader) stores per timed column its watermark `s` ([`SourceMark`]):
//!   a promise that it loads no more records below `s` except ones it lets be late (bounded
//!   out-of-orderness: `s` = latest event time loaded minus the allowed out-of-orderness;
//!   `u64::MAX` once a bounded input ended). A source's stored watermark never moves back
//!   ([`crate::time::publish_source`] keeps the larger), and its idle flag is set or
//!   cleared only by a writer at that watermark or past it (of two loaders of one input,
//!   the one behind speaks for nothing the other may still load).
//! - The **computed** watermark of `c` at snapshot `T`: `min(S, P)`, where `S` is the least
//!   stored watermark of the sources of `c` that are not idle (the least of all when all
//!   are idle) and `P` the least event time among the pending marks of `c` at or above the
//!   published watermark (a by-time index makes it one range read), both read at `T`. A
//!   mark below the published watermark is a late change: it holds nothing, the watermark
//!   passed it already.
//! - The **published** watermark `W(c)` is a cell that [`crate::time::advance`] raises to
//!   the computed value in the same transaction that computed it, and never lowers.
//!
//! ## The promise
//!
//! **`W(c)` never moves back and never passes a change of `c` that was pending in the
//! snapshot it was computed from; a change taken by a run whose snapshot shows `W(c)` above
//! its event time is delivered late.** So a timer at event time `t` fires (when `W(c) > t`)
//! only after every change of `c` at or below `t` that committed before the publishing
//! advance's snapshot has been taken.
//!
//! A change that commits after that snapshot with an event time at or below `t` (a record
//! its loader let be late, an output an observer wrote below its input's time) may be taken
//! by a run whose snapshot still shows the older `W(c)`, and so be told it is on time while
//! the timer fires. State a firing must see is therefore guarded by a write conflict: the
//! run that adds to a window writes a cell the window's firing deletes (it sets the window's
//! timer again), so one of the two retries and sees the other: the firing counts the change,
//! or the run sees `W(c)` past the timer and treats the change as late
//! (`app/examples/window_count.rs`). State guarded otherwise (another row's timer, a plain
//! read of `W`) does not get this.
//!
//! A run may skip that write when its change *held* the watermark ([`Change::held`]): not
//! late, and at or above every source's stored watermark in the run's snapshot. Then every
//! advance either saw its mark (committed, not yet taken: `P` is at most its event time)
//! or ran before the mark committed, when each source's value was no larger than now (a
//! source's value only grows; idle or not, `S` is one of them), so no published value
//! passed the event time before the run commits, and no timer at or above it fired.
//!
//! [`Change::held`]: crate::time::Change::held
//!
//! ### Why
//!
//! 1. *Pending at the snapshot.* Let the advance run at start `T` and a change with event
//!    time `e` be committed before `T` and not observed at `T` (no run that took its mark
//!    committed before `T`). Then its mark (or a smaller one of the same cell) is in the
//!    snapshot, so `P <= e` and the computed value is at most `e`. Snapshot isolation
//!    makes the read of all marks one consistent cut: no mark can be "missed" because it
//!    moved while a scan ran, the case that makes raw-key scans unsound (MillWheel's
//!    zombie writer: a notification committing after a scan).
//! 2. *Committed after the snapshot.* Lateness is decided at the run, not at the writer:
//!    the run that takes a change's mark does so in a snapshot after the change committed,
//!    reads `W(c)` there, and `W` only grows; so a change below a value some advance
//!    published before it was taken is delivered late, never silently counted as on time.
//!    What the sources' watermarks buy is that such changes are rare: a loader writes after
//!    `T` only records at or above its stored watermark (or ones it lets be late), and a
//!    run writes outputs at or above the event time of the change it takes, whose mark was
//!    in the snapshot (1), so the computed value is at most their event time.
//! 3. *The publish.* The advance writes `W(c)` in the transaction that read the marks and
//!    sources; a run that commits between its start and commit took a mark the advance read
//!    (so the computed value was at most that event time) or wrote a new change (2).
//! 4. *Never back.* The published cell is written only larger (read and written in one
//!    transaction; two advances at once conflict on it, and the loser retries and re-reads).
//!
//! ### Crashes, lost replies, stalled workers, GC
//!
//! - A writer that crashes before its commit point leaves a lock on its mark or nothing. An
//!   advance that meets the lock waits for it (until its TTL, then rolls it back, like any
//!   reader): an uncommitted mark never holds the watermark once resolved, and advances stall
//!   meanwhile.
//! - A lost reply of a commit is the transaction protocol's (`percolator::design::commit`):
//!   the mark is committed or not with the change, atomically.
//! - A stalled or crashed worker leaves the mark in place: the watermark waits for it (as
//!   MillWheel's does for pending work), which is the point. A change whose notification is
//!   dead-lettered (its observer failed `max_failures` times) has its mark set aside
//!   (`_pending_dead`) in the same step: the watermark does not wait for an operator. A
//!   replay marks it again at its event time, so its run is told it is late if the
//!   watermark passed it meanwhile; a discarded letter leaves the set-aside mark, which
//!   holds nothing.
//! - GC: marks and watermark cells are ordinary cells; a read in a snapshot is exact or
//!   `SnapshotTooOld` (`percolator::design::gc`), and the advance is a short transaction.
//!
//! ## Timers
//!
//! A timer is two cells: a queue entry (`q` ‖ observer ‖ kind ‖ time ‖ row ‖ tag, so a scan
//! finds due timers in time order) and an index entry by row and tag (kind and time).
//! [`crate::time::set_timer`] writes both (deleting a previous queue entry of the tag);
//! a firing ([`crate::time::fire_due`]) is one transaction that re-reads both, checks that
//! no earlier timer of the same kind waits on the row, deletes both and runs the handler.
//!
//! - *At most one committed firing per set timer*: two firings of one timer both delete its
//!   cells, so snapshot isolation commits one; a later firing finds it gone. A set that
//!   races a firing writes the same cells, so one of them retries and sees the other (an
//!   observer that adds to a window and re-sets the window's timer either lands before the
//!   firing, which then counts it, or after it, when it reads the watermark past the timer
//!   and treats its change as late).
//! - *Time order per row*: a firing of a row's timer at `t` commits only when its
//!   snapshot holds no timer of the row's (same kind) at a time below `t`; the earlier
//!   timer's own firing deletes its index cell, so the later one sees it gone only in a
//!   snapshot after that commit. So the timers a row holds at once fire in time order; a
//!   timer set at a time the watermark has already passed fires at the next pass, after any
//!   of the row's timers that fired before it was set.
//! - *Survives crashes*: timers are cells; a driver that dies leaves them for the next pass
//!   of any process.
//! - *Fires when the watermark passes*: event-time timers below the published watermark
//!   (strictly), oracle-time timers below the oracle's physical time in the pass's
//!   snapshot.
//!
//! ## Who fires
//!
//! A driver started on a worker ([`crate::time::TimerDriver::start_on`]) fires only the
//! timers of rows in the worker's share of the hash split, the split its scanners use for
//! notify keys: timers are split across the workers of a namespace and handed over with
//! the shares when a worker leaves or stops heartbeating. The split only saves work: two
//! drivers that both take a timer (a share changing hands) still commit one firing.
//!
//! ## Chains of timed columns
//!
//! A column `c` written by observers of another column `u` (a later stage: a window's
//! output, a join's result) has no source of its own; it declares `u` its **upstream
//! column** ([`crate::time::declare_upstream`], a cell in `_watermarks`). Its inputs'
//! watermark is then the least of its sources' and, per upstream column, `u`'s watermark
//! computed in the same snapshot (`min(S(u), P(u))`, recursively; a cycle adds nothing).
//! The author's side of the contract: a run that takes a change of `u` at event time `e`
//! writes its changes of `c` as timed changes ([`crate::time::set_timed`]) at or above `e`,
//! in its own transaction.
//!
//! *Why it holds.* A change of `c` that commits after the advance's snapshot `T` with event
//! time `e'` comes from a run that took a change of `u` at `e <= e'`. That change of `u` was
//! pending at `T` (its mark is in the snapshot, so `P(u) <= e` unless it is late at `u`,
//! below `W(u)`) or committed after `T`, when it was loaded at or above `S(u)` as of `T`
//! (sources only grow; or it is late at its source) or written by a run of a column further
//! up (the same argument, one stage up). So every change of `c` that commits after `T` is at
//! or above the computed value, or descends from a change that was late somewhere: it is then
//! delivered late (point 2 above), never silently. A run of `u` that commits before `T`
//! took its mark and wrote `c`'s mark in one transaction, so the snapshot shows the
//! change pending at `c` (1).
//!
//! A computed upstream value is not a stored promise: a change late at its source but at or
//! above `W(u)` lowers `P(u)`. So a change of a column with upstream columns is never
//! [`Change::held`]; its runs take the write conflict with the window's firing instead.
//!
//! ## Not done yet
//!
//! Pending marks are read by a scan of the column's marks (bounded by the backlog) each
//! advance. The loader publishes its watermark in its own transaction after batches
//! commit, not in each batch's (`app::load`'s watermarks module says why that is enough).
//!
//! [`SourceMark`]: crate::time::SourceMark
