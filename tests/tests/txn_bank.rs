//! The bank test (`common/bank.rs`) on the embedded and the faulty memory store; on TiKV in
//! `txn_tikv.rs`.

mod common;
use common::*;
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bank_on_embedded_store_with_crashes() {
    let (_dir, c) = embedded_client();
    bank::bank(c, 4, 50).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bank_on_faulty_memory_store_with_crashes() {
    use percolator::kv::{Faults, FaultyKv, MemoryKv};
    let kv = Arc::new(FaultyKv::new(Arc::new(MemoryKv::new()), Faults::default()));
    bank::bank(client_on(kv, test_config()), 3, 50).await;
}
