//! The transaction suites on TiKV: `percolator_tikv::TikvKv` (default settings, as
//! `open_store` uses) connected to an in-process `minitikv` server, one server per test (in
//! memory, or on an embedded store for the bank).
//!
//! - every anomaly of `common/anomalies.rs`;
//! - every protocol check of `common/protocol.rs` (CAS retry hazard, delayed prewrites and
//!   lock resolution, large values, GC);
//! - the bank with crash injection (`common/bank.rs`), shorter than on the local stores;
//! - the model-based randomized test (`common/model.rs`) with fewer histories, on TiKV as it
//!   is and with the CAS retry hazard and delays injected on top (minitikv does not inject
//!   transport faults);
//! - the model-based test again with a gRPC timeout so short that tikv-client's own retries
//!   are frequent, so that retried CASes really report `swapped = false` for swaps that
//!   applied (`percolator::design::kv`, here from the client itself, not emulated);
//! - the bank and the checks that write or delete versions and data keys again with only
//!   heads and meta records on the atomic client (`AtomicKeys::percolator_spaces`), so that
//!   `V`/`D` keys go through the plain client (puts, `batch_delete` in GC).
//! - in the weather (`common::weather_server`: three stores, ~100 regions through the test
//!   namespace with a split, merge or leader transfer every 10 ms, 0.1% ServerIsBusy, 1%
//!   region errors, 0.5% replies lost after apply): every anomaly and protocol check, the
//!   bank with crashes (split keys) and the model histories; each anomaly and protocol
//!   check runs again in a storm (ten times those rates), since short checks make too few
//!   requests to meet the weather's faults often.

#[macro_use]
mod common;
use common::*;
use percolator::kv::intercept::{Hooks, Intercepted};
use percolator::kv::{Faults, FaultyKv, KvResult};
use percolator::CasOutcome;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

mod anomalies_on_tikv {
    use super::*;

    macro_rules! on_tikv {
        ($($name:ident),* $(,)?) => {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let tikv = tikv_client().await;
                    anomalies::$name(&tikv.client).await;
                }
            )*
        };
    }

    for_each_anomaly!(on_tikv);
}

mod protocol_on_tikv {
    use super::*;

    macro_rules! on_tikv {
        ($($name:ident),* $(,)?) => {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let tikv = tikv_store().await;
                    protocol::$name(tikv.kv.clone()).await;
                }
            )*
        };
    }

    for_each_protocol_check!(on_tikv);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bank_on_tikv_with_crashes() {
    // minitikv keeps its data in an embedded store here (in memory everywhere else).
    let tikv = tikv_embedded_store().await;
    bank::bank(client_on(tikv.kv.clone(), test_config()), 3, 50).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_histories_on_tikv_match_the_model() {
    for seed in 0..3 {
        let tikv = tikv_store().await;
        let kv = match seed {
            0 => tikv.kv.clone(),
            _ => Arc::new(FaultyKv::new(tikv.kv.clone(), Faults::default())),
        };
        model::run_history(kv, seed, 25).await;
    }
}

/// Hooks counting CASes reported as not swapped although the key holds exactly the value
/// they wrote: with unique values (heads carry `seq`), only a retried CAS that had applied
/// reports that.
struct RetryWitness {
    own_value_reports: AtomicU64,
}

#[async_trait::async_trait]
impl Hooks for RetryWitness {
    async fn swapped(&self, _key: &[u8], new: &[u8], out: CasOutcome) -> KvResult<CasOutcome> {
        if !out.swapped && out.previous.as_deref() == Some(new) {
            self.own_value_reports.fetch_add(1, Ordering::Relaxed);
        }
        Ok(out)
    }
}

/// tikv-client retries a gRPC call that timed out (up to 10 times, with backoff). With a
/// 500 us timeout many calls time out after minitikv applied them, and a retried CAS then
/// finds its own value and reports `swapped = false`: the histories must still match the
/// model. Histories run (up to 4, each on a fresh server) until such a retry was seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_histories_survive_the_clients_own_cas_retries() {
    let mut seen = 0;
    for seed in 100..104 {
        let tikv = tikv_store_with(minitikv::ServerConfig::in_memory(), None, |mut c| {
            c.rpc_timeout = Duration::from_micros(500);
            c
        })
        .await;
        let kv = Arc::new(Intercepted::wrap(
            tikv.kv.clone(),
            RetryWitness {
                own_value_reports: AtomicU64::new(0),
            },
        ));
        model::run_history(kv.clone(), seed, 25).await;
        seen += kv.hooks().own_value_reports.load(Ordering::Relaxed);
        if seen > 0 {
            break;
        }
    }
    eprintln!("retried CASes that reported their own applied swap as failed: {seen}");
    assert!(
        seen > 0,
        "no retried CAS reported its own swap: the short timeout no longer provokes retries"
    );
}

mod split_keys_on_tikv {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bank_with_crashes() {
        let tikv = tikv_store_split_keys().await;
        bank::bank(client_on(tikv.kv.clone(), test_config()), 3, 50).await;
    }

    macro_rules! on_split_keys {
        ($($name:ident),* $(,)?) => {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let tikv = tikv_store_split_keys().await;
                    protocol::$name(tikv.kv.clone()).await;
                }
            )*
        };
    }

    on_split_keys! {
        large_values_live_out_of_line,
        gc_keeps_what_the_safe_point_can_see_and_drops_the_rest,
        repeated_overwrites_and_gc_stay_bounded,
        gc_tombstone_keeps_versions_committed_after_the_safe_point,
    }
}

mod in_the_weather {
    use super::*;

    /// A seed per test, from its name (same name, same faults).
    fn seed(name: &str) -> u64 {
        name.bytes()
            .fold(17u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)))
    }

    /// Runs `check` on a store in the weather, then on one in a storm, their faults seeded by
    /// `name`, and reports each.
    async fn in_weather_then_storm<F, Fut>(name: &str, mut check: F)
    where
        F: FnMut(Arc<dyn percolator::kv::RawKv>) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        for storm in [false, true] {
            let seed = seed(name);
            let tikv = if storm {
                tikv_storm_store(seed).await
            } else {
                tikv_weather_store(seed).await
            };
            check(tikv.kv.clone()).await;
            tikv.report(name);
        }
    }

    mod anomalies {
        use super::*;

        macro_rules! in_weather {
            ($($name:ident),* $(,)?) => {
                $(
                    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                    async fn $name() {
                        in_weather_then_storm(stringify!($name), |kv| async move {
                            common::anomalies::$name(&client_on(kv, test_config())).await
                        })
                        .await;
                    }
                )*
            };
        }

        for_each_anomaly!(in_weather);
    }

    mod protocol {
        use super::*;

        macro_rules! in_weather {
            ($($name:ident),* $(,)?) => {
                $(
                    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                    async fn $name() {
                        in_weather_then_storm(stringify!($name), common::protocol::$name).await;
                    }
                )*
            };
        }

        for_each_protocol_check!(in_weather);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bank_with_crashes() {
        let codec = percolator::KeyCodec::new(test_config().namespace);
        let tikv = tikv_store_with(weather_server(seed("bank")), None, |mut c| {
            c.atomic_keys = percolator_tikv::AtomicKeys::percolator_spaces(&codec);
            c
        })
        .await;
        bank::bank(client_on(tikv.kv.clone(), test_config()), 3, 50).await;
        let faults = tikv.server.fault_counts();
        let retries = tikv.report("bank");
        // The weather reached the bank: the server injected faults and the adapter retried.
        assert!(faults.server_busy + faults.region_error + faults.lost_reply > 0);
        assert!(retries.total() + faults.stale_route > 0, "{retries:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn randomized_histories_match_the_model() {
        for seed in 0..2 {
            let tikv = tikv_weather_store(1000 + seed).await;
            model::run_history(tikv.kv.clone(), seed, 25).await;
            tikv.report("model history");
        }
    }
}
