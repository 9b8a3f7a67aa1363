//! The [`RawKv`] conformance suite, generic over backends (feature `testkit`).
//!
//! Every backend runs the same checks. Each check works under its own key prefix, so checks
//! may share a store. Checks panic (with a message naming the check) on a violation, as tests do.
//!
//! ```no_run
//! # async fn demo() {
//! use percolator::kv::{conformance, MemoryKv};
//! use std::sync::Arc;
//! conformance::run_all(Arc::new(MemoryKv::new()), b"conformance/").await;
//! # }
//! ```
//!
//! A test crate runs the suite on a backend with one line, [`conformance_suite!`]
//! (`percolator::conformance_suite!`), which writes one test per check.
//!
//! The checks live in one file per concern (`values.rs`, `cas.rs`, `scans.rs`) but run from one
//! list, [`run_all`] (and [`conformance_suite!`]): a check missing from it shows there.
//!
//! [`conformance_suite!`]: crate::conformance_suite

mod cas;
mod scans;
mod values;

pub use cas::{
    batch_cas_counters, batch_cas_semantics, batch_put_and_cas_semantics, cas_counter,
    cas_sees_every_write, cas_semantics,
};
pub use scans::{calls_yield_to_other_tasks, paging, scan_limits_are_checked, scan_many, scans};
pub use values::{absent_vs_empty, batch_calls, binary_keys, large_values};

use super::RawKv;
use std::sync::Arc;
use std::time::Duration;

/// `prefix ‖ suffix`.
fn key(prefix: &[u8], suffix: &[u8]) -> Vec<u8> {
    let mut k = prefix.to_vec();
    k.extend_from_slice(suffix);
    k
}

/// How long one check may take in [`within`] before it counts as hung.
pub const NO_HANG: Duration = Duration::from_secs(60);

/// Runs `fut` to completion, panicking with `what` if it takes longer than [`NO_HANG`]: a
/// store call that loops (as tikv-client's scan once did) fails the test instead of hanging it.
pub async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(NO_HANG, fut)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {NO_HANG:?}"))
}

/// Writes `mod $module` with one `#[tokio::test]` (multi-threaded, 4 workers) per check of
/// the suite, each on a store of its own, under the prefix `conf/` and within [`NO_HANG`].
///
/// `|check| open` is an async expression (it may use `check`, the check's name, e.g. to
/// seed a fault injector) giving `(guard, Arc<dyn RawKv>)`; the guard (a temporary
/// directory, a server) is dropped when the check ends. Items of the calling module are in
/// scope of `open`; the calling crate needs `tokio` (with its `macros` feature).
///
/// ```ignore
/// percolator::conformance_suite!(memory_backend, |_check| async {
///     ((), Arc::new(MemoryKv::new()) as Arc<dyn RawKv>)
/// });
/// ```
///
/// [`NO_HANG`]: crate::kv::conformance::NO_HANG
#[macro_export]
macro_rules! conformance_suite {
    ($module:ident, |$check:ident| $open:expr) => {
        $crate::conformance_suite!(@checks $module, |$check| $open;
            absent_vs_empty => |kv, p| $crate::kv::conformance::absent_vs_empty(kv.as_ref(), p);
            binary_keys => |kv, p| $crate::kv::conformance::binary_keys(kv.as_ref(), p);
            large_values => |kv, p| $crate::kv::conformance::large_values(kv.as_ref(), p);
            batch_calls => |kv, p| $crate::kv::conformance::batch_calls(kv.as_ref(), p);
            cas_semantics => |kv, p| $crate::kv::conformance::cas_semantics(kv.as_ref(), p);
            cas_counter_8x100 => |kv, p| $crate::kv::conformance::cas_counter(kv.clone(), p, 8, 100);
            cas_sees_every_write =>
                |kv, p| $crate::kv::conformance::cas_sees_every_write(kv.as_ref(), p);
            batch_cas_semantics =>
                |kv, p| $crate::kv::conformance::batch_cas_semantics(kv.as_ref(), p);
            batch_put_and_cas_semantics =>
                |kv, p| $crate::kv::conformance::batch_put_and_cas_semantics(kv.as_ref(), p);
            batch_cas_counters_6x40 =>
                |kv, p| $crate::kv::conformance::batch_cas_counters(kv.clone(), p, 6, 40);
            scans => |kv, p| $crate::kv::conformance::scans(kv.as_ref(), p);
            scan_limits_are_checked =>
                |kv, p| $crate::kv::conformance::scan_limits_are_checked(kv.as_ref(), p);
            scan_many => |kv, p| $crate::kv::conformance::scan_many(kv.as_ref(), p);
            paging_past_10240 => |kv, p| $crate::kv::conformance::paging(kv.as_ref(), p, 25_000);
            all_checks_share_one_store => |kv, p| $crate::kv::conformance::run_all(kv.clone(), p);
        );
    };
    (@checks $module:ident, |$check:ident| $open:expr;
        $($name:ident => |$kv:ident, $p:ident| $body:expr;)*) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    let $check: &'static str = stringify!($name);
                    let (_guard, $kv): (_, ::std::sync::Arc<dyn $crate::kv::RawKv>) = $open.await;
                    let $p: &[u8] = b"conf/";
                    $crate::kv::conformance::within($check, $body).await;
                }
            )*
        }
    };
}

/// Runs every check, each under `prefix` plus the check's name.
pub async fn run_all(kv: Arc<dyn RawKv>, prefix: &[u8]) {
    let p = |name: &str| key(prefix, name.as_bytes());
    absent_vs_empty(kv.as_ref(), &p("absent/")).await;
    binary_keys(kv.as_ref(), &p("binary/")).await;
    large_values(kv.as_ref(), &p("large/")).await;
    batch_calls(kv.as_ref(), &p("batch/")).await;
    cas_semantics(kv.as_ref(), &p("cas/")).await;
    cas_counter(kv.clone(), &p("counter/"), 8, 100).await;
    cas_sees_every_write(kv.as_ref(), &p("seen/")).await;
    batch_cas_semantics(kv.as_ref(), &p("bcas/")).await;
    batch_put_and_cas_semantics(kv.as_ref(), &p("putcas/")).await;
    batch_cas_counters(kv.clone(), &p("bcounters/"), 6, 40).await;
    scans(kv.as_ref(), &p("scan/")).await;
    scan_limits_are_checked(kv.as_ref(), &p("limits/")).await;
    scan_many(kv.as_ref(), &p("many/")).await;
    paging(kv.as_ref(), &p("paging/"), 25_000).await;
}
