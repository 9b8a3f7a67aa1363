//! The protocol corner cases (`common/protocol.rs`) on the in-memory store; on TiKV in
//! `txn_tikv.rs`.

#[macro_use]
mod common;
use common::*;
use percolator::kv::MemoryKv;
use std::sync::Arc;

macro_rules! on_memory {
    ($($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                protocol::$name(Arc::new(MemoryKv::new())).await;
            }
        )*
    };
}

for_each_protocol_check!(on_memory);
