//! Snapshot-isolation transactions (Percolator's protocol over single-key CAS).
//!
//! ```no_run
//! # async fn demo() -> Result<(), percolator::txn::TxnError> {
//! use percolator::kv::MemoryKv;
//! use percolator::ts::LocalClock;
//! use percolator::txn::Client;
//! use percolator::Cell;
//! use std::sync::Arc;
//!
//! let client = Client::new(Arc::new(MemoryKv::new()), Arc::new(LocalClock::new()));
//! let alice = Cell::new("accounts", "alice", "balance");
//! let bob = Cell::new("accounts", "bob", "balance");
//! // Retries on conflicts; the closure gets a fresh transaction each attempt.
//! client
//!     .run(|txn| {
//!         let (alice, bob) = (alice.clone(), bob.clone());
//!         async move {
//!             let a: i64 = txn.get(&alice).await?.map_or(100, |v| String::from_utf8_lossy(&v).parse().unwrap_or(0));
//!             txn.set(alice, (a - 10).to_string());
//!             txn.set(bob, "10");
//!             Ok::<_, percolator::txn::TxnError>(())
//!         }
//!     })
//!     .await?;
//! # Ok(()) }
//! ```

mod backlog;
mod commit;
mod config;
mod error;
mod failpoint;
mod fence;
mod gc;
mod heads;
mod layout;
mod locks;
mod notify;
mod once;
mod prewrite;
mod read;
mod recent;
mod store;
mod transaction;
mod writers;

pub use backlog::{NotifyCounts, SharedNotifyCounts, NOTIFY_COUNTS_META};
pub use config::ClientConfig;
pub use error::{RunError, TxnError, TxnResult};
#[cfg(feature = "failpoints")]
pub use failpoint::CrashHook;
pub use failpoint::CrashPoint;
pub use fence::{Fence, Settlement, FENCE_FLOOR};
pub use gc::GcStats;
pub use layout::{declare_table_ids, stored_table_ids};
pub use locks::TxnStatus;
pub use notify::{wall_bucket, FloorRaise, KeyRecheck, NotifyFloor, NOTIFY_FLOOR_META};
pub use recent::RecentWriteReads;
pub use store::{embedded_options, open_embedded};
pub use transaction::Transaction;

use crate::codec::KeyCodec;
use crate::kv::RawKv;
use crate::ts::TimestampSource;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
// Tokio's clock: the monotonic clock in production, paused time in tests and the simulation.
use tokio::time::Instant;

/// What every transaction of a client shares.
pub(crate) struct Shared {
    pub(crate) kv: Arc<dyn RawKv>,
    pub(crate) oracle: Arc<dyn TimestampSource>,
    pub(crate) codec: KeyCodec,
    pub(crate) config: ClientConfig,
    /// The observed, write-once and remembered columns, behind one lock ([`Shared::columns`]).
    columns: std::sync::RwLock<ColumnSets>,
    /// The notify keys of every commit, published after it (see [`Client::notify_hints`]).
    hints: tokio::sync::broadcast::Sender<Arc<CommittedNotify>>,
    /// Lock-free heads as this client's commits left them (`config.head_cache_bytes`).
    pub(crate) committed_heads: Option<heads::CommittedHeads>,
    /// This client's commits of the remembered columns (`config.recent_writes_bytes`).
    pub(crate) recent: Option<recent::RecentWrites>,
    /// The highest notify floor this client has read or raised (new notify keys go to a
    /// bucket at or above it).
    pub(crate) notify_floor_seen: std::sync::atomic::AtomicU64,
    /// How long this client's slowest recent step of a commit took (see [`RoundTrips`]):
    /// the margin its leases carry.
    pub(crate) round_trips: RoundTrips,
    /// Decided fates (committed at `c`, rolled back) by (start_ts, hash of the primary): a
    /// decided fate never changes, so a status read once serves every later question about
    /// the transaction (the notifications of a loader's batch all name one primary).
    pub(crate) decided: quick_cache::sync::Cache<(u64, u64), locks::TxnStatus>,
    /// This client's commits in flight, which its readers wait on in memory.
    pub(crate) writers: writers::LocalWriters,
    /// Notify keys this client put and removed ([`Client::notify_counts`]).
    pub(crate) notify_counts: backlog::NotifyCounters,
    /// This, for tasks that outlive a call (the publication of the notify counts).
    pub(crate) me: std::sync::Weak<Shared>,
}

/// Columns by table (nested so lookups borrow the cell instead of cloning it); `None`: every
/// column of the table.
type ColumnSet = crate::FastMap<Vec<u8>, Option<crate::FastSet<Vec<u8>>>>;

/// Adds `column` of `table` to `tables` (a table given whole stays whole).
fn add_column(tables: &mut ColumnSet, table: &[u8], column: &[u8]) {
    if let Some(columns) = tables
        .entry(table.to_vec())
        .or_insert_with(|| Some(Default::default()))
    {
        columns.insert(column.to_vec());
    }
}

/// Whether `cell` is in one of `tables`' columns.
fn in_columns(tables: &ColumnSet, cell: &crate::codec::Cell) -> bool {
    !tables.is_empty()
        && tables
            .get(&cell.table)
            .is_some_and(|c| c.as_ref().is_none_or(|c| c.contains(&cell.column)))
}

/// The columns a client treats apart, declared at any time, read on every write and read.
#[derive(Debug, Default)]
pub(crate) struct ColumnSets {
    /// Observed columns: their writes put notify keys ([`Client::observe_column`]).
    observed: ColumnSet,
    /// Write-once columns (`percolator::design::once`).
    write_once: ColumnSet,
    /// Write-once columns whose commits this client remembers
    /// ([`Client::remember_recent_writes`]).
    remembered: ColumnSet,
    /// Whether this client keeps recent writes at all (`config.recent_writes_bytes > 0`).
    remembers: bool,
}

impl ColumnSets {
    /// Whether writes of `cell` put notify keys.
    pub(crate) fn is_observed(&self, cell: &crate::codec::Cell) -> bool {
        in_columns(&self.observed, cell)
    }

    /// Whether `cell` belongs to a write-once column.
    pub(crate) fn is_write_once(&self, cell: &crate::codec::Cell) -> bool {
        in_columns(&self.write_once, cell)
    }

    /// Whether this client remembers its commits of `cell` (a write-once cell of a column
    /// given to [`Client::remember_recent_writes`]; never when nothing is remembered).
    pub(crate) fn is_remembered(&self, cell: &crate::codec::Cell) -> bool {
        self.remembers && in_columns(&self.remembered, cell) && self.is_write_once(cell)
    }
}

/// Decided transaction fates remembered per client (about 40 bytes each).
const DECIDED_CAPACITY: usize = 1 << 16;

/// The slowest recent round trip of a client's commits (a store or oracle call, a batched
/// prewrite round, a heartbeat): the slowest of the current and the previous window of
/// [`ROUND_TRIP_WINDOW`]. A lock or heartbeat lease covers `lock_ttl` plus twice this: a
/// lease is only useful if it outlasts the call that renews it, and on a loaded machine (or
/// a cluster under a leader change) that call can take longer than the TTL itself. Readers
/// are unchanged: they fence once a lease expires. A crashed writer's lease therefore
/// expires at most twice its last measured round trip later than `lock_ttl` alone would,
/// always within `max_lifetime`.
#[derive(Debug)]
pub(crate) struct RoundTrips {
    /// (start of the current window, its slowest, the previous window's slowest).
    windows: std::sync::Mutex<(Instant, Duration, Duration)>,
}

/// How long a slow round trip keeps widening leases: one to two windows.
const ROUND_TRIP_WINDOW: Duration = Duration::from_secs(5);

impl Default for RoundTrips {
    fn default() -> Self {
        RoundTrips {
            windows: std::sync::Mutex::new((Instant::now(), Duration::ZERO, Duration::ZERO)),
        }
    }
}

impl RoundTrips {
    /// The windows as of `now`.
    fn current(&self, now: Instant) -> std::sync::MutexGuard<'_, (Instant, Duration, Duration)> {
        let mut w = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        let age = now.saturating_duration_since(w.0);
        if age >= ROUND_TRIP_WINDOW * 2 {
            *w = (now, Duration::ZERO, Duration::ZERO);
        } else if age >= ROUND_TRIP_WINDOW {
            *w = (now, Duration::ZERO, w.1);
        }
        w
    }

    /// Records one round trip, begun at `sent` and answered now (one clock read for both
    /// the duration and the window: on a virtual machine a clock read can cost a system
    /// call, and a blind write notes three round trips).
    pub(crate) fn note_since(&self, sent: Instant) {
        let now = Instant::now();
        let mut w = self.current(now);
        w.1 = w.1.max(now.saturating_duration_since(sent));
    }

    /// The margin a lease written now carries beyond `lock_ttl`: twice the slowest recent
    /// round trip.
    pub(crate) fn lease_margin(&self, now: Instant) -> Duration {
        // Planted bug `LeaseIgnoresRoundTrips` (`crate::planted`): leases of `lock_ttl` alone.
        #[cfg(feature = "planted")]
        if crate::planted::active(crate::planted::Bug::LeaseIgnoresRoundTrips) {
            return Duration::ZERO;
        }
        let w = self.current(now);
        w.1.max(w.2) * 2
    }
}

/// The notify keys one commit of this client put, published once the commit is decided.
/// In-process workers handle them at once instead of waiting for a scan; hints are
/// best-effort (a slow receiver loses some), the notify space stays the source of truth.
#[derive(Clone, Debug)]
pub struct CommittedNotify {
    /// The timestamp inside the notify keys: the writer's start_ts, or the commit_ts of a
    /// commit that only notified.
    pub notify_ts: u64,
    /// The writer's fate as a notify record states it: `Committed` or `Weak`.
    pub notification: crate::record::Notification,
    /// The bucket of the notify keys (see [`crate::codec::KeyCodec::notify`]). Rarely, a key
    /// was moved to a later bucket after the hint was made (the notify floor passed it);
    /// the moved key is then found by a scan.
    pub bucket: u64,
    /// The cells notified.
    pub cells: Vec<crate::codec::Cell>,
}

/// Hints buffered per receiver before the slowest one starts losing them.
const HINT_CAPACITY: usize = 4096;

impl Shared {
    /// The column sets, read-locked: a loop over a call's cells takes them once, not once
    /// per cell (a guard cannot be held across an `await`: it is not `Send`).
    pub(crate) fn columns(&self) -> std::sync::RwLockReadGuard<'_, ColumnSets> {
        self.columns.read().unwrap_or_else(|p| p.into_inner())
    }

    fn columns_mut(&self) -> std::sync::RwLockWriteGuard<'_, ColumnSets> {
        self.columns.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether writes of `cell` put notify keys ([`ColumnSets::is_observed`]).
    pub(crate) fn is_observed(&self, cell: &crate::codec::Cell) -> bool {
        self.columns().is_observed(cell)
    }

    /// Whether `cell` belongs to a write-once column ([`ColumnSets::is_write_once`]).
    pub(crate) fn is_write_once(&self, cell: &crate::codec::Cell) -> bool {
        self.columns().is_write_once(cell)
    }

    /// The lease a lock or heartbeat written now carries beyond the time it is written:
    /// `lock_ttl` plus the measured margin ([`RoundTrips`]), the margin capped at eight TTLs
    /// (a crashed writer's locks never block readers much longer than a TTL would).
    /// `now`: the caller's clock read of the moment (it measures the writer's age with it too).
    pub(crate) fn lease_at(&self, now: Instant) -> Duration {
        self.config.lock_ttl
            + self
                .round_trips
                .lease_margin(now)
                .min(self.config.lock_ttl * 8)
    }

    /// Whether anyone listens to hints (so committers skip building them otherwise).
    pub(crate) fn wants_hints(&self) -> bool {
        self.hints.receiver_count() > 0
    }

    /// Publishes the notify keys of a decided commit (no receiver: nothing happens).
    pub(crate) fn publish_hint(&self, hint: CommittedNotify) {
        if !hint.cells.is_empty() {
            let _ = self.hints.send(Arc::new(hint));
        }
    }
}

/// The entry point: begins transactions over a store with timestamps from an oracle.
#[derive(Clone)]
pub struct Client {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client with the default configuration (namespace `default`).
    pub fn new(store: Arc<dyn RawKv>, oracle: Arc<dyn TimestampSource>) -> Self {
        Self::with_config(store, oracle, ClientConfig::default())
    }

    /// A client with `config`.
    pub fn with_config(
        store: Arc<dyn RawKv>,
        oracle: Arc<dyn TimestampSource>,
        config: ClientConfig,
    ) -> Self {
        let recent = recent::RecentWrites::new(config.recent_writes_bytes);
        let remembers = recent.is_some();
        Client {
            shared: Arc::new_cyclic(|me| Shared {
                me: me.clone(),
                codec: KeyCodec::with_table_ids(&config.namespace, config.table_ids.clone()),
                kv: store,
                oracle,
                committed_heads: heads::committed_heads(config.head_cache_bytes),
                recent,
                notify_floor_seen: Default::default(),
                round_trips: Default::default(),
                decided: quick_cache::sync::Cache::new(DECIDED_CAPACITY),
                writers: Default::default(),
                notify_counts: Default::default(),
                config,
                columns: std::sync::RwLock::new(ColumnSets {
                    remembers,
                    ..ColumnSets::default()
                }),
                hints: tokio::sync::broadcast::channel(HINT_CAPACITY).0,
            }),
        }
    }

    /// The key codec of the client's namespace.
    pub fn codec(&self) -> &KeyCodec {
        &self.shared.codec
    }

    /// The raw store.
    pub fn store(&self) -> &Arc<dyn RawKv> {
        &self.shared.kv
    }

    /// The current second of this client's wall clock ([`ClientConfig::wall_clock`]): the
    /// bucket its new notify keys go to, unless the notify floor is above it.
    pub fn wall_bucket(&self) -> u64 {
        self.shared.config.wall_clock.now_secs()
    }

    /// Milliseconds since the Unix epoch on this client's wall clock
    /// ([`ClientConfig::wall_clock`]).
    pub fn wall_ms(&self) -> u64 {
        self.shared.config.wall_clock.now_ms()
    }

    /// The timestamp source.
    pub fn oracle(&self) -> &Arc<dyn TimestampSource> {
        &self.shared.oracle
    }

    /// The configuration.
    pub fn config(&self) -> &ClientConfig {
        &self.shared.config
    }

    /// Makes writes of `column` in `table` put notify keys (strong notifications), so the
    /// observers registered on it run. Every client that writes the column must declare it.
    pub fn observe_column(&self, table: impl AsRef<[u8]>, column: impl AsRef<[u8]>) {
        let mut columns = self.shared.columns_mut();
        add_column(&mut columns.observed, table.as_ref(), column.as_ref());
    }

    /// Declares `column` of `table` write-once (`percolator::design::once`): each write of
    /// one of its cells is an immutable record decided by the transaction's primary, with no
    /// head and no CAS of its own. Records have no write-write conflict check: concurrent
    /// writers of one of its cells must also write a common ordinary cell, where all but one
    /// conflict (a later write, such as a redelivery or a delete, reads as the newest). Every
    /// client that reads or writes the column must declare it.
    pub fn write_once_column(&self, table: impl AsRef<[u8]>, column: impl AsRef<[u8]>) {
        let mut columns = self.shared.columns_mut();
        add_column(&mut columns.write_once, table.as_ref(), column.as_ref());
    }

    /// Declares every column of `table` write-once, as [`Client::write_once_column`] does
    /// for one (for tables whose column names are data, such as one column per output).
    pub fn write_once_table(&self, table: impl AsRef<[u8]>) {
        let mut columns = self.shared.columns_mut();
        columns.write_once.insert(table.as_ref().to_vec(), None);
    }

    /// Makes this client remember its commits of `column` in `table`, a write-once column
    /// ([`Client::write_once_column`]; others are not remembered), up to
    /// [`ClientConfig::recent_writes_bytes`] in all, so that
    /// [`Transaction::get_many_recent`] answers reads of them without a store call
    /// (`percolator::design::recent`). Only this client's own commits are remembered.
    pub fn remember_recent_writes(&self, table: impl AsRef<[u8]>, column: impl AsRef<[u8]>) {
        let mut columns = self.shared.columns_mut();
        add_column(&mut columns.remembered, table.as_ref(), column.as_ref());
    }

    /// Reads of remembered columns by [`Transaction::get_many_recent`] since the client was
    /// made: answered from memory, and read from the store.
    pub fn recent_write_reads(&self) -> RecentWriteReads {
        self.shared
            .recent
            .as_ref()
            .map_or_else(RecentWriteReads::default, |r| r.reads())
    }

    /// Whether `cell` belongs to a column declared write-once.
    pub fn is_write_once(&self, cell: &crate::codec::Cell) -> bool {
        self.shared.is_write_once(cell)
    }

    /// Whether writes of `cell` put notify keys.
    pub fn is_observed(&self, cell: &crate::codec::Cell) -> bool {
        self.shared.is_observed(cell)
    }

    /// Hints of this client's commits that put notify keys, each sent once the commit is
    /// decided, in the order commits return (close to, not exactly, commit_ts order). A receiver that falls more than a few thousand commits behind
    /// gets `Lagged` and must find the lost ones by scanning the notify space.
    pub fn notify_hints(&self) -> tokio::sync::broadcast::Receiver<Arc<CommittedNotify>> {
        self.shared.hints.subscribe()
    }

    /// Puts a weak notification on `cell`: no transaction, its observers run at least once.
    pub async fn weak_notify(&self, cell: &crate::codec::Cell) -> TxnResult<()> {
        let ts = self.shared.oracle.get_timestamp().await?;
        let record = crate::record::Notification::Weak.encode();
        let bucket = self
            .shared
            .put_notify_keys(&[(cell.clone(), ts.0, record)])
            .await?;
        self.shared.publish_hint(CommittedNotify {
            notify_ts: ts.0,
            notification: crate::record::Notification::Weak,
            bucket,
            cells: vec![cell.clone()],
        });
        Ok(())
    }

    /// Puts notification `record` for `cell` at timestamp `ts` back into the notify space
    /// (e.g. a replayed dead letter), in a bucket scanners will reach. Returns its key.
    pub async fn put_notification(
        &self,
        cell: &crate::codec::Cell,
        ts: u64,
        record: Vec<u8>,
    ) -> TxnResult<Vec<u8>> {
        let bucket = self
            .shared
            .put_notify_keys(&[(cell.clone(), ts, record)])
            .await?;
        Ok(self.shared.codec.notify(cell, ts, bucket))
    }

    /// Puts notifications for many cells at once, by the path a commit's notify keys take:
    /// each `(cell, ts, record)` becomes `Q(bucket, cell, ts) = record`, all in one bucket
    /// (this second, or the highest floor this client has seen), settled against the notify
    /// floor after the put (moved above it while it is higher), so scanners reach them.
    /// Returns the bucket. A key put again (same cell and `ts`) is the same notification:
    /// at most one run of a strong observer commits for it.
    pub async fn put_notifications(
        &self,
        entries: &[(crate::codec::Cell, u64, Vec<u8>)],
    ) -> TxnResult<u64> {
        if entries.is_empty() {
            return Ok(self.shared.notify_bucket());
        }
        self.shared.put_notify_keys(entries).await
    }

    /// Deletes notify keys whose notifications are settled (handled by their observers,
    /// dead-lettered, or put again elsewhere), in one call, and counts them in
    /// [`Client::notify_counts`]. Deleting a key that is already gone is harmless (and still
    /// counted).
    pub async fn remove_notify_keys(&self, keys: Vec<Vec<u8>>) -> TxnResult<()> {
        self.shared.remove_notify_keys(keys).await
    }

    /// Deletes the strong notify key `key` whose writer was found rolled back, if it still
    /// holds `read` (the notification that status was asked for), read again now; counted
    /// in [`Client::notify_counts`] when deleted. A "rolled back" answer can be wrong only
    /// after GC trimmed the evidence of the writer's commit, and GC rewrites the key as
    /// committed before it trims (`percolator::design::gc`): so a key that still holds the
    /// strong record after the answer was rolled back indeed. Otherwise the key is left
    /// alone and what it holds now is returned ([`KeyRecheck::Changed`]), to be decided again.
    pub async fn remove_rolled_back_notification(
        &self,
        key: &[u8],
        read: &crate::record::Notification,
    ) -> TxnResult<KeyRecheck> {
        #[cfg(feature = "planted")]
        if crate::planted::active(crate::planted::Bug::WorkerDeletesRolledBack) {
            self.shared.kv.delete(key.to_vec()).await?;
            self.shared.count_removed(1);
            return Ok(KeyRecheck::Deleted);
        }
        let recheck = self.shared.delete_if_unchanged(key, &read.encode()).await?;
        if recheck == KeyRecheck::Deleted {
            self.shared.count_removed(1);
        }
        Ok(recheck)
    }

    /// How many notify keys this client has put (commits, weak notifications, replays) and
    /// removed ([`Client::remove_notify_keys`]) so far. A loader whose workers share its
    /// client follows the notification backlog between counts of the store by these
    /// ([`NotifyCounts::since`]); what other processes put or remove is in
    /// [`Client::shared_notify_counts`].
    pub fn notify_counts(&self) -> NotifyCounts {
        self.shared.notify_counts.read()
    }

    /// The notify keys put and removed by every client that publishes its counts
    /// ([`ClientConfig::publish_notify_counts`]), as the store's record holds them, and this
    /// client's share of them: [`SharedNotifyCounts::others`] is what the other clients
    /// (other processes) have published. An estimate: a client that stopped before its
    /// publication, or whose publication failed, is missing from it, and a lost reply can
    /// add a client's counts twice or not at all.
    pub async fn shared_notify_counts(&self) -> TxnResult<SharedNotifyCounts> {
        self.shared.shared_notify_counts().await
    }

    /// Adds what this client put and removed since its last publication to the store's
    /// counters now (they are added on their own shortly after every change, see
    /// [`ClientConfig::publish_notify_counts`]); returns whether there was anything to add.
    pub async fn publish_notify_counts(&self) -> TxnResult<bool> {
        self.shared.publish_notify_counts().await
    }

    /// Where scans of the notify space start ([`NotifyFloor::scan_from`]): no notification
    /// is left in a bucket below it, so readers scan from
    /// [`crate::codec::KeyCodec::notify_from`] of it.
    pub async fn notify_floor(&self) -> TxnResult<u64> {
        Ok(self.shared.read_notify_floor().await?.scan_from)
    }

    /// The published notify floor record: the floor writers settle against and where
    /// readers start (below the floor while a raise's rescan is owed).
    pub async fn notify_floor_record(&self) -> TxnResult<NotifyFloor> {
        self.shared.read_notify_floor().await
    }

    /// Raises the notify floor to `to`, where `from` is the [`Client::notify_floor`] the
    /// caller read before a scan from it that met no notify key in a bucket below `to`;
    /// then does the rescan the floor record owes (keys put below the floor by writers that
    /// read it before a raise are moved above it). A call cut short anywhere leaves the
    /// rescan owed in the record, and readers starting below it, until a later call ends it.
    pub async fn raise_notify_floor(&self, from: u64, to: u64) -> TxnResult<FloorRaise> {
        self.shared.raise_notify_floor(from, to).await
    }

    /// Begins a transaction at a fresh start_ts.
    pub async fn begin(&self) -> TxnResult<Transaction> {
        // The local clock starts before the request, so a slow reply counts against the
        // lifetime rather than extending it. (Snapshot safety does not depend on it: reads
        // check the published GC safe point, see `Transaction::ensure_not_collected`.)
        let started = Instant::now();
        let start_ts = self.shared.oracle.get_timestamp().await?;
        self.shared.round_trips.note_since(started);
        Ok(Transaction::new(self.shared.clone(), start_ts, started))
    }

    /// Begins a read-only snapshot at a chosen timestamp (time-travel reads, verification).
    /// Fails with `InvalidArgument` if `ts` is ahead of the oracle (one timestamp is drawn to
    /// tell), with `SnapshotTooOld` if `ts` is below the published GC safe point; committing
    /// it with writes fails with `InvalidArgument`.
    pub async fn snapshot_at(&self, ts: crate::ts::Timestamp) -> TxnResult<Transaction> {
        // A timestamp the oracle has not issued yet would read a snapshot that commits
        // drawing timestamps below it can still change (an unrepeatable read): refused.
        let now = self.shared.oracle.get_timestamp().await?;
        if ts > now {
            return Err(TxnError::InvalidArgument(format!(
                "snapshot timestamp {ts} is ahead of the oracle ({now}): only a timestamp \
                 the oracle has issued names a snapshot"
            )));
        }
        self.read_only_at(ts).await
    }

    /// A read-only snapshot at a timestamp drawn now ([`Client::snapshot_at`] without the
    /// second oracle call; its timestamp is the transaction's `start_ts`).
    pub async fn snapshot(&self) -> TxnResult<Transaction> {
        let ts = self.shared.oracle.get_timestamp().await?;
        self.read_only_at(ts).await
    }

    /// A read-only snapshot at `ts`, an issued timestamp: refused below the GC safe point.
    async fn read_only_at(&self, ts: crate::ts::Timestamp) -> TxnResult<Transaction> {
        let safe_point = gc::read_safe_point(&self.shared).await?;
        if ts < safe_point {
            return Err(TxnError::SnapshotTooOld {
                start_ts: ts.0,
                max_lifetime_ms: self.shared.config.max_lifetime.as_millis() as u64,
            });
        }
        Ok(Transaction::new_read_only(
            self.shared.clone(),
            ts,
            Instant::now(),
        ))
    }

    /// The fate of transaction `start_ts` whose primary is `primary` (`percolator::design::locks`). An expired undecided transaction is rolled back for
    /// good by this call.
    pub async fn txn_status(
        &self,
        primary: &crate::codec::Cell,
        start_ts: crate::ts::Timestamp,
    ) -> TxnResult<TxnStatus> {
        let ttl_ms = self.shared.config.lock_ttl.as_millis() as u64;
        self.shared.txn_status(primary, start_ts, ttl_ms).await
    }

    /// [`Client::txn_status`] with the writer's lock TTL known (e.g. from a notify key):
    /// an undecided writer is fenced only once `physical(start_ts) + ttl_ms` has passed.
    pub async fn txn_status_with_ttl(
        &self,
        primary: &crate::codec::Cell,
        start_ts: crate::ts::Timestamp,
        ttl_ms: u64,
    ) -> TxnResult<TxnStatus> {
        self.shared.txn_status(primary, start_ts, ttl_ms).await
    }

    /// Runs `body` in a transaction and commits it, retrying the whole transaction on
    /// conflicts (with jittered exponential backoff) up to `config.max_attempts` times.
    /// `body` gets a fresh transaction each attempt and must not commit it itself.
    ///
    /// `body` fails with its own error type `E` (see [`RunError`]): transaction errors reach
    /// it through `?`, the caller gets `E` back, and `run` still retries every retryable
    /// [`TxnError`] inside it (a conflict met in the body or at commit). Errors of the
    /// application's own are returned at once, after rolling the transaction back. A body
    /// whose error type is not fixed otherwise says it, e.g. `Ok::<_, TxnError>(())`.
    pub async fn run<T, E, F, Fut>(&self, mut body: F) -> Result<T, E>
    where
        E: RunError,
        F: FnMut(Transaction) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let config = &self.shared.config;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let txn = self.begin().await?;
            let outcome = match body(txn.clone()).await {
                Ok(value) if txn.is_finished() => Ok(value),
                Ok(value) => txn.commit().await.map(|_| value).map_err(E::from),
                Err(e) => {
                    txn.rollback();
                    Err(e)
                }
            };
            let retryable = match &outcome {
                Err(e) => e.as_txn_error().filter(|e| e.is_retryable()),
                Ok(_) => None,
            };
            match retryable {
                Some(e) if attempt < config.max_attempts => {
                    // Doubling up to 256x the base: with the defaults the attempts span more
                    // than a lock TTL, so a conflict with a crashed writer's live lock outlasts
                    // it instead of failing the caller.
                    let base = config.backoff * 2u32.saturating_pow(attempt.min(8));
                    let jitter = config.random.range_f64(0.5, 1.5);
                    tracing::debug!(attempt, error = %e, "transaction retry");
                    tokio::time::sleep(base.mul_f64(jitter)).await;
                }
                _ => return outcome,
            }
        }
    }

    /// Resolves every lock in the namespace (waiting for live ones to commit or expire):
    /// afterwards no lock that existed when the pass started is left. Returns how many locks
    /// were resolved.
    pub async fn resolve_all_locks(&self) -> TxnResult<usize> {
        gc::resolve_locks_below(&self.shared, crate::ts::Timestamp(u64::MAX)).await
    }

    /// The last published GC safe point ([`Timestamp::ZERO`](crate::ts::Timestamp::ZERO) if
    /// GC never ran): snapshots below it are refused with `SnapshotTooOld`.
    pub async fn gc_safe_point(&self) -> TxnResult<crate::ts::Timestamp> {
        gc::read_safe_point(&self.shared).await
    }

    /// The highest safe point a GC pass has resolved below
    /// ([`Timestamp::ZERO`](crate::ts::Timestamp::ZERO) if none): every lock, strong notify
    /// key and write-once record of a transaction that started below it is decided and
    /// rewritten, so none needs its primary any more. A cell whose every commit is below it,
    /// with no lock, may be deleted outright by a caller that knows no transaction can
    /// write it again (`percolator::design::gc`, "Resolved below").
    pub async fn gc_resolved_below(&self) -> TxnResult<crate::ts::Timestamp> {
        gc::read_resolved_below(&self.shared).await
    }

    /// Garbage-collects below `safe_point` (`percolator::design::gc`):
    /// publishes it, resolves every older lock, then deletes versions no snapshot at or after
    /// it can see. Refuses a safe point less than `config.gc_lag` behind the oracle.
    ///
    /// A key of a table id this client does not know makes it read the store's map again
    /// ([`Client::reload_table_ids`]) and run the pass again; the pass fails with
    /// [`crate::codec::TableIdsError::UnknownId`] only if the store's map does not have the
    /// id either, and with `Mismatch` if the store's map is not a growth of the client's.
    pub async fn gc(&self, safe_point: crate::ts::Timestamp) -> TxnResult<GcStats> {
        loop {
            match gc::collect(&self.shared, safe_point).await {
                Err(TxnError::TableIds(crate::codec::TableIdsError::UnknownId { id })) => {
                    // Passes are safe to repeat (`percolator::design::gc`).
                    self.reload_table_ids().await?;
                    if self.codec().table_ids().name(id).is_none() {
                        return Err(crate::codec::TableIdsError::UnknownId { id }.into());
                    }
                }
                outcome => return outcome,
            }
        }
    }

    /// Reads the namespace's table ids from the store and keys tables by them from now on
    /// (this client and its clones: one codec) if they extend the client's map, for a
    /// long-lived client that meets a table id it does not know: the namespace's map grew
    /// after it opened the store (`percolator::design::layout`, "Table ids"). Returns whether
    /// the map changed. A stored map that is not a growth of the client's (an id given to
    /// another table, a table dropped) is refused with
    /// [`crate::codec::TableIdsError::Mismatch`] and the client keeps its map (invariant S4).
    pub async fn reload_table_ids(&self) -> TxnResult<bool> {
        let namespace = self.shared.codec.namespace();
        let stored = layout::stored_table_ids(self.shared.kv.as_ref(), &namespace).await?;
        let grew = self.shared.codec.grow_table_ids(&stored)?;
        if grew {
            tracing::info!(
                now = %stored.describe_ids(),
                "the namespace's table ids grew; keying tables by the store's map"
            );
        }
        Ok(grew)
    }
}

/// A short pause used when waiting on live locks.
pub(crate) fn lock_wait(attempt: u32) -> Duration {
    Duration::from_millis(1u64 << attempt.min(6))
}
