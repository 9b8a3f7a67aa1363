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
//! | head | `H` | `enc(table) enc(row) enc(column)` | head record (CAS only) |
//! | versions | `V` | cell, `!commit_ts` (big-endian NOT: newest first) | an older committed version |
//! | data | `D` | cell, `!start_ts` | a large value written out of line |
//! | write-once records | `W` | cell, `!start_ts` (newest writer first) | a write of a write-once cell, decided by its writer's primary ([`super::once`]) |
//! | notify | `Q` | `bucket` (big-endian second), cell, `ts` (big-endian) | who made the cell dirty |
//! | meta | `M` | `enc(name)` | oracle record, GC safe point, notify floor, worker registry, dead letters |
//!
//! [`crate::KeyCodec::rows_range`] gives the keys of rows `[lo, hi)` of a table in
//! (row, column) order; `versions_at_or_below(cell, ts)` the versions a reader at `ts` may see,
//! newest first; `notify_from` the notify space from a bucket on ([`super::notify`]).
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
