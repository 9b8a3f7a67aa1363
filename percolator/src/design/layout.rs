//! # Key layout and timestamps
//!
//! ## Key layout ([`crate::codec`])
//!
//! Every key is `enc(namespace) ‖ space tag ‖ …`. `enc` is the memcomparable encoding: each
//! `0x00` becomes `0x00 0xFF`, and the part ends with `0x00 0x01`. It is self-delimiting
//! (namespace "app" never scans keys of "appN") and order-preserving (cells sort by table, then
//! row, then column; property-tested with arbitrary bytes).
//!
//! | space | tag | key after the tag | value |
//! |---|---|---|---|
//! | head | `H` | `table enc(row) enc(column)` (`table`: `enc(name)`, or its id, below) | head record (CAS only) |
//! | versions | `V` | cell, `!commit_ts` (big-endian NOT: newest first) | an older committed version |
//! | data | `D` | cell, `!start_ts` | a large value written out of line |
//! | write-once records | `W` | cell, `!start_ts` (newest writer first) | a write of a write-once cell, decided by its writer's primary ([`super::once`]) |
//! | notify | `Q` | `bucket` (big-endian second), cell, `ts` (big-endian) | who made the cell dirty |
//! | meta | `M` | `enc(name)` | oracle record, GC safe point, notify floor, notify counts, table ids, worker registry, dead letters |
//!
//! [`crate::KeyCodec::rows_range`] gives the keys of rows `[lo, hi)` of a table in
//! (row, column) order; `versions_at_or_below(cell, ts)` the versions a reader at `ts` may see,
//! newest first; `notify_from` the notify space from a bucket on ([`super::notify`]).
//!
//! ### Table ids
//!
//! An application may key its tables by ids instead of their names ([`crate::codec::TableIds`]):
//! the table part of a key is then `0x00 0x02 id` (a big-endian u16), 4 bytes for Photon's
//! `idregistry` where the name took 12. The form never collides with an encoded name (inside
//! `enc`, `0x00` is followed by `0xFF` or `0x01` only), is self-delimiting, and keeps each
//! table's cells contiguous, so range scans of a table and everything above are unchanged;
//! only the order *between* tables differs (ids after the empty name, before every other
//! name), which nothing reads.
//!
//! The ids must be the same in every client of a namespace: a client with another map writes
//! and reads other keys, and would miss the others' cells. So the map is the store's, in the
//! meta record `M table_ids`:
//! - the application declares its map when it opens the store
//!   ([`crate::txn::declare_table_ids`]): written by a CAS if absent, accepted if equal,
//!   extended (by a CAS) if it adds tables and keeps every stored id, refused otherwise
//!   (`TableIdsError::Mismatch`) when a build with another map opens the store (builds from
//!   before table ids do not look: stop every process of the namespace across that upgrade);
//! - a table that gains an id must hold no head, version, value or write-once record keyed by
//!   its name, checked before the CAS (`TableIdsError::NamedTable`): a store written by a
//!   build without ids is refused with that error, never misread (there is no migration: load
//!   it into a new namespace, or keep the older build);
//! - every other client (tools, workers of other binaries) reads the map before it is built
//!   (`percolator_cli::store::open_client` does both) and decodes ids back to names, so
//!   `Cell::table` is always the name; an id the client does not know is
//!   `CodecError::UnknownTableId`, not a wrong name;
//! - a long-lived client that meets an id it does not know (the map grew after it opened the
//!   store: the application declared its tables after a worker, GC or the dashboard started,
//!   or a newer build added tables) reads the store's map again and keys tables by it from
//!   then on, in every clone of the client ([`crate::Client::reload_table_ids`]: workers'
//!   scans, GC passes, the dashboard every sample); only a map that keeps every id of the
//!   client's is adopted ([`crate::codec::TableIds::extends`]), any other is refused
//!   (`TableIdsError::Mismatch`) and the client keeps its own (invariant S4).
//!
//! A client built by hand ([`crate::ClientConfig::table_ids`]) must take the map from the
//! store the same way. What it buys (measured 2026-11-26, alternated with the
//! build keyed by names): embedded, `photon demo --clicks 200000`, about 2 % less CPU and
//! 2 % more joined clicks/s over five rounds, inside this machine's run-to-run noise
//! (one-letter names, the most shorter table names can give, measured 5 %); through
//! minitikv, where every key crosses gRPC, the same build (which also counts the backlog
//! half as often) ran 30 % more joined clicks/s; the two are not measured apart there.
//!
//! Keys with the notify tag of an earlier layout (`N`, before buckets) are not read: drain a
//! store before upgrading across that change.
//!
//! ## Timestamps ([`crate::ts`])
//!
//! [`crate::Timestamp`] = physical milliseconds `<< 18` | logical counter, so TTLs are measured
//! on oracle time. [`crate::TimestampSource::get_timestamp`] must be linearizable (invariant 1
//! of [`super::commit`]; how the oracle keeps it across leaders: `oracle::design`).
//! [`crate::ts::LocalClock`] is a non-persistent in-process source for tests: strictly
//! increasing within a process, even if the wall clock steps back, but it can repeat after a
//! restart. `TimestampSource` lives in this crate, not in `oracle`, so the crate graph stays
//! acyclic: the oracle implements it; transactions consume it.
