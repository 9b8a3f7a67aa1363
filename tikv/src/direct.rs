//! Requests the adapter sends to a TiKV store itself, where tikv-client 0.4.0 would send
//! more, or spend more on each.
//!
//! **`RawBatchScan` in the last region.** tikv-client groups a batch scan's ranges by region
//! (`PdClient::group_ranges_by_region`), but ends a group at a range whose start is past the
//! region's end without minding that an empty end is the end of the key space. In the last
//! region every range after the first is therefore a group, and an RPC, of its own: on a fresh
//! cluster (one region) a join run's `scan_many` of 2 ranges per click cost 2.07
//! `RawBatchScan`s per joined click. The adapter sends the ranges that lie in a cached last
//! region as one request instead ([`raw_batch_scan`]), with the region's epoch and leader as
//! PD named them.
//!
//! **`RawCompareAndSwap`.** Every CAS is one RPC either way, but tikv-client runs each
//! through its request plan (the request cloned for its retries, sharded, dispatched,
//! merged, its errors extracted): about a fifth of photon's CPU per joined click through
//! TiKV, where CASes are most of the RPCs. The adapter sends a CAS whose key lies in a
//! region it knows (remembered as PD named it, or asked of PD) to that region's leader
//! itself ([`raw_cas`]).
//!
//! **Puts and reads in one region.** tikv-client cuts a batch put into requests of 16 KiB and
//! runs each through the same plan. A put, a batch put whose keys all lie in one known region
//! (up to [`DIRECT_PUT_MAX_BYTES`] and one raft entry; `for_cas` set as tikv-client sets it
//! in atomic mode), a
//! get and a batch get whose keys all lie in one known region go to its leader as one request
//! of the adapter's own ([`raw_batch_put`], [`raw_get`], [`raw_batch_get`]).
//!
//! Exactness rests on the store, as for tikv-client's own requests: a request whose epoch or
//! leader is stale, or a key or range that starts outside the region, is refused with a region
//! error (TiKV clips a range's end to the region; in the last region there is nothing past it),
//! never served from another layout. Any answer but a clean one (a region error, a key error,
//! a transport error, the caller's time budget spent) makes the caller send the same request
//! through tikv-client, and forget the region unless the store was only busy (and the
//! store's channel too when the budget ran out: a connection may hang): the fast path can
//! cost time and a few PD lookups, never a key. A refused write is taken as one that may have
//! applied (TiKV can answer an applied write with `NotLeader` or `StaleCommand`, and a lost
//! reply says nothing): sent again through tikv-client, it is the retry hazard tikv-client's
//! own retries already carry (`crate::design`, "Why every call may be repeated").

use crate::pd::{PdRegions, Peer, RegionBounds, RegionEpoch};
use percolator::kv::KeyRange;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Clone, PartialEq, prost::Message)]
struct Context {
    #[prost(uint64, tag = "1")]
    region_id: u64,
    #[prost(message, optional, tag = "2")]
    region_epoch: Option<RegionEpoch>,
    #[prost(message, optional, tag = "3")]
    peer: Option<Peer>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct WireRange {
    #[prost(bytes = "vec", tag = "1")]
    start_key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    end_key: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RawBatchScanRequest {
    #[prost(message, optional, tag = "1")]
    context: Option<Context>,
    #[prost(message, repeated, tag = "2")]
    ranges: Vec<WireRange>,
    #[prost(uint32, tag = "3")]
    each_limit: u32,
}

/// An error message of any kind (`errorpb.Error`, `kvrpcpb.KeyError`): only its presence
/// is read.
#[derive(Clone, PartialEq, prost::Message)]
struct AnyError {}

/// A region error (`errorpb.Error`): whether the store was only busy is read.
#[derive(Clone, PartialEq, prost::Message)]
struct RegionError {
    #[prost(message, optional, tag = "6")]
    server_is_busy: Option<AnyError>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct WirePair {
    #[prost(message, optional, tag = "1")]
    error: Option<AnyError>,
    #[prost(bytes = "vec", tag = "2")]
    key: Vec<u8>,
    #[prost(bytes = "vec", tag = "3")]
    value: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RawBatchScanResponse {
    #[prost(message, optional, tag = "1")]
    region_error: Option<RegionError>,
    #[prost(message, repeated, tag = "2")]
    kvs: Vec<WirePair>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RawCasRequest {
    #[prost(message, optional, tag = "1")]
    context: Option<Context>,
    #[prost(bytes = "vec", tag = "2")]
    key: Vec<u8>,
    #[prost(bytes = "vec", tag = "3")]
    value: Vec<u8>,
    #[prost(bool, tag = "4")]
    previous_not_exist: bool,
    #[prost(bytes = "vec", tag = "5")]
    previous_value: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RawCasResponse {
    #[prost(message, optional, tag = "1")]
    region_error: Option<RegionError>,
    #[prost(string, tag = "2")]
    error: String,
    #[prost(bool, tag = "3")]
    succeed: bool,
    #[prost(bool, tag = "4")]
    previous_not_exist: bool,
    #[prost(bytes = "vec", tag = "5")]
    previous_value: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RawGetRequest {
    #[prost(message, optional, tag = "1")]
    context: Option<Context>,
    #[prost(bytes = "vec", tag = "2")]
    key: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RawGetResponse {
    #[prost(message, optional, tag = "1")]
    region_error: Option<RegionError>,
    #[prost(string, tag = "2")]
    error: String,
    #[prost(bytes = "vec", tag = "3")]
    value: Vec<u8>,
    #[prost(bool, tag = "4")]
    not_found: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RawBatchGetRequest {
    #[prost(message, optional, tag = "1")]
    context: Option<Context>,
    #[prost(bytes = "vec", repeated, tag = "2")]
    keys: Vec<Vec<u8>>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RawBatchGetResponse {
    #[prost(message, optional, tag = "1")]
    region_error: Option<RegionError>,
    #[prost(message, repeated, tag = "2")]
    pairs: Vec<WirePair>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RawBatchPutRequest {
    #[prost(message, optional, tag = "1")]
    context: Option<Context>,
    #[prost(message, repeated, tag = "2")]
    pairs: Vec<WirePair>,
    #[prost(bool, tag = "5")]
    for_cas: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RawBatchPutResponse {
    #[prost(message, optional, tag = "1")]
    region_error: Option<RegionError>,
    #[prost(string, tag = "2")]
    error: String,
}

/// The most bytes (keys and values) of a batch put sent as one direct `RawBatchPut`, which
/// must also fit in one raft entry (`max_entry_bytes`, with [`crate::ENTRY_OVERHEAD_BYTES`]
/// per pair); a larger batch goes through tikv-client (in requests of 16 KiB). A few times a
/// join batch's writes.
pub(crate) const DIRECT_PUT_MAX_BYTES: usize = 256 * 1024;

/// Requests of one kind the adapter sent itself: answered, and refused (then sent through
/// tikv-client).
#[derive(Default)]
pub(crate) struct DirectCounts {
    pub(crate) sent: AtomicU64,
    pub(crate) refused: AtomicU64,
}

impl DirectCounts {
    /// `(answered, refused)`.
    pub(crate) fn snapshot(&self) -> (u64, u64) {
        (
            self.sent.load(Ordering::Relaxed),
            self.refused.load(Ordering::Relaxed),
        )
    }
}

/// Why a direct request gave no answer (the caller sends it through tikv-client).
#[derive(Debug)]
pub(crate) enum Refused {
    /// The cached region carries no epoch and leader.
    NoRoute,
    /// The store's address or channel could not be had, or the call failed in transport.
    Transport(tikv_client::Error),
    /// The store refused the request for the region (stale epoch, leader moved, ...).
    RegionError,
    /// The store was too busy to serve it (`ServerIsBusy`): the region is still right.
    Busy,
    /// The store answered a pair, or the key, with an error.
    KeyError,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::NoRoute => f.write_str("the cached region names no epoch and leader"),
            Refused::Transport(e) => write!(f, "transport: {e}"),
            Refused::RegionError => f.write_str("region error"),
            Refused::Busy => f.write_str("server is busy"),
            Refused::KeyError => f.write_str("key error in the answer"),
        }
    }
}

/// Up to `each_limit` pairs of each of `ranges` (all inside `region`) through one
/// `RawBatchScan` to the region's leader, unsorted and unclipped as the store answers them.
pub(crate) async fn raw_batch_scan(
    pd: &PdRegions,
    region: &RegionBounds,
    ranges: &[&KeyRange],
    each_limit: u32,
) -> Result<Vec<(Vec<u8>, Vec<u8>)>, Refused> {
    let reply: RawBatchScanResponse = call(pd, region, "/tikvpb.Tikv/RawBatchScan", |context| {
        RawBatchScanRequest {
            context: Some(context),
            ranges: ranges
                .iter()
                .map(|r| WireRange {
                    start_key: r.start.clone(),
                    end_key: r.end.clone().unwrap_or_default(),
                })
                .collect(),
            each_limit,
        }
    })
    .await?;
    Ok(reply.kvs.into_iter().map(|p| (p.key, p.value)).collect())
}

/// The CAS of `key` (from `expected`, `None`: absent, to `new`) through one
/// `RawCompareAndSwap` to the leader of `region` (which holds `key`): the value found before
/// and whether it swapped, as tikv-client's `compare_and_swap` answers.
pub(crate) async fn raw_cas(
    pd: &PdRegions,
    region: &RegionBounds,
    key: &[u8],
    expected: Option<&[u8]>,
    new: &[u8],
) -> Result<(Option<Vec<u8>>, bool), Refused> {
    let reply: RawCasResponse = call(pd, region, "/tikvpb.Tikv/RawCompareAndSwap", |context| {
        RawCasRequest {
            context: Some(context),
            key: key.to_vec(),
            value: new.to_vec(),
            previous_not_exist: expected.is_none(),
            previous_value: expected.map(<[u8]>::to_vec).unwrap_or_default(),
        }
    })
    .await?;
    let previous = (!reply.previous_not_exist).then_some(reply.previous_value);
    Ok((previous, reply.succeed))
}

/// `pairs` (all inside `region`) written through one `RawBatchPut` to the region's leader,
/// `for_cas` as tikv-client's atomic mode sets it (the keys' writes then take the latches
/// their CASes take).
pub(crate) async fn raw_batch_put(
    pd: &PdRegions,
    region: &RegionBounds,
    pairs: &[(Vec<u8>, Vec<u8>)],
    for_cas: bool,
) -> Result<(), Refused> {
    let _: RawBatchPutResponse = call(pd, region, "/tikvpb.Tikv/RawBatchPut", |context| {
        RawBatchPutRequest {
            context: Some(context),
            pairs: pairs
                .iter()
                .map(|(key, value)| WirePair {
                    error: None,
                    key: key.clone(),
                    value: value.clone(),
                })
                .collect(),
            for_cas,
        }
    })
    .await?;
    Ok(())
}

/// The value of `key` (inside `region`) through one `RawGet` to the region's leader.
pub(crate) async fn raw_get(
    pd: &PdRegions,
    region: &RegionBounds,
    key: &[u8],
) -> Result<Option<Vec<u8>>, Refused> {
    let reply: RawGetResponse = call(pd, region, "/tikvpb.Tikv/RawGet", |context| RawGetRequest {
        context: Some(context),
        key: key.to_vec(),
    })
    .await?;
    Ok((!reply.not_found).then_some(reply.value))
}

/// The pairs found of `keys` (all inside `region`) through one `RawBatchGet` to the
/// region's leader, in the store's order.
pub(crate) async fn raw_batch_get(
    pd: &PdRegions,
    region: &RegionBounds,
    keys: &[Vec<u8>],
) -> Result<Vec<(Vec<u8>, Vec<u8>)>, Refused> {
    let reply: RawBatchGetResponse = call(pd, region, "/tikvpb.Tikv/RawBatchGet", |context| {
        RawBatchGetRequest {
            context: Some(context),
            keys: keys.to_vec(),
        }
    })
    .await?;
    Ok(reply.pairs.into_iter().map(|p| (p.key, p.value)).collect())
}

/// The answer of the leader of `region` to the request `build` makes with the region's
/// context, through one unary call of `path`: refused when the region names no leader, the
/// call fails in transport (the store's address and channel are then forgotten), or the
/// answer carries a region error or a key error.
async fn call<Req, Resp>(
    pd: &PdRegions,
    region: &RegionBounds,
    path: &'static str,
    build: impl FnOnce(Context) -> Req,
) -> Result<Resp, Refused>
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: Reply + prost::Message + Default + Send + Sync + 'static,
{
    let route = region.route.ok_or(Refused::NoRoute)?;
    let store = route.leader.store_id;
    let channel = pd.store_channel(store).await.map_err(Refused::Transport)?;
    let request = build(Context {
        region_id: region.id,
        region_epoch: Some(route.epoch),
        peer: Some(route.leader),
    });
    let reply: Resp = pd.unary(channel, path, request).await.map_err(|e| {
        pd.forget_store(store);
        Refused::Transport(e)
    })?;
    match reply.refusal() {
        Some(refused) => Err(refused),
        None => Ok(reply),
    }
}

/// An answer that may refuse its request.
trait Reply {
    /// Why the store refused the request, if it did.
    fn refusal(&self) -> Option<Refused>;
}

/// The refusal of an answer with `region_error` and a key `error` (empty: none).
fn refusal_of(region_error: &Option<RegionError>, key_error: bool) -> Option<Refused> {
    match region_error {
        Some(error) if error.server_is_busy.is_some() => Some(Refused::Busy),
        Some(_) => Some(Refused::RegionError),
        None => key_error.then_some(Refused::KeyError),
    }
}

impl Reply for RawBatchScanResponse {
    fn refusal(&self) -> Option<Refused> {
        refusal_of(
            &self.region_error,
            self.kvs.iter().any(|p| p.error.is_some()),
        )
    }
}

impl Reply for RawBatchGetResponse {
    fn refusal(&self) -> Option<Refused> {
        refusal_of(
            &self.region_error,
            self.pairs.iter().any(|p| p.error.is_some()),
        )
    }
}

impl Reply for RawCasResponse {
    fn refusal(&self) -> Option<Refused> {
        refusal_of(&self.region_error, !self.error.is_empty())
    }
}

impl Reply for RawGetResponse {
    fn refusal(&self) -> Option<Refused> {
        refusal_of(&self.region_error, !self.error.is_empty())
    }
}

impl Reply for RawBatchPutResponse {
    fn refusal(&self) -> Option<Refused> {
        refusal_of(&self.region_error, !self.error.is_empty())
    }
}
