//! The model-based randomized test (`common/model.rs`) on the faulty memory store (CAS retry
//! hazard and delays injected); on TiKV in `txn_tikv.rs`.

mod common;
use common::*;
use percolator::kv::{Faults, FaultyKv, MemoryKv};
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_histories_match_the_model() {
    for seed in 0..4 {
        let faulty = Arc::new(FaultyKv::new(Arc::new(MemoryKv::new()), Faults::default()));
        model::run_history(faulty, seed, 25).await;
    }
}
