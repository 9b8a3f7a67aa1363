//! The TiKV service (raw API) as one store of the cluster answers it. Every request takes
//! one path, [`StoreService::serve`]: the call is counted, injected faults, TiKV's key size
//! limit, the routing checks TiKV makes, its raft entry size limit, the column family
//! check, then the request's own work, whose error the response type maps the way TiKV does
//! (its `error` string, or a gRPC status for responses without one; see [`super::raw`]).

use super::latches::Held;
use super::raw::{check_cf, check_ttl, clamp, scan_range, Keys, RawError, RawRequest, RawResponse};
use super::writes::WriteKind;
use super::State;
use crate::cluster::{
    epoch_not_match, key_not_in_region, not_leader, raft_entry_too_large, region_not_found,
    RegionInfo,
};
use crate::proto::errorpb;
use crate::proto::kvrpcpb::{self, Context, KvPair};
use crate::proto::tikv::tikv_server::Tikv;
use percolator::kv::{KeyRange, KvError, ScanOrder, MAX_SCAN_LIMIT};
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tonic::{Request, Response, Status};

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

impl StoreService {
    /// Serves one raw request: counts it; injects the configured faults (a delay, then
    /// `ServerIsBusy` or a region error); refuses a key over the size limit (TiKV's storage
    /// layer does, before raft); answers a region error when the context names a stale
    /// region, epoch, store or leader or the request's keys lie outside the region, and
    /// `RaftEntryTooLarge` when a write is over the raft entry limit; refuses column
    /// families other than `default`; else runs `work` with the region, mapping its error
    /// as the response type does; then maybe drops the reply (the request stays applied).
    async fn serve<Q, R, F, Fut>(&self, req: Q, work: F) -> Result<Response<R>, Status>
    where
        Q: RawRequest,
        R: RawResponse,
        F: FnOnce(Q, RegionInfo) -> Fut,
        Fut: Future<Output = Result<R, RawError>>,
    {
        self.count_call(Q::METHOD);
        if let Some(delay) = self.injected_delay() {
            tokio::time::sleep(delay).await;
        }
        if let Some(err) = self.injected_error(req.context()) {
            return Ok(Response::new(R::default().with_region_error(err)));
        }
        if let Some((key, size)) = req.keys().too_long(self.limits.max_key_bytes) {
            let prefix = &key[..key.len().min(32)];
            let refused = RawError::Refused(format!(
                "Key is too large: {} ({size} bytes, prefix {prefix:?}), limit {}",
                Q::METHOD,
                self.limits.max_key_bytes
            ));
            return R::default().with_error(refused).map(Response::new);
        }
        // Read before the route: a split or merge after it shows at the write's note.
        let generation = self.layout.generation();
        let region = match self.route(req.context(), req.keys()) {
            Ok(region) => region,
            Err(err) => return Ok(Response::new(R::default().with_region_error(*err))),
        };
        if let Some(size) = req.entry_bytes() {
            if size > self.limits.raft_entry_max_bytes as u64 {
                let err = raft_entry_too_large(region.id, size);
                return Ok(Response::new(R::default().with_region_error(err)));
            }
        }
        let written = req.entry_bytes().map(|bytes| (bytes, req.keys().count()));
        let (region_id, version) = (region.id, region.version);
        // Into the region's size bound once the write is done, failed or dropped midway.
        let bound_note = written.map(|(bytes, keys)| {
            self.note_bound_on_drop(region_id, version, generation, bytes, keys)
        });
        let done = match check_cf(req.cf()) {
            Ok(()) => work(req, region.clone()).await,
            Err(refused) => Err(refused),
        };
        drop(bound_note);
        if let (Ok(_), Some((bytes, keys))) = (&done, written) {
            self.note_write(region_id, bytes, keys).await;
            if let Some(err) = self.applied_region_error(&region) {
                return Ok(Response::new(R::default().with_region_error(err)));
            }
        }
        let reply = match done {
            Ok(response) => Ok(response),
            Err(error) => R::default().with_error(error),
        };
        if reply.is_ok() && self.lose_reply() {
            return Err(Status::unavailable(
                "minitikv: reply lost after the request was applied (injected)",
            ));
        }
        reply.map(Response::new)
    }

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
        if let Some(key) = keys.outside(&region) {
            return Err(key_not_in_region(&key, &region));
        }
        Ok(region)
    }
}

impl State {
    /// The latches of `keys` if the write is in atomic mode (`for_cas`); plain writes take
    /// none, as in TiKV.
    async fn latch_if<'k>(
        &self,
        for_cas: bool,
        keys: impl IntoIterator<Item = &'k [u8]>,
    ) -> Option<Held<'_>> {
        if for_cas {
            Some(self.latches.acquire(keys).await)
        } else {
            None
        }
    }

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
            self.scanned_keys
                .fetch_add(page.len() as u64, Ordering::Relaxed);
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

#[tonic::async_trait]
impl Tikv for StoreService {
    async fn raw_get(
        &self,
        request: Request<kvrpcpb::RawGetRequest>,
    ) -> Result<Response<kvrpcpb::RawGetResponse>, Status> {
        type R = kvrpcpb::RawGetResponse;
        self.serve(request.into_inner(), |req, _| async move {
            match self.store.get(&req.key).await {
                Ok(Some(value)) => Ok(R {
                    value,
                    ..R::default()
                }),
                Ok(None) => Ok(R {
                    not_found: true,
                    ..R::default()
                }),
                Err(e) => Err(RawError::Store("RawGet", e)),
            }
        })
        .await
    }

    async fn raw_batch_get(
        &self,
        request: Request<kvrpcpb::RawBatchGetRequest>,
    ) -> Result<Response<kvrpcpb::RawBatchGetResponse>, Status> {
        type R = kvrpcpb::RawBatchGetResponse;
        self.serve(request.into_inner(), |req, _| async move {
            let values = self
                .store
                .batch_get(&req.keys)
                .await
                .map_err(|e| RawError::Store("RawBatchGet", e))?;
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
            Ok(R {
                region_error: None,
                pairs,
            })
        })
        .await
    }

    async fn raw_put(
        &self,
        request: Request<kvrpcpb::RawPutRequest>,
    ) -> Result<Response<kvrpcpb::RawPutResponse>, Status> {
        type R = kvrpcpb::RawPutResponse;
        self.serve(request.into_inner(), |req, _| async move {
            check_ttl(req.ttl)?;
            let kind = WriteKind::of(req.for_cas);
            let _latched = self.latch_if(req.for_cas, [req.key.as_slice()]).await;
            self.store
                .put(req.key.clone(), req.value)
                .await
                .map_err(|e| RawError::Store("RawPut", e))?;
            self.writes.record(kind, [req.key.as_slice()]);
            Ok(R::default())
        })
        .await
    }

    async fn raw_batch_put(
        &self,
        request: Request<kvrpcpb::RawBatchPutRequest>,
    ) -> Result<Response<kvrpcpb::RawBatchPutResponse>, Status> {
        type R = kvrpcpb::RawBatchPutResponse;
        self.serve(request.into_inner(), |req, _| async move {
            // The request-wide `ttl` is deprecated in favour of `ttls`, but still honoured.
            #[allow(deprecated)]
            let legacy_ttl = req.ttl;
            req.ttls
                .iter()
                .chain([&legacy_ttl])
                .try_for_each(|t| check_ttl(*t))?;
            let keys: Vec<Vec<u8>> = req.pairs.iter().map(|p| p.key.clone()).collect();
            let _latched = self
                .latch_if(req.for_cas, keys.iter().map(Vec::as_slice))
                .await;
            let pairs = req.pairs.into_iter().map(|p| (p.key, p.value)).collect();
            self.store
                .batch_put(pairs)
                .await
                .map_err(|e| RawError::Store("RawBatchPut", e))?;
            let kind = WriteKind::of(req.for_cas);
            self.writes.record(kind, keys.iter().map(Vec::as_slice));
            Ok(R::default())
        })
        .await
    }

    async fn raw_delete(
        &self,
        request: Request<kvrpcpb::RawDeleteRequest>,
    ) -> Result<Response<kvrpcpb::RawDeleteResponse>, Status> {
        type R = kvrpcpb::RawDeleteResponse;
        self.serve(request.into_inner(), |req, _| async move {
            let _latched = self.latch_if(req.for_cas, [req.key.as_slice()]).await;
            self.store
                .delete(req.key.clone())
                .await
                .map_err(|e| RawError::Store("RawDelete", e))?;
            let kind = WriteKind::of(req.for_cas);
            self.writes.record(kind, [req.key.as_slice()]);
            Ok(R::default())
        })
        .await
    }

    async fn raw_batch_delete(
        &self,
        request: Request<kvrpcpb::RawBatchDeleteRequest>,
    ) -> Result<Response<kvrpcpb::RawBatchDeleteResponse>, Status> {
        type R = kvrpcpb::RawBatchDeleteResponse;
        self.serve(request.into_inner(), |req, _| async move {
            let _latched = self
                .latch_if(req.for_cas, req.keys.iter().map(Vec::as_slice))
                .await;
            self.store
                .batch_delete(req.keys.clone())
                .await
                .map_err(|e| RawError::Store("RawBatchDelete", e))?;
            let kind = WriteKind::of(req.for_cas);
            self.writes.record(kind, req.keys.iter().map(Vec::as_slice));
            Ok(R::default())
        })
        .await
    }

    async fn raw_scan(
        &self,
        request: Request<kvrpcpb::RawScanRequest>,
    ) -> Result<Response<kvrpcpb::RawScanResponse>, Status> {
        type R = kvrpcpb::RawScanResponse;
        self.serve(request.into_inner(), |req, region| async move {
            let (range, order) = scan_range(req.start_key, req.end_key, req.reverse);
            let kvs = self
                .scan(
                    clamp(range, &region),
                    req.limit as usize,
                    order,
                    req.key_only,
                )
                .await
                .map_err(|e| RawError::Store("RawScan", e))?;
            Ok(R {
                region_error: None,
                kvs,
            })
        })
        .await
    }

    async fn raw_batch_scan(
        &self,
        request: Request<kvrpcpb::RawBatchScanRequest>,
    ) -> Result<Response<kvrpcpb::RawBatchScanResponse>, Status> {
        type R = kvrpcpb::RawBatchScanResponse;
        self.serve(request.into_inner(), |req, region| async move {
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
                    .map_err(|e| RawError::Store("RawBatchScan", e))?;
                kvs.extend(found);
            }
            Ok(R {
                region_error: None,
                kvs,
            })
        })
        .await
    }

    async fn raw_delete_range(
        &self,
        request: Request<kvrpcpb::RawDeleteRangeRequest>,
    ) -> Result<Response<kvrpcpb::RawDeleteRangeResponse>, Status> {
        type R = kvrpcpb::RawDeleteRangeResponse;
        self.serve(request.into_inner(), |req, region| async move {
            let (range, _) = scan_range(req.start_key, req.end_key, false);
            let range = clamp(range, &region);
            loop {
                let page = self
                    .store
                    .scan(range.clone(), MAX_SCAN_LIMIT, ScanOrder::Forward)
                    .await
                    .map_err(|e| RawError::Store("RawDeleteRange", e))?;
                if page.is_empty() {
                    break;
                }
                let keys = page.into_iter().map(|(k, _)| k).collect();
                self.store
                    .batch_delete(keys)
                    .await
                    .map_err(|e| RawError::Store("RawDeleteRange", e))?;
            }
            Ok(R::default())
        })
        .await
    }

    async fn raw_compare_and_swap(
        &self,
        request: Request<kvrpcpb::RawCasRequest>,
    ) -> Result<Response<kvrpcpb::RawCasResponse>, Status> {
        type R = kvrpcpb::RawCasResponse;
        self.serve(request.into_inner(), |req, _| async move {
            check_ttl(req.ttl)?;
            let expected = (!req.previous_not_exist).then_some(req.previous_value);
            // As TiKV: read, compare and write under the key's latch, which only atomic
            // writes take; a plain write of the key may land in between (see `latches`).
            let _latched = self.latches.acquire([req.key.as_slice()]).await;
            let previous = self
                .store
                .get(&req.key)
                .await
                .map_err(|e| RawError::Store("RawCompareAndSwap", e))?;
            self.latches.cas_checkpoint().await;
            let swapped = previous == expected;
            if swapped {
                self.store
                    .put(req.key.clone(), req.value)
                    .await
                    .map_err(|e| RawError::Store("RawCompareAndSwap", e))?;
                self.writes.record(WriteKind::Cas, [req.key.as_slice()]);
            }
            let out = percolator::kv::CasOutcome { previous, swapped };
            Ok(R {
                region_error: None,
                error: String::new(),
                succeed: out.swapped,
                previous_not_exist: out.previous.is_none(),
                previous_value: out.previous.unwrap_or_default(),
            })
        })
        .await
    }
}
