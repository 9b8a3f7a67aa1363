//! A minimal PD client for region boundaries (`GetRegion`, `GetPrevRegion`), which
//! tikv-client 0.4.0 does not expose. Reverse scans use it to walk regions from the end of
//! a range; forward scans ask it through a cache of the regions PD named
//! ([`PdRegions::region_cached`]), so a page inside a known region costs no PD lookup.
//!
//! The cache is only a way of cutting a range into parts: a forward scan reads each part
//! exactly whatever the real layout (the client routes the part's `batch_scan` per region
//! itself), so a stale entry costs RPCs, never keys (invariant K3). Stale entries are
//! bounded: an entry lives for [`crate::TikvConfig::region_cache_ttl`], a read of its part
//! that fails drops it, and every answer from PD replaces the entries it overlaps.
//!
//! It also names a region's epoch and leader and a store's address, which the adapter's own
//! requests to a store need (`crate::direct`).
//!
//! The messages are declared here with only the fields read (prost skips the others), so
//! the adapter needs no protobuf build step.

use crate::TlsFiles;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};
use tokio::sync::Mutex;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

#[derive(Clone, PartialEq, prost::Message)]
struct RequestHeader {
    #[prost(uint64, tag = "1")]
    cluster_id: u64,
    #[prost(uint64, tag = "2")]
    sender_id: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ResponseHeader {
    #[prost(uint64, tag = "1")]
    cluster_id: u64,
    #[prost(message, optional, tag = "2")]
    error: Option<PdError>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct PdError {
    #[prost(int32, tag = "1")]
    kind: i32,
    #[prost(string, tag = "2")]
    message: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct GetMembersRequest {
    #[prost(message, optional, tag = "1")]
    header: Option<RequestHeader>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Member {
    #[prost(string, repeated, tag = "4")]
    client_urls: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct GetMembersResponse {
    #[prost(message, optional, tag = "1")]
    header: Option<ResponseHeader>,
    #[prost(message, optional, tag = "3")]
    leader: Option<Member>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct GetRegionRequest {
    #[prost(message, optional, tag = "1")]
    header: Option<RequestHeader>,
    #[prost(bytes = "vec", tag = "2")]
    region_key: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Region {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(bytes = "vec", tag = "2")]
    start_key: Vec<u8>,
    #[prost(bytes = "vec", tag = "3")]
    end_key: Vec<u8>,
    #[prost(message, optional, tag = "4")]
    region_epoch: Option<RegionEpoch>,
}

/// `metapb.RegionEpoch`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, prost::Message)]
pub(crate) struct RegionEpoch {
    #[prost(uint64, tag = "1")]
    pub(crate) conf_ver: u64,
    #[prost(uint64, tag = "2")]
    pub(crate) version: u64,
}

/// `metapb.Peer`: a replica of a region on a store.
#[derive(Clone, Copy, PartialEq, Eq, Hash, prost::Message)]
pub(crate) struct Peer {
    #[prost(uint64, tag = "1")]
    pub(crate) id: u64,
    #[prost(uint64, tag = "2")]
    pub(crate) store_id: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct GetRegionResponse {
    #[prost(message, optional, tag = "1")]
    header: Option<ResponseHeader>,
    #[prost(message, optional, tag = "2")]
    region: Option<Region>,
    #[prost(message, optional, tag = "3")]
    leader: Option<Peer>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct GetStoreRequest {
    #[prost(message, optional, tag = "1")]
    header: Option<RequestHeader>,
    #[prost(uint64, tag = "2")]
    store_id: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Store {
    #[prost(string, tag = "2")]
    address: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct GetStoreResponse {
    #[prost(message, optional, tag = "1")]
    header: Option<ResponseHeader>,
    #[prost(message, optional, tag = "2")]
    store: Option<Store>,
}

/// A region's key range as PD sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RegionBounds {
    pub(crate) id: u64,
    /// Inclusive; empty: the start of the key space.
    pub(crate) start: Vec<u8>,
    /// Exclusive; empty: the end of the key space.
    pub(crate) end: Vec<u8>,
    /// Where requests for the region go, as PD named it with the bounds (`None` if PD named
    /// no leader).
    pub(crate) route: Option<Route>,
}

/// What a request to a region carries besides its keys: the epoch its sender knows and the
/// peer it is sent to. A stale one is refused by the store with a region error, never
/// served from another layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Route {
    pub(crate) epoch: RegionEpoch,
    pub(crate) leader: Peer,
}

impl RegionBounds {
    /// Whether `key` lies in this region.
    pub(crate) fn contains(&self, key: &[u8]) -> bool {
        self.start.as_slice() <= key && (self.end.is_empty() || key < self.end.as_slice())
    }
}

/// Regions PD named, by start key, each with the time it was learned; no two overlap.
#[derive(Default)]
struct RegionCache {
    by_start: BTreeMap<Vec<u8>, (RegionBounds, Instant)>,
}

impl RegionCache {
    /// The entry holding `key`, if it is younger than `ttl`.
    fn get(&self, key: &[u8], ttl: Duration) -> Option<RegionBounds> {
        let (_, (region, learned)) = self.by_start.range(..=key.to_vec()).next_back()?;
        (region.contains(key) && learned.elapsed() < ttl).then(|| region.clone())
    }

    /// Remembers `region`, dropping every entry it overlaps (the layout changed since).
    fn insert(&mut self, region: RegionBounds) {
        // Entries starting inside `region`...
        let inside: Vec<Vec<u8>> = self
            .by_start
            .range(region.start.clone()..)
            .take_while(|(start, _)| region.end.is_empty() || **start < region.end)
            .map(|(start, _)| start.clone())
            .collect();
        for start in inside {
            self.by_start.remove(&start);
        }
        // ...and the one before it, if it reaches into `region`.
        let before = self
            .by_start
            .range(..region.start.clone())
            .next_back()
            .filter(|(_, (r, _))| r.end.is_empty() || r.end > region.start)
            .map(|(start, _)| start.clone());
        if let Some(start) = before {
            self.by_start.remove(&start);
        }
        self.by_start
            .insert(region.start.clone(), (region, Instant::now()));
    }

    /// Forgets the entry holding `key`.
    fn forget(&mut self, key: &[u8]) {
        let holder = self
            .by_start
            .range(..=key.to_vec())
            .next_back()
            .filter(|(_, (r, _))| r.contains(key))
            .map(|(start, _)| start.clone());
        if let Some(start) = holder {
            self.by_start.remove(&start);
        }
    }
}

/// How often an idle channel (to PD or a store) checks its connection.
const KEEPALIVE: Duration = Duration::from_secs(10);
/// How long a channel waits for the answer to its check before it drops the connection:
/// long enough that a busy machine's late answer does not cut a healthy one.
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// Connection to the PD leader, made on first use and again after a failure.
pub(crate) struct PdRegions {
    endpoints: Vec<String>,
    tls: Option<TlsFiles>,
    timeout: Duration,
    conn: Mutex<Option<(Channel, u64)>>,
    max_message_bytes: usize,
    cache: std::sync::Mutex<RegionCache>,
    cache_ttl: Duration,
    /// Store addresses by store id, and channels by address (`crate::direct`).
    stores: std::sync::Mutex<HashMap<u64, String>>,
    store_channels: std::sync::Mutex<HashMap<String, Channel>>,
}

fn pd_err(message: String) -> tikv_client::Error {
    // Reported like the client's own PD failures (an `InternalError`): transient.
    tikv_client::Error::InternalError { message }
}

impl PdRegions {
    pub(crate) fn new(
        endpoints: Vec<String>,
        tls: Option<TlsFiles>,
        timeout: Duration,
        cache_ttl: Duration,
        max_message_bytes: usize,
    ) -> Self {
        PdRegions {
            endpoints,
            tls,
            timeout,
            conn: Mutex::new(None),
            max_message_bytes,
            cache: std::sync::Mutex::new(RegionCache::default()),
            cache_ttl,
            stores: std::sync::Mutex::new(HashMap::new()),
            store_channels: std::sync::Mutex::new(HashMap::new()),
        }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, RegionCache> {
        // The cache holds no invariant a panic could break half-way (each entry is a PD
        // answer): a poisoned lock is used as it is.
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The region holding `key`, from the cache when a fresh entry holds it, else from PD
    /// (remembered when it holds `key`). Only for callers that read what they are given
    /// exactly on any layout (forward scans): the answer may be out of date.
    pub(crate) async fn region_cached(&self, key: &[u8]) -> tikv_client::Result<RegionBounds> {
        if let Some(region) = self.cache().get(key, self.cache_ttl) {
            return Ok(region);
        }
        let region = self.region(key).await?;
        if region.contains(key) && !self.cache_ttl.is_zero() {
            self.cache().insert(region.clone());
        }
        Ok(region)
    }

    /// The region holding `key` as last learned, however long ago (a request sent with a
    /// stale route is refused by the store: for callers that forget the region then), else
    /// from PD (remembered when it holds `key`). Fails when PD names none holding `key`.
    pub(crate) async fn region_routed(&self, key: &[u8]) -> tikv_client::Result<RegionBounds> {
        if let Some(region) = self.cache().get(key, Duration::MAX) {
            return Ok(region);
        }
        let region = self.region(key).await?;
        if !region.contains(key) {
            return Err(pd_err(format!(
                "PD named region {} for a key outside it",
                region.id
            )));
        }
        self.cache().insert(region.clone());
        Ok(region)
    }

    /// Drops the cached region holding `key` and the channel to its leader's store (a
    /// request to it went unanswered: the connection may hang).
    pub(crate) fn forget_with_leader(&self, key: &[u8]) {
        let leader = self
            .cache()
            .get(key, Duration::MAX)
            .and_then(|r| r.route)
            .map(|route| route.leader.store_id);
        self.forget(key);
        if let Some(store) = leader {
            self.forget_store(store);
        }
    }

    /// Drops the cached region holding `key` (a read of its part failed: the layout may
    /// have changed).
    pub(crate) fn forget(&self, key: &[u8]) {
        self.cache().forget(key);
    }

    fn url(&self, addr: &str) -> String {
        if addr.starts_with("http://") || addr.starts_with("https://") {
            addr.to_string()
        } else if self.tls.is_some() {
            format!("https://{addr}")
        } else {
            format!("http://{addr}")
        }
    }

    async fn channel(&self, addr: &str) -> tikv_client::Result<Channel> {
        // Keepalives, as tikv-client's connections have them: a half-open connection (a
        // NAT or conntrack flush, a one-way partition) fails within seconds instead of when
        // TCP gives up.
        let mut endpoint = Endpoint::from_shared(self.url(addr))
            .map_err(|e| pd_err(format!("address {addr}: {e}")))?
            .timeout(self.timeout)
            .connect_timeout(self.timeout)
            .tcp_keepalive(Some(KEEPALIVE))
            .http2_keep_alive_interval(KEEPALIVE)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT)
            .keep_alive_while_idle(true);
        if let Some(tls) = &self.tls {
            let read = |p: &std::path::Path| {
                std::fs::read(p).map_err(|e| format!("reading {}: {e}", p.display()))
            };
            let (ca, cert, key) = match (read(&tls.ca), read(&tls.cert), read(&tls.key)) {
                (Ok(ca), Ok(cert), Ok(key)) => (ca, cert, key),
                (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return Err(pd_err(e)),
            };
            let config = ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(ca))
                .identity(Identity::from_pem(cert, key));
            endpoint = endpoint
                .tls_config(config)
                .map_err(|e| pd_err(format!("TLS for {addr}: {e}")))?;
        }
        endpoint
            .connect()
            .await
            .map_err(|e| pd_err(format!("connecting to {addr}: {e}")))
    }

    /// A unary call of `path` on `channel` (PD's, or a store's: `crate::direct`), whose
    /// answer may be up to the configured message size (tonic's default is 4 MiB).
    pub(crate) async fn unary<Req, Resp>(
        &self,
        channel: Channel,
        path: &'static str,
        request: Req,
    ) -> tikv_client::Result<Resp>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let mut grpc =
            tonic::client::Grpc::new(channel).max_decoding_message_size(self.max_message_bytes);
        grpc.ready()
            .await
            .map_err(|e| pd_err(format!("{path}: channel not ready: {e}")))?;
        let codec: tonic::codec::ProstCodec<Req, Resp> = tonic::codec::ProstCodec::default();
        let path = tonic::codegen::http::uri::PathAndQuery::from_static(path);
        grpc.unary(tonic::Request::new(request), path, codec)
            .await
            .map(tonic::Response::into_inner)
            .map_err(tikv_client::Error::GrpcAPI)
    }

    /// The leader's channel and the cluster id, connecting if needed.
    async fn leader(&self) -> tikv_client::Result<(Channel, u64)> {
        let mut conn = self.conn.lock().await;
        if let Some(c) = conn.as_ref() {
            return Ok(c.clone());
        }
        let mut last = pd_err("no PD endpoint".into());
        for addr in &self.endpoints {
            let members = match self.channel(addr).await {
                Ok(channel) => self
                    .unary::<_, GetMembersResponse>(
                        channel.clone(),
                        "/pdpb.PD/GetMembers",
                        GetMembersRequest { header: None },
                    )
                    .await
                    .map(|m| (channel, m)),
                Err(e) => Err(e),
            };
            let (channel, members) = match members {
                Ok(found) => found,
                Err(e) => {
                    last = e;
                    continue;
                }
            };
            let cluster_id = members.header.map_or(0, |h| h.cluster_id);
            let leader_url = members
                .leader
                .and_then(|l| l.client_urls.into_iter().next());
            let channel = match leader_url {
                Some(url)
                    if url
                        .trim_start_matches("http://")
                        .trim_start_matches("https://")
                        != addr
                            .trim_start_matches("http://")
                            .trim_start_matches("https://") =>
                {
                    match self.channel(&url).await {
                        Ok(c) => c,
                        Err(e) => {
                            last = e;
                            continue;
                        }
                    }
                }
                _ => channel,
            };
            *conn = Some((channel.clone(), cluster_id));
            return Ok((channel, cluster_id));
        }
        Err(last)
    }

    async fn region_call(
        &self,
        path: &'static str,
        key: &[u8],
    ) -> tikv_client::Result<Option<RegionBounds>> {
        let (channel, cluster_id) = self.leader().await?;
        let request = GetRegionRequest {
            header: Some(RequestHeader {
                cluster_id,
                sender_id: 0,
            }),
            region_key: key.to_vec(),
        };
        let reply = self
            .unary::<_, GetRegionResponse>(channel, path, request)
            .await;
        let reply = match reply {
            Ok(r) => r,
            Err(e) => {
                // Reconnect (perhaps to a new leader) next time.
                *self.conn.lock().await = None;
                return Err(e);
            }
        };
        if let Some(error) = reply.header.and_then(|h| h.error) {
            *self.conn.lock().await = None;
            return Err(pd_err(format!("PD {path}: {}", error.message)));
        }
        let leader = reply.leader.filter(|l| l.store_id != 0);
        Ok(reply.region.map(|r| RegionBounds {
            id: r.id,
            start: r.start_key,
            end: r.end_key,
            route: match (r.region_epoch, leader) {
                (Some(epoch), Some(leader)) => Some(Route { epoch, leader }),
                _ => None,
            },
        }))
    }

    /// The region holding `key`.
    pub(crate) async fn region(&self, key: &[u8]) -> tikv_client::Result<RegionBounds> {
        self.region_call("/pdpb.PD/GetRegion", key)
            .await?
            .ok_or_else(|| pd_err(format!("PD knows no region for key {key:?}")))
    }

    /// A channel to the store `store_id` (its address from PD, remembered; a channel is
    /// made on first use and kept: tonic reconnects it after a failure).
    pub(crate) async fn store_channel(&self, store_id: u64) -> tikv_client::Result<Channel> {
        let known = self.lock_stores().get(&store_id).cloned();
        let address = match known {
            Some(address) => address,
            None => {
                let address = self.store_address(store_id).await?;
                self.lock_stores().insert(store_id, address.clone());
                address
            }
        };
        let channel = self.lock_store_channels().get(&address).cloned();
        if let Some(channel) = channel {
            return Ok(channel);
        }
        match self.channel(&address).await {
            Ok(channel) => {
                self.lock_store_channels().insert(address, channel.clone());
                Ok(channel)
            }
            Err(e) => {
                // The store may have moved: ask PD for its address next time.
                self.forget_store(store_id);
                Err(e)
            }
        }
    }

    /// Forgets what is known of the store `store_id` (a request to it failed: it may have
    /// moved).
    pub(crate) fn forget_store(&self, store_id: u64) {
        if let Some(address) = self.lock_stores().remove(&store_id) {
            self.lock_store_channels().remove(&address);
        }
    }

    fn lock_stores(&self) -> std::sync::MutexGuard<'_, HashMap<u64, String>> {
        // Each entry is a PD answer: a poisoned lock is used as it is.
        self.stores.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_store_channels(&self) -> std::sync::MutexGuard<'_, HashMap<String, Channel>> {
        self.store_channels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    async fn store_address(&self, store_id: u64) -> tikv_client::Result<String> {
        let (channel, cluster_id) = self.leader().await?;
        let request = GetStoreRequest {
            header: Some(RequestHeader {
                cluster_id,
                sender_id: 0,
            }),
            store_id,
        };
        let path = "/pdpb.PD/GetStore";
        let reply = match self
            .unary::<_, GetStoreResponse>(channel, path, request)
            .await
        {
            Ok(r) => r,
            Err(e) => {
                *self.conn.lock().await = None;
                return Err(e);
            }
        };
        if let Some(error) = reply.header.and_then(|h| h.error) {
            *self.conn.lock().await = None;
            return Err(pd_err(format!("PD {path}: {}", error.message)));
        }
        reply
            .store
            .map(|s| s.address)
            .filter(|a| !a.is_empty())
            .ok_or_else(|| pd_err(format!("PD knows no address for store {store_id}")))
    }

    /// The region before the one holding `key` (`None` before the first region).
    pub(crate) async fn prev_region(
        &self,
        key: &[u8],
    ) -> tikv_client::Result<Option<RegionBounds>> {
        self.region_call("/pdpb.PD/GetPrevRegion", key).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(id: u64, start: &[u8], end: &[u8]) -> RegionBounds {
        RegionBounds {
            id,
            start: start.to_vec(),
            end: end.to_vec(),
            route: None,
        }
    }

    const TTL: Duration = Duration::from_secs(60);

    #[test]
    fn the_cache_answers_keys_of_its_regions_only() {
        let mut cache = RegionCache::default();
        cache.insert(region(1, b"", b"b"));
        cache.insert(region(2, b"d", b""));
        assert_eq!(cache.get(b"a", TTL).map(|r| r.id), Some(1));
        assert_eq!(cache.get(b"", TTL).map(|r| r.id), Some(1));
        assert_eq!(cache.get(b"b", TTL), None, "end is exclusive");
        assert_eq!(cache.get(b"c", TTL), None);
        assert_eq!(cache.get(b"d", TTL).map(|r| r.id), Some(2));
        assert_eq!(cache.get(b"zzz", TTL).map(|r| r.id), Some(2));
        assert_eq!(cache.get(b"a", Duration::ZERO), None, "expired");
    }

    #[test]
    fn an_answer_replaces_the_entries_it_overlaps() {
        let mut cache = RegionCache::default();
        cache.insert(region(1, b"a", b"c"));
        cache.insert(region(2, b"c", b"e"));
        cache.insert(region(3, b"e", b"g"));
        // A merge of 1 and 2 (and the start of 3's range moved): 1, 2 and 3 overlap it.
        cache.insert(region(4, b"b", b"f"));
        assert_eq!(cache.by_start.len(), 1);
        assert_eq!(cache.get(b"a", TTL), None);
        assert_eq!(cache.get(b"e", TTL).map(|r| r.id), Some(4));
        assert_eq!(cache.get(b"f", TTL), None);
        // A split: the new left half replaces the whole.
        cache.insert(region(5, b"b", b"d"));
        assert_eq!(cache.get(b"c", TTL).map(|r| r.id), Some(5));
        assert_eq!(cache.get(b"e", TTL), None);
        // An unbounded last region replaces everything from its start on.
        cache.insert(region(6, b"x", b"y"));
        cache.insert(region(7, b"c", b""));
        assert_eq!(cache.get(b"x", TTL).map(|r| r.id), Some(7));
        assert_eq!(cache.get(b"b", TTL), None, "5 reached into 7");
    }

    #[test]
    fn forget_drops_the_holder_only() {
        let mut cache = RegionCache::default();
        cache.insert(region(1, b"a", b"c"));
        cache.insert(region(2, b"c", b"e"));
        cache.forget(b"b");
        cache.forget(b"x");
        assert_eq!(cache.get(b"b", TTL), None);
        assert_eq!(cache.get(b"c", TTL).map(|r| r.id), Some(2));
    }
}
