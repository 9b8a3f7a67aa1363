//! Where minitikv behaves as TiKV beyond routing, through raw gRPC: raw CAS is serialised
//! only with latched (atomic-mode) writes, a write can be applied and answered with a
//! region error, regions split as their data grows, and the kinds of write each key
//! received are recorded.

use minitikv::proto::kvrpcpb::{self, Context};
use minitikv::proto::pd::PdClient;
use minitikv::proto::pdpb;
use minitikv::proto::tikv::tikv_client::TikvClient;
use minitikv::{RunningServer, ServerConfig, SplitPolicy, WriteKinds};
use tonic::transport::Channel;

async fn clients(server: &RunningServer) -> (PdClient<Channel>, TikvClient<Channel>) {
    let url = format!("http://{}", server.endpoint());
    (
        PdClient::connect(url.clone()).await.expect("PD client"),
        TikvClient::connect(url).await.expect("TiKV client"),
    )
}

/// The context of the region holding `key`, as PD describes it now.
async fn ctx(pd: &mut PdClient<Channel>, key: &[u8]) -> Option<Context> {
    let resp = pd
        .get_region(pdpb::GetRegionRequest {
            region_key: key.to_vec(),
            ..Default::default()
        })
        .await
        .expect("GetRegion")
        .into_inner();
    let region = resp.region.expect("a region");
    Some(Context {
        region_id: region.id,
        region_epoch: region.region_epoch,
        peer: resp.leader,
        ..Default::default()
    })
}

fn put(ctx: Option<Context>, key: &[u8], value: &[u8], for_cas: bool) -> kvrpcpb::RawPutRequest {
    kvrpcpb::RawPutRequest {
        context: ctx,
        key: key.to_vec(),
        value: value.to_vec(),
        for_cas,
        ..Default::default()
    }
}

fn cas(ctx: Option<Context>, key: &[u8], value: &[u8]) -> kvrpcpb::RawCasRequest {
    kvrpcpb::RawCasRequest {
        context: ctx,
        key: key.to_vec(),
        value: value.to_vec(),
        previous_not_exist: true,
        ..Default::default()
    }
}

async fn get(kv: &mut TikvClient<Channel>, ctx: Option<Context>, key: &[u8]) -> Vec<u8> {
    let resp = kv
        .raw_get(kvrpcpb::RawGetRequest {
            context: ctx,
            key: key.to_vec(),
            ..Default::default()
        })
        .await
        .expect("RawGet")
        .into_inner();
    assert!(
        resp.region_error.is_none() && resp.error.is_empty(),
        "{resp:?}"
    );
    resp.value
}

/// As in TiKV, a plain put takes no latch: it lands between a CAS's read and its write, and
/// the CAS (which compared against the value before it) overwrites it. The old server ran
/// CAS atomically against every write, so the plain put waited and the CAS then failed.
#[tokio::test]
async fn a_plain_put_is_not_serialised_with_a_cas() {
    let server = minitikv::start(ServerConfig {
        record_writes: true,
        ..ServerConfig::in_memory()
    })
    .await
    .expect("server");
    let (mut pd, kv) = clients(&server).await;
    let key = b"k-plain";
    let c = ctx(&mut pd, key).await;
    let mut hold = server.hold_cas();
    let mut cas_kv = kv.clone();
    let cas_req = cas(c.clone(), key, b"by cas");
    let pending = tokio::spawn(async move { cas_kv.raw_compare_and_swap(cas_req).await });
    hold.stopped_cas(1).await;
    // Completes while the CAS holds its latch between its read and its write.
    let resp = kv
        .clone()
        .raw_put(put(c.clone(), key, b"by plain put", false))
        .await
        .expect("RawPut")
        .into_inner();
    assert!(
        resp.region_error.is_none() && resp.error.is_empty(),
        "{resp:?}"
    );
    drop(hold);
    let out = pending.await.expect("task").expect("RawCAS").into_inner();
    assert!(out.succeed, "the CAS read the key absent: {out:?}");
    assert!(out.previous_not_exist);
    // The plain put is lost under the CAS.
    assert_eq!(get(&mut kv.clone(), c, key).await, b"by cas");
    let kinds = server.write_kinds();
    let k = kinds.get(key.as_slice()).copied().unwrap_or_default();
    assert_eq!(
        k,
        WriteKinds {
            plain: 1,
            atomic: 0,
            cas: 1
        }
    );
    assert!(k.mixed());
    server.shutdown().await;
}

/// An atomic-mode put (`for_cas`) waits for the CAS's latch and applies after it.
#[tokio::test]
async fn an_atomic_put_waits_for_the_cas_latch() {
    let server = minitikv::start(ServerConfig {
        record_writes: true,
        ..ServerConfig::in_memory()
    })
    .await
    .expect("server");
    let (mut pd, kv) = clients(&server).await;
    let key = b"k-atomic";
    let c = ctx(&mut pd, key).await;
    let mut hold = server.hold_cas();
    let mut cas_kv = kv.clone();
    let cas_req = cas(c.clone(), key, b"by cas");
    let pending_cas = tokio::spawn(async move { cas_kv.raw_compare_and_swap(cas_req).await });
    hold.stopped_cas(1).await;
    let mut put_kv = kv.clone();
    let put_req = put(c.clone(), key, b"by atomic put", true);
    let pending_put = tokio::spawn(async move { put_kv.raw_put(put_req).await });
    hold.latch_waiters(1).await;
    drop(hold);
    let out = pending_cas
        .await
        .expect("task")
        .expect("RawCAS")
        .into_inner();
    assert!(out.succeed, "{out:?}");
    let resp = pending_put
        .await
        .expect("task")
        .expect("RawPut")
        .into_inner();
    assert!(
        resp.region_error.is_none() && resp.error.is_empty(),
        "{resp:?}"
    );
    assert_eq!(get(&mut kv.clone(), c, key).await, b"by atomic put");
    let k = server.write_kinds()[key.as_slice()];
    assert_eq!((k.plain, k.atomic, k.cas, k.mixed()), (0, 1, 1, false));
    server.shutdown().await;
}

/// A write answered with an injected region error after it applied is in the store (a
/// client repeating a CAS then finds its own value: `tests/tests/tikv_applied_errors.rs`).
#[tokio::test]
async fn a_write_can_apply_and_answer_a_region_error() {
    let server = minitikv::start(ServerConfig {
        faults: minitikv::Faults {
            seed: 3,
            applied_region_error: 1.0,
            ..minitikv::Faults::none()
        },
        ..ServerConfig::in_memory()
    })
    .await
    .expect("server");
    let (mut pd, mut kv) = clients(&server).await;
    let key = b"k-applied";
    let c = ctx(&mut pd, key).await;
    let resp = kv
        .raw_put(put(c.clone(), key, b"v1", false))
        .await
        .expect("RawPut")
        .into_inner();
    assert!(resp.region_error.is_some(), "{resp:?}");
    assert_eq!(get(&mut kv, c.clone(), key).await, b"v1");
    let mut first = cas(c.clone(), key, b"v2");
    first.previous_not_exist = false;
    first.previous_value = b"v1".to_vec();
    let resp = kv
        .raw_compare_and_swap(first)
        .await
        .expect("RawCAS")
        .into_inner();
    assert!(resp.region_error.is_some(), "{resp:?}");
    assert_eq!(get(&mut kv, c, key).await, b"v2");
    assert_eq!(server.fault_counts().applied_region_error, 2);
    server.shutdown().await;
}

/// A region over its maximum key count splits into pieces of the split key count, as
/// TiKV's split check does; the keys stay readable region by region.
#[tokio::test]
async fn regions_split_by_key_count_as_data_grows() {
    let policy = SplitPolicy::by_keys(100);
    let server = minitikv::start(ServerConfig {
        split: Some(policy),
        ..ServerConfig::in_memory().single_region()
    })
    .await
    .expect("server");
    let (mut pd, mut kv) = clients(&server).await;
    assert_eq!(server.regions().len(), 1);
    // Ascending keys in batches: every batch lies in the last region.
    for batch in 0..40u32 {
        let keys: Vec<Vec<u8>> = (0..25)
            .map(|i| format!("key{:05}", batch * 25 + i).into_bytes())
            .collect();
        let c = ctx(&mut pd, &keys[0]).await;
        let resp = kv
            .raw_batch_put(kvrpcpb::RawBatchPutRequest {
                context: c,
                pairs: keys
                    .iter()
                    .map(|k| kvrpcpb::KvPair {
                        key: k.clone(),
                        value: b"v".to_vec(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .await
            .expect("RawBatchPut")
            .into_inner();
        assert!(
            resp.region_error.is_none() && resp.error.is_empty(),
            "{resp:?}"
        );
    }
    let regions = server.regions();
    assert!(
        regions.len() >= 6,
        "1,000 keys in {} regions",
        regions.len()
    );
    let mut total = 0;
    for region in &regions {
        let c = ctx(&mut pd, &region.start).await;
        let resp = kv
            .raw_scan(kvrpcpb::RawScanRequest {
                context: c,
                start_key: region.start.clone(),
                end_key: region.end.clone(),
                limit: 10_000,
                key_only: true,
                ..Default::default()
            })
            .await
            .expect("RawScan")
            .into_inner();
        let n = resp.kvs.len() as u64;
        // Checked every split_keys / 16 keys written: at most one batch over the maximum.
        assert!(n <= policy.max_keys + 25, "{n} keys in {region:?}");
        total += n;
    }
    assert_eq!(total, 1_000);
    server.shutdown().await;
}

/// Splitting by size: 1 KiB values under a 64 KiB split size.
#[tokio::test]
async fn regions_split_by_size_as_data_grows() {
    let policy = SplitPolicy::from_split_size(64 * 1024);
    let server = minitikv::start(ServerConfig {
        split: Some(policy),
        ..ServerConfig::in_memory().single_region()
    })
    .await
    .expect("server");
    let (mut pd, mut kv) = clients(&server).await;
    for i in 0..400u32 {
        let key = format!("big{i:05}").into_bytes();
        let c = ctx(&mut pd, &key).await;
        let resp = kv
            .raw_put(put(c, &key, &[7u8; 1024], false))
            .await
            .expect("RawPut")
            .into_inner();
        assert!(
            resp.region_error.is_none() && resp.error.is_empty(),
            "{resp:?}"
        );
    }
    // 400 KiB in pieces of about 64 KiB.
    let n = server.regions().len();
    assert!((4..=8).contains(&n), "{n} regions");
    server.shutdown().await;
}
