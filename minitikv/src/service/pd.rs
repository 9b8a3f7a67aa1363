//! The PD service: members, the TSO stream, regions and stores from the layout, the GC
//! safe point.

use super::State;
use super::CLUSTER_ID;
use super::LOGICAL_BITS;
use crate::cluster::RegionInfo;
use crate::proto::pd::Pd;
use crate::proto::{metapb, pdpb};
use futures::{Stream, StreamExt};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use tonic::{Request, Response, Status, Streaming};

impl State {
    fn header(&self) -> pdpb::ResponseHeader {
        pdpb::ResponseHeader {
            cluster_id: CLUSTER_ID,
            error: None,
        }
    }

    fn error_header(&self, kind: pdpb::ErrorType, message: String) -> pdpb::ResponseHeader {
        pdpb::ResponseHeader {
            cluster_id: CLUSTER_ID,
            error: Some(pdpb::Error {
                r#type: kind as i32,
                message,
            }),
        }
    }

    /// A PD error header if the request names another cluster.
    fn check_cluster(&self, header: Option<&pdpb::RequestHeader>) -> Option<pdpb::ResponseHeader> {
        let id = header.map_or(0, |h| h.cluster_id);
        (id != 0 && id != CLUSTER_ID).then(|| {
            self.error_header(
                pdpb::ErrorType::Unknown,
                format!("mismatch cluster id, need {CLUSTER_ID} but got {id}"),
            )
        })
    }

    /// `Err` with the refusal to answer when the request names another cluster: PD answers
    /// with an error in the response header, not with a gRPC error.
    fn in_cluster<R: WithHeader>(
        &self,
        header: Option<&pdpb::RequestHeader>,
    ) -> Result<(), Response<R>> {
        match self.check_cluster(header) {
            Some(refusal) => Err(Response::new(R::with_header(refusal))),
            None => Ok(()),
        }
    }

    fn member(&self) -> pdpb::Member {
        let url = format!("http://{}", self.advertise);
        pdpb::Member {
            name: "minitikv".into(),
            member_id: 1,
            peer_urls: vec![url.clone()],
            client_urls: vec![url],
            binary_version: env!("CARGO_PKG_VERSION").into(),
            ..Default::default()
        }
    }

    fn store_meta(&self, id: u64) -> Option<metapb::Store> {
        let address = self.store_addr(id)?;
        Some(metapb::Store {
            id,
            address: address.clone(),
            state: metapb::StoreState::Up as i32,
            version: "7.1.0".into(),
            peer_address: address,
            node_state: metapb::NodeState::Serving as i32,
            ..Default::default()
        })
    }

    fn region_response(&self, region: Option<RegionInfo>) -> pdpb::GetRegionResponse {
        pdpb::GetRegionResponse {
            header: Some(self.header()),
            leader: region.as_ref().map(RegionInfo::leader),
            region: region.map(|r| r.meta(self.layout.stores)),
            ..Default::default()
        }
    }

    /// `count` fresh timestamps; returns the last one (the client derives the others).
    fn allocate_ts(&self, count: u32) -> pdpb::Timestamp {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let mut tso = self.tso.lock().unwrap_or_else(|e| e.into_inner());
        let (physical, logical) = &mut *tso;
        if now > *physical {
            *physical = now;
            *logical = 0;
        }
        let count = i64::from(count.max(1));
        if *logical + count >= 1 << LOGICAL_BITS {
            *physical += 1;
            *logical = 0;
        }
        *logical += count;
        pdpb::Timestamp {
            physical: *physical,
            logical: *logical,
            suffix_bits: 0,
        }
    }
}

type TsoStream = Pin<Box<dyn Stream<Item = Result<pdpb::TsoResponse, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl Pd for Arc<State> {
    type TsoStream = TsoStream;

    async fn get_members(
        &self,
        _request: Request<pdpb::GetMembersRequest>,
    ) -> Result<Response<pdpb::GetMembersResponse>, Status> {
        self.count_call("GetMembers");
        let member = self.member();
        Ok(Response::new(pdpb::GetMembersResponse {
            header: Some(self.header()),
            members: vec![member.clone()],
            leader: Some(member.clone()),
            etcd_leader: Some(member),
            ..Default::default()
        }))
    }

    // tonic::Status is large, and it is what the stream must yield.
    #[allow(clippy::result_large_err)]
    async fn tso(
        &self,
        request: Request<Streaming<pdpb::TsoRequest>>,
    ) -> Result<Response<Self::TsoStream>, Status> {
        self.count_call("Tso");
        let state = self.clone();
        let mut stopped = self.stopped.clone();
        // The stream ends when the server shuts down, so graceful shutdown is not held up by
        // the client's long-lived TSO stream.
        let stop = async move {
            while !*stopped.borrow() {
                if stopped.changed().await.is_err() {
                    break;
                }
            }
        };
        let responses = request
            .into_inner()
            .take_until(Box::pin(stop))
            .map(move |req| {
                let req = req?;
                if let Some(header) = state.check_cluster(req.header.as_ref()) {
                    return Ok(pdpb::TsoResponse {
                        header: Some(header),
                        count: 0,
                        timestamp: None,
                    });
                }
                let timestamp = state.allocate_ts(req.count);
                Ok(pdpb::TsoResponse {
                    header: Some(state.header()),
                    count: req.count,
                    timestamp: Some(timestamp),
                })
            });
        Ok(Response::new(Box::pin(responses)))
    }

    async fn get_store(
        &self,
        request: Request<pdpb::GetStoreRequest>,
    ) -> Result<Response<pdpb::GetStoreResponse>, Status> {
        self.count_call("GetStore");
        let req = request.into_inner();
        if let Err(refused) = self.in_cluster(req.header.as_ref()) {
            return Ok(refused);
        }
        let Some(store) = self.store_meta(req.store_id) else {
            return Ok(Response::new(pdpb::GetStoreResponse {
                header: Some(self.error_header(
                    pdpb::ErrorType::Unknown,
                    format!("invalid store ID {}, not found", req.store_id),
                )),
                ..Default::default()
            }));
        };
        Ok(Response::new(pdpb::GetStoreResponse {
            header: Some(self.header()),
            store: Some(store),
            stats: None,
        }))
    }

    async fn get_all_stores(
        &self,
        request: Request<pdpb::GetAllStoresRequest>,
    ) -> Result<Response<pdpb::GetAllStoresResponse>, Status> {
        self.count_call("GetAllStores");
        let req = request.into_inner();
        if let Err(refused) = self.in_cluster(req.header.as_ref()) {
            return Ok(refused);
        }
        Ok(Response::new(pdpb::GetAllStoresResponse {
            header: Some(self.header()),
            stores: (1..=self.layout.stores)
                .filter_map(|id| self.store_meta(id))
                .collect(),
        }))
    }

    async fn get_region(
        &self,
        request: Request<pdpb::GetRegionRequest>,
    ) -> Result<Response<pdpb::GetRegionResponse>, Status> {
        self.count_call("GetRegion");
        let req = request.into_inner();
        if let Err(refused) = self.in_cluster(req.header.as_ref()) {
            return Ok(refused);
        }
        let region = self.layout.region_for(&req.region_key);
        Ok(Response::new(self.region_response(Some(region))))
    }

    async fn get_prev_region(
        &self,
        request: Request<pdpb::GetRegionRequest>,
    ) -> Result<Response<pdpb::GetRegionResponse>, Status> {
        self.count_call("GetPrevRegion");
        let req = request.into_inner();
        if let Err(refused) = self.in_cluster(req.header.as_ref()) {
            return Ok(refused);
        }
        // Like PD: the region before the one holding the key; none before the first.
        let region = self.layout.prev_region(&req.region_key);
        Ok(Response::new(self.region_response(region)))
    }

    async fn scan_regions(
        &self,
        request: Request<pdpb::ScanRegionsRequest>,
    ) -> Result<Response<pdpb::ScanRegionsResponse>, Status> {
        self.count_call("ScanRegions");
        let req = request.into_inner();
        if let Err(refused) = self.in_cluster(req.header.as_ref()) {
            return Ok(refused);
        }
        let regions = self
            .layout
            .scan(&req.start_key, &req.end_key, req.limit.max(0) as usize);
        let stores = self.layout.stores;
        Ok(Response::new(pdpb::ScanRegionsResponse {
            header: Some(self.header()),
            region_metas: regions.iter().map(|r| r.meta(stores)).collect(),
            leaders: regions.iter().map(RegionInfo::leader).collect(),
            regions: regions
                .iter()
                .map(|r| pdpb::Region {
                    region: Some(r.meta(stores)),
                    leader: Some(r.leader()),
                    ..Default::default()
                })
                .collect(),
        }))
    }

    async fn get_region_by_id(
        &self,
        request: Request<pdpb::GetRegionByIdRequest>,
    ) -> Result<Response<pdpb::GetRegionResponse>, Status> {
        self.count_call("GetRegionByID");
        let req = request.into_inner();
        if let Err(refused) = self.in_cluster(req.header.as_ref()) {
            return Ok(refused);
        }
        // Like PD: an unknown region id is answered with no region, not an error.
        let region = self.layout.by_id(req.region_id);
        Ok(Response::new(self.region_response(region)))
    }

    async fn get_gc_safe_point(
        &self,
        _request: Request<pdpb::GetGcSafePointRequest>,
    ) -> Result<Response<pdpb::GetGcSafePointResponse>, Status> {
        self.count_call("GetGCSafePoint");
        Ok(Response::new(pdpb::GetGcSafePointResponse {
            header: Some(self.header()),
            safe_point: self.gc_safe_point.load(Ordering::SeqCst),
        }))
    }

    async fn update_gc_safe_point(
        &self,
        request: Request<pdpb::UpdateGcSafePointRequest>,
    ) -> Result<Response<pdpb::UpdateGcSafePointResponse>, Status> {
        self.count_call("UpdateGCSafePoint");
        let wanted = request.into_inner().safe_point;
        let new = self
            .gc_safe_point
            .fetch_max(wanted, Ordering::SeqCst)
            .max(wanted);
        Ok(Response::new(pdpb::UpdateGcSafePointResponse {
            header: Some(self.header()),
            new_safe_point: new,
        }))
    }
}

/// A PD response that can carry only a header (a refusal or an error).
trait WithHeader {
    /// The response with `header` and every other field empty.
    fn with_header(header: pdpb::ResponseHeader) -> Self;
}

macro_rules! with_header {
    ($($response:ty),* $(,)?) => {
        $(impl WithHeader for $response {
            fn with_header(header: pdpb::ResponseHeader) -> Self {
                Self {
                    header: Some(header),
                    ..Default::default()
                }
            }
        })*
    };
}

with_header!(
    pdpb::GetAllStoresResponse,
    pdpb::GetRegionResponse,
    pdpb::GetStoreResponse,
    pdpb::ScanRegionsResponse
);
