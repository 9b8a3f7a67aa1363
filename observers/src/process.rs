//! Handling one notify key (ARCHITECTURE.md, "Observers"): decide the writer's fate, run the
//! observer in a transaction guarded by the acknowledgment column, delete the key.

use crate::deadletter::DeadLetter;
use crate::error::ObserverError;
use crate::metrics::Metrics;
use crate::registry::{ObserverKind, Registered, Registry};
use futures::FutureExt;
use percolator::record::Notification;
use percolator::txn::TxnStatus;
use percolator::{Cell, Client, Timestamp, TxnError};
use std::panic::AssertUnwindSafe;
use std::time::Instant;

/// The value of a notify key, decoded once where it was read (a scan) or made (a commit
/// hint), and passed on typed.
#[derive(Clone, Debug)]
pub(crate) enum Payload {
    /// A notification record.
    Record(Notification),
    /// Bytes that are no notification record (parked as a dead letter by [`handle`]).
    Corrupt {
        /// The value as stored.
        bytes: Vec<u8>,
        /// Why it does not decode.
        error: String,
    },
}

impl Payload {
    /// Decodes a notify key's stored value.
    pub(crate) fn decode(bytes: &[u8]) -> Payload {
        match Notification::decode(bytes) {
            Ok(n) => Payload::Record(n),
            Err(e) => Payload::Corrupt {
                bytes: bytes.to_vec(),
                error: e.to_string(),
            },
        }
    }

    /// The stored form (what a dead letter keeps). Decoding is strict, so a record encodes
    /// back to the very bytes it was decoded from.
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        match self {
            Payload::Record(n) => n.encode(),
            Payload::Corrupt { bytes, .. } => bytes.clone(),
        }
    }
}

/// What became of one notify key.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The observer ran and committed; the key is deleted.
    Ran,
    /// Already covered by the acknowledgment (a duplicate); the key is deleted.
    Covered,
    /// The writer rolled back; the key is deleted, nothing ran.
    RolledBack,
    /// The writer is undecided; the key stays, try later.
    Pending,
    /// No observer is registered on the column; the key stays.
    Unobserved,
    /// The observer failed; the key stays (or is dead-lettered by the caller). `resolved` is
    /// the notification with the writer's fate decided (`Committed { c }`), to be parked
    /// instead of the raw strong record, whose evidence GC may remove later.
    Failed {
        /// The error.
        error: String,
        /// The decided notification record, if the writer's commit was established.
        resolved: Option<Notification>,
    },
}

fn parse_ack(bytes: Option<Vec<u8>>) -> u64 {
    bytes
        .and_then(|b| <[u8; 8]>::try_from(b.as_slice()).ok())
        .map(u64::from_be_bytes)
        .unwrap_or(0)
}

/// Runs the observer in `client.run`, catching panics as failures. The observer's own error
/// comes back as it wrote it; transaction errors inside it are retried by `run`.
async fn run_observer(
    client: &Client,
    registered: &Registered,
    cell: &Cell,
    covered_ts: Option<u64>,
    metrics: &Metrics,
) -> Result<bool, ObserverError> {
    let started = Instant::now();
    let attempts = std::sync::atomic::AtomicU64::new(0);
    let ran = client
        .run(|txn| {
            let cell = cell.clone();
            let observer = registered.observer.clone();
            let name = registered.name.clone();
            let attempts = &attempts;
            async move {
                if attempts.fetch_add(1, std::sync::atomic::Ordering::Relaxed) > 0 {
                    Metrics::add(&metrics.conflicts);
                }
                let Some(covered_ts) = covered_ts else {
                    // Weak: no acknowledgment check.
                    return call(observer, txn, cell).await.map(|()| true);
                };
                // Reading the cell rolls a committed writer's lock forward first.
                let (_, latest) = txn.get_versioned(&cell).await?;
                let ack_cell = Registry::ack_cell(&cell, &name);
                let ack = parse_ack(txn.get(&ack_cell).await?);
                let m = covered_ts.max(latest.unwrap_or(0));
                if m <= ack {
                    return Ok(false);
                }
                call(observer, txn.clone(), cell).await?;
                txn.set(ack_cell, m.to_be_bytes().to_vec());
                Ok(true)
            }
        })
        .await?;
    if ran {
        metrics.record_latency(started.elapsed());
    }
    Ok(ran)
}

/// Calls the observer, turning its panic into an [`ObserverError::Failed`] (which `run` does
/// not retry).
async fn call(
    observer: std::sync::Arc<dyn crate::registry::Observer>,
    txn: percolator::Transaction,
    cell: Cell,
) -> Result<(), ObserverError> {
    match AssertUnwindSafe(observer.observe(txn, cell))
        .catch_unwind()
        .await
    {
        Ok(result) => result,
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "observer panicked".to_string());
            Err(ObserverError::failed(format!("panic: {message}")))
        }
    }
}

/// Handles the notify key `key` (value `payload`) of `cell`.
pub(crate) async fn handle(
    client: &Client,
    registry: &Registry,
    metrics: &Metrics,
    cell: &Cell,
    key: &[u8],
    payload: &Payload,
) -> Result<Outcome, TxnError> {
    let Some(registered) = registry.get(cell) else {
        return Ok(Outcome::Unobserved);
    };
    let notification = match payload {
        Payload::Record(n) => n,
        Payload::Corrupt { bytes, error } => {
            // A corrupt notify key can never be processed: park it for the operator.
            let letter = DeadLetter {
                notify_key: key.to_vec(),
                notification: bytes.clone(),
                error: format!("corrupt notification: {error}"),
            };
            DeadLetter::park(client, &letter)
                .await
                .map_err(crate::error::WorkerError::into_txn)?;
            Metrics::add(&metrics.dead_lettered);
            return Ok(Outcome::Failed {
                error: letter.error,
                resolved: None,
            });
        }
    };
    let covered = match (notification, registered.kind) {
        (Notification::Weak, _) => None,
        (Notification::Committed { commit_ts }, _) => Some(*commit_ts),
        (
            Notification::Strong {
                start_ts,
                primary,
                ttl_ms,
            },
            _,
        ) => match client
            .txn_status_with_ttl(primary, Timestamp(*start_ts), *ttl_ms)
            .await?
        {
            TxnStatus::Committed(commit_ts) => Some(commit_ts.0),
            TxnStatus::RolledBack => {
                client.store().delete(key.to_vec()).await?;
                Metrics::add(&metrics.rolled_back);
                return Ok(Outcome::RolledBack);
            }
            TxnStatus::Pending => return Ok(Outcome::Pending),
        },
    };
    // A weak observer given a strong notification still runs (at least once); a strong
    // observer given a weak one runs without the acknowledgment check.
    let covered = if registered.kind == ObserverKind::Weak {
        None
    } else {
        covered
    };
    match run_observer(client, registered, cell, covered, metrics).await {
        Ok(ran) => {
            client.store().delete(key.to_vec()).await?;
            if ran {
                Metrics::add(&metrics.processed);
                Ok(Outcome::Ran)
            } else {
                Metrics::add(&metrics.duplicates);
                Ok(Outcome::Covered)
            }
        }
        Err(ObserverError::Txn(e)) if e.is_retryable() => {
            Metrics::add(&metrics.conflicts);
            Ok(Outcome::Pending)
        }
        Err(e) => {
            Metrics::add(&metrics.failures);
            let resolved = match (notification, covered) {
                (Notification::Strong { .. }, Some(commit_ts)) => {
                    Some(Notification::Committed { commit_ts })
                }
                _ => None,
            };
            Ok(Outcome::Failed {
                error: e.render(),
                resolved,
            })
        }
    }
}
