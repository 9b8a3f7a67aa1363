//! The Hermitage-style anomaly suite (`common/anomalies.rs`) on the in-memory store. The same
//! checks run on TiKV in `txn_tikv.rs`.

#[macro_use]
mod common;
use common::*;

macro_rules! on_memory {
    ($($name:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $name() {
                anomalies::$name(&memory_client()).await;
            }
        )*
    };
}

for_each_anomaly!(on_memory);
