//! The raw key-value store contract ([`RawKv`]) and its backends.
//!
//! Everything the transaction protocol needs from a store is here: single-key reads and
//! writes, batched reads and writes (not atomic across keys), bounded scans in either
//! direction, and an atomic single-key compare-and-swap. The contract follows what TiKV's raw
//! mode offers through `tikv-client` 0.4.0 (see [`crate::design::kv`]), so a CAS never deletes.

mod embedded;
mod memory;
mod pager;

#[cfg(feature = "testkit")]
pub mod conformance;
#[cfg(feature = "testkit")]
mod faulty;
pub mod intercept;
#[cfg(feature = "testkit")]
pub use faulty::{FaultHooks, Faults, FaultyKv};

pub use embedded::{
    default_write_buffer_bytes, process_memory_bytes, Durability, DurabilityError, EmbeddedKv,
    EmbeddedOptions, KeySplit, CACHE_MB_ENV, FALLBACK_WRITE_BUFFER_BYTES,
    MAX_DEFAULT_WRITE_BUFFER_BYTES, MIN_DEFAULT_WRITE_BUFFER_BYTES, WRITE_BUFFER_MB_ENV,
};
pub use memory::MemoryKv;
pub(crate) use pager::retry_after;
pub use pager::{retry_unavailable, scan_all, RangePager, MAX_SCAN_LIMIT, UNAVAILABLE_RETRIES};

use async_trait::async_trait;
use std::path::PathBuf;

/// A key and its value, as returned by scans.
pub type KvPair = (Vec<u8>, Vec<u8>);

/// Errors a [`RawKv`] backend reports.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KvError {
    /// The storage engine failed; `op` names the call that failed.
    #[error("storage engine error in {op}: {message}")]
    Engine {
        /// The failing call, e.g. `"put"` or `"compare_and_swap"`.
        op: &'static str,
        /// The engine's own description of the failure.
        message: String,
    },
    /// An I/O error outside the engine proper (lock file, data directory).
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Another process (or another handle in this process) holds the data directory.
    #[error(
        "data directory {path} is already in use by another process (lock file {lock} is held)"
    )]
    DirectoryInUse {
        /// The data directory.
        path: PathBuf,
        /// The lock file that is held.
        lock: PathBuf,
    },
    /// The embedded store in `path` keeps keys in the split partition `recorded`, and was
    /// opened without that split (`given`: the split asked for, if any): it would miss those
    /// keys (see `kv/embedded/split.rs`).
    #[error(
        "store {path} keeps keys in partition {recorded:?} of its own but was opened with {}: \
         open it with the key split that made it (for transaction data: \
         percolator::codec::notify_split)",
        match given { Some(name) => format!("the split {name:?}"), None => "no key split".to_string() }
    )]
    SplitMismatch {
        /// The data directory.
        path: PathBuf,
        /// The split partition the store records.
        recorded: String,
        /// The split partition the caller gave, if any.
        given: Option<String>,
    },
    /// The caller passed an argument the store cannot accept.
    #[error("invalid argument to {op}: {message}")]
    InvalidArgument {
        /// The call that was refused.
        op: &'static str,
        /// What was wrong with the argument.
        message: String,
    },
    /// The store could not be reached or did not answer in time (remote backends).
    #[error("store unavailable in {op}: {message}")]
    Unavailable {
        /// The call that failed.
        op: &'static str,
        /// The transport's description of the failure.
        message: String,
    },
}

/// Shorthand for results of [`RawKv`] calls.
pub type KvResult<T> = Result<T, KvError>;

/// A half-open key range `[start, end)`; `end: None` means "to the end of the key space".
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KeyRange {
    /// First key included.
    pub start: Vec<u8>,
    /// First key excluded; `None` for no upper bound.
    pub end: Option<Vec<u8>>,
}

impl KeyRange {
    /// The range `[start, end)`.
    pub fn new(start: impl Into<Vec<u8>>, end: impl Into<Vec<u8>>) -> Self {
        KeyRange {
            start: start.into(),
            end: Some(end.into()),
        }
    }

    /// Every key starting at `start`, with no upper bound.
    pub fn from(start: impl Into<Vec<u8>>) -> Self {
        KeyRange {
            start: start.into(),
            end: None,
        }
    }

    /// Every key that begins with `prefix`.
    pub fn prefix(prefix: &[u8]) -> Self {
        KeyRange {
            start: prefix.to_vec(),
            end: prefix_successor(prefix),
        }
    }

    /// Whether `key` lies inside the range.
    pub fn contains(&self, key: &[u8]) -> bool {
        key >= self.start.as_slice() && self.end.as_deref().is_none_or(|end| key < end)
    }

    /// Whether the range can hold no key at all (`end <= start`).
    pub fn is_empty(&self) -> bool {
        self.end
            .as_deref()
            .is_some_and(|end| end <= self.start.as_slice())
    }
}

/// A cooperative yield point for backends whose calls complete without waiting (memory,
/// embedded): it spends one unit of the task's Tokio budget and yields once the budget is
/// spent. Without it a task looping over store calls never returns `Pending`, holds its
/// worker thread forever and can starve timers (a bank test hung that way on 2 workers).
/// A consequence: do not drive these calls with a blocking executor (e.g.
/// `futures::executor::block_on`) from inside a Tokio task; once the task's budget is spent
/// the call yields and waits for a Tokio wake-up that such an executor never delivers.
pub(crate) async fn yield_point() {
    tokio::task::coop::consume_budget().await;
}

/// The smallest key greater than every key with this prefix, or `None` if there is none
/// (the prefix is empty or all `0xFF`).
pub fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// Direction of a scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScanOrder {
    /// Ascending keys, starting at the range's start.
    Forward,
    /// Descending keys, starting just below the range's end.
    Reverse,
}

/// The result of [`RawKv::compare_and_swap`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CasOutcome {
    /// The value the key held when the CAS was evaluated (`None`: absent).
    pub previous: Option<Vec<u8>>,
    /// Whether the new value was written.
    pub swapped: bool,
}

impl CasOutcome {
    /// This outcome of a CAS from `expected` to `new` with the retry hazard decided
    /// (`percolator::design::kv`): a CAS repeated after its reply was lost may report its own
    /// applied write as `swapped = false, previous = new`. Where `new` is unique to this
    /// writer that is the swap, and it is reported as one; any other outcome is kept.
    pub fn own_write_decided(self, expected: Option<Vec<u8>>, new: &[u8]) -> CasOutcome {
        if !self.swapped && self.previous.as_deref() == Some(new) {
            CasOutcome {
                previous: expected,
                swapped: true,
            }
        } else {
            self
        }
    }
}

/// One compare-and-swap of a [`RawKv::batch_compare_and_swap`]: if `key` holds `expected`
/// (`None`: absent), write `new`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CasRequest {
    /// The key swapped.
    pub key: Vec<u8>,
    /// The value expected (`None`: absent).
    pub expected: Option<Vec<u8>>,
    /// The value to write.
    pub new: Vec<u8>,
}

impl CasRequest {
    /// A request to swap `key` from `expected` to `new`.
    pub fn new(
        key: impl Into<Vec<u8>>,
        expected: Option<Vec<u8>>,
        new: impl Into<Vec<u8>>,
    ) -> Self {
        CasRequest {
            key: key.into(),
            expected,
            new: new.into(),
        }
    }
}

/// Refuses a batch of CAS requests naming one key twice (the contract of
/// [`RawKv::batch_compare_and_swap`]), with [`KvError::InvalidArgument`]. Backends call it
/// before applying anything.
pub fn check_distinct_cas_keys(requests: &[CasRequest]) -> KvResult<()> {
    let mut seen = crate::FastSet::with_capacity_and_hasher(requests.len(), Default::default());
    for request in requests {
        if !seen.insert(request.key.as_slice()) {
            return Err(KvError::InvalidArgument {
                op: "batch_compare_and_swap",
                message: format!(
                    "key {} appears twice in one batch",
                    request.key.escape_ascii()
                ),
            });
        }
    }
    Ok(())
}

/// Refuses a [`RawKv::batch_put_and_compare_and_swap`] naming a key twice among its
/// requests, or a key both among its pairs and its requests, with
/// [`KvError::InvalidArgument`]. Backends call it before applying anything.
pub fn check_put_and_cas_keys(pairs: &[KvPair], requests: &[CasRequest]) -> KvResult<()> {
    check_distinct_cas_keys(requests)?;
    if pairs.is_empty() || requests.is_empty() {
        return Ok(());
    }
    let swapped: crate::FastSet<&[u8]> = requests.iter().map(|r| r.key.as_slice()).collect();
    match pairs
        .iter()
        .find(|(key, _)| swapped.contains(key.as_slice()))
    {
        Some((key, _)) => Err(KvError::InvalidArgument {
            op: "batch_put_and_compare_and_swap",
            message: format!(
                "key {} is both put and swapped in one call",
                key.escape_ascii()
            ),
        }),
        None => Ok(()),
    }
}

/// The raw store contract every backend implements.
///
/// Writes are durable when they return (to the backend's configured degree). Batched calls
/// are not atomic across keys. Only [`RawKv::compare_and_swap`] is atomic, and only for its one
/// key; it is atomic against every other write to that key through the same store. Each
/// request of a [`RawKv::batch_compare_and_swap`] is atomic in the same way, for its key.
#[async_trait]
pub trait RawKv: Send + Sync + 'static {
    /// The value of `key`, or `None` if absent (an empty value is `Some(vec![])`).
    async fn get(&self, key: &[u8]) -> KvResult<Option<Vec<u8>>>;

    /// The values of `keys`, in the same order (`None` where absent).
    async fn batch_get(&self, keys: &[Vec<u8>]) -> KvResult<Vec<Option<Vec<u8>>>>;

    /// Writes `value` at `key`.
    async fn put(&self, key: Vec<u8>, value: Vec<u8>) -> KvResult<()>;

    /// Writes every pair; not atomic across keys.
    async fn batch_put(&self, pairs: Vec<KvPair>) -> KvResult<()>;

    /// Removes `key` (no error if it is absent).
    async fn delete(&self, key: Vec<u8>) -> KvResult<()>;

    /// Removes every key in `keys`; not atomic across keys.
    async fn batch_delete(&self, keys: Vec<Vec<u8>>) -> KvResult<()> {
        for key in keys {
            self.delete(key).await?;
        }
        Ok(())
    }

    /// Up to `limit` pairs of `range` in `order` (reverse starts just below `range.end`).
    /// `limit` must be between 1 and [`MAX_SCAN_LIMIT`]; use [`scan_all`] or [`RangePager`]
    /// for larger ranges.
    async fn scan(&self, range: KeyRange, limit: usize, order: ScanOrder) -> KvResult<Vec<KvPair>>;

    /// Up to `each_limit` pairs of each of `ranges`, ascending, in the order of `ranges`: one
    /// call for many small ranges (a transaction reading several write-once cells' records).
    /// Ranges may be in any order and must not overlap. The default scans them one by one;
    /// a backend where each call is a round trip (TiKV) sends them together.
    async fn scan_many(
        &self,
        ranges: Vec<KeyRange>,
        each_limit: usize,
    ) -> KvResult<Vec<Vec<KvPair>>> {
        let mut out = Vec::with_capacity(ranges.len());
        for range in ranges {
            out.push(self.scan(range, each_limit, ScanOrder::Forward).await?);
        }
        Ok(out)
    }

    /// Atomically: if the value of `key` equals `expected` (`None`: absent), write `new`.
    /// Returns the value found and whether the swap happened. Never deletes.
    async fn compare_and_swap(
        &self,
        key: Vec<u8>,
        expected: Option<Vec<u8>>,
        new: Vec<u8>,
    ) -> KvResult<CasOutcome>;

    /// Many [`RawKv::compare_and_swap`]s in one call. Each request is atomic for its own key
    /// exactly as a single CAS is; the batch is **not** atomic across keys (another writer
    /// may see some requests applied and others not yet). Outcomes come back in request
    /// order. A batch naming one key twice is refused with [`KvError::InvalidArgument`]
    /// before anything is applied; an empty batch is a no-op.
    ///
    /// **When the call returns `Err`**, any subset of the requests may have applied (each
    /// one wholly or not at all), as with the same CASes issued one by one of which some
    /// failed or lost their reply: the caller re-reads the keys it cares about. The retry
    /// hazard of single CAS applies per request too (a request reported `swapped == false`
    /// whose `previous` is its own `new` value may have applied).
    ///
    /// The default runs the single CASes concurrently and waits for all of them (none is
    /// cancelled half-way), then returns the first error, if any. Backends override it to
    /// share locks, journal writes or round trips.
    async fn batch_compare_and_swap(&self, requests: Vec<CasRequest>) -> KvResult<Vec<CasOutcome>> {
        check_distinct_cas_keys(&requests)?;
        let swaps = requests
            .into_iter()
            .map(|r| self.compare_and_swap(r.key, r.expected, r.new));
        futures::future::join_all(swaps).await.into_iter().collect()
    }

    /// [`RawKv::batch_put`] of `pairs`, then [`RawKv::batch_compare_and_swap`] of
    /// `requests`, in one call: no request's swap is seen without every pair (a transaction's
    /// extra writes and the locks that need them). A key both put and swapped, or swapped
    /// twice, is refused with [`KvError::InvalidArgument`] before anything applies.
    ///
    /// **When the call returns `Err`**, any subset of the pairs and of the requests may have
    /// applied, as after the two calls. The default makes the two calls (so wrappers see
    /// them as such); the embedded store writes both in one fjall batch (one journal write
    /// instead of two).
    async fn batch_put_and_compare_and_swap(
        &self,
        pairs: Vec<KvPair>,
        requests: Vec<CasRequest>,
    ) -> KvResult<Vec<CasOutcome>> {
        check_put_and_cas_keys(&pairs, &requests)?;
        if !pairs.is_empty() {
            self.batch_put(pairs).await?;
        }
        self.batch_compare_and_swap(requests).await
    }

    /// Makes every write this store acknowledged so far survive power loss (and kernel
    /// panics), whatever durability its writes are acknowledged with: the embedded store runs
    /// an `fdatasync`; TiKV needs nothing (it acknowledges a write once its Raft log is synced
    /// on a majority); the memory store has nothing to sync (nothing outlives the process).
    /// Wrappers forward it. For the few writes whose loss would break safety rather than lose
    /// data (the oracle's record).
    async fn sync(&self) -> KvResult<()>;
}

/// Checks the `limit` argument of a scan against the contract.
pub(crate) fn check_scan_limit(limit: usize) -> KvResult<()> {
    if limit == 0 || limit > MAX_SCAN_LIMIT {
        return Err(KvError::InvalidArgument {
            op: "scan",
            message: format!("limit {limit} is outside 1..={MAX_SCAN_LIMIT}"),
        });
    }
    Ok(())
}
