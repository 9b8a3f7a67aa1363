//! The RawKv conformance suite on every backend.

use percolator::kv::{conformance, EmbeddedKv, MemoryKv, RawKv};
use std::sync::Arc;

fn memory() -> Arc<dyn RawKv> {
    Arc::new(MemoryKv::new())
}

fn embedded() -> (tempfile::TempDir, Arc<dyn RawKv>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let kv = EmbeddedKv::open(dir.path()).expect("open embedded store");
    (dir, Arc::new(kv))
}

macro_rules! conformance_tests {
    ($($name:ident => |$kv:ident, $p:ident| $body:expr;)*) => {
        mod memory_backend {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    let $kv = memory();
                    let $p: &[u8] = b"conf/";
                    $body.await;
                }
            )*
        }
        mod embedded_backend {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    let (_dir, $kv) = embedded();
                    let $p: &[u8] = b"conf/";
                    $body.await;
                }
            )*
        }
    };
}

conformance_tests! {
    absent_vs_empty => |kv, p| conformance::absent_vs_empty(kv.as_ref(), p);
    binary_keys => |kv, p| conformance::binary_keys(kv.as_ref(), p);
    large_values => |kv, p| conformance::large_values(kv.as_ref(), p);
    batch_calls => |kv, p| conformance::batch_calls(kv.as_ref(), p);
    cas_semantics => |kv, p| conformance::cas_semantics(kv.as_ref(), p);
    cas_counter_8x100 => |kv, p| conformance::cas_counter(kv.clone(), p, 8, 100);
    scans => |kv, p| conformance::scans(kv.as_ref(), p);
    scan_limits_are_checked => |kv, p| conformance::scan_limits_are_checked(kv.as_ref(), p);
    paging_past_10240 => |kv, p| conformance::paging(kv.as_ref(), p, 25_000);
    all_checks_share_one_store => |kv, p| conformance::run_all(kv.clone(), p);
}

/// Store calls are yield points: on a single-threaded runtime a loop of calls lets other tasks
/// run (a non-yielding loop once starved the timer of a 2-worker runtime and hung a test).
#[tokio::test(flavor = "current_thread")]
async fn memory_calls_yield_to_other_tasks() {
    conformance::calls_yield_to_other_tasks(memory(), b"conf/").await;
}

#[tokio::test(flavor = "current_thread")]
async fn embedded_calls_yield_to_other_tasks() {
    let (_dir, kv) = embedded();
    conformance::calls_yield_to_other_tasks(kv, b"conf/").await;
}
