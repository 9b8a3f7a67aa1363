//! What the seed's faults are at each moment: whether chaos is on, the current store
//! outage, and counters of what was injected. Shared by the store's fault layer
//! ([`crate::store`]) and the oracle ([`crate::oracle`]); the fault schedule
//! ([`crate::world`]) switches them.

use crate::rng::SimRng;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// Rates of the store's faults while chaos is on (per call).
#[derive(Clone, Copy, Debug)]
pub struct FaultRates {
    /// A short delay (0-3 ms) before the call reaches the store.
    pub delay: f64,
    /// A call held back for 50 ms to 1.5 s while others run.
    pub hold: f64,
    /// A call that fails before it reaches the store.
    pub fail_before: f64,
    /// A write that applies and then fails (its reply lost).
    pub fail_after: f64,
    /// A point read of a fate key ([`Faults::fate_keys`]: the head of a cell that is
    /// the primary of many transactions) held back for 0.5 s to `fate_hold_max` while
    /// others run: the fate check of a GC pass, a worker or a reader stalled while another
    /// GC pass rewrites what it read and trims the evidence it is about to look for.
    pub fate_hold: f64,
    /// The longest such hold.
    pub fate_hold_max: Duration,
    /// The same for the fate checks of a worker on a client of its own
    /// ([`crate::store::Role::Worker`]), held 1-4 s, not one at a time.
    pub worker_fate_hold: f64,
    /// The same for the fate checks of stalled readers ([`crate::store::Role::Reader`]),
    /// held 12-24 s: past a retention delete of the cell after the snapshot and a GC pass
    /// whose safe point passed that delete.
    pub reader_fate_hold: f64,
    /// A scan of the notify space that fails before it reaches the store (a region error):
    /// a worker's pass, or (at one and a half times the rate) the rescan a floor raise
    /// owes, which a raise cut short leaves to the next pass.
    pub notify_scan_fail: f64,
    /// A CAS of a notify floor record held 0.3-1.5 s before it applies: a scanner's raise
    /// then lands long after its scan, while writers (held puts among them) put keys in the
    /// buckets it is about to skip and read the floor before it moved.
    pub floor_hold: f64,
    /// A put of notify keys of the beacons' namespace held 1.2-3 s after its writer chose
    /// their bucket: it lands after scanners went past that bucket, and its writer's floor
    /// read follows it (the other namespace's notify puts are a commit's prewrite: held
    /// that long, most would only be fenced). A CAS raising the beacons' floor past the
    /// bucket of a put held then waits until the put landed and its writer read the floor
    /// ([`Faults::floor_raise_gate`]): the key lies in the range the raise skips, below
    /// every reader's start unless the raise's rescan (owed in the record) moves it.
    pub notify_put_hold: f64,
    /// A worker's heartbeat (the put of its record in the worker registry) held 4-10 s, one
    /// at a time: a busy process whose heartbeat waits while its runs go on. The others take
    /// its share once its record stayed the same long enough; it must have stopped owning
    /// it by then (self-fencing).
    pub heartbeat_hold: f64,
    /// Reads of event-time state held 0.3-1.5 s: the published watermark an advance reads
    /// first, and the window counts a run adds to and a firing reads, so an advance, the
    /// run of a change committed after its snapshot and the window's firing overlap.
    pub timed_hold: f64,
    /// A stalled reader's scan of a revised cell's records ([`crate::revisions`]) held
    /// 10-20 s after its head read: the cell is written again through its head meanwhile
    /// and a GC pass whose safe point passed that write collects the record the reader
    /// was to answer (hole 7 of the write-once GC races).
    pub reader_scan_hold: f64,
}

impl Default for FaultRates {
    fn default() -> Self {
        FaultRates {
            delay: 0.5,
            hold: 0.02,
            fail_before: 0.003,
            fail_after: 0.003,
            fate_hold: 0.0,
            fate_hold_max: Duration::from_secs(3),
            worker_fate_hold: 0.0,
            reader_fate_hold: 0.0,
            notify_scan_fail: 0.0,
            floor_hold: 0.0,
            notify_put_hold: 0.0,
            heartbeat_hold: 0.0,
            timed_hold: 0.0,
            reader_scan_hold: 0.0,
        }
    }
}

/// A set of store keys (or key prefixes' starts) the fault layer aims at, set once the
/// harness knows the codec.
#[derive(Debug, Default)]
pub struct KeySet(Mutex<Vec<Vec<u8>>>);

impl KeySet {
    /// Sets the keys.
    pub fn set(&self, keys: Vec<Vec<u8>>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = keys;
    }

    /// Whether `key` is one of them.
    pub fn contains(&self, key: &[u8]) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|k| k.as_slice() == key)
    }
}

/// What an outage takes down.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every call.
    All,
    /// The calls whose (first) key holds these bytes: the region of one table, as when a
    /// TiKV region has no leader while the rest of the store serves (the notify space,
    /// whose scans start at the floor, stays up).
    Region(Vec<u8>),
}

/// The fault state of one run.
#[derive(Debug)]
pub struct Faults {
    /// The seed's generator.
    pub rng: SimRng,
    /// Store fault rates while chaos is on.
    pub rates: FaultRates,
    chaos: AtomicBool,
    outage_until: Mutex<Option<(Instant, Scope)>>,
    /// Until when scans of the notify space still fail now and then once chaos is off: the
    /// liveness phase's drain starts in the tail of the weather, as an operator's does.
    drain_weather_until: Mutex<Option<Instant>>,
    injected: AtomicU64,
    /// Heads whose point reads are fate checks worth holding: those of the cells that are
    /// the primaries of most transactions (the loaders' offsets).
    pub fate_keys: KeySet,
    notify_prefixes: Mutex<Vec<Vec<u8>>>,
    floor_keys: Mutex<Vec<Vec<u8>>>,
    /// Keys of event-time state whose reads [`FaultRates::timed_hold`] holds.
    pub timed_keys: KeySet,
    /// The starts of the record ranges of the revised cells ([`crate::revisions`]), whose
    /// scans [`FaultRates::reader_scan_hold`] holds.
    pub revision_scans: KeySet,
    held_put_prefix: Mutex<Vec<u8>>,
    held_floor_key: Mutex<Vec<u8>>,
    held_puts: Mutex<Vec<(u64, Instant)>>,
    worker_prefix: Mutex<Vec<u8>>,
    heartbeat_holding: AtomicBool,
    heartbeat_puts: Mutex<std::collections::HashMap<Vec<u8>, Instant>>,
    slow: Mutex<Option<(usize, Instant, Duration)>>,
    fate_holding: AtomicBool,
    /// The heads of the primaries of the revised cells' writes ([`crate::revisions`]): a
    /// reader's fate check of one is held until GC trimmed the evidence of older writes.
    pub revision_fate_keys: KeySet,
    /// Woken when a fate check is held: GC actors start a pass at once (so another pass
    /// runs to completion while the held one waits).
    pub kick: std::sync::Arc<Notify>,
}

impl Faults {
    /// Faults drawn from `rng` at `rates`, chaos on.
    pub fn new(rng: SimRng, rates: FaultRates) -> Self {
        Faults {
            rng,
            rates,
            chaos: AtomicBool::new(true),
            outage_until: Mutex::new(None),
            drain_weather_until: Mutex::new(None),
            injected: AtomicU64::new(0),
            fate_keys: KeySet::default(),
            notify_prefixes: Mutex::new(Vec::new()),
            floor_keys: Mutex::new(Vec::new()),
            timed_keys: KeySet::default(),
            revision_scans: KeySet::default(),
            held_put_prefix: Mutex::new(Vec::new()),
            held_floor_key: Mutex::new(Vec::new()),
            held_puts: Mutex::new(Vec::new()),
            worker_prefix: Mutex::new(Vec::new()),
            heartbeat_holding: AtomicBool::new(false),
            heartbeat_puts: Mutex::new(std::collections::HashMap::new()),
            slow: Mutex::new(None),
            fate_holding: AtomicBool::new(false),
            revision_fate_keys: KeySet::default(),
            kick: std::sync::Arc::new(Notify::new()),
        }
    }

    /// Adds a namespace's notify space (its keys begin with `prefix`) and the key of its
    /// floor record.
    pub fn add_notify_space(&self, prefix: Vec<u8>, floor_key: Vec<u8>) {
        self.notify_prefixes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(prefix);
        self.floor_keys
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(floor_key);
    }

    /// The notify space whose puts [`FaultRates::notify_put_hold`] holds (its keys begin
    /// with `prefix`, then the bucket), and the key of its floor record, whose raises wait
    /// for those puts ([`Faults::floor_raise_gate`]).
    pub fn set_held_put_space(&self, prefix: Vec<u8>, floor_key: Vec<u8>) {
        *self
            .held_put_prefix
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = prefix;
        *self
            .held_floor_key
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = floor_key;
    }

    /// Notes a put of the held notify space (its first key `key`) held until `lands`.
    pub fn note_held_put(&self, key: &[u8], lands: Instant) {
        let prefix = self
            .held_put_prefix
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len();
        let Some(bucket) = key
            .get(prefix..prefix + 8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(u64::from_be_bytes)
        else {
            return;
        };
        let mut held = self.held_puts.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        held.retain(|(_, until)| *until > now);
        held.push((bucket, lands));
    }

    /// For a CAS of the held notify space's floor record from `expected` to `new`: if it
    /// raises the floor past the bucket of a notify put held now (the raiser's scan went
    /// past that bucket before the key was there), until when to hold it: until that put
    /// has landed and its writer read the floor (still below its key). Correct raises owe
    /// the rescan of what they skipped and find the key; one cut short leaves it there.
    pub fn floor_raise_gate(
        &self,
        key: &[u8],
        expected: Option<&[u8]>,
        new: &[u8],
    ) -> Option<Instant> {
        if self
            .held_floor_key
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_slice()
            != key
        {
            return None;
        }
        // The floor of a record (both layouts; none is 0).
        let floor = |bytes: Option<&[u8]>| -> Option<u64> {
            let word = match bytes {
                None => return Some(0),
                Some(b) if b.len() == 8 => b,
                Some(b) if b.len() == 17 => &b[1..9],
                Some(_) => return None,
            };
            <[u8; 8]>::try_from(word).ok().map(u64::from_be_bytes)
        };
        let (from, to) = (floor(expected)?, floor(Some(new))?);
        let mut held = self.held_puts.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        held.retain(|(_, until)| *until > now);
        held.iter()
            .filter(|(bucket, _)| from <= *bucket && *bucket < to)
            .map(|(_, until)| *until + Duration::from_millis(30))
            .max()
    }

    /// Whether a put of `key` may be held ([`FaultRates::notify_put_hold`]).
    pub fn is_held_put_key(&self, key: &[u8]) -> bool {
        let prefix = self
            .held_put_prefix
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        !prefix.is_empty() && key.starts_with(&prefix)
    }

    /// Whether `key` is in a notify space.
    pub fn is_notify_key(&self, key: &[u8]) -> bool {
        self.notify_prefixes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|prefix| key.starts_with(prefix))
    }

    /// Whether a scan of `range` is a floor raise's rescan: it ends at a bucket of a notify
    /// space (a pass ends at the space's end).
    pub fn is_rescan(&self, range: &percolator::kv::KeyRange) -> bool {
        let Some(end) = range.end.as_deref() else {
            return false;
        };
        self.notify_prefixes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|prefix| end.len() == prefix.len() + 8 && end.starts_with(prefix))
    }

    /// Whether `key` is a notify floor record's.
    pub fn is_floor_key(&self, key: &[u8]) -> bool {
        self.floor_keys
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|k| k.as_slice() == key)
    }

    /// Makes every store call of `process` take `per_call` until `until` (a slow machine:
    /// its round trips are uniformly slow, and meet no other fault of the store meanwhile).
    pub fn slow_down(&self, process: usize, until: Instant, per_call: Duration) {
        *self.slow.lock().unwrap_or_else(|p| p.into_inner()) = Some((process, until, per_call));
        self.count();
    }

    /// How long each store call of `process` takes now, if its machine is slow.
    pub fn slowness(&self, process: usize) -> Option<Duration> {
        let slow = self.slow.lock().unwrap_or_else(|p| p.into_inner());
        slow.filter(|(p, until, _)| self.chaos() && *p == process && Instant::now() < *until)
            .map(|(_, _, d)| d)
    }

    /// Where the worker registry's records start (their keys begin with these bytes).
    pub fn set_worker_prefix(&self, prefix: Vec<u8>) {
        *self.worker_prefix.lock().unwrap_or_else(|p| p.into_inner()) = prefix;
    }

    /// Whether `key` is a worker's record in the registry.
    pub fn is_worker_key(&self, key: &[u8]) -> bool {
        let prefix = self.worker_prefix.lock().unwrap_or_else(|p| p.into_inner());
        !prefix.is_empty() && key.starts_with(&prefix)
    }

    /// Notes a call about to reach the store (no fault stopped it): the time of a put of a
    /// worker's record (a heartbeat) is kept per key.
    pub fn note_heartbeat_put(&self, call: &percolator::kv::intercept::Call<'_>) {
        if let percolator::kv::intercept::Call::Put { key, .. } = call {
            if self.is_worker_key(key) {
                self.heartbeat_puts
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key.to_vec(), Instant::now());
            }
        }
    }

    /// When the last put of the worker record `key` reached the store.
    pub fn last_heartbeat_put(&self, key: &[u8]) -> Option<Instant> {
        self.heartbeat_puts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .copied()
    }

    /// Takes the one hold of a heartbeat at a time; `false` if one is held.
    pub fn begin_heartbeat_hold(&self) -> bool {
        !self.heartbeat_holding.swap(true, Ordering::Relaxed)
    }

    /// Ends the hold taken by [`Faults::begin_heartbeat_hold`].
    pub fn end_heartbeat_hold(&self) {
        self.heartbeat_holding.store(false, Ordering::Relaxed);
    }

    /// Takes the one hold of a fate check at a time (others run freely meanwhile, the GC
    /// passes that must complete during it among them); `false` if one is held.
    pub fn begin_fate_hold(&self) -> bool {
        !self.fate_holding.swap(true, Ordering::Relaxed)
    }

    /// Ends the hold taken by [`Faults::begin_fate_hold`].
    pub fn end_fate_hold(&self) {
        self.fate_holding.store(false, Ordering::Relaxed);
    }

    /// Whether faults are injected now.
    pub fn chaos(&self) -> bool {
        self.chaos.load(Ordering::Relaxed)
    }

    /// Turns every fault off (the liveness phase) or on.
    pub fn set_chaos(&self, on: bool) {
        self.chaos.store(on, Ordering::Relaxed);
        if !on {
            *self.outage_until.lock().unwrap_or_else(|p| p.into_inner()) = None;
            *self.slow.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
    }

    /// Lets scans of the notify space fail now and then until `until`, with chaos off
    /// ([`Faults::in_drain_weather`]).
    pub fn drain_weather(&self, until: Instant) {
        *self
            .drain_weather_until
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(until);
    }

    /// Whether a scan of the notify space may still fail now (chaos off, the weather's tail
    /// not over).
    pub fn in_drain_weather(&self) -> bool {
        !self.chaos()
            && self
                .drain_weather_until
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_some_and(|until| Instant::now() < until)
    }

    /// Starts a store outage of `scope` until `until`.
    pub fn outage(&self, until: Instant, scope: Scope) {
        *self.outage_until.lock().unwrap_or_else(|p| p.into_inner()) = Some((until, scope));
        self.count();
    }

    /// Whether a call on `key` meets an outage now.
    pub fn in_outage(&self, key: &[u8]) -> bool {
        self.chaos()
            && self
                .outage_until
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
                .is_some_and(|(until, scope)| {
                    Instant::now() < *until
                        && match scope {
                            Scope::All => true,
                            Scope::Region(part) => {
                                key.windows(part.len()).any(|w| w == part.as_slice())
                            }
                        }
                })
    }

    /// Counts one injected fault.
    pub fn count(&self) {
        self.injected.fetch_add(1, Ordering::Relaxed);
    }

    /// Faults injected so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }
}
