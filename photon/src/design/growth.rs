//! # Spaces that grow with the history
//!
//! Finding work must cost in proportion to what is live, not to what was ever handled. Where
//! each space stands:
//!
//! - **Notify space**: bounded by the backlog's age (buckets and the notify floor:
//!   `percolator::design::notify`).
//! - **Pending clicks**: bounded by the parked-click index, below.
//! - **Version GC**: below.
//! - **IdRegistry**: one entry per click id and an index row per entry by event day; `photon gc
//!   --retention-days N` drops, through the index, the entries of whole days below a boundary
//!   that never moves back, one day later than the boundary ([`super::join`]).
//! - **Wake checks** (`wakechecks/<file>@<offset>/queries`): one per loaded batch of queries
//!   (about one per 2,000 lines at saturation), deleted transactionally by its observer, which leaves a head
//!   (shrunk to a tombstone head by GC). Nothing scans the table (checks are found through their
//!   notify keys), so it costs storage, about a hundred bytes per batch; a raw purge of those
//!   heads behind the GC safe point, like the parked index's, is not written.
//! - **Joined output and outcomes**: the product's output, grows with it by design; only
//!   `verify` and `export` read it, page by page in bounded memory.
//! - **Loader offsets**: one cell per input file.
//! - **Worker registrations** (`M workers/<id>`): deleted on a clean shutdown; a killed worker's
//!   record stays (ignored once its heartbeat is stale), and so does its hint address
//!   (`M hint-addrs/<id>`, a few dozen bytes, read by every loader's relay each second and
//!   ignored beside a stale heartbeat).
//! - **Dead letters**: kept until replayed or dropped by an operator.
//! - **Memory**: the embedded store's caches (knobs: `percolator::design::kv`, "Memory"), each
//!   client's remembered heads (`ClientConfig::head_cache_bytes`, 16 MiB) and, in a process
//!   that runs a pipeline, its remembered loads of events (`ClientConfig::recent_writes_bytes`,
//!   64 MiB: [`super::join`], "Events read from memory"), the hint channel
//!   (4,096 commits), the workers' handled-recently set (pruned after 5 s) and retry ledger
//!   (bounded). The heap profile: `docs/perf/memory.md`.
//!
//! ## The parked-click index ([`crate::parked`])
//!
//! A woken row of `pending/<query_id>` is deleted transactionally, which leaves its head (a
//! delete version, shrunk to a tombstone head once GC passes it), so a sweep that scans the
//! pending table would walk every query that ever had a parked click. The sweep reads an index
//! instead: each park also writes `parked/<bucket:012>/<query_id>/<click_id>` in the park's
//! transaction, the bucket being a second, and a cursor `control/parked/cursor` says below which
//! bucket every index cell has been handled. A pass reads the cursor `c` in a snapshot at `N`
//! (`n` = the second of `N`), reads the index cells of buckets `[c, n)` page by page, handles
//! each (below), and moves the cursor to `n` (a transaction writing the maximum). A pass reads
//! the cells that fell due since the previous pass and the pending rows they name: cells below
//! the cursor are never read again, whatever was parked and woken before.
//!
//! - *Filed at the commit deadline.* A cell's bucket is at or after the latest second at which
//!   its transaction can commit (`Transaction::commit_deadline_ms`: start_ts plus
//!   `max_lifetime`; a later commit_ts is refused, invariant 5 of
//!   `percolator::design::commit`), and at or after the click's horizon for a refiled click. So
//!   a transaction that writes a cell of bucket `b < n` commits at a physical time `<= b < n`,
//!   before `N`, or never: the snapshot at `N` sees every cell below `n` that will ever exist (a
//!   committed writer's lock met by the scan is rolled forward like any read). Nothing can
//!   appear behind the cursor, and parks do not read the cursor (no extra read, no write-write
//!   race with the sweep). The cost: a parked click is first looked at `max_lifetime` (120 s)
//!   after its park, so a wake-up the observers lost (a dead-lettered wake run) is recovered
//!   after two minutes, and a click whose horizon is shorter than that expires up to that late.
//! - *Handled.* In the pass's snapshot, a cell whose click is no longer on its query's list is
//!   stale (it was woken; a later park of the same click files a cell of its own, and the list
//!   and the cell are written by one transaction, so a cell visible at `N` has its park visible
//!   too). Otherwise a transaction per pending row (`sweep_row`, retried on conflicts) notifies
//!   every click of the row whose query arrived or whose horizon passed, takes them off the
//!   list, and files each due click still waiting again at its horizon (a bucket above `n`, its
//!   transaction starting after `N`). It writes nothing when nothing changes. Concurrent
//!   sweepers, parks and wake runs conflict on the row, so a click is woken once.
//! - *Crash between steps.* The cursor moves only after every cell below its new value was
//!   handled; a pass that fails moves it to the bucket where it failed at most, and a pass
//!   killed anywhere leaves it where it was. Redoing a row is harmless (a stale cell stays
//!   stale, a refile files one more cell, which is stale once the click is woken). Concurrent
//!   passes (one sweeper per `photon work` process) each move the cursor only over what they
//!   handled, and the cursor never moves back.
//! - *The horizon.* Expiry is decided by the sweeper's `--horizon-secs` when a cell falls due,
//!   in event time (the query logs' published watermark, `crate::expiry`); a click not yet
//!   expired is refiled at its horizon (in a backfill, where the horizon is long past on the
//!   wall clock, at its next commit deadline: it is looked at again every transaction
//!   lifetime until the loaded logs pass it), so a horizon longer than the parker's only
//!   delays the look.
//! - A store with no cursor (new, or written before the index) gets one full pass over the
//!   pending table, filing every waiting click, and then a cursor at 0.
//! - *Deleting handled cells.* A transactional delete would leave a head per cell, so the GC
//!   pass (`photon::maintenance::gc_pass`, right after `Client::gc`) deletes the index cells of
//!   buckets below both the cursor and its safe point outright, with raw deletes of their heads,
//!   versions and values (`parked::purge_handled`). No pass reads below the cursor again (a pass
//!   that read an older cursor finds fewer cells, all handled), and below the safe point no
//!   transaction that could write or lock such a cell is left: a transaction filing bucket `b`
//!   commits by `b`, GC has resolved every lock below its safe point, and no transaction older
//!   than the safe point can still lock anything (its lifetime is shorter than `gc_lag`).
//!   Metric `photon_gc_parked_keys_deleted_total`.
//! - Tests (`photon/tests/parked.rs`): after 1,000 clicks parked and woken, 20 passes scan at
//!   most 20 pairs, and a GC pass then leaves only the 10 refiled cells of the index; orphan
//!   clicks parked while sweeps run back to back, another sweep is killed mid-pass at random
//!   moments and store calls are delayed at random all end expired (with cells filed at their
//!   transaction's start second instead of its commit deadline the test fails); a store without
//!   the index gets its full pass.
//!
//! ## Version GC ([`crate::maintenance`])
//!
//! `Client::gc` (`percolator::design::gc`) trims `recent` lists and `V` versions; `photon work`
//! runs it every `--gc-every-secs` (600 s; 0 turns it off) at a safe point `--gc-lag-secs` (600
//! s, at least the client's `gc_lag`) behind the oracle, and with `--registry-retention-days N`
//! also drops IdRegistry days as `photon gc` does (`photon demo --duration` runs run it too).
//! Several workers of a namespace take turns through a lease cell (`control/gc/lease`: holder
//! and expiry, taken in a transaction): one pass at a time. The lease saves work only;
//! concurrent GCs are safe anyway (`percolator::design::gc`). A GC pass walks every head of the
//! namespace, hence the long period. Metrics: `percolator_gc_passes_total`, `_skipped_total`
//! (lease held elsewhere), `_failures_total`, `_versions_deleted_total`,
//! `_heads_tombstoned_total`, `_locks_resolved_total`, `_records_resolved_total`,
//! `_records_deleted_total`, `percolator_gc_safe_point_timestamp_seconds`,
//! `percolator_gc_last_pass_seconds` (a pass reads every record and head kept, so it grows
//! with the history: `docs/operating.md`), and Photon's
//! `photon_gc_registry_keys_deleted_total`. Tests:
//! `photon/tests/maintenance.rs` (two workers' GC tasks leave a 200-times rewritten cell with at
//! most one `V` entry and no old IdRegistry day, every read still right; GC passes racing each
//! other and a writer: reads never go back and the final value is the number of increments).
//! Photon writes most cells once; the cells rewritten per event are the loader's offset cells
//! (one version per batch), pending rows and the sweep's cursor.
