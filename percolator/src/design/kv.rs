//! # The raw store contract and its backends
//!
//! ## The contract ([`crate::kv::RawKv`])
//!
//! An async trait, object-safe (`Arc<dyn RawKv>`) through `async-trait`:
//!
//! | call | semantics |
//! |---|---|
//! | `get`, `batch_get` | `None` = absent; an empty value is `Some(vec![])` |
//! | `put`, `batch_put`, `delete`, `batch_delete` | durable on return; batches are not atomic across keys |
//! | `scan(range, limit, order)` | `[start, end)`, `end: None` = unbounded; `1 <= limit <= 10240`; reverse starts just below `end` |
//! | `compare_and_swap(key, expected, new)` | atomic for its key; returns the value found and whether it swapped; never deletes |
//! | `scan_many(ranges, each_limit)` | each range's first `each_limit` pairs ascending, answers in the order of `ranges` (disjoint, any order); the default scans them one by one, TiKV sends them in one `batch_scan` (one RPC per region holding some) |
//! | `batch_compare_and_swap(Vec<CasRequest>)` | each request atomic for its own key, as a single CAS; not atomic across keys; outcomes in request order; one key twice → `InvalidArgument` before anything applies; on `Err`, any subset of the requests may have applied (each wholly or not at all) |
//! | `batch_put_and_compare_and_swap(pairs, requests)` | a `batch_put` then a `batch_compare_and_swap`, in one call: no swap is seen without every pair; a key put and swapped, or swapped twice → `InvalidArgument` before anything applies; on `Err`, any subset of both may have applied; the default makes the two calls, the embedded store writes one fjall batch |
//! | `sync` | everything acknowledged before is on disk (an `fdatasync` of an embedded store whatever its durability; nothing for TiKV, which syncs its Raft log before acknowledging) |
//!
//! [`crate::kv::scan_all`] and [`crate::kv::RangePager`] page through ranges of any size
//! (forward: next start is `last ‖ 0x00`; reverse: next end is `last`). The limit of 10,240 and
//! "CAS never deletes" come from TiKV raw mode through `tikv-client` 0.4.0, so code written
//! against the contract runs on both backends.
//!
//! `batch_compare_and_swap` has a default (the single CASes run concurrently, all awaited, the
//! first error returned), so every backend has it; the embedded store, memory and TiKV override
//! it. A batch that returned `Err` is read as "some of these CASes may have happened": the
//! caller re-reads what it cares about, exactly as after a lost single CAS; the retry hazard
//! applies per request.
//!
//! The public error enums of the library crates (`KvError`, `TxnError`, `RecordError`,
//! `OracleError`, `WorkerError`, ...) are `#[non_exhaustive]`: a new variant is not a breaking
//! change, so code matching them outside their crate keeps a `_` arm.
//!
//! ## The retry hazard
//!
//! A CAS whose reply is lost may be sent again by the transport (`tikv-client` does;
//! `kv::FaultyKv` injects it in tests). If the first attempt applied, the repeat finds
//! our own new value and answers `swapped = false` with `previous == new`; if another writer
//! replaced our value in between, it answers with that writer's value. A failed CAS therefore
//! means "re-read and decide", never "nothing was written". Every value this project CASes never
//! repeats (a head's `seq` grows on every CAS, the oracle record's `seq` likewise, the GC safe
//! point and the notify floor only grow), so "not swapped, but `previous` is exactly what I
//! sent" is read as our own applied swap, never someone else's (no ABA). Where a re-read cannot
//! decide (the lock of a committing transaction gone from its primary), the writer asks the
//! status of its own transaction ([`super::locks`]). A CAS failing with `Unavailable` has an
//! unknown outcome: re-read.
//!
//! ## Embedded backend ([`crate::kv::EmbeddedKv`])
//!
//! Engine: **fjall 2.x**, a pure-Rust LSM tree (no C toolchain or system library, journal with
//! configurable persistence, ordered range iteration both ways). Choices:
//!
//! - **Durability.** fjall appends every write to its journal and, with
//!   `manual_journal_persist` off (the default we keep), flushes the journal to the OS before
//!   the write returns, so an acknowledged write survives `kill -9`. `Durability::Fsync` also
//!   syncs the journals before acknowledging (power-loss safe), as `RawKv::sync` does in
//!   either mode: the journal's buffer to the OS, then an `fdatasync` of every file of
//!   fjall's journals directory and of the directory, without fjall's journal mutex
//!   (`Keyspace::persist(SyncData)` holds it through the fsync, and every write takes it:
//!   the oracle's sync of its window, every 1.5 s, stalled every writer for as long as the
//!   disk took). Why that covers every acknowledged write (a deleted journal's writes are
//!   in fsynced segments): `EmbeddedKv`'s `sync_journals`. A failed sync is kept: every
//!   later write and sync fails with it (Linux reports a lost writeback once, so a later
//!   sync through a new descriptor would succeed without the lost pages), as fjall refuses
//!   writes after a failed `persist` of its own.
//! - **CAS atomicity.** fjall has no CAS on a plain partition. Every write of a key (put,
//!   delete, batch put/delete, CAS) holds one of 1024 striped mutexes chosen by the key's hash;
//!   a CAS reads, compares and writes under its stripe, so no write of the same key from any
//!   task can interleave. Batches lock their stripes in ascending order (no deadlock). A batched
//!   CAS takes the stripes of all its keys the same way (each once), reads every key, writes
//!   every request that swaps in **one fjall write batch** (one journal write) and releases
//!   them.
//! - **Group commit** under `Durability::Fsync`: writers that finish their journal write while
//!   another writer's `fdatasync` runs share the next one. Each writer takes a ticket after its
//!   journal write; the one running an fsync (a `tokio::sync::Mutex` makes it one at a time)
//!   reads the ticket counter *before* it syncs, so every ticket up to that count belongs to a
//!   write already in the journal, which the journals' sync (above) covers; it then
//!   publishes that count as `synced`. A writer whose ticket is at or below `synced` returns
//!   without syncing; the others queue on the mutex and, when their turn comes, usually find
//!   their ticket covered. So N writers arriving during one fsync cost one more fsync, not N
//!   (`EmbeddedKv::fsyncs` counts them; a unit test queues ten writers behind a held turn and
//!   sees one fsync cover all ten). Under `Durability::Process` (the default) there is no fsync
//!   and nothing to group: fjall flushes each write to the OS in the call.
//! - **Two partitions.** Notify keys (the byte after the key's namespace is the notify tag,
//!   whatever the namespace; [`super::layout`]) live in a fjall partition of their own,
//!   `notify`; every other key in `kv`. A notification is put and deleted within seconds, so the
//!   notify space is mostly delete markers; alone in a partition, a scan of it merges only that
//!   partition's memtable and few segments, and compaction of the data does not rewrite those
//!   markers. A key's home is a pure function of its bytes, so a point call or a CAS touches one
//!   partition and a batch spanning both is still one fjall batch (atomic, one journal write); a
//!   scan reads the one partition its range can hold keys of (exact for the codec's ranges
//!   inside one space) or both, merged in key order. A store written with a single partition has
//!   its notify keys moved when first opened (recorded in a third partition, `layout`, once all
//!   are moved, so a crash midway resumes). There is no way back: a binary that knows only one
//!   partition does not see the `notify` partition (its notifications would look handled) and
//!   must not open a store the split was made in. The store itself knows no key layout: it
//!   takes the split as a `KeySplit` through `EmbeddedOptions::split`, and the transaction
//!   layer supplies the codec's (`codec::notify_split`, `txn::open_embedded`); a store that
//!   recorded a split and is opened without it, or with another, fails with
//!   `KvError::SplitMismatch`. Tests: a randomized comparison with
//!   [`crate::kv::MemoryKv`] (keys of every space of two namespaces, one a prefix of the other,
//!   and raw keys; scans forward and reverse over codec and arbitrary ranges at several limits),
//!   the move of an older store's keys, and the codec's classification of every key against
//!   every range.
//! - **Memtables of half the write buffer.** Each partition is created with a memtable limit of
//!   half `EmbeddedOptions::write_buffer_bytes` instead of fjall's 16 MiB; the write buffer
//!   still bounds all memtables together, and fjall's monitor flushes the largest memtable once
//!   they pass half of it, so a larger limit would only let one partition fill the buffer and
//!   stall writers. Fewer flushes leave fewer level-0 segments for a point read of an absent key
//!   to check, fewer segments for a write-once cell's range scan to merge (a scan seeks every
//!   level-0 segment it overlaps: no bloom filter applies to a range) and less to compact; a
//!   short run may never flush at all. So the write buffer is sized by the host: a sixteenth of
//!   the memory the process may use (the machine's, or its cgroup's limit if lower: a
//!   container counts its own), between 64 MiB and 1 GiB (`kv::default_write_buffer_bytes`;
//!   256 MiB if that memory cannot be read; measured in `docs/perf/photon.md`, 2026-11-29
//!   15:05). fjall keeps a partition's options from its creation, so a store keeps the memtable
//!   size it was created with (a store created on a large host and opened in a small container
//!   keeps its 512 MiB memtables; the container's smaller buffer still bounds them together).
//!   What it costs: memory (resident memory grows towards the buffer while memtables fill),
//!   and the journal a store replays when it reopens, which holds what the memtables hold and
//!   a bit more. fjall flushes the partitions of its oldest journals once the sealed journals
//!   pass half its limit, stalls writers past 90 % and halts them past the limit (checked when
//!   a writer's memtable fills). The limit is fjall's 512 MiB, or the write buffer if that is
//!   larger, so that it stays at least twice a partition's memtable and a full memtable's
//!   journal never stalls its writer: a 1 GiB buffer with a 512 MiB limit would let a writer
//!   that fills a 512 MiB memtable halt until that memtable is flushed (a review of fjall
//!   2.11's `check_journal_size`; not seen in the runs measured). The replay is bounded by
//!   about the limit plus the active journal (at most a memtable's worth): a job of 2,000,000
//!   events leaves up to about 900 MB with a 1 GiB buffer, replayed in about 5 s on this
//!   project's 2-core host (140 MB and 1.3 s with 256 MiB).
//! - **Exclusivity.** `LOCK` in the data directory is held with an exclusive `flock` (std
//!   `File::try_lock`) for the life of the store; a second opener, in another process or this
//!   one, gets `KvError::DirectoryInUse` naming the directory. fjall's files live in `fjall/`.
//! - **Calls run inline** on the calling task (memtable writes and cached reads take
//!   microseconds); only the fsync of `Durability::Fsync` goes to the blocking pool. Because
//!   such a call never waits, every call of the embedded and in-memory backends starts with a
//!   cooperative yield point (`tokio::task::coop::consume_budget`): a task looping over store
//!   calls yields once its budget is spent. Without it a read-only loop never returns
//!   `Pending`, keeps a runtime worker forever and starves the timer
//!   (`conformance::calls_yield_to_other_tasks` checks it on a current-thread runtime).
//! - **Memory.** The bounded contributors and their knobs: fjall's block cache
//!   (`EmbeddedOptions::cache_bytes`, 64 MiB) and memtables
//!   (`EmbeddedOptions::write_buffer_bytes`, a sixteenth of the process's memory between 64 MiB
//!   and 1 GiB), both settable for every binary opening an
//!   embedded store through `PERCOLATOR_EMBEDDED_CACHE_MB` and
//!   `PERCOLATOR_EMBEDDED_WRITE_BUFFER_MB` (`EmbeddedOptions::from_env`). In memory the caches
//!   fill to about 1.8 times their knobs (decoded blocks weigh more than their bytes); what
//!   keeps growing after is the store's bloom filters (about 10 bits per key and version in each
//!   segment), in proportion to the data kept, not to the time run. The heap profile behind
//!   this: `docs/perf/memory.md`.
//!
//! ## In-memory backend ([`crate::kv::MemoryKv`])
//!
//! A `BTreeMap` behind one mutex; every call is atomic (a batched CAS too, under the one lock).
//! It is the reference model for property tests and a fast store for unit tests.
//!
//! ## Conformance
//!
//! `percolator::kv::conformance` (feature `testkit`) holds one suite, generic over `RawKv`, and
//! `percolator::conformance_suite!`, which writes one test per check for a backend given how to
//! open it: the `tests` package runs it against every backend with one line each
//! (`tests/tests/kv_conformance.rs` for memory and embedded, `kv_conformance_tikv.rs` for TiKV,
//! once quiet and once in the weather). The crash test (`tests/tests/embedded_durability.rs`)
//! SIGKILLs a child writer at random moments and checks every acknowledged key after reopening.
