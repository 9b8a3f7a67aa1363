//! # What operators read, and the drain check
//!
//! [`crate::admin`] (rendered by `percolator-ctl`): typed reads from any process, none of which
//! resolves, waits on or changes what it inspects: the worker registry (live by heartbeat age,
//! index in the hash split), the backlog per column (one pass from the notify floor: O(live)),
//! notifications, dead letters (id: FNV-1a of the notify key), locks (one pass over the heads:
//! O(cells)), cells with their lock and versions (head, then `V`).
//!
//! ## Drained, seen from another process (`is_drained`)
//!
//! A run in flight always has its notify key in the store (deleted only after the run
//! committed; its chained notifications are put in its prewrite, before that commit), so "no
//! notify key" implies "no run in flight that can still produce work", except that a scan is
//! not atomic: a run finishing during the scan can put its chained key behind the scan's
//! position and delete its own ahead of it. Each heartbeat record carries the worker's count of
//! handled notifications, counted right after a key is deleted; so the check reads the records,
//! scans (any key: not drained), then waits until every live worker has beaten twice after the
//! scan ended, and answers drained only if no worker's count moved and none left or joined with
//! progress.
//!
//! A process that runs workers itself (`photon run --until-drained` confirming its drain in
//! the store) checks those by their own counters (`is_drained_beside`, `Worker::runs_mark`):
//! before the scan, no run in flight and the count of runs started; after it, the same. A run
//! marks its cells in flight before it counts itself, and the count is read before the cells,
//! so a run in flight at any moment of the scan is either seen in flight before it or has
//! moved the count after it. Workers of other processes are still waited for by heartbeat.
//! Keys put behind the scan by writers that are not runs (a sweep, another process's loader)
//! are outside the argument above in both forms of the check: the heartbeat wait gave them
//! time to be run and counted; the local form compares the put counts (this process's, exact,
//! and the other processes' as published, about 50 ms after their puts) before the scan and
//! 200 ms after it, and `photon run` stops its periodic sweep before it checks (its release
//! sweeps instead, after the scan). With no other worker live, the check takes one scan and
//! 200 ms instead of two heartbeats (1-1.5 s at the end of every job before).
//!
//! Tests: `observers/tests/admin.rs` (hand-written records: idle, busy during the check,
//! silent, backlog; local workers: idle without heartbeats, a run in flight, a busy remote
//! worker beside a local one), `ctl/tests/ctl.rs` (`wait` returns only when every row of a two-hop chain
//! is done, with two workers), `photon/tests/until_drained.rs` (Photon's drain adds its loader:
//! `photon::design`).
//!
//! ## Reprocessing existing cells (`crate::renotify`, `percolator-ctl renotify`)
//!
//! For each cell of a column that holds a value, in pages of rows read in one snapshot, it
//! puts a `Committed { c }` notification (`c` the commit_ts of the version read) through the
//! commit path's bucket choice and floor settling (`Client::put_notifications`), then records
//! the last row done in `M renotify/...` by CAS; the record is deleted at the end. A page redone
//! after a crash puts the same keys, which a strong observer's acknowledgment absorbs (`m = c`
//! is already covered) and a guarded one's guard; `force` uses `max(F, c)` with `F` fixed when
//! the pass began, so a forced pass resumed is still one run per cell. It covers every value
//! only once every writer declares the column (a writer that does not declare it commits
//! without notifying). Tests: `tests/tests/renotify.rs`, `ctl/tests/ctl.rs`.
