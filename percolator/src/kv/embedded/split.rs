//! The key split of an [`EmbeddedKv`](super::EmbeddedKv): which keys live in a fjall partition
//! of their own, as the caller's [`KeySplit`] says.
//!
//! The store knows nothing of what the keys mean; the layer that owns the key layout (the
//! transaction layer: `percolator::codec::notify_split`) supplies the rule through
//! [`EmbeddedOptions::split`](super::EmbeddedOptions::split). Safety of the rule rests on three
//! points:
//!
//! - **A key has one home.** [`KeySplit::holds`] is a pure function of the key's bytes that
//!   gives the same answer for the life of the data, so a point call or a CAS touches one
//!   partition, and a batch spanning both is still one fjall batch (one journal write).
//! - **Scans never miss a side.** [`KeySplit::sides`] may say a range can hold keys of a side
//!   that has none (the scan then reads both partitions, merged in key order), never the
//!   reverse.
//! - **A split store is never opened without its split.** Once every key the rule holds has
//!   been moved to its partition, the layout partition records `<partition>-split` (for the
//!   transaction layer's rule: `notify-split`, the record stores written before this
//!   injection carry). Opening such a store without that rule (no split, or another
//!   partition) is refused with [`KvError::SplitMismatch`]: it would not see the keys in that
//!   partition. A store written without a split, opened with one, has its keys moved on that
//!   first open (a crash midway leaves the record unwritten and the next open moves the
//!   rest).

use super::engine;
use crate::kv::{KeyRange, KvError, KvResult};
use fjall::{Keyspace, PartitionCreateOptions, PartitionHandle};
use std::path::Path;
use std::sync::Arc;

/// Name of the partition holding every key the split does not take.
pub(super) const MAIN_PARTITION: &str = "kv";
/// The partition of the store's own records about its layout (never seen through `RawKv`).
const LAYOUT_PARTITION: &str = "layout";
/// Suffix of a layout record naming a split partition whose keys were all moved into it.
const SPLIT_RECORD_SUFFIX: &str = "-split";

/// A rule keeping some keys of an [`EmbeddedKv`](super::EmbeddedKv) in a partition of their
/// own (see the module documentation for what it must guarantee).
pub trait KeySplit: Send + Sync + std::fmt::Debug + 'static {
    /// The fjall partition of the keys the rule holds: a fixed name, neither `kv` nor
    /// `layout`.
    fn partition(&self) -> &'static str;

    /// Whether `key` lives in the split partition: a pure function of its bytes, the same
    /// answer for the life of the data.
    fn holds(&self, key: &[u8]) -> bool;

    /// Which keys `range` can hold: `(keys the rule holds, other keys)`. A side may be `true`
    /// without holding any key, never `false` while it may.
    fn sides(&self, range: &KeyRange) -> (bool, bool);
}

/// The split partition of an open store and the rule filling it.
pub(super) struct Split {
    /// The caller's rule.
    pub(super) rule: Arc<dyn KeySplit>,
    /// The partition of the keys it holds.
    pub(super) partition: PartitionHandle,
}

/// Opens the split partition of `rule` (moving the keys it holds out of `main` the first
/// time), or, without a rule, checks that the store was never split. `options` are those of
/// the split partition.
pub(super) fn open_split(
    path: &Path,
    keyspace: &Keyspace,
    main: &PartitionHandle,
    rule: Option<&Arc<dyn KeySplit>>,
    options: PartitionCreateOptions,
) -> KvResult<Option<Split>> {
    let layout = keyspace
        .open_partition(LAYOUT_PARTITION, PartitionCreateOptions::default())
        .map_err(engine("open"))?;
    let wanted = rule.map(|r| r.partition());
    if let Some(name) = wanted {
        if name == MAIN_PARTITION || name == LAYOUT_PARTITION {
            return Err(KvError::InvalidArgument {
                op: "open",
                message: format!("a key split cannot use the partition name {name:?}"),
            });
        }
    }
    for item in layout.keys() {
        let record = item.map_err(engine("open"))?;
        let Some(name) = record.strip_suffix(SPLIT_RECORD_SUFFIX.as_bytes()) else {
            continue;
        };
        if Some(name) != wanted.map(str::as_bytes) {
            return Err(KvError::SplitMismatch {
                path: path.to_path_buf(),
                recorded: String::from_utf8_lossy(name).into_owned(),
                given: wanted.map(String::from),
            });
        }
    }
    let Some(rule) = rule else {
        return Ok(None);
    };
    let partition = keyspace
        .open_partition(rule.partition(), options)
        .map_err(engine("open"))?;
    let record = format!("{}{SPLIT_RECORD_SUFFIX}", rule.partition());
    if layout.get(&record).map_err(engine("open"))?.is_none() {
        move_split_keys(keyspace, main, &partition, rule.as_ref())?;
        layout.insert(&record, b"1").map_err(engine("open"))?;
    }
    Ok(Some(Split {
        rule: rule.clone(),
        partition,
    }))
}

/// Moves the keys `rule` holds from `main` into `split` (one pass over `main`, until the
/// split is recorded).
fn move_split_keys(
    keyspace: &Keyspace,
    main: &PartitionHandle,
    split: &PartitionHandle,
    rule: &dyn KeySplit,
) -> KvResult<()> {
    if main.is_empty().map_err(engine("open"))? {
        return Ok(());
    }
    // One pass over every key: minutes on a large store, once.
    tracing::info!(
        partition = rule.partition(),
        "moving keys to their own partition (once, on the first open with this split)"
    );
    let mut moved = 0u64;
    let mut batch = keyspace.batch();
    for item in main.iter() {
        let (k, v) = item.map_err(engine("open"))?;
        if rule.holds(&k) {
            batch.insert(split, k.clone(), v);
            batch.remove(main, k);
            moved += 1;
            if batch.len() >= 20_000 {
                std::mem::replace(&mut batch, keyspace.batch())
                    .commit()
                    .map_err(engine("open"))?;
            }
        }
    }
    batch.commit().map_err(engine("open"))?;
    if moved > 0 {
        tracing::info!(
            moved,
            partition = rule.partition(),
            "keys moved to their own partition"
        );
    }
    Ok(())
}
