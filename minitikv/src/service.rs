//! The PD and TiKV gRPC services over one [`RawKv`] store.

use crate::cluster::{
    epoch_not_match, key_not_in_region, not_leader, region_not_found, server_is_busy, Dice,
    FaultCounts, Faults, Layout, RegionInfo,
};
use crate::proto::kvrpcpb::{self, Context, KvPair};
use crate::proto::pd::Pd;
use crate::proto::tikv::tikv_server::Tikv;
use crate::proto::{errorpb, metapb, pdpb};
use futures::{Stream, StreamExt};
use percolator::kv::{KeyRange, KvError, RawKv, ScanOrder, MAX_SCAN_LIMIT};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;
use tonic::{Request, Response, Status, Streaming};

/// The cluster id PD reports ("minitikv" in ASCII).
pub const CLUSTER_ID: u64 = 0x6d69_6e69_7469_6b76;
/// Logical bits of a PD timestamp.
const LOGICAL_BITS: u32 = 18;

#[derive(Default)]
struct FaultCounters {
    server_busy: AtomicU64,
    region_error: AtomicU64,
    lost_reply: AtomicU64,
    delay: AtomicU64,
    stale_route: AtomicU64,
}

/// Shared state of both services and every store.
pub(crate) struct State {
    pub(crate) store: Arc<dyn RawKv>,
    advertise: String,
    stopped: watch::Receiver<bool>,
    tso: Mutex<(i64, i64)>,
    gc_safe_point: AtomicU64,
    pub(crate) layout: Layout,
    /// Addresses of stores 1..=n (index 0 is store 1), set once every store listens.
    store_addrs: RwLock<Vec<String>>,
    faults: Faults,
    dice: Dice,
    counts: FaultCounters,
}

/// The TiKV service as one store of the cluster answers it.
pub(crate) struct StoreService {
    pub(crate) state: Arc<State>,
    pub(crate) id: u64,
}

impl std::ops::Deref for StoreService {
    type Target = State;
    fn deref(&self) -> &State {
        &self.state
    }
}

/// The keys a request touches, for routing checks.
pub(crate) enum Keys<'a> {
    One(&'a [u8]),
    Many(Vec<&'a [u8]>),
}

impl State {
    pub(crate) fn new(
        store: Arc<dyn RawKv>,
        advertise: String,
        stopped: watch::Receiver<bool>,
        layout: Layout,
        faults: Faults,
    ) -> Self {
        State {
            store,
            advertise: advertise.clone(),
            stopped,
            tso: Mutex::new((0, 0)),
            gc_safe_point: AtomicU64::new(0),
            layout,
            store_addrs: RwLock::new(vec![advertise]),
            dice: Dice::new(faults.seed),
            faults,
            counts: FaultCounters::default(),
        }
    }

    pub(crate) fn set_store_addrs(&self, addrs: Vec<String>) {
        *self.store_addrs.write().unwrap_or_else(|e| e.into_inner()) = addrs;
    }

    pub(crate) fn fault_counts(&self) -> FaultCounts {
        let c = &self.counts;
        FaultCounts {
            server_busy: c.server_busy.load(Ordering::Relaxed),
            region_error: c.region_error.load(Ordering::Relaxed),
            lost_reply: c.lost_reply.load(Ordering::Relaxed),
            delay: c.delay.load(Ordering::Relaxed),
            stale_route: c.stale_route.load(Ordering::Relaxed),
        }
    }

    fn store_addr(&self, id: u64) -> Option<String> {
        let addrs = self.store_addrs.read().unwrap_or_else(|e| e.into_inner());
        id.checked_sub(1)
            .and_then(|i| addrs.get(i as usize))
            .cloned()
    }

    /// An injected delay, if the dice say so.
    fn injected_delay(&self) -> Option<Duration> {
        if self.faults.max_delay.is_zero() || !self.dice.hit(self.faults.delay) {
            return None;
        }
        self.counts.delay.fetch_add(1, Ordering::Relaxed);
        Some(self.faults.max_delay.mul_f64(self.dice.unit()))
    }

    /// An injected `ServerIsBusy` or region error, if the dice say so.
    fn injected_error(&self, ctx: Option<&Context>) -> Option<errorpb::Error> {
        if self.dice.hit(self.faults.server_busy) {
            self.counts.server_busy.fetch_add(1, Ordering::Relaxed);
            return Some(server_is_busy());
        }
        if self.dice.hit(self.faults.region_error) {
            self.counts.region_error.fetch_add(1, Ordering::Relaxed);
            let region_id = ctx.map_or(0, |c| c.region_id);
            let region = self.layout.by_id(region_id);
            return Some(match (self.dice.next_u64() % 3, region) {
                (0, Some(region)) => not_leader(&region),
                (1, Some(region)) => {
                    epoch_not_match(vec![region.meta(self.layout.stores)], region.id)
                }
                _ => region_not_found(region_id),
            });
        }
        None
    }

    /// Whether to drop the reply of a request that was applied.
    fn lose_reply(&self) -> bool {
        let lost = self.dice.hit(self.faults.lost_reply);
        if lost {
            self.counts.lost_reply.fetch_add(1, Ordering::Relaxed);
        }
        lost
    }

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

impl StoreService {
    /// The region a request is for, or the region error TiKV would answer: the context must
    /// name an existing region, its current epoch and this store as its leader, and every
    /// key must lie inside it.
    fn route(
        &self,
        ctx: Option<&Context>,
        keys: Keys<'_>,
    ) -> Result<RegionInfo, Box<errorpb::Error>> {
        self.check_route(ctx, keys).map_err(|e| {
            self.counts.stale_route.fetch_add(1, Ordering::Relaxed);
            Box::new(e)
        })
    }

    // A region error is what TiKV answers; it is boxed by `route` for the caller.
    #[allow(clippy::result_large_err)]
    fn check_route(
        &self,
        ctx: Option<&Context>,
        keys: Keys<'_>,
    ) -> Result<RegionInfo, errorpb::Error> {
        let Some(ctx) = ctx else {
            return Err(region_not_found(0));
        };
        let Some(region) = self.layout.by_id(ctx.region_id) else {
            return Err(region_not_found(ctx.region_id));
        };
        if let Some(peer) = &ctx.peer {
            if peer.store_id != self.id {
                return Err(errorpb::Error {
                    message: format!(
                        "store not match, request store id is {}, but actual store id is {}",
                        peer.store_id, self.id
                    ),
                    store_not_match: Some(errorpb::StoreNotMatch {
                        request_store_id: peer.store_id,
                        actual_store_id: self.id,
                    }),
                    ..Default::default()
                });
            }
        }
        if region.leader_store != self.id {
            return Err(not_leader(&region));
        }
        let epoch = ctx.region_epoch.clone().unwrap_or_default();
        if epoch != region.epoch() {
            // Like TiKV: the current region and its neighbours (the halves of a split).
            let mut current = vec![region.meta(self.layout.stores)];
            if !region.start.is_empty() {
                if let Some(prev) = self.layout.prev_region(&region.start) {
                    current.push(prev.meta(self.layout.stores));
                }
            }
            return Err(epoch_not_match(current, region.id));
        }
        let bad = match &keys {
            Keys::One(k) => (!region.contains(k)).then_some(*k),
            Keys::Many(ks) => ks.iter().find(|k| !region.contains(k)).copied(),
        };
        if let Some(key) = bad {
            return Err(key_not_in_region(key, &region));
        }
        Ok(region)
    }
}

impl State {
    /// Pages through `range` in `order`, returning up to `limit` pairs (0: none).
    async fn scan(
        &self,
        range: KeyRange,
        limit: usize,
        order: ScanOrder,
        key_only: bool,
    ) -> Result<Vec<KvPair>, KvError> {
        let mut out = Vec::new();
        let mut range = range;
        while out.len() < limit && !range.is_empty() {
            let want = (limit - out.len()).min(MAX_SCAN_LIMIT);
            let page = self.store.scan(range.clone(), want, order).await?;
            let full = page.len() == want;
            if let Some((last, _)) = page.last() {
                match order {
                    ScanOrder::Forward => {
                        let mut next = last.clone();
                        next.push(0);
                        range.start = next;
                    }
                    ScanOrder::Reverse => range.end = Some(last.clone()),
                }
            }
            out.extend(page.into_iter().map(|(key, value)| KvPair {
                error: None,
                key,
                value: if key_only { Vec::new() } else { value },
            }));
            if !full {
                break;
            }
        }
        Ok(out)
    }
}

/// TiKV's raw API serves the `default`, `lock` and `write` column families; minitikv keeps
/// only `default` (an empty name) and refuses the others with an error string.
fn check_cf(cf: &str) -> Result<(), String> {
    if cf.is_empty() || cf == "default" {
        Ok(())
    } else {
        Err(format!(
            "minitikv: column family {cf:?} is not supported (only \"default\")"
        ))
    }
}

fn check_ttl(ttl: u64) -> Result<(), String> {
    if ttl == 0 {
        Ok(())
    } else {
        Err("minitikv: TTL is not supported (storage.enable-ttl = false)".into())
    }
}

/// The raw scan range of a request: forward scans `[start, end)`; reverse scans
/// `[end, start)` descending (TiKV's convention). An empty upper bound means "to the end of
/// the region", here of the key space.
fn scan_range(start_key: Vec<u8>, end_key: Vec<u8>, reverse: bool) -> (KeyRange, ScanOrder) {
    let bound = |k: Vec<u8>| (!k.is_empty()).then_some(k);
    if reverse {
        (
            KeyRange {
                start: end_key,
                end: bound(start_key),
            },
            ScanOrder::Reverse,
        )
    } else {
        (
            KeyRange {
                start: start_key,
                end: bound(end_key),
            },
            ScanOrder::Forward,
        )
    }
}

/// The lowest key a raw scan request reads (TiKV's reverse scans put the upper bound in
/// `start_key`): it must lie in the region the request is sent to.
fn scan_lower_bound<'a>(start_key: &'a [u8], end_key: &'a [u8], reverse: bool) -> &'a [u8] {
    if reverse {
        end_key
    } else {
        start_key
    }
}

/// `range` cut to the keys of `region` (TiKV serves a scan from one region only).
fn clamp(mut range: KeyRange, region: &RegionInfo) -> KeyRange {
    if range.start < region.start {
        range.start = region.start.clone();
    }
    if !region.end.is_empty() {
        match &range.end {
            Some(end) if end.as_slice() <= region.end.as_slice() => {}
            _ => range.end = Some(region.end.clone()),
        }
    }
    range
}

fn internal(op: &str, e: KvError) -> Status {
    tracing::warn!(op, error = %e, "storage error");
    Status::internal(format!("minitikv {op}: {e}"))
}

type TsoStream = Pin<Box<dyn Stream<Item = Result<pdpb::TsoResponse, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl Pd for Arc<State> {
    type TsoStream = TsoStream;

    async fn get_members(
        &self,
        _request: Request<pdpb::GetMembersRequest>,
    ) -> Result<Response<pdpb::GetMembersResponse>, Status> {
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
        let req = request.into_inner();
        if let Some(header) = self.check_cluster(req.header.as_ref()) {
            return Ok(Response::new(pdpb::GetStoreResponse {
                header: Some(header),
                ..Default::default()
            }));
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
        let req = request.into_inner();
        if let Some(header) = self.check_cluster(req.header.as_ref()) {
            return Ok(Response::new(pdpb::GetAllStoresResponse {
                header: Some(header),
                stores: Vec::new(),
            }));
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
        let req = request.into_inner();
        if let Some(header) = self.check_cluster(req.header.as_ref()) {
            return Ok(Response::new(pdpb::GetRegionResponse {
                header: Some(header),
                ..Default::default()
            }));
        }
        let region = self.layout.region_for(&req.region_key);
        Ok(Response::new(self.region_response(Some(region))))
    }

    async fn get_prev_region(
        &self,
        request: Request<pdpb::GetRegionRequest>,
    ) -> Result<Response<pdpb::GetRegionResponse>, Status> {
        let req = request.into_inner();
        if let Some(header) = self.check_cluster(req.header.as_ref()) {
            return Ok(Response::new(pdpb::GetRegionResponse {
                header: Some(header),
                ..Default::default()
            }));
        }
        // Like PD: the region before the one holding the key; none before the first.
        let region = self.layout.prev_region(&req.region_key);
        Ok(Response::new(self.region_response(region)))
    }

    async fn scan_regions(
        &self,
        request: Request<pdpb::ScanRegionsRequest>,
    ) -> Result<Response<pdpb::ScanRegionsResponse>, Status> {
        let req = request.into_inner();
        if let Some(header) = self.check_cluster(req.header.as_ref()) {
            return Ok(Response::new(pdpb::ScanRegionsResponse {
                header: Some(header),
                ..Default::default()
            }));
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
        let req = request.into_inner();
        if let Some(header) = self.check_cluster(req.header.as_ref()) {
            return Ok(Response::new(pdpb::GetRegionResponse {
                header: Some(header),
                ..Default::default()
            }));
        }
        // Like PD: an unknown region id is answered with no region, not an error.
        let region = self.layout.by_id(req.region_id);
        Ok(Response::new(self.region_response(region)))
    }

    async fn get_gc_safe_point(
        &self,
        _request: Request<pdpb::GetGcSafePointRequest>,
    ) -> Result<Response<pdpb::GetGcSafePointResponse>, Status> {
        Ok(Response::new(pdpb::GetGcSafePointResponse {
            header: Some(self.header()),
            safe_point: self.gc_safe_point.load(Ordering::SeqCst),
        }))
    }

    async fn update_gc_safe_point(
        &self,
        request: Request<pdpb::UpdateGcSafePointRequest>,
    ) -> Result<Response<pdpb::UpdateGcSafePointResponse>, Status> {
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

/// Injects the configured faults around a request: a delay, `ServerIsBusy` or a region
/// error before it; a region error when the context names a stale region, epoch, store or
/// leader or `$keys` lie outside the region; else runs `$body` with the region bound to
/// `$region`, then maybe drops the reply (the request stays applied).
macro_rules! with_region {
    ($self:ident, $req:ident, $resp:ty, $keys:expr, |$region:ident| $body:block) => {{
        if let Some(delay) = $self.injected_delay() {
            tokio::time::sleep(delay).await;
        }
        if let Some(err) = $self.injected_error($req.context.as_ref()) {
            return Ok(Response::new(<$resp>::default().with_region_error(err)));
        }
        #[allow(unused_variables)]
        let $region = match $self.route($req.context.as_ref(), $keys) {
            Ok(region) => region,
            Err(err) => return Ok(Response::new(<$resp>::default().with_region_error(*err))),
        };
        let reply: Result<Response<$resp>, Status> = async { $body }.await;
        if reply.is_ok() && $self.lose_reply() {
            return Err(Status::unavailable(
                "minitikv: reply lost after the request was applied (injected)",
            ));
        }
        reply
    }};
}

trait WithRegionError {
    fn with_region_error(self, err: errorpb::Error) -> Self;
}

macro_rules! region_error_field {
    ($($t:ty),*) => {$(
        impl WithRegionError for $t {
            fn with_region_error(mut self, err: errorpb::Error) -> Self {
                self.region_error = Some(err);
                self
            }
        }
    )*};
}

region_error_field!(
    kvrpcpb::RawGetResponse,
    kvrpcpb::RawBatchGetResponse,
    kvrpcpb::RawPutResponse,
    kvrpcpb::RawBatchPutResponse,
    kvrpcpb::RawDeleteResponse,
    kvrpcpb::RawBatchDeleteResponse,
    kvrpcpb::RawScanResponse,
    kvrpcpb::RawBatchScanResponse,
    kvrpcpb::RawDeleteRangeResponse,
    kvrpcpb::RawCasResponse
);

/// Builds a response carrying only an `error` string.
macro_rules! error_response {
    ($resp:ty, $msg:expr) => {
        Ok(Response::new(<$resp>::default().with_error($msg)))
    };
}

trait WithError {
    fn with_error(self, message: String) -> Self;
}

macro_rules! error_field {
    ($($t:ty),*) => {$(
        impl WithError for $t {
            fn with_error(mut self, message: String) -> Self {
                self.error = message;
                self
            }
        }
    )*};
}

error_field!(
    kvrpcpb::RawGetResponse,
    kvrpcpb::RawPutResponse,
    kvrpcpb::RawBatchPutResponse,
    kvrpcpb::RawDeleteResponse,
    kvrpcpb::RawBatchDeleteResponse,
    kvrpcpb::RawDeleteRangeResponse,
    kvrpcpb::RawCasResponse
);

#[tonic::async_trait]
impl Tikv for StoreService {
    async fn raw_get(
        &self,
        request: Request<kvrpcpb::RawGetRequest>,
    ) -> Result<Response<kvrpcpb::RawGetResponse>, Status> {
        type R = kvrpcpb::RawGetResponse;
        let req = request.into_inner();
        with_region!(self, req, R, Keys::One(&req.key), |region| {
            if let Err(msg) = check_cf(&req.cf) {
                return error_response!(R, msg);
            }
            match self.store.get(&req.key).await {
                Ok(Some(value)) => Ok(Response::new(R {
                    value,
                    ..R::default()
                })),
                Ok(None) => Ok(Response::new(R {
                    not_found: true,
                    ..R::default()
                })),
                Err(e) => error_response!(R, e.to_string()),
            }
        })
    }

    async fn raw_batch_get(
        &self,
        request: Request<kvrpcpb::RawBatchGetRequest>,
    ) -> Result<Response<kvrpcpb::RawBatchGetResponse>, Status> {
        type R = kvrpcpb::RawBatchGetResponse;
        let req = request.into_inner();
        with_region!(
            self,
            req,
            R,
            Keys::Many(req.keys.iter().map(Vec::as_slice).collect()),
            |region| {
                check_cf(&req.cf).map_err(Status::invalid_argument)?;
                let values = self
                    .store
                    .batch_get(&req.keys)
                    .await
                    .map_err(|e| internal("RawBatchGet", e))?;
                // Like TiKV: only the keys that exist are returned.
                let pairs = req
                    .keys
                    .into_iter()
                    .zip(values)
                    .filter_map(|(key, value)| {
                        value.map(|value| KvPair {
                            error: None,
                            key,
                            value,
                        })
                    })
                    .collect();
                Ok(Response::new(R {
                    region_error: None,
                    pairs,
                }))
            }
        )
    }

    async fn raw_put(
        &self,
        request: Request<kvrpcpb::RawPutRequest>,
    ) -> Result<Response<kvrpcpb::RawPutResponse>, Status> {
        type R = kvrpcpb::RawPutResponse;
        let req = request.into_inner();
        with_region!(self, req, R, Keys::One(&req.key), |region| {
            if let Err(msg) = check_cf(&req.cf).and_then(|()| check_ttl(req.ttl)) {
                return error_response!(R, msg);
            }
            match self.store.put(req.key, req.value).await {
                Ok(()) => Ok(Response::new(R::default())),
                Err(e) => error_response!(R, e.to_string()),
            }
        })
    }

    async fn raw_batch_put(
        &self,
        request: Request<kvrpcpb::RawBatchPutRequest>,
    ) -> Result<Response<kvrpcpb::RawBatchPutResponse>, Status> {
        type R = kvrpcpb::RawBatchPutResponse;
        let req = request.into_inner();
        with_region!(
            self,
            req,
            R,
            Keys::Many(req.pairs.iter().map(|p| p.key.as_slice()).collect()),
            |region| {
                // The request-wide `ttl` is deprecated in favour of `ttls`, but still honoured.
                #[allow(deprecated)]
                let legacy_ttl = req.ttl;
                let ttl_check = req
                    .ttls
                    .iter()
                    .chain([&legacy_ttl])
                    .try_for_each(|t| check_ttl(*t));
                if let Err(msg) = check_cf(&req.cf).and(ttl_check) {
                    return error_response!(R, msg);
                }
                let pairs = req.pairs.into_iter().map(|p| (p.key, p.value)).collect();
                match self.store.batch_put(pairs).await {
                    Ok(()) => Ok(Response::new(R::default())),
                    Err(e) => error_response!(R, e.to_string()),
                }
            }
        )
    }

    async fn raw_delete(
        &self,
        request: Request<kvrpcpb::RawDeleteRequest>,
    ) -> Result<Response<kvrpcpb::RawDeleteResponse>, Status> {
        type R = kvrpcpb::RawDeleteResponse;
        let req = request.into_inner();
        with_region!(self, req, R, Keys::One(&req.key), |region| {
            if let Err(msg) = check_cf(&req.cf) {
                return error_response!(R, msg);
            }
            match self.store.delete(req.key).await {
                Ok(()) => Ok(Response::new(R::default())),
                Err(e) => error_response!(R, e.to_string()),
            }
        })
    }

    async fn raw_batch_delete(
        &self,
        request: Request<kvrpcpb::RawBatchDeleteRequest>,
    ) -> Result<Response<kvrpcpb::RawBatchDeleteResponse>, Status> {
        type R = kvrpcpb::RawBatchDeleteResponse;
        let req = request.into_inner();
        with_region!(
            self,
            req,
            R,
            Keys::Many(req.keys.iter().map(Vec::as_slice).collect()),
            |region| {
                if let Err(msg) = check_cf(&req.cf) {
                    return error_response!(R, msg);
                }
                match self.store.batch_delete(req.keys).await {
                    Ok(()) => Ok(Response::new(R::default())),
                    Err(e) => error_response!(R, e.to_string()),
                }
            }
        )
    }

    async fn raw_scan(
        &self,
        request: Request<kvrpcpb::RawScanRequest>,
    ) -> Result<Response<kvrpcpb::RawScanResponse>, Status> {
        type R = kvrpcpb::RawScanResponse;
        let req = request.into_inner();
        with_region!(
            self,
            req,
            R,
            Keys::One(scan_lower_bound(&req.start_key, &req.end_key, req.reverse)),
            |region| {
                check_cf(&req.cf).map_err(Status::invalid_argument)?;
                let (range, order) = scan_range(req.start_key, req.end_key, req.reverse);
                let kvs = self
                    .scan(
                        clamp(range, &region),
                        req.limit as usize,
                        order,
                        req.key_only,
                    )
                    .await
                    .map_err(|e| internal("RawScan", e))?;
                Ok(Response::new(R {
                    region_error: None,
                    kvs,
                }))
            }
        )
    }

    async fn raw_batch_scan(
        &self,
        request: Request<kvrpcpb::RawBatchScanRequest>,
    ) -> Result<Response<kvrpcpb::RawBatchScanResponse>, Status> {
        type R = kvrpcpb::RawBatchScanResponse;
        let req = request.into_inner();
        with_region!(
            self,
            req,
            R,
            Keys::Many(
                req.ranges
                    .iter()
                    .map(|r| scan_lower_bound(&r.start_key, &r.end_key, req.reverse))
                    .collect()
            ),
            |region| {
                check_cf(&req.cf).map_err(Status::invalid_argument)?;
                let mut kvs = Vec::new();
                for r in req.ranges {
                    let (range, order) = scan_range(r.start_key, r.end_key, req.reverse);
                    let found = self
                        .scan(
                            clamp(range, &region),
                            req.each_limit as usize,
                            order,
                            req.key_only,
                        )
                        .await
                        .map_err(|e| internal("RawBatchScan", e))?;
                    kvs.extend(found);
                }
                Ok(Response::new(R {
                    region_error: None,
                    kvs,
                }))
            }
        )
    }

    async fn raw_delete_range(
        &self,
        request: Request<kvrpcpb::RawDeleteRangeRequest>,
    ) -> Result<Response<kvrpcpb::RawDeleteRangeResponse>, Status> {
        type R = kvrpcpb::RawDeleteRangeResponse;
        let req = request.into_inner();
        with_region!(self, req, R, Keys::One(&req.start_key), |region| {
            if let Err(msg) = check_cf(&req.cf) {
                return error_response!(R, msg);
            }
            let (range, _) = scan_range(req.start_key, req.end_key, false);
            let range = clamp(range, &region);
            loop {
                let page = match self
                    .store
                    .scan(range.clone(), MAX_SCAN_LIMIT, ScanOrder::Forward)
                    .await
                {
                    Ok(page) => page,
                    Err(e) => return error_response!(R, e.to_string()),
                };
                if page.is_empty() {
                    break;
                }
                let keys = page.into_iter().map(|(k, _)| k).collect();
                if let Err(e) = self.store.batch_delete(keys).await {
                    return error_response!(R, e.to_string());
                }
            }
            Ok(Response::new(R::default()))
        })
    }

    async fn raw_compare_and_swap(
        &self,
        request: Request<kvrpcpb::RawCasRequest>,
    ) -> Result<Response<kvrpcpb::RawCasResponse>, Status> {
        type R = kvrpcpb::RawCasResponse;
        let req = request.into_inner();
        with_region!(self, req, R, Keys::One(&req.key), |region| {
            if let Err(msg) = check_cf(&req.cf).and_then(|()| check_ttl(req.ttl)) {
                return error_response!(R, msg);
            }
            let expected = (!req.previous_not_exist).then_some(req.previous_value);
            // The store's CAS is atomic against every write of its key (for_cas or not), so
            // minitikv is stricter than TiKV, where only for_cas writes take the latches.
            match self
                .store
                .compare_and_swap(req.key, expected, req.value)
                .await
            {
                Ok(out) => Ok(Response::new(R {
                    region_error: None,
                    error: String::new(),
                    succeed: out.swapped,
                    previous_not_exist: out.previous.is_none(),
                    previous_value: out.previous.unwrap_or_default(),
                })),
                Err(e) => error_response!(R, e.to_string()),
            }
        })
    }
}
