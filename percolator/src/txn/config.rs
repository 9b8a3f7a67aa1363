//! Tunables of the transaction client.

use std::time::Duration;

/// Configuration of a [`crate::txn::Client`].
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// Key namespace of the application (every key starts with its encoding).
    pub namespace: Vec<u8>,
    /// Lock TTL granted on top of the time already spent since start_ts.
    pub lock_ttl: Duration,
    /// Whether a committing transaction extends its primary's lock TTL while it runs long
    /// (needs a tokio runtime with timers enabled, as retries and lock waits do anyway).
    pub heartbeat: bool,
    /// Maximum transaction lifetime L (invariant 5): older transactions abort.
    pub max_lifetime: Duration,
    /// How far GC safe points must lag the oracle (G > L plus a margin).
    pub gc_lag: Duration,
    /// Values longer than this are stored out of line in `D` keys.
    pub inline_limit: usize,
    /// Maximum attempts of [`crate::txn::Client::run`] on retryable errors.
    pub max_attempts: u32,
    /// First backoff between attempts (doubles, with jitter, up to 256x).
    pub backoff: Duration,
    /// Heads this client committed, remembered (up to about this many bytes; 0: none) as the
    /// expected value of a later prewrite of the same cell that did not read it first: a
    /// blind write then skips its head read when nobody else wrote the cell meanwhile. Only
    /// cells written more than once are remembered (a first write guesses the head absent
    /// anyway). Never used for reads.
    pub head_cache_bytes: u64,
    /// This client's commits of the columns it remembers
    /// ([`crate::Client::remember_recent_writes`]) kept in memory, up to about this many
    /// bytes (0: none), for [`crate::Transaction::get_many_recent`] to answer without a
    /// store call (`percolator::design::recent`).
    pub recent_writes_bytes: u64,
    /// How soon after this client puts or removes notify keys it adds them to the store's
    /// shared counters ([`crate::Client::shared_notify_counts`], one CAS of a meta record
    /// per publication), which loaders in other processes follow the notification backlog
    /// by; `None`: never (those loaders then see this client's keys only when they count
    /// the notify space). Publications need a tokio runtime.
    pub publish_notify_counts: Option<Duration>,
    /// Tables keyed by an id instead of their name (`percolator::design::layout`, "Table
    /// ids"): the store's map for the namespace ([`crate::txn::stored_table_ids`], or
    /// what [`crate::txn::declare_table_ids`] made it). Every client of a namespace must
    /// use the same map: a client with another one does not see the others' cells.
    pub table_ids: crate::codec::TableIds,
    /// The wall clock of this process ([`crate::clock`]): the bucket of new notify keys,
    /// and whatever else built on the client reads wall time (scanners' ages, GC leases).
    /// Default: the system clock. A simulation gives each simulated host its own.
    pub wall_clock: std::sync::Arc<dyn crate::clock::WallClock>,
    /// Where retry jitter comes from ([`crate::random`]). Default: the thread-local
    /// generator. A simulation draws it from its seed.
    pub random: std::sync::Arc<dyn crate::random::RandomSource>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            namespace: b"default".to_vec(),
            lock_ttl: Duration::from_secs(3),
            heartbeat: true,
            max_lifetime: Duration::from_secs(120),
            gc_lag: Duration::from_secs(600),
            inline_limit: 1024,
            max_attempts: 30,
            backoff: Duration::from_millis(2),
            head_cache_bytes: 16 * 1024 * 1024,
            recent_writes_bytes: 64 * 1024 * 1024,
            publish_notify_counts: Some(Duration::from_millis(50)),
            table_ids: Default::default(),
            wall_clock: std::sync::Arc::new(crate::clock::SystemClock),
            random: std::sync::Arc::new(crate::random::ThreadRandom),
        }
    }
}

impl ClientConfig {
    /// The default configuration for namespace `namespace`.
    pub fn with_namespace(namespace: impl AsRef<[u8]>) -> Self {
        ClientConfig {
            namespace: namespace.as_ref().to_vec(),
            ..Self::default()
        }
    }
}
