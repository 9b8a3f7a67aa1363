//! How minitikv serves a request, what it checks like TiKV, and what it does not emulate. The
//! overview and the configuration are in the [crate documentation](crate).
//!
//! ## Structure
//!
//! tonic servers (the tonic 0.10 / prost 0.12 stack `tikv-client` already uses) answer the PD
//! calls and the TiKV raw RPCs. Messages are generated at build time from protos vendored in
//! `minitikv/proto/` (copied from `tikv-client` 0.4.0, unchanged) with `protoc` from
//! `protoc-bin-vendored`; the two services are declared in `build.rs` with only the methods
//! served, so anything else answers `UNIMPLEMENTED`. One service per file:
//! `minitikv/src/service/pd.rs` (PD) and `service/kv.rs` (the TiKV raw API, with the request and
//! response shapes in `service/raw.rs`), over the state in `service/mod.rs`. Every raw request
//! takes one path, `StoreService::serve`: injected faults, the routing checks below, the column
//! family check, then the request's own work, whose failure the response type maps as TiKV does
//! (its `error` string, or a gRPC status for responses without one), then maybe a lost reply.
//!
//! ## Regions and stores
//!
//! Splits keep the id on the right half and bump both epochs' versions; a merge keeps the left
//! region and bumps its version; leader moves keep the epoch. The churn task splits at a key of
//! the region's data, as TiKV splits a grown region. With several stores (store 1 listens beside
//! PD, the others on ephemeral ports of the same IP, all in one process over one data store),
//! every region has a peer on every store; leaders start round-robin.
//!
//! ## Checked like TiKV
//!
//! A request naming an unknown region gets `region_not_found`, the wrong store
//! `store_not_match`, a follower `not_leader` with the leader, an old epoch `epoch_not_match`
//! with the current region and its left neighbour, a key outside the region
//! `key_not_in_region`; a scan's seek key (`start_key`: a reverse scan's upper bound) must lie
//! in the region, its end included, as in TiKV, so an empty upper bound is refused beyond the
//! first region. Scans are cut to the region. Keys over 8 KiB are refused, and writes over 8 MiB
//! get `raft_entry_too_large`. PD answers `GetRegion`/`GetPrevRegion`/`ScanRegions` from the
//! layout. Absent keys are answered with `not_found`, batch gets return only found keys, CAS
//! answers `previous_not_exist` / `previous_value` / `succeed`.
//!
//! ## Faults
//!
//! Per request, a delay before it, then `ServerIsBusy`, then an injected region error
//! (`NotLeader` naming the leader, `EpochNotMatch`, `RegionNotFound`), and after a request
//! applied, its reply replaced by gRPC `UNAVAILABLE` (the retry hazard). Decisions come from a
//! splitmix64 stream of the seed (the sequence is fixed; which request gets which decision
//! depends on arrival order). `RunningServer::fault_counts()` counts them, and the stale routes
//! refused. `Faults::weather(seed)` is the tests' weather: 0.1% busy, 1% region errors, 0.5%
//! lost replies, 1% delays up to 5 ms. `Faults::applied_region_error`
//! (`--applied-region-error-rate`, not part of the weather) applies a write and then answers
//! `NotLeader`/`EpochNotMatch`, so the client resends an applied write
//! (`tests/tests/tikv_applied_errors.rs`).
//!
//! ## Regions and latches, as TiKV
//!
//! - Four regions by default (split at `f`, `m`, `s`; `ServerConfig::single_region()` /
//!   `--single-region` for one). Regions split as data grows, as TiKV's split checks do
//!   (`SplitPolicy`: checked after about a sixteenth of the split size is written, split past
//!   1.5 x the split size or the split keys; default 8 MiB like the docker configuration,
//!   `--region-split-size`, 0 turns it off).
//! - A CAS reads, compares and writes under its key's latch, and so do writes sent in atomic
//!   mode (`for_cas`); plain writes take no latch, as in TiKV's raw put. So a plain write can be
//!   lost under a concurrent CAS here too (`RunningServer::hold_cas()` makes the race
//!   deterministic in tests), and `RunningServer::write_kinds()` records which kinds of write
//!   each key got: `photon/tests/write_kinds.rs` checks that no key of a photon run gets both.
//!
//! ## Absent
//!
//! - Not emulated: replication and raft (a region's data is the one store's, whichever store
//!   leads), elections without a leader, load-based splitting, TTL (refused),
//!   column families other than `default` (refused), the API v2 keyspace codec, coprocessor,
//!   checksum, transactional KV, PD followers. The TSO answers from the wall clock with a logical
//!   counter and is not persisted: it is there because the client opens the stream on connect,
//!   not as the project's oracle. Besides injected lost replies, a client `rpc_timeout` below
//!   the server's latency (e.g. 500 us) provokes the client's real retries.
