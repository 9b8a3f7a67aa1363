//! TiKV's request checks minitikv reproduces beyond routing: the key a scan seeks to must lie
//! in its region (a reverse scan's empty upper bound only in the first region), keys of at
//! most 8 KiB, raft entries of at most 8 MiB; and the per-method call counts.

#[macro_use]
mod common;

use common::{get, ok, put, region_ctx as ctx_of};
use minitikv::proto::kvrpcpb::{self, Context};
use minitikv::proto::pd::PdClient;
use minitikv::proto::tikv::tikv_client::TikvClient;
use minitikv::{RunningServer, ServerConfig};
use tonic::transport::Channel;

/// One store, regions `["", "m")` and `["m", "")`; a TiKV client taking messages up to
/// minitikv's limit.
async fn two_regions() -> (RunningServer, PdClient<Channel>, TikvClient<Channel>) {
    let server = minitikv::start(ServerConfig {
        split_keys: vec![b"m".to_vec()],
        ..ServerConfig::in_memory()
    })
    .await
    .unwrap();
    let (pd, kv) = common::clients(&server).await;
    let kv = kv
        .max_decoding_message_size(minitikv::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(minitikv::MAX_MESSAGE_BYTES);
    (server, pd, kv)
}

fn reverse_scan(ctx: Option<Context>, upper: &[u8], lower: &[u8]) -> kvrpcpb::RawScanRequest {
    kvrpcpb::RawScanRequest {
        context: ctx,
        start_key: upper.to_vec(),
        end_key: lower.to_vec(),
        limit: 10,
        reverse: true,
        ..Default::default()
    }
}

/// A reverse scan seeks to its upper bound (`start_key`), which TiKV requires inside the
/// region, its end key included: an empty upper bound is refused with `KeyNotInRegion` in
/// any region but the first (tikv/client-rust#512), a bound at the region's end is served.
#[tokio::test]
async fn reverse_scans_must_seek_inside_their_region() {
    let (_server, mut pd, mut kv) = two_regions().await;
    let last = ctx_of(&mut pd, b"x").await;
    let first = ctx_of(&mut pd, b"a").await;
    for (k, ctx) in [(b"a", first.clone()), (b"x", last.clone())] {
        assert_no_error!(ok(kv.raw_put(put(ctx, k, b"v"))).await);
    }
    let resp = ok(kv.raw_scan(reverse_scan(last.clone(), b"", b"m"))).await;
    let err = resp
        .region_error
        .expect("empty upper bound in the last region");
    assert!(err.key_not_in_region.is_some(), "{err:?}");

    let resp = kv
        .raw_scan(reverse_scan(last, &[0xFF; 8], b"m"))
        .await
        .unwrap()
        .into_inner();
    assert!(resp.region_error.is_none(), "{:?}", resp.region_error);
    assert_eq!(resp.kvs.len(), 1);
    // The region's end key is a valid upper bound; an empty one in the first region too.
    for upper in [&b"m"[..], b""] {
        let resp = ok(kv.raw_scan(reverse_scan(first.clone(), upper, b""))).await;
        assert!(resp.region_error.is_none(), "upper {upper:?}");
        assert_eq!(resp.kvs.len(), 1, "upper {upper:?}");
    }
    // Beyond the region's end: refused.
    let resp = ok(kv.raw_scan(reverse_scan(first, b"n", b""))).await;
    assert!(resp
        .region_error
        .and_then(|e| e.key_not_in_region)
        .is_some());
}

/// Keys over 8 KiB are refused (in the response's error string, before routing), writes
/// over 8 MiB get `RaftEntryTooLarge` naming the region and the size; at the limits, both
/// pass.
#[tokio::test]
async fn keys_and_raft_entries_over_tikvs_limits_are_refused() {
    let (_server, mut pd, mut kv) = two_regions().await;
    let ctx = ctx_of(&mut pd, b"x").await;
    let put = |key: Vec<u8>, value: Vec<u8>| put(ctx.clone(), &key, &value);
    let long = |n: usize| {
        let mut key = b"x".to_vec();
        key.resize(n, b'k');
        key
    };
    let resp = ok(kv.raw_put(put(long(8 * 1024 + 1), b"v".to_vec()))).await;
    assert!(resp.error.contains("Key is too large"), "{resp:?}");
    let resp = ok(kv.raw_put(put(long(8 * 1024), b"v".to_vec()))).await;
    assert!(resp.error.is_empty() && resp.region_error.is_none());

    let limit = 8 * 1024 * 1024;
    let resp = kv
        .raw_put(put(b"x1".to_vec(), vec![7; limit - 2]))
        .await
        .unwrap()
        .into_inner();
    assert!(resp.error.is_empty() && resp.region_error.is_none());
    let resp = kv
        .raw_put(put(b"x2".to_vec(), vec![7; limit - 1]))
        .await
        .unwrap()
        .into_inner();
    let too_large = resp
        .region_error
        .and_then(|e| e.raft_entry_too_large)
        .expect("RaftEntryTooLarge");
    assert_eq!(too_large.entry_size, limit as u64 + 1);
    assert_eq!(Some(too_large.region_id), ctx.as_ref().map(|c| c.region_id));
    // A batch is one entry: two halves of the limit and a little more.
    let batch = kvrpcpb::RawBatchPutRequest {
        context: ctx.clone(),
        pairs: (0..2u8)
            .map(|i| kvrpcpb::KvPair {
                key: vec![b'x', b'b', i],
                value: vec![i; limit / 2],
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let resp = ok(kv.raw_batch_put(batch)).await;
    assert!(resp
        .region_error
        .and_then(|e| e.raft_entry_too_large)
        .is_some());
    assert!(ok(kv.raw_get(get(ctx, b"x2"))).await.not_found);
}

/// Calls are counted by method, PD's too, and scans count the keys they read.
#[tokio::test]
async fn calls_are_counted_by_method() {
    let (server, mut pd, mut kv) = two_regions().await;
    let before = server.rpc_counts();
    let ctx = ctx_of(&mut pd, b"x").await;
    for k in [&b"x1"[..], b"x2", b"x3"] {
        kv.raw_put(put(ctx.clone(), k, b"v")).await.unwrap();
    }
    let scan = kvrpcpb::RawScanRequest {
        context: ctx,
        start_key: b"x".to_vec(),
        limit: 2,
        ..Default::default()
    };
    assert_eq!(ok(kv.raw_scan(scan)).await.kvs.len(), 2);
    let counts = server.rpc_counts().since(&before);
    assert_eq!(counts.calls("GetRegion"), 1);
    assert_eq!(counts.calls("RawPut"), 3);
    assert_eq!(counts.calls("RawScan"), 1);
    assert_eq!(counts.calls("RawBatchScan"), 0);
    assert_eq!(counts.scanned_keys, 2);
}
