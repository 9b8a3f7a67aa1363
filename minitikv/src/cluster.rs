//! The cluster's layout (regions, their epochs and leaders, stores) and seeded fault
//! injection.

use crate::proto::{errorpb, metapb};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;
use std::time::Duration;

/// The id of the first store (the one PD runs beside).
pub const STORE_ID: u64 = 1;
/// The id of the first region (covering every key on a cluster without split keys).
pub const REGION_ID: u64 = 2;
/// The id of the first region's peer on [`STORE_ID`].
pub const PEER_ID: u64 = 3;

/// Faults injected into TiKV raw RPCs, each at a rate per request (0.0 to 1.0), decided by
/// a generator seeded with [`Faults::seed`]: the same seed gives the same sequence of
/// decisions (which request gets which decision depends on arrival order).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Faults {
    /// Seed of the decisions.
    pub seed: u64,
    /// Answer `ServerIsBusy` (nothing applied), as an overloaded TiKV does.
    pub server_busy: f64,
    /// Answer a region error (nothing applied): `NotLeader` naming the leader, `EpochNotMatch`
    /// with the current region, or `RegionNotFound`, as during splits, merges and elections.
    pub region_error: f64,
    /// Apply the request, then answer gRPC `UNAVAILABLE` instead of the reply (a reply lost
    /// after the write applied: the client's retry hazard).
    pub lost_reply: f64,
    /// Apply a write, then answer a region error (`NotLeader` or `EpochNotMatch`) instead of
    /// its reply, as when a leader steps down after the entry committed: the client retries
    /// a write that already applied (for a CAS: the retry hazard).
    pub applied_region_error: f64,
    /// Delay the request (before applying it) by up to [`Faults::max_delay`].
    pub delay: f64,
    /// Longest injected delay.
    pub max_delay: Duration,
}

impl Faults {
    /// No faults.
    pub fn none() -> Self {
        Faults::default()
    }

    /// The weather tests run in: 0.1% `ServerIsBusy`, 1% region errors, 0.5% replies lost
    /// after apply, 1% of requests delayed by up to 5 ms.
    pub fn weather(seed: u64) -> Self {
        Faults {
            seed,
            server_busy: 0.001,
            region_error: 0.01,
            lost_reply: 0.005,
            applied_region_error: 0.0,
            delay: 0.01,
            max_delay: Duration::from_millis(5),
        }
    }

    /// Whether any fault is enabled.
    pub fn any(&self) -> bool {
        self.server_busy > 0.0
            || self.region_error > 0.0
            || self.lost_reply > 0.0
            || self.applied_region_error > 0.0
            || self.delay > 0.0
    }
}

/// Runtime changes of the layout made by a background task, at random among splits, merges
/// and leader transfers (seeded).
#[derive(Clone, Debug, PartialEq)]
pub struct Churn {
    /// Time between two changes.
    pub interval: Duration,
    /// Seed of the changes.
    pub seed: u64,
    /// The task keeps the region count between these (splits below, merges above).
    pub min_regions: usize,
    /// See [`Churn::min_regions`].
    pub max_regions: usize,
}

/// How many faults minitikv injected, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// `ServerIsBusy` answers.
    pub server_busy: u64,
    /// Injected region errors.
    pub region_error: u64,
    /// Replies dropped after the request was applied.
    pub lost_reply: u64,
    /// Delayed requests.
    pub delay: u64,
    /// Requests refused because they named a stale region, epoch or leader (real routing
    /// errors after splits, merges and leader transfers, not injected).
    pub stale_route: u64,
    /// Writes applied and then answered with an injected region error.
    pub applied_region_error: u64,
}

/// One region of the layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionInfo {
    /// Region id.
    pub id: u64,
    /// First key (inclusive); empty: the start of the key space.
    pub start: Vec<u8>,
    /// End key (exclusive); empty: the end of the key space.
    pub end: Vec<u8>,
    /// Epoch version (bumped by splits and merges).
    pub version: u64,
    /// Epoch conf version (never changes: peers are fixed, one per store).
    pub conf_ver: u64,
    /// Store of the leader.
    pub leader_store: u64,
}

impl RegionInfo {
    /// Whether `key` lies in the region.
    pub fn contains(&self, key: &[u8]) -> bool {
        key >= self.start.as_slice() && (self.end.is_empty() || key < self.end.as_slice())
    }

    /// The peer id of this region on `store` (unique across regions and stores).
    pub fn peer_id(&self, store: u64) -> u64 {
        if self.id == REGION_ID && store == STORE_ID {
            PEER_ID
        } else {
            self.id * 1000 + store
        }
    }

    pub(crate) fn epoch(&self) -> metapb::RegionEpoch {
        metapb::RegionEpoch {
            conf_ver: self.conf_ver,
            version: self.version,
        }
    }

    pub(crate) fn peer(&self, store: u64) -> metapb::Peer {
        metapb::Peer {
            id: self.peer_id(store),
            store_id: store,
            role: metapb::PeerRole::Voter as i32,
            is_witness: false,
        }
    }

    pub(crate) fn leader(&self) -> metapb::Peer {
        self.peer(self.leader_store)
    }

    pub(crate) fn meta(&self, stores: u64) -> metapb::Region {
        metapb::Region {
            id: self.id,
            start_key: self.start.clone(),
            end_key: self.end.clone(),
            region_epoch: Some(self.epoch()),
            peers: (1..=stores).map(|s| self.peer(s)).collect(),
            ..Default::default()
        }
    }
}

/// Errors of layout changes.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum LayoutError {
    /// The split key is already a region boundary (or empty).
    #[error("{0:?} is already a region boundary")]
    AlreadyBoundary(Vec<u8>),
    /// No region to merge: the key is not a region boundary.
    #[error("{0:?} is not a region boundary")]
    NotBoundary(Vec<u8>),
    /// No such region.
    #[error("region {0} does not exist")]
    NoRegion(u64),
    /// No such store.
    #[error("store {0} does not exist")]
    NoStore(u64),
}

/// The regions, keyed by start key.
pub(crate) struct Layout {
    regions: RwLock<BTreeMap<Vec<u8>, RegionInfo>>,
    next_id: AtomicU64,
    /// Bumped by every split and merge (the split checks' size bounds hold only while it
    /// does not move under a write: `service::split`).
    generation: AtomicU64,
    pub(crate) stores: u64,
}

impl Layout {
    /// One region over the whole key space, split at `split_keys`; leaders spread over the
    /// stores round-robin.
    pub(crate) fn new(split_keys: &[Vec<u8>], stores: u64) -> Self {
        let layout = Layout {
            regions: RwLock::new(BTreeMap::new()),
            next_id: AtomicU64::new(REGION_ID + 2),
            generation: AtomicU64::new(0),
            stores: stores.max(1),
        };
        layout.write().insert(Vec::new(), empty_region());
        let mut keys: Vec<Vec<u8>> = split_keys
            .iter()
            .filter(|k| !k.is_empty())
            .cloned()
            .collect();
        keys.sort();
        keys.dedup();
        for (i, key) in keys.into_iter().enumerate() {
            if let Ok(id) = layout.split(&key) {
                let store = (i as u64 + 1) % layout.stores + 1;
                let _ = layout.transfer_leader(id, store);
            }
        }
        layout
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<Vec<u8>, RegionInfo>> {
        self.regions.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<Vec<u8>, RegionInfo>> {
        self.regions.write().unwrap_or_else(|e| e.into_inner())
    }

    /// How many splits and merges the layout has seen.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// The region holding `key`.
    pub(crate) fn region_for(&self, key: &[u8]) -> RegionInfo {
        let regions = self.read();
        Self::find(&regions, key)
    }

    fn find(regions: &BTreeMap<Vec<u8>, RegionInfo>, key: &[u8]) -> RegionInfo {
        regions
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(key)))
            .next_back()
            .map(|(_, r)| r.clone())
            // The map always holds the region starting at the empty key.
            .unwrap_or_else(|| {
                regions
                    .values()
                    .next()
                    .cloned()
                    .unwrap_or_else(empty_region)
            })
    }

    /// The region before the one holding `key` (PD's `GetPrevRegion`).
    pub(crate) fn prev_region(&self, key: &[u8]) -> Option<RegionInfo> {
        let regions = self.read();
        let holder = Self::find(&regions, key);
        regions
            .range::<[u8], _>((Bound::Unbounded, Bound::Excluded(holder.start.as_slice())))
            .next_back()
            .map(|(_, r)| r.clone())
    }

    pub(crate) fn by_id(&self, id: u64) -> Option<RegionInfo> {
        self.read().values().find(|r| r.id == id).cloned()
    }

    /// Regions overlapping `[start, end)` (empty end: unbounded), at most `limit` (0: all).
    pub(crate) fn scan(&self, start: &[u8], end: &[u8], limit: usize) -> Vec<RegionInfo> {
        let regions = self.read();
        let first = Self::find(&regions, start);
        regions
            .range::<[u8], _>((Bound::Included(first.start.as_slice()), Bound::Unbounded))
            .map(|(_, r)| r.clone())
            .take_while(|r| end.is_empty() || r.start.as_slice() < end)
            .take(if limit == 0 { usize::MAX } else { limit })
            .collect()
    }

    /// Every region, in key order.
    pub(crate) fn all(&self) -> Vec<RegionInfo> {
        self.read().values().cloned().collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.read().len()
    }

    /// Splits the region holding `key` at `key`: the left part gets a new id, the right part
    /// keeps the old one (TiKV's `right-derive-when-split`); both epochs' versions move past
    /// the old one. Returns the new (left) region's id.
    pub(crate) fn split(&self, key: &[u8]) -> Result<u64, LayoutError> {
        let mut regions = self.write();
        let old = Self::find(&regions, key);
        if key.is_empty() || old.start == key {
            return Err(LayoutError::AlreadyBoundary(key.to_vec()));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let version = old.version + 1;
        let left = RegionInfo {
            id,
            start: old.start.clone(),
            end: key.to_vec(),
            version,
            conf_ver: old.conf_ver,
            leader_store: old.leader_store,
        };
        let right = RegionInfo {
            start: key.to_vec(),
            version,
            ..old
        };
        regions.insert(left.start.clone(), left);
        regions.insert(right.start.clone(), right);
        self.generation.fetch_add(1, Ordering::SeqCst);
        Ok(id)
    }

    /// Merges the region starting at `key` into its left neighbour (which keeps its id and
    /// moves its epoch version past both).
    pub(crate) fn merge(&self, key: &[u8]) -> Result<(), LayoutError> {
        let mut regions = self.write();
        if key.is_empty() || !regions.contains_key(key) {
            return Err(LayoutError::NotBoundary(key.to_vec()));
        }
        let right = regions
            .remove(key)
            .ok_or_else(|| LayoutError::NotBoundary(key.to_vec()))?;
        let left = regions
            .range_mut::<[u8], _>((Bound::Unbounded, Bound::Excluded(key)))
            .next_back()
            .map(|(_, r)| r)
            .ok_or_else(|| LayoutError::NotBoundary(key.to_vec()))?;
        left.end = right.end;
        left.version = left.version.max(right.version) + 1;
        self.generation.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// Moves the leader of region `id` to `store` (the epoch does not change, as in TiKV).
    pub(crate) fn transfer_leader(&self, id: u64, store: u64) -> Result<(), LayoutError> {
        if store == 0 || store > self.stores {
            return Err(LayoutError::NoStore(store));
        }
        let mut regions = self.write();
        let region = regions
            .values_mut()
            .find(|r| r.id == id)
            .ok_or(LayoutError::NoRegion(id))?;
        region.leader_store = store;
        Ok(())
    }
}

fn empty_region() -> RegionInfo {
    RegionInfo {
        id: REGION_ID,
        start: Vec::new(),
        end: Vec::new(),
        version: 1,
        conf_ver: 1,
        leader_store: STORE_ID,
    }
}

/// A stream of seeded pseudo-random numbers (splitmix64 over a shared counter).
pub(crate) struct Dice {
    seed: u64,
    n: AtomicU64,
}

impl Dice {
    pub(crate) fn new(seed: u64) -> Self {
        Dice {
            seed,
            n: AtomicU64::new(0),
        }
    }

    pub(crate) fn next_u64(&self) -> u64 {
        let n = self.n.fetch_add(1, Ordering::Relaxed);
        let mut z = self
            .seed
            .wrapping_add(n.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number uniform in [0, 1).
    pub(crate) fn unit(&self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub(crate) fn hit(&self, rate: f64) -> bool {
        rate > 0.0 && self.unit() < rate
    }
}

/// Shapes of TiKV region errors.
pub(crate) fn region_not_found(region_id: u64) -> errorpb::Error {
    errorpb::Error {
        message: format!("region {region_id} is missing"),
        region_not_found: Some(errorpb::RegionNotFound { region_id }),
        ..Default::default()
    }
}

pub(crate) fn not_leader(region: &RegionInfo) -> errorpb::Error {
    errorpb::Error {
        message: format!("peer is not leader for region {}", region.id),
        not_leader: Some(errorpb::NotLeader {
            region_id: region.id,
            leader: Some(region.leader()),
        }),
        ..Default::default()
    }
}

pub(crate) fn epoch_not_match(current: Vec<metapb::Region>, region_id: u64) -> errorpb::Error {
    errorpb::Error {
        message: format!("epoch not match for region {region_id}"),
        epoch_not_match: Some(errorpb::EpochNotMatch {
            current_regions: current,
        }),
        ..Default::default()
    }
}

pub(crate) fn key_not_in_region(key: &[u8], region: &RegionInfo) -> errorpb::Error {
    errorpb::Error {
        message: format!("key {key:?} is not in region {}", region.id),
        key_not_in_region: Some(errorpb::KeyNotInRegion {
            key: key.to_vec(),
            region_id: region.id,
            start_key: region.start.clone(),
            end_key: region.end.clone(),
        }),
        ..Default::default()
    }
}

/// TiKV's answer to a write whose raft entry is over `raft-entry-max-size`.
pub(crate) fn raft_entry_too_large(region_id: u64, entry_size: u64) -> errorpb::Error {
    errorpb::Error {
        message: format!("raft entry is too large, region {region_id}, entry size {entry_size}"),
        raft_entry_too_large: Some(errorpb::RaftEntryTooLarge {
            region_id,
            entry_size,
        }),
        ..Default::default()
    }
}

pub(crate) fn server_is_busy() -> errorpb::Error {
    errorpb::Error {
        message: "server is busy".into(),
        server_is_busy: Some(errorpb::ServerIsBusy {
            reason: "minitikv: injected".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_and_merges_keep_the_key_space_covered() {
        let layout = Layout::new(&[b"m".to_vec(), b"f".to_vec()], 3);
        let all = layout.all();
        assert_eq!(all.len(), 3);
        assert_eq!(all[0].start, b"");
        assert_eq!(all[0].end, b"f");
        assert_eq!(all[2].end, b"");
        assert_eq!(layout.region_for(b"g").start, b"f");
        assert_eq!(layout.prev_region(b"g").map(|r| r.start), Some(Vec::new()));
        assert!(layout.prev_region(b"a").is_none());
        let before = layout.region_for(b"x");
        layout.split(b"t").unwrap();
        let after = layout.region_for(b"x");
        assert_eq!(after.id, before.id);
        assert!(after.version > before.version);
        assert_eq!(
            layout.split(b"t"),
            Err(LayoutError::AlreadyBoundary(b"t".to_vec()))
        );
        layout.merge(b"t").unwrap();
        assert_eq!(layout.region_for(b"x").start, b"m");
        assert_eq!(layout.scan(b"a", b"n", 0).len(), 3);
        for w in layout.all().windows(2) {
            assert_eq!(w[0].end, w[1].start);
        }
    }

    #[test]
    fn dice_are_deterministic() {
        let a = Dice::new(7);
        let b = Dice::new(7);
        let xs: Vec<u64> = (0..10).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..10).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        let hits = (0..100_000).filter(|_| a.hit(0.01)).count();
        assert!((500..1500).contains(&hits), "{hits}");
    }
}
