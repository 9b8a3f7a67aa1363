//! The TiKV backend in a real cluster's weather: what the client does, what the adapter adds, and
//! why repeating any call is safe. The adapter's rules (which client writes which key, scans per
//! region, limits, batched CAS) are in the [crate documentation](crate).
//!
//! ## The weather, call by call
//!
//! Transient errors are classified ([`crate::RetryCause`]) and every call retries them with one
//! policy: exponential backoff from `retry_base_delay` (5 ms) doubling to `retry_max_delay`
//! (500 ms), each delay drawn between half and all of the step (equal jitter), until the call's
//! `op_timeout` leaves no room for another attempt; then `Unavailable`.
//! [`crate::TikvKv::retry_counts`] returns the retries by cause (and calls that gave up); each
//! retry is logged at `debug`, giving up at `warn`.
//!
//! | weather | what the client does | what the adapter does |
//! |---|---|---|
//! | `ServerIsBusy` (overloaded TiKV; nothing applied) | returns it at once | retries with backoff (cause `ServerBusy`) |
//! | `NotLeader` with a leader hint | updates its cache, resends at once | nothing to do |
//! | `EpochNotMatch`, `RegionNotFound`, `StoreNotMatch`, `KeyNotInRegion`, stale command (splits, merges, moves) | drops the cached region, backs off, reloads from PD, re-shards batches per region | sizes that backoff to `op_timeout`; retries what is still left (cause `Region`) |
//! | reply lost / connection broken / RPC over `rpc_timeout` (the write may have applied) | retries itself, except in `scan`/`scan_reverse` | retries (causes `Transport`, `Deadline`), including reverse scans |
//! | any region error (`ServerIsBusy` included), key error or transport failure of the adapter's own requests (`RawBatchScan` of `scan_many` in the last region, `RawCompareAndSwap`, `RawBatchPut`, `RawGet` and `RawBatchGet` in one region), or a PD lookup or answer slower than its budget (`rpc_timeout`, at most half of what the deadline leaves) | not involved | drops the remembered region (kept when the store was only busy; the store's address and channel go too after a failed call or connection, or a request unanswered within the budget), sends the same request through the client at once, within the call's deadline ([`crate::TikvKv::direct_batch_scans`], [`crate::TikvKv::direct_compare_and_swaps`], [`crate::TikvKv::direct_puts`] and [`crate::TikvKv::direct_reads`] count these); a CAS or put whose reply was lost may have applied, and resending it is the hazard below |
//! | PD unreachable | fails region lookups | retries (cause `Transport`) |
//! | cluster down for longer than `op_timeout` | keeps retrying | `Unavailable { op }` at the deadline |
//!
//! Timeouts: every call runs under `op_timeout` (default 20 s), each RPC under `rpc_timeout`
//! (2 s), connecting under `connect_timeout` (10 s). The client's own backoff
//! (`RawClient::with_backoff`) is jittered and sized so its delays add up to `op_timeout` (at
//! most 40 attempts: it doubles without bound), instead of giving up on region errors after
//! about 1.5 s (`DEFAULT_REGION_BACKOFF`: 10 attempts).
//!
//! ## Why every call may be repeated
//!
//! Reads are idempotent; a `put`/`batch_put` repeated is indistinguishable from the first
//! attempt arriving late (the contract orders nothing between concurrent plain writes of a key),
//! and a partly applied `batch_put` (split per region, parts sent concurrently) is completed by
//! repeating it whole; deletes of absent keys are no-ops. A CAS repeated after a lost reply is
//! the retry hazard (`percolator::design::kv`): if the first attempt applied, the repeat answers
//! `swapped = false` with `previous == new` (read as success by callers with unique values, or
//! by the adapter with `unique_cas_values`), or, if another writer replaced our value in
//! between, with that writer's value. A failed CAS therefore means "re-read and decide", never
//! "nothing was written": percolator's commit point does exactly that (the status of the
//! primary), and the conformance `cas_counter` check keeps the counter's history in its values
//! to decide the same way.
//!
//! In the weather tests almost every region error and lost reply is absorbed by the client's
//! own retries (sized to `op_timeout` as above); what reaches the adapter is `ServerIsBusy` and
//! reverse-scan transport errors.
//!
//! Callers ride on these retries: `photon load`, for one, has no retry loop of its own, so an
//! outage longer than `op_timeout` still ends it (a rerun resumes from its offsets).
//!
//! ## Limits and switches
//!
//! - Size limits (`max_key_bytes`, `max_entry_bytes`) are checked per pair, counting 1 KiB for
//!   its raft command ([`crate::ENTRY_OVERHEAD_BYTES`]): the client splits batches into
//!   requests of about 16 KiB, so only a single pair can reach TiKV's 8 MiB raft entry limit.
//! - `reverse_scan_fast_path = false` pages every reverse scan's range forward with key-only
//!   scans (the fallback for a part whose answer fails a check, used for the whole range).
//!
//! ## Connection details
//!
//! TLS: `TikvConfig::tls` (CA, certificate, key paths) goes to
//! `tikv_client::Config::with_security`. The client's gRPC decode limit is raised to 256 MiB
//! (`max_message_bytes`; its default of 4 MiB would refuse a scan page of large values).
//! `percolator_cli::store::open_store` opens any `--store` (`embedded:`/`memory` through the
//! core, `tikv:PD,...` through [`crate::TikvKv`]); it is async because connecting to PD is.
//!
//! ## Tests
//!
//! `tests/tests/tikv_regions.rs` (1,024 regions: a page up to a region's keys costs one
//! `RawBatchScan`, and one PD lookup only when its region is not cached),
//! `random_forward_scans_with_stale_cached_regions_match_a_model` (K3 with a cache that never
//! expires under churn), `random_reverse_scans_in_the_weather_match_a_model`,
//! `reverse_scans_below_a_boundary_that_merges_and_splits_hold_every_key` (PD's two answers
//! straddling a merge: a quarter of its scans lost their top keys before the check),
//! `reverse_scans_while_keys_are_deleted_are_never_short` (no short answer while keys lie
//! below: it fails when paging answers a full window without reading again),
//! `batch_cas_counters_with_one_reply_in_ten_lost`, the conformance suite and every transaction
//! test on minitikv, quiet and in the weather (`percolator::design::testing`).
//! `photon/tests/multiprocess.rs` repeats its chaos run (SIGKILLed workers and oracles) on a
//! minitikv with three stores, 64 regions, size splits at 64 KiB that spread photon's keys,
//! churn every 50 ms and seeded faults; every click is joined exactly once.
