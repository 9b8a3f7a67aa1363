//! minitikv answered through raw gRPC (its own generated clients): PD calls, raw RPCs, TiKV
//! shaped errors, and the `minitikv serve` binary.

#[macro_use]
mod common;

use common::{clients, ctx_for, get, ok, pd_region, put, refused};
use minitikv::proto::kvrpcpb::{self, Context};
use minitikv::proto::metapb;
use minitikv::proto::pd::PdClient;
use minitikv::proto::pdpb;
use minitikv::proto::tikv::tikv_client::TikvClient;
use minitikv::{ServerConfig, CLUSTER_ID, PEER_ID, REGION_ID, STORE_ID};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

fn ctx() -> Option<Context> {
    Some(Context {
        region_id: REGION_ID,
        region_epoch: Some(metapb::RegionEpoch {
            conf_ver: 1,
            version: 1,
        }),
        peer: Some(metapb::Peer {
            id: PEER_ID,
            store_id: STORE_ID,
            ..Default::default()
        }),
        ..Default::default()
    })
}

#[tokio::test]
async fn pd_describes_one_store_and_one_region_covering_every_key() {
    let server = minitikv::start(ServerConfig::in_memory().single_region())
        .await
        .unwrap();
    let (mut pd, _) = clients(&server).await;
    let members = ok(pd.get_members(pdpb::GetMembersRequest::default())).await;
    assert_eq!(members.header.unwrap().cluster_id, CLUSTER_ID);
    assert_eq!(
        members.leader.unwrap().client_urls,
        vec![format!("http://{}", server.endpoint())]
    );
    let region = ok(pd.get_region(pdpb::GetRegionRequest {
        region_key: b"anything".to_vec(),
        ..Default::default()
    }))
    .await;
    let r = region.region.unwrap();
    assert_eq!((r.id, r.start_key, r.end_key), (REGION_ID, vec![], vec![]));
    assert_eq!(region.leader.unwrap().store_id, STORE_ID);
    let by_id = ok(pd.get_region_by_id(pdpb::GetRegionByIdRequest {
        region_id: 77,
        ..Default::default()
    }))
    .await;
    assert!(by_id.region.is_none(), "unknown region id: no region");
    let store = ok(pd.get_store(pdpb::GetStoreRequest {
        store_id: STORE_ID,
        ..Default::default()
    }))
    .await;
    assert_eq!(store.store.unwrap().address, server.endpoint());
    let missing = ok(pd.get_store(pdpb::GetStoreRequest {
        store_id: 9,
        ..Default::default()
    }))
    .await;
    assert!(missing.header.unwrap().error.unwrap().message.contains("9"));
    let wrong_cluster = ok(pd.get_all_stores(pdpb::GetAllStoresRequest {
        header: Some(pdpb::RequestHeader {
            cluster_id: 1234,
            sender_id: 0,
        }),
        ..Default::default()
    }))
    .await;
    assert!(wrong_cluster.header.unwrap().error.is_some());

    // The TSO stream answers each request with `count` increasing timestamps.
    let requests = futures::stream::iter((0..3).map(|_| pdpb::TsoRequest {
        header: Some(pdpb::RequestHeader {
            cluster_id: CLUSTER_ID,
            sender_id: 0,
        }),
        count: 10,
        dc_location: String::new(),
    }));
    let mut responses = ok(pd.tso(requests)).await;
    let mut last = (0i64, 0i64);
    for _ in 0..3 {
        let resp = responses.message().await.unwrap().unwrap();
        assert_eq!(resp.count, 10);
        let ts = resp.timestamp.unwrap();
        let first = (ts.physical, ts.logical - 9);
        assert!(
            first > last,
            "timestamps increase: {first:?} after {last:?}"
        );
        last = (ts.physical, ts.logical);
    }
    server.shutdown().await;
}

#[tokio::test]
async fn raw_rpcs_answer_like_tikv() {
    let server = minitikv::start(ServerConfig::in_memory().single_region())
        .await
        .unwrap();
    let (_, mut kv) = clients(&server).await;
    for (k, v) in [
        (&b"a"[..], &b"1"[..]),
        (b"b", b""),
        (b"c", b"3"),
        (b"d", b"4"),
    ] {
        assert_no_error!(ok(kv.raw_put(put(ctx(), k, v))).await);
    }
    let resp = ok(kv.raw_get(get(ctx(), b"b"))).await;
    assert!(
        !resp.not_found && resp.value.is_empty(),
        "empty value is found"
    );
    let resp = ok(kv.raw_get(get(ctx(), b"zz"))).await;
    assert!(resp.not_found, "absent key: not_found");

    let batch = ok(kv.raw_batch_get(kvrpcpb::RawBatchGetRequest {
        context: ctx(),
        keys: vec![b"a".to_vec(), b"zz".to_vec(), b"b".to_vec()],
        ..Default::default()
    }))
    .await;
    let keys: Vec<_> = batch.pairs.iter().map(|p| p.key.clone()).collect();
    assert_eq!(keys, vec![b"a".to_vec(), b"b".to_vec()], "only found keys");

    let scan = |start: &[u8], end: &[u8], reverse: bool, limit: u32, key_only: bool| {
        kvrpcpb::RawScanRequest {
            context: ctx(),
            start_key: start.to_vec(),
            end_key: end.to_vec(),
            limit,
            key_only,
            reverse,
            ..Default::default()
        }
    };
    let keys_of = |r: kvrpcpb::RawScanResponse| -> Vec<Vec<u8>> {
        r.kvs.into_iter().map(|p| p.key).collect()
    };
    let fwd = kv
        .raw_scan(scan(b"b", b"d", false, 10, false))
        .await
        .unwrap();
    assert_eq!(
        keys_of(fwd.into_inner()),
        vec![b"b".to_vec(), b"c".to_vec()]
    );
    // Reverse: start_key is the (exclusive) upper bound, end_key the lower bound.
    let rev = kv.raw_scan(scan(b"d", b"a", true, 2, false)).await.unwrap();
    assert_eq!(
        keys_of(rev.into_inner()),
        vec![b"c".to_vec(), b"b".to_vec()]
    );
    let open = kv.raw_scan(scan(b"", b"", true, 1, true)).await.unwrap();
    let open = open.into_inner();
    assert_eq!(open.kvs[0].key, b"d".to_vec());
    assert!(open.kvs[0].value.is_empty(), "key_only");

    let bs = ok(kv.raw_batch_scan(kvrpcpb::RawBatchScanRequest {
        context: ctx(),
        ranges: vec![
            kvrpcpb::KeyRange {
                start_key: b"a".to_vec(),
                end_key: b"c".to_vec(),
            },
            kvrpcpb::KeyRange {
                start_key: b"c".to_vec(),
                end_key: vec![],
            },
        ],
        each_limit: 1,
        ..Default::default()
    }))
    .await;
    let keys: Vec<_> = bs.kvs.iter().map(|p| p.key.clone()).collect();
    assert_eq!(
        keys,
        vec![b"a".to_vec(), b"c".to_vec()],
        "each_limit per range"
    );

    let cas = |prev: Option<&[u8]>, new: &[u8]| kvrpcpb::RawCasRequest {
        context: ctx(),
        key: b"k".to_vec(),
        value: new.to_vec(),
        previous_not_exist: prev.is_none(),
        previous_value: prev.unwrap_or_default().to_vec(),
        ..Default::default()
    };
    let r = ok(kv.raw_compare_and_swap(cas(None, b"x"))).await;
    assert!(r.succeed && r.previous_not_exist);
    let r = ok(kv.raw_compare_and_swap(cas(None, b"y"))).await;
    assert!(!r.succeed && !r.previous_not_exist && r.previous_value == b"x");
    let r = ok(kv.raw_compare_and_swap(cas(Some(b"x"), b"y"))).await;
    assert!(r.succeed && r.previous_value == b"x");

    let dr = ok(kv.raw_delete_range(kvrpcpb::RawDeleteRangeRequest {
        context: ctx(),
        start_key: b"b".to_vec(),
        end_key: b"d".to_vec(),
        ..Default::default()
    }))
    .await;
    assert!(dr.error.is_empty());
    let left = kv.raw_scan(scan(b"", b"", false, 10, true)).await.unwrap();
    assert_eq!(
        keys_of(left.into_inner()),
        vec![b"a".to_vec(), b"d".to_vec(), b"k".to_vec()]
    );

    let bad_cf = ok(kv.raw_put(kvrpcpb::RawPutRequest {
        cf: "lock".into(),
        ..put(ctx(), b"a", b"1")
    }))
    .await;
    assert!(bad_cf.error.contains("column family"));
    let ttl = ok(kv.raw_put(kvrpcpb::RawPutRequest {
        ttl: 5,
        ..put(ctx(), b"a", b"1")
    }))
    .await;
    assert!(ttl.error.contains("TTL"));
    server.shutdown().await;
}

#[tokio::test]
async fn wrong_region_epoch_or_store_get_region_errors() {
    let server = minitikv::start(ServerConfig::in_memory().single_region())
        .await
        .unwrap();
    let (_, mut kv) = clients(&server).await;
    let mut wrong_region = ctx().unwrap();
    wrong_region.region_id = 42;
    let resp = ok(kv.raw_get(get(Some(wrong_region), b"a"))).await;
    let err = resp.region_error.expect("region error");
    assert_eq!(err.region_not_found.unwrap().region_id, 42);

    let mut stale = ctx().unwrap();
    stale.region_epoch = Some(metapb::RegionEpoch {
        conf_ver: 1,
        version: 0,
    });
    let resp = ok(kv.raw_put(put(Some(stale), b"a", b"v"))).await;
    let err = resp.region_error.expect("region error");
    let current = err
        .epoch_not_match
        .expect("epoch not match")
        .current_regions;
    assert_eq!(current[0].id, REGION_ID);

    let mut other_store = ctx().unwrap();
    other_store.peer = Some(metapb::Peer {
        id: PEER_ID,
        store_id: 5,
        ..Default::default()
    });
    let resp = ok(kv.raw_compare_and_swap(common::cas(Some(other_store), b"a", b"v"))).await;
    assert_eq!(
        resp.region_error
            .expect("region error")
            .store_not_match
            .unwrap()
            .request_store_id,
        5
    );
    let resp = ok(kv.raw_scan(kvrpcpb::RawScanRequest {
        context: None,
        limit: 1,
        ..Default::default()
    }))
    .await;
    assert!(resp.region_error.unwrap().region_not_found.is_some());
    server.shutdown().await;
}

#[tokio::test]
async fn data_survives_a_restart_on_the_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let server = minitikv::start(ServerConfig::embedded(dir.path()).single_region())
        .await
        .unwrap();
    let (_, mut kv) = clients(&server).await;
    assert_no_error!(ok(kv.raw_put(put(ctx(), b"durable", b"yes"))).await);
    drop(kv);
    server.shutdown().await;
    let server = minitikv::start(ServerConfig::embedded(dir.path()).single_region())
        .await
        .unwrap();
    let (_, mut kv) = clients(&server).await;
    let resp = ok(kv.raw_get(get(ctx(), b"durable"))).await;
    assert_eq!(resp.value, b"yes");
    server.shutdown().await;
}

#[tokio::test]
async fn the_binary_prints_its_port_and_serves() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_minitikv"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn minitikv");
    let stdout = child.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    })
    .await
    .unwrap()
    .unwrap();
    let addr = line
        .trim()
        .strip_prefix("minitikv listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    assert!(!addr.ends_with(":0"), "real port printed: {addr}");
    let mut pd = PdClient::connect(format!("http://{addr}")).await.unwrap();
    let members = ok(pd.get_members(pdpb::GetMembersRequest::default())).await;
    assert_eq!(members.header.unwrap().cluster_id, CLUSTER_ID);
    child.kill().unwrap();
    child.wait().unwrap();

    let help = Command::new(env!("CARGO_BIN_EXE_minitikv"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        text.contains("--data") && text.contains("--listen"),
        "{text}"
    );
}

/// Several regions and stores: PD answers the right region per key (and the previous one,
/// and ranges of them); a store that is not the leader answers `NotLeader` naming it; after a
/// split the old epoch gets `EpochNotMatch`; a key outside the region `KeyNotInRegion`; after
/// a merge the merged-away region is not found; after a leader transfer the old leader
/// refuses.
#[tokio::test]
async fn regions_stores_splits_merges_and_leader_moves_route_like_tikv() {
    let server = minitikv::start(ServerConfig {
        split_keys: vec![b"g".to_vec(), b"p".to_vec()],
        stores: 3,
        ..ServerConfig::in_memory()
    })
    .await
    .unwrap();
    let (mut pd, _) = clients(&server).await;
    let stores = ok(pd.get_all_stores(pdpb::GetAllStoresRequest::default()))
        .await
        .stores;
    assert_eq!(stores.len(), 3);
    let addr = |store: u64| {
        let s = stores.iter().find(|s| s.id == store).expect("store");
        format!("http://{}", s.address)
    };

    let (a, _) = pd_region(&mut pd, b"a").await;
    let (h, h_leader) = pd_region(&mut pd, b"h").await;
    let (z, _) = pd_region(&mut pd, b"z").await;
    assert_eq!(
        (a.start_key.as_slice(), a.end_key.as_slice()),
        (&b""[..], &b"g"[..])
    );
    assert_eq!(
        (h.start_key.as_slice(), h.end_key.as_slice()),
        (&b"g"[..], &b"p"[..])
    );
    assert_eq!(
        (z.start_key.as_slice(), z.end_key.as_slice()),
        (&b"p"[..], &b""[..])
    );
    let prev = ok(pd.get_prev_region(pdpb::GetRegionRequest {
        region_key: b"h".to_vec(),
        ..Default::default()
    }))
    .await;
    assert_eq!(prev.region.map(|r| r.id), Some(a.id));
    let scanned = ok(pd.scan_regions(pdpb::ScanRegionsRequest {
        start_key: b"b".to_vec(),
        end_key: b"q".to_vec(),
        ..Default::default()
    }))
    .await;
    assert_eq!(
        scanned
            .regions
            .iter()
            .filter_map(|r| r.region.as_ref().map(|r| r.id))
            .collect::<Vec<_>>(),
        vec![a.id, h.id, z.id]
    );

    // The leader serves; another store answers NotLeader naming it.
    let mut leader = TikvClient::connect(addr(h_leader.store_id)).await.unwrap();
    let put = |key: &[u8], ctx: Context| put(Some(ctx), key, b"v");
    assert_no_error!(ok(leader.raw_put(put(b"h", ctx_for(&h, &h_leader)))).await);
    let other = h_leader.store_id % 3 + 1;
    let mut follower = TikvClient::connect(addr(other)).await.unwrap();
    let mut on_follower = ctx_for(&h, &h_leader);
    on_follower.peer = Some(metapb::Peer {
        store_id: other,
        ..h_leader.clone()
    });
    let err = refused(&mut follower, put(b"h", on_follower)).await;
    assert_eq!(
        err.not_leader.and_then(|n| n.leader).map(|l| l.store_id),
        Some(h_leader.store_id)
    );

    // A key of another region.
    let err = refused(&mut leader, put(b"q", ctx_for(&h, &h_leader))).await;
    assert!(err.key_not_in_region.is_some(), "{err:?}");

    // Split: the old epoch is refused with the current regions.
    server.split(b"k").unwrap();
    let err = refused(&mut leader, put(b"m", ctx_for(&h, &h_leader))).await;
    let current = err
        .epoch_not_match
        .expect("epoch not match")
        .current_regions;
    assert!(
        current.iter().any(|r| r.id == h.id && r.start_key == b"k"),
        "{current:?}"
    );
    let (right, right_leader) = pd_region(&mut pd, b"m").await;
    assert_eq!(right.id, h.id);
    assert_no_error!(ok(leader.raw_put(put(b"m", ctx_for(&right, &right_leader)))).await);

    // Merge the right half away: naming it is RegionNotFound.
    server.merge(b"k").unwrap();
    let err = refused(&mut leader, put(b"m", ctx_for(&right, &right_leader))).await;
    assert!(err.region_not_found.is_some(), "{err:?}");

    // Leader transfer: the old leader refuses, naming the new one.
    let (merged, merged_leader) = pd_region(&mut pd, b"m").await;
    let new_store = merged_leader.store_id % 3 + 1;
    server.transfer_leader(merged.id, new_store).unwrap();
    let err = refused(&mut leader, put(b"m", ctx_for(&merged, &merged_leader))).await;
    assert_eq!(
        err.not_leader.and_then(|n| n.leader).map(|l| l.store_id),
        Some(new_store)
    );
}

/// A reply lost after apply: the client sees UNAVAILABLE, yet the write is there.
#[tokio::test]
async fn lost_replies_are_lost_after_the_write_applied() {
    use percolator::kv::{MemoryKv, RawKv};
    let store = std::sync::Arc::new(MemoryKv::new());
    let server = minitikv::start_with_store(
        store.clone(),
        ServerConfig {
            faults: minitikv::Faults {
                seed: 1,
                lost_reply: 1.0,
                ..minitikv::Faults::none()
            },
            ..ServerConfig::in_memory().single_region()
        },
    )
    .await
    .unwrap();
    let (_, mut kv) = clients(&server).await;
    let status = kv
        .raw_put(put(ctx(), b"k", b"v"))
        .await
        .expect_err("reply lost");
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert_eq!(server.fault_counts().lost_reply, 1);
    assert_eq!(
        store.get(b"k").await.unwrap(),
        Some(b"v".to_vec()),
        "the put applied"
    );
    server.shutdown().await;
}
