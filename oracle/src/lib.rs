//! The timestamp oracle (TSO): strictly increasing timestamps, never reused across restarts,
//! takeovers or wall-clock steps, batched for throughput.
//!
//! - [`server`]: the `oracle serve` service: a leader (elected through a compare-and-swap
//!   record in the store) serving from a persisted window, standbys that take over when it
//!   dies, and an epoch check before every reply batch (see [`crate::design`]).
//! - [`OracleClient`]: one connection per process, batching the requests of many tasks into
//!   rounds (one request each, a few in flight at once), failing over across oracle addresses.
//! - [`LocalOracle`]: the same persisted window in-process, for the embedded single-process mode.
//!
//! Both [`OracleClient`] and [`LocalOracle`] implement [`percolator::TimestampSource`].

#![warn(missing_docs)]

pub mod client;
pub mod clock;
pub mod design;
mod lease;
pub mod local;
pub mod proto;
pub mod record;
pub mod server;
#[cfg(feature = "testkit")]
pub mod testkit;

pub use client::{ClientConfig, ClientError, ClientStats, OracleClient};
pub use clock::{Clock, ManualClock, SkewedClock, SystemClock};
pub use local::LocalOracle;
pub use record::{LeaderInfo, OracleRecord, RecordError};
pub use server::{ServerConfig, ServerHandle, ServerStats};

use percolator::KvError;
use std::sync::Arc;
use std::time::Duration;

/// Errors of the oracle crate (the server side and [`LocalOracle`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OracleError {
    /// The store failed.
    #[error("store error: {0}")]
    Store(#[from] KvError),
    /// The oracle record in the store cannot be decoded.
    #[error("corrupt oracle record: {0}")]
    CorruptRecord(#[from] RecordError),
    /// This instance is not (or no longer) the leader: another one raised the epoch.
    #[error("not the leader")]
    NotLeader,
    /// Leadership could not be taken (another instance won the race every time).
    #[error("could not take over the oracle record: {0}")]
    TakeoverFailed(String),
    /// A socket operation failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// A count outside `1..=`[`proto::MAX_COUNT`] was asked for.
    #[error("invalid timestamp count {0}")]
    InvalidCount(u64),
}

/// Settings of the persisted window, shared by the server and [`LocalOracle`].
#[derive(Clone)]
pub struct WindowOptions {
    /// Namespace of the meta key (`KeyCodec::new(namespace).meta("oracle")`).
    pub namespace: String,
    /// Physical time reserved ahead by each window write (default 3 s).
    pub window: Duration,
    /// Upper bound of the adaptive window (default 30 s): the window doubles whenever serving
    /// had to wait for an extension.
    pub max_window: Duration,
    /// The wall clock (injectable for tests).
    pub clock: Arc<dyn Clock>,
}

impl Default for WindowOptions {
    fn default() -> Self {
        WindowOptions {
            namespace: "default".to_string(),
            window: Duration::from_secs(3),
            max_window: Duration::from_secs(30),
            clock: Arc::new(SystemClock),
        }
    }
}

impl std::fmt::Debug for WindowOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WindowOptions")
            .field("namespace", &self.namespace)
            .field("window", &self.window)
            .field("max_window", &self.max_window)
            .finish_non_exhaustive()
    }
}

/// The meta key of the oracle record for `namespace`.
pub fn record_key(namespace: &str) -> Vec<u8> {
    percolator::KeyCodec::new(namespace).meta(record::RECORD_NAME)
}
