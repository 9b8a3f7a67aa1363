//! Regions split as their data grows, as TiKV's split checks split them.
//!
//! TiKV (raftstore's split checker; `components/raftstore/src/coprocessor/config.rs`)
//! splits a region once it holds more than `region-max-size` bytes or `region-max-keys`
//! keys, into pieces of `region-split-size` bytes / `region-split-keys` keys. The defaults
//! derive from the split size: max size = 1.5 x split size, split keys = 10,000 per MiB of
//! split size, max keys = 1.5 x split keys. It checks a region again once about a sixteenth
//! of its split size was written to it (`region-split-check-diff`).
//!
//! minitikv does the same with [`SplitPolicy`] ([`crate::ServerConfig::split`]; the default
//! is the docker cluster's 8 MiB split size): every applied write adds its bytes and keys to
//! its region's tally; once the tally reaches a sixteenth of the split size or split keys,
//! the region's data is counted (a scan of the store) and, if it is over either maximum, the
//! region is split at the keys that end each piece of split size or split keys (at most
//! [`MAX_SPLITS_PER_CHECK`] at once, as TiKV's `batch-split-limit`). The check runs after
//! the write applied and before its reply; one check runs at a time (a write that finds one
//! running keeps its tally for the next). Clients see the splits as TiKV's: `EpochNotMatch`
//! for the old epoch, new bounds from PD.
//!
//! **Counting only when a split is possible.** TiKV's check reads approximate sizes from its
//! SST properties; minitikv counts by scanning, which walks every deleted key still in the
//! store (a notify key is put, then deleted). So each region keeps an upper bound of its size
//! for its current epoch: what its last complete count found plus the bytes and keys of every
//! write noted since the count began (a write only adds at most its bytes and keys; a delete
//! or an overwrite is counted as if it added). A due check whose bound is within both maxima
//! skips the scan, since a count could only have found the region within them. The bound
//! stays above the region's size because:
//! - a write is noted once it applied, failed or was dropped midway (`BoundNote`), whether
//!   or not a running count's scan saw it (counted twice at worst);
//! - a write routed before a split or merge can land, after it, in a region that was counted
//!   in between (its count already past the write's key); so a note whose layout generation
//!   moved since routing drops every bound (`Layout::generation`), and each region's next due
//!   check counts;
//! - a bound belongs to one epoch version of its region, and a note or check of another
//!   version drops it.
//!
//! Writes that bypass the RPCs (a caller of `start_with_store` writing its store directly) are
//! in neither the tally nor the bound: a region whose bound is within the maxima is not counted
//! again until RPC writes push the bound over one, or a split or merge drops it.

use super::State;
use percolator::kv::{KeyRange, ScanOrder, MAX_SCAN_LIMIT};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Most splits one check makes (TiKV's `batch-split-limit`, 10).
pub const MAX_SPLITS_PER_CHECK: usize = 10;

/// When regions split as their data grows ([`crate::ServerConfig::split`]); see the module
/// documentation of how TiKV does it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitPolicy {
    /// Bytes (keys and values) of a piece after a split: TiKV's `region-split-size`.
    pub split_bytes: u64,
    /// A region over this many bytes is split: TiKV's `region-max-size`.
    pub max_bytes: u64,
    /// Keys of a piece after a split: TiKV's `region-split-keys`.
    pub split_keys: u64,
    /// A region over this many keys is split: TiKV's `region-max-keys`.
    pub max_keys: u64,
}

impl SplitPolicy {
    /// TiKV's policy for a `region-split-size` of `bytes`, with its derived defaults.
    pub fn from_split_size(bytes: u64) -> Self {
        let split_keys = (bytes * 10_000 / (1024 * 1024)).max(1);
        SplitPolicy {
            split_bytes: bytes.max(1),
            max_bytes: (bytes / 2 * 3).max(1),
            split_keys,
            max_keys: split_keys / 2 * 3,
        }
    }

    /// A policy splitting by key count only (for tests): pieces of `split_keys` keys once a
    /// region holds more than 1.5 times that.
    pub fn by_keys(split_keys: u64) -> Self {
        let split_keys = split_keys.max(1);
        SplitPolicy {
            split_bytes: u64::MAX,
            max_bytes: u64::MAX,
            split_keys,
            max_keys: (split_keys / 2 * 3).max(split_keys + 1),
        }
    }

    fn check_after(&self) -> (u64, u64) {
        (
            (self.split_bytes / 16).max(1),
            (self.split_keys / 16).max(1),
        )
    }
}

impl Default for SplitPolicy {
    /// The docker cluster's `region-split-size = "8MB"`: 8 MiB / 80,000 keys a piece,
    /// split above 12 MiB / 120,000 keys.
    fn default() -> Self {
        SplitPolicy::from_split_size(8 * 1024 * 1024)
    }
}

/// The bytes and keys written to each region since its last check, and the regions' size
/// bounds.
#[derive(Default)]
pub(crate) struct SplitTally {
    written: std::sync::Mutex<HashMap<u64, (u64, u64)>>,
    /// Per region id: an upper bound of its size (see the module documentation).
    bounds: std::sync::Mutex<HashMap<u64, SizeBound>>,
    checking: tokio::sync::Mutex<()>,
    /// Due checks that counted a region by scanning it.
    counted: AtomicU64,
    /// Due checks whose size bound made the count needless.
    skipped: AtomicU64,
}

/// How the split checks that came due went ([`crate::RunningServer::split_checks`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SplitChecks {
    /// Checks that counted the region by scanning it.
    pub counted: u64,
    /// Checks skipped because the region's size bound was within both maxima.
    pub skipped: u64,
}

impl SplitTally {
    /// The checks so far.
    pub(crate) fn checks(&self) -> SplitChecks {
        SplitChecks {
            counted: self.counted.load(Ordering::Relaxed),
            skipped: self.skipped.load(Ordering::Relaxed),
        }
    }
}

/// A write on its way into its region's size bound: noted when dropped
/// ([`State::note_bound_on_drop`]).
pub(crate) struct BoundNote<'a> {
    state: &'a State,
    region_id: u64,
    version: u64,
    generation: u64,
    bytes: u64,
    keys: u64,
}

impl Drop for BoundNote<'_> {
    fn drop(&mut self) {
        self.state.note_bound(self);
    }
}

/// An upper bound of a region's bytes and keys in one epoch version.
#[derive(Clone, Copy, Debug)]
struct SizeBound {
    /// The region's epoch version the bound is of.
    version: u64,
    /// Bytes: the last count's (none while counting) plus those written since it began.
    bytes: u64,
    /// Keys, likewise.
    keys: u64,
    /// A count is running: `bytes` and `keys` hold only the writes noted since it began.
    counting: bool,
}

impl State {
    /// A note of a write of `bytes` over `keys` keys routed to region `region_id` at epoch
    /// version `version` and layout generation `generation`, made into the region's size
    /// bound when dropped (after the write applied, failed or was dropped midway: a write that
    /// never applied only makes the bound larger).
    pub(crate) fn note_bound_on_drop(
        &self,
        region_id: u64,
        version: u64,
        generation: u64,
        bytes: u64,
        keys: u64,
    ) -> BoundNote<'_> {
        BoundNote {
            state: self,
            region_id,
            version,
            generation,
            bytes,
            keys,
        }
    }

    /// Adds a write to its region's size bound (see [`BoundNote`]).
    fn note_bound(&self, note: &BoundNote<'_>) {
        if self.split.is_none() {
            return;
        }
        let mut bounds = self.tally.bounds.lock().unwrap_or_else(|e| e.into_inner());
        if self.layout.generation() != note.generation {
            // Split or merged since the write was routed: its keys may lie in a region whose
            // count already passed them.
            bounds.clear();
            return;
        }
        if let Some(bound) = bounds.get_mut(&note.region_id) {
            if bound.version == note.version {
                bound.bytes = bound.bytes.saturating_add(note.bytes);
                bound.keys = bound.keys.saturating_add(note.keys);
            } else {
                bounds.remove(&note.region_id);
            }
        }
    }

    /// Notes a write of `bytes` over `keys` keys applied in region `region_id` (its size bound
    /// already has it: [`Self::note_bound_on_drop`]), and splits the region if it is due for
    /// a check and over the policy's maximum.
    pub(crate) async fn note_write(&self, region_id: u64, bytes: u64, keys: u64) {
        let Some(policy) = self.split else {
            return;
        };
        let (due_bytes, due_keys) = policy.check_after();
        {
            let mut written = self.tally.written.lock().unwrap_or_else(|e| e.into_inner());
            let entry = written.entry(region_id).or_default();
            entry.0 += bytes;
            entry.1 += keys;
            if entry.0 < due_bytes && entry.1 < due_keys {
                return;
            }
        }
        let Ok(_one) = self.tally.checking.try_lock() else {
            return;
        };
        self.tally
            .written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&region_id);
        let Some(region) = self.layout.by_id(region_id) else {
            // Merged away.
            self.tally
                .bounds
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&region_id);
            return;
        };
        {
            let mut bounds = self.tally.bounds.lock().unwrap_or_else(|e| e.into_inner());
            match bounds.get(&region_id) {
                Some(b)
                    if b.version == region.version
                        && !b.counting
                        && b.bytes <= policy.max_bytes
                        && b.keys <= policy.max_keys =>
                {
                    // Within both maxima whatever was deleted: a count would split nothing.
                    self.tally.skipped.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                _ => {}
            }
            bounds.insert(
                region_id,
                SizeBound {
                    version: region.version,
                    bytes: 0,
                    keys: 0,
                    counting: true,
                },
            );
        }
        self.tally.counted.fetch_add(1, Ordering::Relaxed);
        let counted = self.split_points(&region.start, &region.end, &policy).await;
        {
            let mut bounds = self.tally.bounds.lock().unwrap_or_else(|e| e.into_inner());
            match (&counted, bounds.get_mut(&region_id)) {
                (Ok((_, Some((bytes, keys)))), Some(bound))
                    if bound.version == region.version && bound.counting =>
                {
                    bound.bytes = bound.bytes.saturating_add(*bytes);
                    bound.keys = bound.keys.saturating_add(*keys);
                    bound.counting = false;
                }
                _ => {
                    bounds.remove(&region_id);
                }
            }
        }
        match counted.map(|(points, _)| points) {
            Ok(points) => {
                for key in &points {
                    if let Err(e) = self.layout.split(key) {
                        tracing::debug!(error = %e, "minitikv split check: split refused");
                    }
                }
                if !points.is_empty() {
                    tracing::debug!(
                        region = region_id,
                        splits = points.len(),
                        regions = self.layout.len(),
                        "minitikv split a region over its size"
                    );
                }
            }
            Err(e) => tracing::warn!(error = %e, "minitikv split check: scan failed"),
        }
    }

    /// The keys at which the region `[start, end)` splits under `policy`: none unless it
    /// holds more than `max_bytes` or `max_keys`; else the first key after each piece of
    /// `split_bytes` / `split_keys`. With them, the region's bytes and keys if the scan
    /// counted all of it (it stops at [`MAX_SPLITS_PER_CHECK`] points).
    async fn split_points(
        &self,
        start: &[u8],
        end: &[u8],
        policy: &SplitPolicy,
    ) -> Result<(Vec<Vec<u8>>, Option<(u64, u64)>), percolator::kv::KvError> {
        let mut range = KeyRange {
            start: start.to_vec(),
            end: (!end.is_empty()).then(|| end.to_vec()),
        };
        let (mut total_bytes, mut total_keys) = (0u64, 0u64);
        let (mut piece_bytes, mut piece_keys) = (0u64, 0u64);
        let mut points = Vec::new();
        loop {
            let page = self
                .store
                .scan(range.clone(), MAX_SCAN_LIMIT, ScanOrder::Forward)
                .await?;
            let full = page.len() == MAX_SCAN_LIMIT;
            for (key, value) in &page {
                if piece_bytes >= policy.split_bytes || piece_keys >= policy.split_keys {
                    if points.len() == MAX_SPLITS_PER_CHECK {
                        return Ok((over(total_bytes, total_keys, policy, points), None));
                    }
                    points.push(key.clone());
                    (piece_bytes, piece_keys) = (0, 0);
                }
                let size = (key.len() + value.len()) as u64;
                piece_bytes += size;
                piece_keys += 1;
                total_bytes += size;
                total_keys += 1;
            }
            match page.last() {
                Some((last, _)) if full => {
                    let mut next = last.clone();
                    next.push(0);
                    range.start = next;
                }
                _ => {
                    let counted = Some((total_bytes, total_keys));
                    return Ok((over(total_bytes, total_keys, policy, points), counted));
                }
            }
        }
    }
}

/// `points` if the region counted is over the policy's maximum, else none.
fn over(bytes: u64, keys: u64, policy: &SplitPolicy, points: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    if bytes > policy.max_bytes || keys > policy.max_keys {
        points
    } else {
        Vec::new()
    }
}
