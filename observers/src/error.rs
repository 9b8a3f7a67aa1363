//! Errors of observers and workers.

use percolator::txn::RunError;
use percolator::TxnError;

/// A boxed error an observer's failure may carry as its cause.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What an observer may fail with. It is the error type of the observer's transaction body
/// (it implements [`RunError`]), so the framework retries the transaction errors inside it
/// and hands an author's own failure back as the author wrote it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ObserverError {
    /// A transaction call failed (conflicts are retried by the framework).
    #[error(transparent)]
    Txn(#[from] TxnError),
    /// The observer's own logic failed (or it panicked: the message then starts with
    /// `panic: `).
    #[error("observer failed: {message}")]
    Failed {
        /// What went wrong.
        message: String,
        /// The underlying error, if any.
        #[source]
        source: Option<BoxError>,
    },
}

impl ObserverError {
    /// An application failure with a message.
    pub fn failed(message: impl Into<String>) -> Self {
        ObserverError::Failed {
            message: message.into(),
            source: None,
        }
    }

    /// An application failure with a message and the error that caused it.
    pub fn failed_with(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        ObserverError::Failed {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// The error and its chain of causes rendered on one line (what a dead letter keeps).
    pub fn render(&self) -> String {
        let mut out = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(c) = cause {
            out.push_str(": ");
            out.push_str(&c.to_string());
            cause = c.source();
        }
        out
    }
}

impl RunError for ObserverError {
    fn as_txn_error(&self) -> Option<&TxnError> {
        match self {
            ObserverError::Txn(e) => Some(e),
            ObserverError::Failed { .. } => None,
        }
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
    /// The socket for relayed hints could not be set up ([`crate::HintListener::bind`]).
    #[error("relayed hints: {0}")]
    HintSocket(String),
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
    /// A renotify progress record could not be decoded.
    #[error("corrupt renotify progress record at {key}: {reason}")]
    CorruptRenotify {
        /// The key, escaped.
        key: String,
        /// What was wrong.
        reason: String,
    },
    /// A renotify pass of this column is in progress with the other `force` setting: it
    /// resumes only as it began.
    #[error("a renotify of {table}/{column} {} is in progress: run it again as it began", if *force { "with force" } else { "without force" })]
    RenotifyMismatch {
        /// The table, escaped.
        table: String,
        /// The column, escaped.
        column: String,
        /// Whether the pass in progress forces.
        force: bool,
    },
    /// Work was still left after this long ([`crate::testing::Harness::run_until_quiet`]).
    #[error("observers still busy after {waited:?} (a chain that never ends?)")]
    NotQuiet {
        /// How long it waited.
        waited: std::time::Duration,
    },
}

impl WorkerError {
    /// As a transaction error, for paths that report those (a store or oracle failure keeps
    /// its kind, so the retry policy still tells transient failures from others).
    pub(crate) fn into_txn(self) -> TxnError {
        match self {
            WorkerError::Txn(e) => e,
            WorkerError::Storage(e) => TxnError::Storage(e),
            other => TxnError::User(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use percolator::kv::MemoryKv;
    use percolator::ts::LocalClock;
    use percolator::Client;
    use std::sync::Arc;

    #[derive(Debug, thiserror::Error)]
    #[error("quota of {0} exceeded")]
    struct Quota(u32);

    /// An author's failure comes back through `Client::run` as the author's error, its
    /// source intact; the dead-letter rendering keeps the whole chain.
    #[tokio::test]
    async fn an_authors_error_comes_back_typed() {
        let client = Client::new(Arc::new(MemoryKv::new()), Arc::new(LocalClock::new()));
        let err = client
            .run(|_txn| async { Err::<(), _>(ObserverError::failed_with("upload", Quota(7))) })
            .await
            .expect_err("the body fails");
        let ObserverError::Failed { message, source } = &err else {
            panic!("not the author's error: {err:?}");
        };
        assert_eq!(message, "upload");
        let quota = source
            .as_ref()
            .and_then(|s| s.downcast_ref::<Quota>())
            .expect("the source is the author's error");
        assert_eq!(quota.0, 7);
        assert_eq!(err.render(), "observer failed: upload: quota of 7 exceeded");
    }

    /// Transaction errors inside the body are retried by `run` (a conflict once, then success).
    #[tokio::test]
    async fn transaction_errors_inside_are_retried() {
        let client = Client::new(Arc::new(MemoryKv::new()), Arc::new(LocalClock::new()));
        let attempts = std::sync::atomic::AtomicU32::new(0);
        let value = client
            .run(|_txn| {
                let n = attempts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async move {
                    if n == 0 {
                        return Err(ObserverError::Txn(TxnError::Conflict {
                            cell: percolator::Cell::new("t", "r", "c"),
                        }));
                    }
                    Ok(n)
                }
            })
            .await
            .expect("retried");
        assert_eq!(value, 1);
    }
}
