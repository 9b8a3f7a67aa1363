//! The simulator's typed errors.

/// Why a simulation could not run or report (a failed check is not an error: it is a
/// violation in the seed's report, [`crate::report::SeedReport::violations`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// The runtime of a seed could not be built.
    #[error("building the runtime of seed {seed}: {source}")]
    Runtime {
        /// The seed.
        seed: u64,
        /// The cause.
        source: std::io::Error,
    },
    /// The trace file could not be written.
    #[error("writing the trace to {path}: {source}")]
    Trace {
        /// The file.
        path: std::path::PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A transaction the harness itself needs (set-up, final reads) failed.
    #[error("harness transaction failed in {step}: {source}")]
    Harness {
        /// What the harness was doing.
        step: &'static str,
        /// The cause.
        source: percolator::TxnError,
    },
}
