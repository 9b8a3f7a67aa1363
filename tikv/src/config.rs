//! How to reach the cluster and how the adapter behaves: [`TikvConfig`] and its TLS files
//! (the rule naming the keys only the atomic client may write is in [`crate::atomic_keys`]).

use crate::AtomicKeys;
use std::path::PathBuf;
use std::time::Duration;

/// Default of [`TikvConfig::cas_concurrency`].
pub const DEFAULT_CAS_CONCURRENCY: usize = 64;

/// PEM files for mutual TLS with PD and TiKV (passed to `tikv_client::Config::with_security`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// CA certificate the servers' certificates are checked against.
    pub ca: PathBuf,
    /// This client's certificate.
    pub cert: PathBuf,
    /// This client's private key.
    pub key: PathBuf,
}

/// How to reach the cluster and how the adapter behaves.
#[derive(Clone, Debug)]
pub struct TikvConfig {
    /// PD endpoints (`host:port`, optionally with `http://` / `https://`).
    pub pd_endpoints: Vec<String>,
    /// Timeout of each gRPC call the client makes (default 2 s, the client's default).
    pub rpc_timeout: Duration,
    /// Deadline of one [`RawKv`](percolator::RawKv) call, client retries included (default 20 s). On expiry the
    /// call fails with [`KvError::Unavailable`](percolator::KvError::Unavailable).
    pub op_timeout: Duration,
    /// Deadline for connecting to PD (default 10 s).
    pub connect_timeout: Duration,
    /// Mutual TLS files; `None` for plaintext.
    pub tls: Option<TlsFiles>,
    /// Which keys are CASed (default: all).
    pub atomic_keys: AtomicKeys,
    /// Largest gRPC message the client accepts (default 256 MiB; the client's default of 4 MiB
    /// would refuse a scan page of large values).
    pub max_message_bytes: usize,
    /// Every CASed value is unique (`percolator::design::kv`): read a failed CAS
    /// that found exactly the new value as a success (the client's retry hazard). Default
    /// `false`: outcomes are reported as the server gave them.
    pub unique_cas_values: bool,
    /// Concurrent single-key deletes used for atomic keys (default 16).
    pub delete_concurrency: usize,
    /// Concurrent CAS RPCs of one `batch_compare_and_swap` (default 64): tikv-client 0.4.0
    /// has no batched CAS, so a batch is that many single CASes in flight at a time. A batch
    /// of `n` costs about `ceil(n / cas_concurrency)` CAS round trips; on a cluster each
    /// waits for a Raft commit (milliseconds), so the default lets a commit round of 256
    /// heads finish in 4 of them (16 with the earlier default of 16), while on loopback the
    /// server's CPU, not the window, is the bound. Binaries read it from
    /// `PERCOLATOR_TIKV_CAS_CONCURRENCY` (`percolator_cli::store`).
    pub cas_concurrency: usize,
    /// Reverse scans walk regions from the end of the range (PD region bounds, then a probe
    /// or a verified `RawClient::scan_reverse` per region; default `true`). `false` always
    /// pages the whole range forward (O(range size)).
    pub reverse_scan_fast_path: bool,
    /// How long a region learned from PD is used to cut forward scans into parts without
    /// asking PD again (default 10 s; zero: ask PD for every part, as before the cache, and
    /// send no request of the adapter's own). A stale entry costs RPCs, never keys: each part
    /// is read exactly on any layout (see the crate documentation, "Scans"). A failed read of
    /// a part drops its entry at once. The requests the adapter sends to a region's leader
    /// itself (crate documentation, "Requests sent directly") use an entry whatever its age,
    /// until the store refuses one.
    pub region_cache_ttl: Duration,
    /// First delay of the adapter's retries of transient errors (default 5 ms); each retry
    /// doubles it up to [`TikvConfig::retry_max_delay`], with jitter (a delay is drawn
    /// uniformly between half and all of the current step). Retries stop at `op_timeout`.
    pub retry_base_delay: Duration,
    /// Largest delay between two retries of one call (default 500 ms).
    pub retry_max_delay: Duration,
    /// Longest key the cluster accepts: TiKV's `max-key-size` (default 8 KiB). Calls naming
    /// a longer key are refused with [`KvError::InvalidArgument`](percolator::KvError::InvalidArgument) before anything is sent.
    pub max_key_bytes: usize,
    /// TiKV's `raftstore.raft-entry-max-size` (default 8 MiB). A pair whose key and value
    /// (with [`crate::ENTRY_OVERHEAD_BYTES`] for the raft command around them) would not fit
    /// in one raft entry is refused with [`KvError::InvalidArgument`](percolator::KvError::InvalidArgument) before anything is
    /// sent; the client splits batches into ~16 KiB requests, and a batch the adapter sends
    /// itself fits in one entry, so only single pairs can reach the limit.
    pub max_entry_bytes: usize,
}

impl TikvConfig {
    /// Defaults for these PD endpoints.
    pub fn new(pd_endpoints: Vec<String>) -> Self {
        TikvConfig {
            pd_endpoints,
            rpc_timeout: Duration::from_secs(2),
            op_timeout: Duration::from_secs(20),
            connect_timeout: Duration::from_secs(10),
            tls: None,
            atomic_keys: AtomicKeys::All,
            max_message_bytes: 256 * 1024 * 1024,
            unique_cas_values: false,
            delete_concurrency: 16,
            cas_concurrency: DEFAULT_CAS_CONCURRENCY,
            reverse_scan_fast_path: true,
            region_cache_ttl: Duration::from_secs(10),
            retry_base_delay: Duration::from_millis(5),
            retry_max_delay: Duration::from_millis(500),
            max_key_bytes: 8 * 1024,
            max_entry_bytes: 8 * 1024 * 1024,
        }
    }

    /// tikv-client's own backoff, used for the region errors and gRPC errors it retries
    /// itself (refreshing its region cache in between). Its default
    /// (`DEFAULT_REGION_BACKOFF`: 10 attempts, 2 ms doubling to 500 ms, ~1.5 s in all) gives
    /// up long before `op_timeout` under region churn; this one is jittered (so that many
    /// clients hitting one split do not retry in step), its step grows to
    /// `max(retry_max_delay, op_timeout / 20)` and it has enough attempts for its delays to
    /// add up to about `op_timeout` (the adapter's deadline stops it first).
    /// Capped at 40 attempts: the client doubles its step without a bound, and 2 ms << 62
    /// overflows.
    pub(crate) fn client_backoff(&self) -> tikv_client::Backoff {
        const BASE_MS: u64 = 2;
        let budget_ms = self.op_timeout.as_millis() as u64;
        // A step of a twentieth of the deadline lets 40 attempts cover it.
        let max_ms = (self.retry_max_delay.as_millis() as u64)
            .max(budget_ms / 20)
            .max(BASE_MS);
        let (mut attempts, mut step, mut total) = (0u32, BASE_MS, 0u64);
        while total < budget_ms && attempts < 40 {
            // Equal jitter waits at least half of each step.
            total += step.min(max_ms) / 2;
            step = step.saturating_mul(2);
            attempts += 1;
        }
        tikv_client::Backoff::equal_jitter_backoff(BASE_MS, max_ms, attempts.max(10))
    }

    pub(crate) fn client_config(&self) -> tikv_client::Config {
        let mut config = tikv_client::Config::default()
            .with_timeout(self.rpc_timeout)
            .with_grpc_max_decoding_message_size(self.max_message_bytes);
        if let Some(tls) = &self.tls {
            config = config.with_security(tls.ca.clone(), tls.cert.clone(), tls.key.clone());
        }
        config
    }
}
