//! Percolator-style snapshot-isolation transactions over a raw key-value store.
//!
//! - [`kv`]: the [`kv::RawKv`] store contract (get, batch get, put, delete, bounded scans and
//!   single-key compare-and-swap) with an embedded persistent backend ([`kv::EmbeddedKv`], on
//!   the fjall LSM engine) and an in-memory reference backend ([`kv::MemoryKv`]).
//! - [`codec`]: the order-preserving key layout of cells, versions, locks and notifications.
//! - [`ts`]: hybrid timestamps and the [`ts::TimestampSource`] trait the oracle implements.
//! - [`record`]: the head and version records stored per cell.
//! - [`txn`]: snapshot-isolation transactions ([`txn::Client`], [`txn::Transaction`]) with
//!   lazy lock resolution and version GC.
//!
//! See `ARCHITECTURE.md` at the repository root for the map and the invariants, and
//! [`design`] for the protocol's arguments.

pub mod clock;
pub mod codec;
pub mod design;
pub mod kv;
#[cfg(feature = "planted")]
pub mod planted;
pub mod random;
pub mod record;
pub mod ts;
pub mod txn;

pub use codec::{Cell, KeyCodec};

/// The in-process hash maps of the hot paths (transaction state, observed columns, batched
/// CAS checks; the workers' ledgers and observer registry): aHash, randomly seeded per process
/// like std's `RandomState` but several times cheaper on short keys (SipHash was 5 % of
/// `photon demo`'s CPU, issue 42). Nothing hashed with it is stored or compared across
/// processes.
pub type FastMap<K, V> = std::collections::HashMap<K, V, FastHashState>;
/// The set of [`FastMap`].
pub type FastSet<K> = std::collections::HashSet<K, FastHashState>;
/// The hasher builder of [`FastMap`], for hashing a key once and keeping only its hash.
pub type FastHashState = ahash::RandomState;
pub use kv::{CasOutcome, KeyRange, KvError, RawKv, ScanOrder};
pub use ts::{Timestamp, TimestampError, TimestampSource};
pub use txn::{Client, ClientConfig, Transaction, TxnError};
