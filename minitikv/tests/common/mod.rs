//! Helpers shared by minitikv's gRPC tests: clients of a running server, the context PD
//! gives a key's region, request builders and the unwrapping of an answered call.
#![allow(dead_code)] // each test binary uses its own subset

use minitikv::proto::kvrpcpb::{self, Context};
use minitikv::proto::metapb;
use minitikv::proto::pd::PdClient;
use minitikv::proto::pdpb;
use minitikv::proto::tikv::tikv_client::TikvClient;
use minitikv::RunningServer;
use std::future::Future;
use tonic::transport::Channel;

/// A PD client and a TiKV client of `server`.
pub async fn clients(server: &RunningServer) -> (PdClient<Channel>, TikvClient<Channel>) {
    let url = format!("http://{}", server.endpoint());
    (
        PdClient::connect(url.clone()).await.expect("PD client"),
        TikvClient::connect(url).await.expect("TiKV client"),
    )
}

/// The message of a call the server answered (panics on a gRPC status).
pub async fn ok<T>(call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>) -> T {
    call.await.expect("the call is answered").into_inner()
}

/// The region holding `key` and its leader, as PD describes them now.
pub async fn pd_region(pd: &mut PdClient<Channel>, key: &[u8]) -> (metapb::Region, metapb::Peer) {
    let resp = ok(pd.get_region(pdpb::GetRegionRequest {
        region_key: key.to_vec(),
        ..Default::default()
    }))
    .await;
    (resp.region.expect("region"), resp.leader.expect("leader"))
}

/// The context TiKV expects for `region` (as PD describes it) on its leader's store.
pub fn ctx_for(region: &metapb::Region, leader: &metapb::Peer) -> Context {
    Context {
        region_id: region.id,
        region_epoch: region.region_epoch.clone(),
        peer: Some(leader.clone()),
        ..Default::default()
    }
}

/// The context of the region holding `key`, as PD describes it now.
pub async fn region_ctx(pd: &mut PdClient<Channel>, key: &[u8]) -> Option<Context> {
    let (region, leader) = pd_region(pd, key).await;
    Some(ctx_for(&region, &leader))
}

/// A plain put of `value` at `key`.
pub fn put(ctx: Option<Context>, key: &[u8], value: &[u8]) -> kvrpcpb::RawPutRequest {
    kvrpcpb::RawPutRequest {
        context: ctx,
        key: key.to_vec(),
        value: value.to_vec(),
        ..Default::default()
    }
}

/// A CAS writing `value` at `key` if it is absent.
pub fn cas(ctx: Option<Context>, key: &[u8], value: &[u8]) -> kvrpcpb::RawCasRequest {
    kvrpcpb::RawCasRequest {
        context: ctx,
        key: key.to_vec(),
        value: value.to_vec(),
        previous_not_exist: true,
        ..Default::default()
    }
}

/// A get of `key`.
pub fn get(ctx: Option<Context>, key: &[u8]) -> kvrpcpb::RawGetRequest {
    kvrpcpb::RawGetRequest {
        context: ctx,
        key: key.to_vec(),
        ..Default::default()
    }
}

/// Asserts an answer carries neither a region error nor an error string.
macro_rules! assert_no_error {
    ($resp:expr) => {{
        let resp = &$resp;
        assert!(
            resp.region_error.is_none() && resp.error.is_empty(),
            "{resp:?}"
        );
    }};
}

/// The region error `kv` refuses a put with (panics if it accepts it).
pub async fn refused(
    kv: &mut TikvClient<Channel>,
    req: kvrpcpb::RawPutRequest,
) -> minitikv::proto::errorpb::Error {
    let resp = ok(kv.raw_put(req)).await;
    match resp.region_error {
        Some(error) => error,
        None => panic!("a region error: {resp:?}"),
    }
}
