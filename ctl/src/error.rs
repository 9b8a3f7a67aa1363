//! The errors of `percolator-ctl`'s verbs.

/// Why a verb failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CtlError {
    /// Reading or changing the observers' state failed.
    #[error(transparent)]
    Worker(#[from] observers::WorkerError),
    /// A transaction or oracle call failed.
    #[error(transparent)]
    Txn(#[from] percolator::TxnError),
    /// The timestamp oracle failed.
    #[error(transparent)]
    Timestamp(#[from] percolator::ts::TimestampError),
    /// The raw store failed.
    #[error(transparent)]
    Storage(#[from] percolator::KvError),
    /// The oracle's leadership record does not decode.
    #[error("decoding the oracle record: {0}")]
    OracleRecord(#[from] oracle::RecordError),
    /// The command line asks for something that cannot be done (no such dead letter, an
    /// ambiguous id, a bad timeout).
    #[error("{0}")]
    Usage(String),
    /// The dashboard's HTTP server failed (`serve`).
    #[error("serving the dashboard: {0}")]
    Serve(Box<dyn std::error::Error + Send + Sync>),
    /// The namespace's table ids changed after this process opened the store (an
    /// application declared or extended them): its keys would be read with the old map.
    /// (The dashboard no longer stops with it: it reloads the map, `serve::reload`.)
    #[error(
        "the namespace's table ids changed after this process opened the store (now: {now}; \
         this process: {opened}); restart it to read them"
    )]
    TableIdsChanged {
        /// The map the process opened the store with.
        opened: String,
        /// The store's map now.
        now: String,
    },
}
