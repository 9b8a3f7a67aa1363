//! Crash injection between protocol steps (test-only).
//!
//! With the `failpoints` feature, a test installs a hook on a transaction; at each point the
//! hook may answer `true`, and the transaction then stops dead, leaving behind whatever it has
//! written, exactly as if its process had been killed. Without the feature the hook cannot be
//! installed and every check compiles to nothing.

/// A point of the commit protocol where a crash can be injected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashPoint {
    /// A lock was just confirmed; `primary` tells whether it was the primary's, `locked`
    /// counts the locks confirmed so far (prewrites run in parallel).
    Prewrote {
        /// Whether the lock just confirmed is the primary's.
        primary: bool,
        /// Locks confirmed so far, this one included.
        locked: usize,
    },
    /// The write-once records (and the primary round's notify keys) were put; the primary's
    /// round has not locked anything yet.
    RecordsWritten,
    /// Every lock is confirmed; commit_ts not drawn yet.
    AllPrewritten,
    /// Right after the commit point (the primary's commit CAS).
    Committed,
    /// A secondary was just committed; `committed` counts those committed so far.
    SecondaryCommitted {
        /// Secondaries committed so far, this one included.
        committed: usize,
    },
}

/// A crash hook: answers whether to crash at a point.
#[cfg(feature = "failpoints")]
pub type CrashHook = std::sync::Arc<dyn Fn(CrashPoint) -> bool + Send + Sync>;

/// Returns `Err(InjectedCrash)` from the enclosing function if the transaction's crash hook
/// asks for a crash at this point; expands to nothing without the `failpoints` feature.
macro_rules! crash_point {
    ($txn:expr, $point:expr) => {
        #[cfg(feature = "failpoints")]
        {
            if let Some(hook) = $txn.crash_hook() {
                let point = $point;
                if hook(point) {
                    return Err($crate::txn::TxnError::InjectedCrash(point));
                }
            }
        }
    };
}
pub(crate) use crash_point;
