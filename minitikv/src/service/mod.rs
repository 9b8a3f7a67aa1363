//! The PD and TiKV gRPC services over one [`RawKv`] store: the state they share (layout,
//! injected faults) here, one service per file: [`pd`] (placement driver: members, TSO,
//! regions, stores, GC safe point) and [`kv`] (the TiKV raw API, one routing and error path
//! for every request), with the shapes of raw requests and responses in [`raw`].

mod kv;
mod latches;
mod pd;
mod raw;
mod split;
mod writes;

pub(crate) use kv::StoreService;
pub use latches::CasHold;
pub use split::{SplitChecks, SplitPolicy, MAX_SPLITS_PER_CHECK};
pub use writes::WriteKinds;

use crate::cluster::{
    epoch_not_match, not_leader, region_not_found, server_is_busy, Dice, FaultCounts, Faults,
    Layout,
};
use crate::proto::errorpb;
use crate::proto::kvrpcpb::Context;
use percolator::kv::RawKv;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::watch;

/// The cluster id PD reports ("minitikv" in ASCII).
pub const CLUSTER_ID: u64 = 0x6d69_6e69_7469_6b76;
/// Logical bits of a PD timestamp.
const LOGICAL_BITS: u32 = 18;

/// TiKV's size limits, which minitikv enforces like TiKV: a key over `max_key_bytes` is
/// refused (`Key is too large`, in the response's error), a write whose raft entry is over
/// `raft_entry_max_bytes` gets the region error `RaftEntryTooLarge`. minitikv counts an
/// entry as the bytes of the keys and values it writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// TiKV's `max-key-size` (default 8 KiB).
    pub max_key_bytes: usize,
    /// TiKV's `raftstore.raft-entry-max-size` (default 8 MiB).
    pub raft_entry_max_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_key_bytes: 8 * 1024,
            raft_entry_max_bytes: 8 * 1024 * 1024,
        }
    }
}

/// The RPCs minitikv served so far, by method (`RawScan`, `RawBatchScan`, `GetRegion`, ...;
/// every request counts, also those answered with an error), and the keys its scans read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RpcCounts {
    /// Calls by method name.
    pub calls: BTreeMap<&'static str, u64>,
    /// Keys read by `RawScan` and `RawBatchScan` (each key of each answer).
    pub scanned_keys: u64,
}

impl RpcCounts {
    /// Calls of `method` (0 if none).
    pub fn calls(&self, method: &str) -> u64 {
        self.calls.get(method).copied().unwrap_or(0)
    }

    /// The counts since `earlier` (a snapshot taken before).
    pub fn since(&self, earlier: &RpcCounts) -> RpcCounts {
        RpcCounts {
            calls: self
                .calls
                .iter()
                .map(|(m, n)| (*m, n.saturating_sub(earlier.calls(m))))
                .filter(|(_, n)| *n > 0)
                .collect(),
            scanned_keys: self.scanned_keys.saturating_sub(earlier.scanned_keys),
        }
    }
}

#[derive(Default)]
struct FaultCounters {
    server_busy: AtomicU64,
    region_error: AtomicU64,
    lost_reply: AtomicU64,
    delay: AtomicU64,
    stale_route: AtomicU64,
    applied_region_error: AtomicU64,
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
    pub(crate) limits: Limits,
    calls: Mutex<BTreeMap<&'static str, u64>>,
    scanned_keys: AtomicU64,
    pub(crate) latches: latches::Latches,
    pub(crate) writes: writes::WriteLog,
    split: Option<SplitPolicy>,
    tally: split::SplitTally,
}

/// The options of [`State::new`] beyond the store and the layout.
pub(crate) struct StateOptions {
    pub(crate) faults: Faults,
    pub(crate) limits: Limits,
    pub(crate) split: Option<SplitPolicy>,
    pub(crate) record_writes: bool,
}

impl State {
    pub(crate) fn new(
        store: Arc<dyn RawKv>,
        advertise: String,
        stopped: watch::Receiver<bool>,
        layout: Layout,
        options: StateOptions,
    ) -> Self {
        let StateOptions {
            faults,
            limits,
            split,
            record_writes,
        } = options;
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
            limits,
            calls: Mutex::new(BTreeMap::new()),
            scanned_keys: AtomicU64::new(0),
            latches: latches::Latches::new(),
            writes: writes::WriteLog::new(record_writes),
            split,
            tally: split::SplitTally::default(),
        }
    }

    /// Counts one call of `method`.
    pub(crate) fn count_call(&self, method: &'static str) {
        let mut calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        *calls.entry(method).or_insert(0) += 1;
    }

    pub(crate) fn rpc_counts(&self) -> RpcCounts {
        RpcCounts {
            calls: self.calls.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            scanned_keys: self.scanned_keys.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn set_store_addrs(&self, addrs: Vec<String>) {
        *self.store_addrs.write().unwrap_or_else(|e| e.into_inner()) = addrs;
    }

    pub(crate) fn split_checks(&self) -> SplitChecks {
        self.tally.checks()
    }

    pub(crate) fn fault_counts(&self) -> FaultCounts {
        let c = &self.counts;
        FaultCounts {
            server_busy: c.server_busy.load(Ordering::Relaxed),
            region_error: c.region_error.load(Ordering::Relaxed),
            lost_reply: c.lost_reply.load(Ordering::Relaxed),
            delay: c.delay.load(Ordering::Relaxed),
            stale_route: c.stale_route.load(Ordering::Relaxed),
            applied_region_error: c.applied_region_error.load(Ordering::Relaxed),
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

    /// A region error to answer a write that was applied, if the dice say so (a leader
    /// that lost its leadership after the entry committed: `NotLeader` or `EpochNotMatch`).
    fn applied_region_error(&self, region: &crate::cluster::RegionInfo) -> Option<errorpb::Error> {
        if !self.dice.hit(self.faults.applied_region_error) {
            return None;
        }
        self.counts
            .applied_region_error
            .fetch_add(1, Ordering::Relaxed);
        Some(if self.dice.next_u64().is_multiple_of(2) {
            not_leader(region)
        } else {
            epoch_not_match(vec![region.meta(self.layout.stores)], region.id)
        })
    }

    /// Whether to drop the reply of a request that was applied.
    fn lose_reply(&self) -> bool {
        let lost = self.dice.hit(self.faults.lost_reply);
        if lost {
            self.counts.lost_reply.fetch_add(1, Ordering::Relaxed);
        }
        lost
    }
}
