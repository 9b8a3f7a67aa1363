//! The shapes every raw request and response share, for [`super::kv`]'s one `serve` path:
//! a request's name, context, column family, the keys it touches and the bytes it writes;
//! a response's region error and how it carries a failure; the request checks and range
//! helpers TiKV applies.

use crate::cluster::RegionInfo;
use crate::proto::errorpb;
use crate::proto::kvrpcpb::{self, Context};
use percolator::kv::{KeyRange, KvError, ScanOrder};
use tonic::Status;

/// The keys a request touches, for routing checks.
pub(crate) enum Keys<'a> {
    /// One key, which must lie in the region (and within the key size limit).
    One(&'a [u8]),
    /// Several keys, each of which must lie in the region (and within the key size limit).
    Many(Vec<&'a [u8]>),
    /// The keys scans seek to (`start_key`: the lower bound of a forward scan, the upper
    /// bound of a reverse one). As in TiKV (`RegionIterator::should_seekable`), each must
    /// lie in the region, its end key included; an empty key is the first key of the key
    /// space, so an empty upper bound of a reverse scan lies only in the first region.
    Seek(Vec<&'a [u8]>),
}

impl Keys<'_> {
    /// The first key that lies outside `region`.
    pub(crate) fn outside(&self, region: &RegionInfo) -> Option<Vec<u8>> {
        let seekable = |k: &[u8]| {
            k >= region.start.as_slice() && (region.end.is_empty() || k <= region.end.as_slice())
        };
        match self {
            Keys::One(k) => (!region.contains(k)).then(|| k.to_vec()),
            Keys::Many(ks) => ks.iter().find(|k| !region.contains(k)).map(|k| k.to_vec()),
            Keys::Seek(ks) => ks.iter().find(|k| !seekable(k)).map(|k| k.to_vec()),
        }
    }

    /// How many keys (for a write's tally of keys written).
    pub(crate) fn count(&self) -> u64 {
        match self {
            Keys::One(_) => 1,
            Keys::Many(ks) | Keys::Seek(ks) => ks.len() as u64,
        }
    }

    /// The first key longer than `limit` bytes, and its length (seek keys are not checked).
    pub(crate) fn too_long(&self, limit: usize) -> Option<(&[u8], usize)> {
        let long = |k: &&[u8]| k.len() > limit;
        match self {
            Keys::One(k) => Some(*k).filter(long),
            Keys::Many(ks) => ks.iter().copied().find(long),
            Keys::Seek(_) => None,
        }
        .map(|k| (k, k.len()))
    }
}

/// Why a raw request's own work failed; its response type says how TiKV answers it
/// ([`RawResponse::with_error`]).
pub(crate) enum RawError {
    /// A request TiKV would refuse: a column family other than `default`, a TTL, a key over
    /// the size limit.
    Refused(String),
    /// The store failed in the named call.
    Store(&'static str, KvError),
}

/// A raw request: its name, context (region, epoch, peer), column family, the keys it
/// touches (which must lie in its region) and the size of the raft entry it writes.
pub(crate) trait RawRequest {
    /// The RPC's name (`RawGet`, ...), under which calls are counted.
    const METHOD: &'static str;
    fn context(&self) -> Option<&Context>;
    fn cf(&self) -> &str;
    fn keys(&self) -> Keys<'_>;
    /// The bytes the request proposes to raft (keys and values written); `None` for reads.
    fn entry_bytes(&self) -> Option<u64>;
}

macro_rules! raw_request {
    ($($t:ty => $method:literal, |$r:ident| $keys:expr, $entry:expr;)*) => {$(
        impl RawRequest for $t {
            const METHOD: &'static str = $method;
            fn context(&self) -> Option<&Context> {
                self.context.as_ref()
            }
            fn cf(&self) -> &str {
                &self.cf
            }
            fn keys(&self) -> Keys<'_> {
                let $r = self;
                $keys
            }
            #[allow(unused_variables)]
            fn entry_bytes(&self) -> Option<u64> {
                let $r = self;
                $entry
            }
        }
    )*};
}

fn len(bytes: &[u8]) -> u64 {
    bytes.len() as u64
}

raw_request!(
    kvrpcpb::RawGetRequest => "RawGet", |r| Keys::One(&r.key), None;
    kvrpcpb::RawBatchGetRequest => "RawBatchGet", |r| many(&r.keys), None;
    kvrpcpb::RawPutRequest => "RawPut", |r| Keys::One(&r.key), Some(len(&r.key) + len(&r.value));
    kvrpcpb::RawBatchPutRequest => "RawBatchPut",
        |r| Keys::Many(r.pairs.iter().map(|p| p.key.as_slice()).collect()),
        Some(r.pairs.iter().map(|p| len(&p.key) + len(&p.value)).sum());
    kvrpcpb::RawDeleteRequest => "RawDelete", |r| Keys::One(&r.key), Some(len(&r.key));
    kvrpcpb::RawBatchDeleteRequest => "RawBatchDelete", |r| many(&r.keys),
        Some(r.keys.iter().map(|k| len(k)).sum());
    // TiKV's reverse scans put the upper bound in `start_key`: it is the key they seek to.
    kvrpcpb::RawScanRequest => "RawScan", |r| Keys::Seek(vec![&r.start_key]), None;
    kvrpcpb::RawBatchScanRequest => "RawBatchScan",
        |r| Keys::Seek(r.ranges.iter().map(|range| range.start_key.as_slice()).collect()),
        None;
    kvrpcpb::RawDeleteRangeRequest => "RawDeleteRange", |r| Keys::One(&r.start_key),
        Some(len(&r.start_key) + len(&r.end_key));
    kvrpcpb::RawCasRequest => "RawCompareAndSwap", |r| Keys::One(&r.key),
        Some(len(&r.key) + len(&r.value));
);

/// A raw response: carries a region error, and answers a [`RawError`] as TiKV does.
pub(crate) trait RawResponse: Default + Sized {
    fn with_region_error(self, err: errorpb::Error) -> Self;
    /// The answer to `error`: in the response's `error` string, or, for responses without
    /// one, a gRPC status (`INVALID_ARGUMENT` for a refused request, `INTERNAL` for a store
    /// failure).
    // tonic::Status is large, and it is what the handler must return.
    #[allow(clippy::result_large_err)]
    fn with_error(self, error: RawError) -> Result<Self, Status>;
}

/// Responses with an `error` string: every failure goes there.
macro_rules! raw_response_with_error_string {
    ($($t:ty),*) => {$(
        impl RawResponse for $t {
            fn with_region_error(mut self, err: errorpb::Error) -> Self {
                self.region_error = Some(err);
                self
            }
            fn with_error(mut self, error: RawError) -> Result<Self, Status> {
                self.error = match error {
                    RawError::Refused(message) => message,
                    RawError::Store(_, e) => e.to_string(),
                };
                Ok(self)
            }
        }
    )*};
}

/// Responses without an `error` string: failures are gRPC statuses.
macro_rules! raw_response_with_status {
    ($($t:ty),*) => {$(
        impl RawResponse for $t {
            fn with_region_error(mut self, err: errorpb::Error) -> Self {
                self.region_error = Some(err);
                self
            }
            fn with_error(self, error: RawError) -> Result<Self, Status> {
                Err(match error {
                    RawError::Refused(message) => Status::invalid_argument(message),
                    RawError::Store(op, e) => {
                        tracing::warn!(op, error = %e, "storage error");
                        Status::internal(format!("minitikv {op}: {e}"))
                    }
                })
            }
        }
    )*};
}

raw_response_with_error_string!(
    kvrpcpb::RawGetResponse,
    kvrpcpb::RawPutResponse,
    kvrpcpb::RawBatchPutResponse,
    kvrpcpb::RawDeleteResponse,
    kvrpcpb::RawBatchDeleteResponse,
    kvrpcpb::RawDeleteRangeResponse,
    kvrpcpb::RawCasResponse
);

raw_response_with_status!(
    kvrpcpb::RawBatchGetResponse,
    kvrpcpb::RawScanResponse,
    kvrpcpb::RawBatchScanResponse
);

/// TiKV's raw API serves the `default`, `lock` and `write` column families; minitikv keeps
/// only `default` (an empty name) and refuses the others with an error string.
pub(crate) fn check_cf(cf: &str) -> Result<(), RawError> {
    if cf.is_empty() || cf == "default" {
        Ok(())
    } else {
        Err(RawError::Refused(format!(
            "minitikv: column family {cf:?} is not supported (only \"default\")"
        )))
    }
}

pub(crate) fn check_ttl(ttl: u64) -> Result<(), RawError> {
    if ttl == 0 {
        Ok(())
    } else {
        Err(RawError::Refused(
            "minitikv: TTL is not supported (storage.enable-ttl = false)".into(),
        ))
    }
}

/// The raw scan range of a request: forward scans `[start, end)`; reverse scans
/// `[end, start)` descending (TiKV's convention). An empty upper bound means "to the end of
/// the region", here of the key space.
pub(crate) fn scan_range(
    start_key: Vec<u8>,
    end_key: Vec<u8>,
    reverse: bool,
) -> (KeyRange, ScanOrder) {
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

/// `range` cut to the keys of `region` (TiKV serves a scan from one region only).
pub(crate) fn clamp(mut range: KeyRange, region: &RegionInfo) -> KeyRange {
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

/// The keys of a batch request, for routing.
pub(crate) fn many(keys: &[Vec<u8>]) -> Keys<'_> {
    Keys::Many(keys.iter().map(Vec::as_slice).collect())
}
