//! Where minitikv behaves as TiKV beyond routing, through raw gRPC: raw CAS is serialised
//! only with latched (atomic-mode) writes, a write can be applied and answered with a
//! region error, regions split as their data grows, and the kinds of write each key
//! received are recorded.

#[macro_use]
mod common;

use common::{cas, clients, get, ok, put, region_ctx as ctx};
use minitikv::proto::kvrpcpb::{self, Context};
use minitikv::proto::pd::PdClient;
use minitikv::proto::tikv::tikv_client::TikvClient;
use minitikv::{RunningServer, ServerConfig, SplitPolicy, WriteKinds};
use tonic::transport::Channel;

/// The value of `key`, read without error.
async fn value(kv: &mut TikvClient<Channel>, ctx: Option<Context>, key: &[u8]) -> Vec<u8> {
    let resp = ok(kv.raw_get(get(ctx, key))).await;
    assert_no_error!(resp);
    resp.value
}

type CasAnswer = Result<tonic::Response<kvrpcpb::RawCasResponse>, tonic::Status>;

/// A server recording the kinds of write, and a CAS writing "by cas" at `key` (absent)
/// stopped between its read and its write while `hold` lives.
struct HeldCas {
    server: RunningServer,
    kv: TikvClient<Channel>,
    ctx: Option<Context>,
    hold: minitikv::CasHold,
    pending: tokio::task::JoinHandle<CasAnswer>,
}

async fn held_cas(key: &[u8]) -> HeldCas {
    let server = minitikv::start(ServerConfig {
        record_writes: true,
        ..ServerConfig::in_memory()
    })
    .await
    .expect("server");
    let (mut pd, kv) = clients(&server).await;
    let ctx = ctx(&mut pd, key).await;
    let mut hold = server.hold_cas();
    let mut cas_kv = kv.clone();
    let cas_req = cas(ctx.clone(), key, b"by cas");
    let pending = tokio::spawn(async move { cas_kv.raw_compare_and_swap(cas_req).await });
    hold.stopped_cas(1).await;
    HeldCas {
        server,
        kv,
        ctx,
        hold,
        pending,
    }
}

/// As in TiKV, a plain put takes no latch: it lands between a CAS's read and its write, and
/// the CAS (which compared against the value before it) overwrites it. The old server ran
/// CAS atomically against every write, so the plain put waited and the CAS then failed.
#[tokio::test]
async fn a_plain_put_is_not_serialised_with_a_cas() {
    let key = b"k-plain";
    let HeldCas {
        server,
        kv,
        ctx: c,
        hold,
        pending,
    } = held_cas(key).await;
    // Completes while the CAS holds its latch between its read and its write.
    assert_no_error!(ok(kv.clone().raw_put(put(c.clone(), key, b"by plain put"))).await);
    drop(hold);
    let out = pending.await.expect("task").expect("RawCAS").into_inner();
    assert!(out.succeed, "the CAS read the key absent: {out:?}");
    assert!(out.previous_not_exist);
    // The plain put is lost under the CAS.
    assert_eq!(value(&mut kv.clone(), c, key).await, b"by cas");
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
    let key = b"k-atomic";
    let HeldCas {
        server,
        kv,
        ctx: c,
        mut hold,
        pending: pending_cas,
    } = held_cas(key).await;
    let mut put_kv = kv.clone();
    let put_req = kvrpcpb::RawPutRequest {
        for_cas: true,
        ..put(c.clone(), key, b"by atomic put")
    };
    let pending_put = tokio::spawn(async move { put_kv.raw_put(put_req).await });
    hold.latch_waiters(1).await;
    drop(hold);
    let out = pending_cas
        .await
        .expect("task")
        .expect("RawCAS")
        .into_inner();
    assert!(out.succeed, "{out:?}");
    assert_no_error!(pending_put
        .await
        .expect("task")
        .expect("RawPut")
        .into_inner());
    assert_eq!(value(&mut kv.clone(), c, key).await, b"by atomic put");
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
    let resp = ok(kv.raw_put(put(c.clone(), key, b"v1"))).await;
    assert!(resp.region_error.is_some(), "{resp:?}");
    assert_eq!(value(&mut kv, c.clone(), key).await, b"v1");
    let mut first = cas(c.clone(), key, b"v2");
    first.previous_not_exist = false;
    first.previous_value = b"v1".to_vec();
    let resp = ok(kv.raw_compare_and_swap(first)).await;
    assert!(resp.region_error.is_some(), "{resp:?}");
    assert_eq!(value(&mut kv, c, key).await, b"v2");
    assert_eq!(server.fault_counts().applied_region_error, 2);
    server.shutdown().await;
}

/// A server of one region to begin with, splitting by `policy`, and its clients.
async fn splitting(policy: SplitPolicy) -> (RunningServer, PdClient<Channel>, TikvClient<Channel>) {
    let server = minitikv::start(ServerConfig {
        split: Some(policy),
        ..ServerConfig::in_memory().single_region()
    })
    .await
    .expect("server");
    let (pd, kv) = clients(&server).await;
    (server, pd, kv)
}

/// The live keys of each of `regions`, read region by region.
async fn keys_per_region(
    regions: &[minitikv::RegionInfo],
    pd: &mut PdClient<Channel>,
    kv: &mut TikvClient<Channel>,
) -> Vec<(minitikv::RegionInfo, u64)> {
    let mut counts = Vec::new();
    for region in regions {
        let c = ctx(pd, &region.start).await;
        let resp = ok(kv.raw_scan(kvrpcpb::RawScanRequest {
            context: c,
            start_key: region.start.clone(),
            end_key: region.end.clone(),
            limit: 10_000,
            key_only: true,
            ..Default::default()
        }))
        .await;
        counts.push((region.clone(), resp.kvs.len() as u64));
    }
    counts
}

/// Puts `key` = `value` through the region `pd` names for it; the write must succeed.
async fn put_key(
    pd: &mut PdClient<Channel>,
    kv: &mut TikvClient<Channel>,
    key: Vec<u8>,
    value: &[u8],
) {
    let c = ctx(pd, &key).await;
    assert_no_error!(ok(kv.raw_put(put(c, &key, value))).await);
}

/// Puts 400 keys of 1 KiB (`big00000`...), in ascending order.
async fn put_400_kib(pd: &mut PdClient<Channel>, kv: &mut TikvClient<Channel>) {
    for i in 0..400u32 {
        put_key(pd, kv, format!("big{i:05}").into_bytes(), &[7u8; 1024]).await;
    }
}

/// Puts `value` at `key`, then deletes it (a notify key's life).
async fn put_then_delete(
    pd: &mut PdClient<Channel>,
    kv: &mut TikvClient<Channel>,
    key: Vec<u8>,
    value: &[u8],
) {
    let c = ctx(pd, &key).await;
    assert_no_error!(ok(kv.raw_put(put(c.clone(), &key, value))).await);
    let resp = ok(kv.raw_delete(kvrpcpb::RawDeleteRequest {
        context: c,
        key,
        ..Default::default()
    }))
    .await;
    assert_no_error!(resp);
}

/// A region over its maximum key count splits into pieces of the split key count, as
/// TiKV's split check does; the keys stay readable region by region.
#[tokio::test]
async fn regions_split_by_key_count_as_data_grows() {
    let policy = SplitPolicy::by_keys(100);
    let (server, mut pd, mut kv) = splitting(policy).await;
    assert_eq!(server.regions().len(), 1);
    // Ascending keys in batches: every batch lies in the last region.
    for batch in 0..40u32 {
        let keys: Vec<Vec<u8>> = (0..25)
            .map(|i| format!("key{:05}", batch * 25 + i).into_bytes())
            .collect();
        let c = ctx(&mut pd, &keys[0]).await;
        let resp = ok(kv.raw_batch_put(kvrpcpb::RawBatchPutRequest {
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
        }))
        .await;
        assert_no_error!(resp);
    }
    let regions = server.regions();
    assert!(
        regions.len() >= 6,
        "1,000 keys in {} regions",
        regions.len()
    );
    let mut total = 0;
    for (region, n) in keys_per_region(&regions, &mut pd, &mut kv).await {
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
    let (server, mut pd, mut kv) = splitting(policy).await;
    put_400_kib(&mut pd, &mut kv).await;
    // 400 KiB in pieces of about 64 KiB.
    let n = server.regions().len();
    assert!((4..=8).contains(&n), "{n} regions");
    server.shutdown().await;
}

/// Keys put and deleted again and again (a notify key's life) leave a region's size where it
/// was: its due split checks skip the count on the region's size bound instead of scanning
/// every deleted key, and a region that then grows past its maximum still splits.
#[tokio::test]
async fn churn_skips_the_count_and_growth_still_splits() {
    let policy = SplitPolicy::by_keys(100);
    let (server, mut pd, mut kv) = splitting(policy).await;
    // Ten live keys, then 300 rounds of a put and a delete of another key: 600 writes,
    // a check due every 6 keys written.
    for i in 0..10u32 {
        put_key(&mut pd, &mut kv, format!("live{i:03}").into_bytes(), b"v").await;
    }
    for i in 0..300u32 {
        let key = format!("churn{i:05}").into_bytes();
        put_then_delete(&mut pd, &mut kv, key, b"v").await;
    }
    let churned = server.split_checks();
    assert_eq!(server.regions().len(), 1);
    // A check is due every 6 keys written (about 100 in all). The first counts (no bound
    // yet); the bound then grows by a key per write and passes the maximum of 150 keys about
    // 140 writes after each count, when the next count resets it: 5 counts, 96 skipped.
    assert_eq!((churned.counted, churned.skipped), (5, 96), "{churned:?}");
    // Growth: 400 live keys in ascending order split the region as before, and no region
    // is left over its maximum by more than the keys written between two checks.
    for i in 0..400u32 {
        put_key(&mut pd, &mut kv, format!("grow{i:05}").into_bytes(), b"v").await;
    }
    let regions = server.regions();
    assert!(
        regions.len() >= 3,
        "410 live keys in {} regions",
        regions.len()
    );
    assert!(server.split_checks().counted > churned.counted);
    let mut total = 0;
    for (region, n) in keys_per_region(&regions, &mut pd, &mut kv).await {
        assert!(n <= policy.max_keys + 6, "{n} keys in {region:?}");
        total += n;
    }
    assert_eq!(total, 410);
    server.shutdown().await;
}

/// The same by size: 1 KiB values put and deleted under a 64 KiB split size skip their
/// counts; live values then split the region as before.
#[tokio::test]
async fn churn_by_size_skips_the_count_and_growth_still_splits() {
    let policy = SplitPolicy::from_split_size(64 * 1024);
    let (server, mut pd, mut kv) = splitting(policy).await;
    for i in 0..200u32 {
        let key = format!("churn{i:05}").into_bytes();
        put_then_delete(&mut pd, &mut kv, key, &[7u8; 1024]).await;
    }
    // About 204 KiB written, a check due every 4 KiB (50); the bound passes the
    // maximum of 96 KiB about every 94 pairs: 3 counts, 47 skipped.
    let churned = server.split_checks();
    assert_eq!(server.regions().len(), 1);
    assert_eq!((churned.counted, churned.skipped), (3, 47), "{churned:?}");
    put_400_kib(&mut pd, &mut kv).await;
    // 400 KiB in pieces of about 64 KiB, as `regions_split_by_size_as_data_grows`.
    let n = server.regions().len();
    assert!((4..=8).contains(&n), "{n} regions");
    server.shutdown().await;
}
