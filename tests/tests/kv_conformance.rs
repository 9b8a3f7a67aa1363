//! The RawKv conformance suite on every local backend (TiKV: `kv_conformance_tikv.rs`).

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

percolator::conformance_suite!(memory_backend, |_check| async { ((), memory()) });
fn embedded_split() -> (tempfile::TempDir, Arc<dyn RawKv>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let kv = percolator::txn::open_embedded(dir.path(), Default::default())
        .expect("open embedded store");
    (dir, Arc::new(kv))
}

percolator::conformance_suite!(embedded_backend, |_check| async { embedded() });
// With the transaction layout's key split (notify keys in a partition of their own).
percolator::conformance_suite!(embedded_split_backend, |_check| async { embedded_split() });

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
