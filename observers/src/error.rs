//! Errors of observers and workers.

use percolator::TxnError;

/// What an observer may fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ObserverError {
    /// A transaction call failed (conflicts are retried by the framework).
    #[error(transparent)]
    Txn(#[from] TxnError),
    /// The observer's own logic failed.
    #[error("observer failed: {0}")]
    Failed(String),
}

impl ObserverError {
    /// An application failure with a message.
    pub fn failed(message: impl Into<String>) -> Self {
        ObserverError::Failed(message.into())
    }
}

/// Errors of registration and of the worker runtime.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// Two observers were registered on one (table, column).
    #[error("an observer is already registered on {table}/{column}")]
    DuplicateObserver {
        /// The table, escaped.
        table: String,
        /// The column, escaped.
        column: String,
    },
    /// A store or transaction call failed.
    #[error(transparent)]
    Txn(#[from] TxnError),
    /// The raw store failed.
    #[error(transparent)]
    Storage(#[from] percolator::KvError),
    /// A dead letter could not be decoded.
    #[error("corrupt dead letter at {key}: {reason}")]
    CorruptDeadLetter {
        /// The key, escaped.
        key: String,
        /// What was wrong.
        reason: String,
    },
    /// Work was still left after this long ([`crate::testing::Harness::run_until_quiet`]).
    #[error("observers still busy after {waited:?} (a chain that never ends?)")]
    NotQuiet {
        /// How long it waited.
        waited: std::time::Duration,
    },
}
