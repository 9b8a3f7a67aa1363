//! Errors of the transaction layer.

use crate::codec::Cell;
use crate::kv::KvError;
use crate::record::RecordError;
use crate::ts::TimestampError;

/// Why a transaction (or a GC pass) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TxnError {
    /// Another transaction wrote or locked `cell` concurrently; retrying may succeed.
    #[error("write conflict on {cell}")]
    Conflict {
        /// The contended cell.
        cell: Cell,
    },
    /// The transaction writes a cell of a write-once column that already holds a value in its
    /// snapshot (`percolator::design::once`): a write-once cell is written by one committed
    /// transaction only.
    #[error("{cell} is write-once and already holds a value")]
    WrittenOnce {
        /// The cell.
        cell: Cell,
    },
    /// The transaction was rolled back by someone else (it stalled and its locks were fenced)
    /// before it reached its commit point. Nothing it wrote is visible.
    #[error("transaction {start_ts} was aborted by another client before it committed")]
    Aborted {
        /// The transaction's start_ts.
        start_ts: u64,
    },
    /// The writer stalled for so long that GC may have removed the evidence of its fate:
    /// whether it committed is unknown. Callers that must not repeat work re-read their
    /// progress inside the next transaction.
    #[error("transaction {start_ts}: commit outcome unknown")]
    CommitUnknown {
        /// The transaction's start_ts.
        start_ts: u64,
    },
    /// The transaction lived longer than the maximum lifetime (or started below the GC safe
    /// point) and can neither commit nor return reads.
    #[error("transaction {start_ts} is too old (older than {max_lifetime_ms} ms or below the GC safe point)")]
    SnapshotTooOld {
        /// The transaction's start_ts.
        start_ts: u64,
        /// The configured maximum lifetime.
        max_lifetime_ms: u64,
    },
    /// The transaction was already committed or rolled back.
    #[error("transaction {start_ts} is already finished")]
    Finished {
        /// The transaction's start_ts.
        start_ts: u64,
    },
    /// The raw store failed.
    #[error(transparent)]
    Storage(#[from] KvError),
    /// The timestamp oracle failed.
    #[error(transparent)]
    Timestamp(#[from] TimestampError),
    /// A record read from the store is corrupt.
    #[error("corrupt record at {key}: {source}")]
    Corrupt {
        /// The store key, escaped.
        key: String,
        /// What was wrong.
        source: RecordError,
    },
    /// The caller passed an invalid argument (e.g. a GC safe point that is too recent).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The namespace's table ids in the store refuse this client's
    /// ([`crate::txn::declare_table_ids`], `percolator::design::layout`).
    #[error("table ids of the namespace: {0}")]
    TableIds(#[from] crate::codec::TableIdsError),
    /// A crash was injected here by a test hook (feature `failpoints`); the transaction
    /// stopped dead, leaving whatever it had written.
    #[cfg(feature = "failpoints")]
    #[error("crash injected at {0:?}")]
    InjectedCrash(crate::txn::CrashPoint),
    /// An error raised by the closure passed to `Client::run` whose error type is
    /// `TxnError` (a body may instead fail with its own error type, see [`RunError`]).
    #[error("{0}")]
    User(String),
}

impl TxnError {
    /// A corrupt record at store key `key` (kept escaped in the error), `why` saying what was
    /// wrong with it.
    pub fn corrupt(key: &[u8], why: RecordError) -> TxnError {
        TxnError::Corrupt {
            key: key.escape_ascii().to_string(),
            source: why,
        }
    }

    /// Whether retrying the whole transaction may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, TxnError::Conflict { .. } | TxnError::Aborted { .. })
    }

    /// Whether the failure may pass if the caller tries again later, as a new transaction:
    /// retryable conflicts, an unreachable or slow store or oracle, and a commit whose
    /// outcome is unknown (the caller must then re-read its progress inside the retry,
    /// as a loader does with its offsets). Corruption, bad arguments and user errors are not.
    pub fn is_transient(&self) -> bool {
        match self {
            TxnError::Conflict { .. }
            | TxnError::Aborted { .. }
            | TxnError::CommitUnknown { .. }
            | TxnError::SnapshotTooOld { .. }
            | TxnError::Timestamp(_) => true,
            TxnError::Storage(e) => matches!(e, KvError::Unavailable { .. }),
            _ => false,
        }
    }
}

/// An error a [`crate::txn::Client::run`] body may fail with: the application's own error
/// type, which carries transaction errors (`From<TxnError>`, so `?` works on every
/// transaction call) and shows them again, so that `run` can retry the retryable ones
/// whatever the body's error type. `TxnError` itself implements it; an application error
/// with a `Txn(TxnError)` variant implements it in three lines:
///
/// ```
/// use percolator::txn::{RunError, TxnError};
///
/// #[derive(Debug)]
/// enum AppError {
///     Txn(TxnError),
///     Invalid(String),
/// }
/// impl From<TxnError> for AppError {
///     fn from(e: TxnError) -> Self {
///         AppError::Txn(e)
///     }
/// }
/// impl RunError for AppError {
///     fn as_txn_error(&self) -> Option<&TxnError> {
///         match self {
///             AppError::Txn(e) => Some(e),
///             _ => None,
///         }
///     }
/// }
/// # let _ = AppError::Invalid(String::new());
/// ```
pub trait RunError: From<TxnError> {
    /// The transaction error this is, if it is one (`run` retries it if it is retryable).
    fn as_txn_error(&self) -> Option<&TxnError>;
}

impl RunError for TxnError {
    fn as_txn_error(&self) -> Option<&TxnError> {
        Some(self)
    }
}

/// Shorthand for transaction results.
pub type TxnResult<T> = Result<T, TxnError>;
