//! The weather: which client errors are transient ([`RetryCause`]), the retry loop every
//! call runs in (jittered exponential backoff within the call's [`Deadline`]), the retry
//! counters, and the mapping of client errors to [`KvError`].

use crate::limits::raft_entry_too_large;
use crate::TikvKv;
use percolator::kv::{KvError, KvResult};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Why the adapter retried a call (see [`TikvKv::retry_counts`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryCause {
    /// TiKV answered `ServerIsBusy` (its scheduler or raftstore is overloaded): nothing was
    /// applied. tikv-client 0.4.0 returns it at once, without backoff.
    ServerBusy,
    /// A region error the client did not resolve within its own backoff (`RegionNotFound`,
    /// `EpochNotMatch`, `NotLeader`, `StoreNotMatch`, stale command, no leader known) or a
    /// region lookup in PD that failed.
    Region,
    /// The connection failed or the reply was lost (gRPC `Unavailable`, `Unknown`,
    /// `Aborted`, broken channel, PD unreachable): a write may or may not have applied.
    Transport,
    /// An RPC outlived [`TikvConfig::rpc_timeout`](crate::TikvConfig::rpc_timeout): a write may or may not have applied.
    Deadline,
}

/// How many times the adapter retried calls, by cause (a health figure: all stay near 0 on
/// a quiet cluster). Retries inside tikv-client (region errors it resolves itself) are not
/// counted here.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetryCounts {
    /// Retries after `ServerIsBusy`.
    pub server_busy: u64,
    /// Retries after region errors.
    pub region: u64,
    /// Retries after transport errors (lost replies).
    pub transport: u64,
    /// Retries after an RPC deadline expired.
    pub deadline: u64,
    /// Calls that still failed with a transient error when `op_timeout` left no time for
    /// another attempt.
    pub gave_up: u64,
}

impl RetryCounts {
    /// Retries of every cause.
    pub fn total(&self) -> u64 {
        self.server_busy + self.region + self.transport + self.deadline
    }
}

#[derive(Default)]
pub(crate) struct RetryCounters {
    server_busy: AtomicU64,
    region: AtomicU64,
    transport: AtomicU64,
    deadline: AtomicU64,
    gave_up: AtomicU64,
}

impl RetryCounters {
    pub(crate) fn count(&self, cause: RetryCause) {
        let counter = match cause {
            RetryCause::ServerBusy => &self.server_busy,
            RetryCause::Region => &self.region,
            RetryCause::Transport => &self.transport,
            RetryCause::Deadline => &self.deadline,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> RetryCounts {
        RetryCounts {
            server_busy: self.server_busy.load(Ordering::Relaxed),
            region: self.region.load(Ordering::Relaxed),
            transport: self.transport.load(Ordering::Relaxed),
            deadline: self.deadline.load(Ordering::Relaxed),
            gave_up: self.gave_up.load(Ordering::Relaxed),
        }
    }
}

/// The deadline of one [`RawKv`] call: every attempt and every backoff of the call fits
/// before it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Deadline(pub(crate) Instant);

impl Deadline {
    pub(crate) fn remaining(&self) -> Duration {
        self.0.saturating_duration_since(Instant::now())
    }
}

impl TikvKv {
    /// Runs one client call until it succeeds, fails with a permanent error, or `deadline`
    /// leaves no time for another attempt. Transient errors ([`RetryCause`]) are retried
    /// after a jittered exponential backoff.
    ///
    /// Only calls that may be repeated go through here, and all of ours may:
    /// - reads are idempotent;
    /// - `put`/`batch_put` write fixed values: repeating one is the same as the first attempt
    ///   arriving late, which a concurrent writer can never tell from network delay (the
    ///   contract orders nothing between concurrent plain writes of one key);
    /// - `delete`/`batch_delete` are idempotent (deleting an absent key is a no-op);
    /// - a partly applied `batch_put` (the client splits it per region and sends the parts
    ///   concurrently) is completed by repeating the whole batch: the applied parts are
    ///   rewritten with the same values;
    /// - `compare_and_swap` is repeated with the same `expected`/`new`. If an earlier
    ///   attempt applied and only its reply was lost, the repeat answers `swapped = false`
    ///   with `previous == new` (the retry hazard; unique values make it recognisable, see
    ///   [`TikvConfig::unique_cas_values`]), or, if another writer replaced our value in
    ///   between, with that writer's value: callers treat a failed CAS as "re-read and
    ///   decide" (percolator checks the transaction's status), never as proof that nothing
    ///   was written.
    pub(crate) async fn call<T, F, Fut>(
        &self,
        op: &'static str,
        deadline: Deadline,
        mut attempt: F,
    ) -> KvResult<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = tikv_client::Result<T>>,
    {
        let policy = &self.config;
        let mut step = policy.retry_base_delay.max(Duration::from_micros(100));
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let remaining = deadline.remaining();
            let error = match tokio::time::timeout(remaining, attempt()).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) => e,
                Err(_) => {
                    self.retries.gave_up.fetch_add(1, Ordering::Relaxed);
                    return Err(KvError::Unavailable {
                        op,
                        message: format!(
                            "no answer within {:?} after {attempts} attempt(s) (PD {})",
                            policy.op_timeout,
                            policy.pd_endpoints.join(",")
                        ),
                    });
                }
            };
            let Some(cause) = transient_cause(&error) else {
                return Err(map_error(op, error));
            };
            // Equal jitter: between half and all of the current step.
            let delay = step.mul_f64(0.5 + rand::random::<f64>() * 0.5);
            if delay >= deadline.remaining() {
                self.retries.gave_up.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(op, ?cause, attempts, error = %error, "transient error; no time left for another attempt");
                return Err(map_error(op, error));
            }
            self.retries.count(cause);
            tracing::debug!(op, ?cause, attempts, ?delay, error = %error, "transient error; retrying");
            tokio::time::sleep(delay).await;
            step = (step * 2).min(policy.retry_max_delay.max(step));
        }
    }
}

/// The cause of a transient client error (worth retrying after a backoff), or `None` for a
/// permanent one.
pub(crate) fn transient_cause(e: &tikv_client::Error) -> Option<RetryCause> {
    use tikv_client::Error as E;
    if raft_entry_too_large(e).is_some() {
        // The same write is refused however often it is repeated.
        return None;
    }
    match e {
        E::RegionError(region) if region.server_is_busy.is_some() => Some(RetryCause::ServerBusy),
        E::RegionError(_)
        | E::LeaderNotFound { .. }
        | E::RegionForKeyNotFound { .. }
        | E::RegionForRangeNotFound { .. }
        | E::RegionNotFoundInResponse { .. }
        | E::EntryNotFoundInRegionCache
        | E::NoCurrentRegions => Some(RetryCause::Region),
        E::Grpc(_)
        | E::Io(_)
        | E::Channel(_)
        | E::Canceled(_)
        | E::JoinError(_)
        | E::UndeterminedError(_)
        // PD connection failures ("PD cluster failed to respond", "failed to connect to").
        | E::InternalError { .. } => Some(RetryCause::Transport),
        E::GrpcAPI(status) => match status.code() {
            tonic_code::DeadlineExceeded => Some(RetryCause::Deadline),
            // tonic reports its own client-side timeout as `Cancelled: Timeout expired`.
            tonic_code::Cancelled if status.message().contains("Timeout expired") => {
                Some(RetryCause::Deadline)
            }
            tonic_code::Unavailable
            | tonic_code::Cancelled
            | tonic_code::Unknown
            | tonic_code::Aborted
            | tonic_code::ResourceExhausted => Some(RetryCause::Transport),
            _ => None,
        },
        E::ExtractedErrors(errors) | E::MultipleKeyErrors(errors) => {
            errors.iter().find_map(transient_cause)
        }
        _ => None,
    }
}

/// Whether a client error means "the cluster could not be reached or did not answer".
pub(crate) fn is_unavailable(e: &tikv_client::Error) -> bool {
    transient_cause(e).is_some()
}

use tonic::Code as tonic_code;

/// Maps a client error to a [`KvError`] naming the call.
pub(crate) fn map_error(op: &'static str, e: tikv_client::Error) -> KvError {
    if let Some((region, size)) = raft_entry_too_large(&e) {
        tracing::warn!(
            op,
            region,
            size,
            "TiKV refused a raft entry over raft-entry-max-size"
        );
        return KvError::InvalidArgument {
            op,
            message: format!(
                "TiKV refused a raft entry of {size} bytes (region {region}): over its \
                 raft-entry-max-size"
            ),
        };
    }
    let message = format!("tikv-client: {e}");
    if matches!(e, tikv_client::Error::MaxScanLimitExceeded { .. }) {
        KvError::InvalidArgument { op, message }
    } else if is_unavailable(&e) {
        KvError::Unavailable { op, message }
    } else {
        KvError::Engine { op, message }
    }
}
