//! The notify space's floor: notify keys are ordered by the second they were put in (their
//! bucket), and a published floor says below which bucket no notification is left, so a
//! scan starts there instead of walking every notification ever handled (their delete
//! markers stay in an LSM store until compaction). The protocol and its argument that no
//! notification is ever missed are in ARCHITECTURE.md, "The notify space".

use super::{Shared, TxnError, TxnResult};
use crate::codec::{Cell, Key};
use crate::kv::{RangePager, ScanOrder};
use std::sync::atomic::Ordering;

/// Name of the meta record holding the notify floor (a bucket, big-endian u64).
pub const NOTIFY_FLOOR_META: &[u8] = b"notify_floor";

/// The current wall-clock second: the bucket new notify keys go to (unless the floor is
/// already above it).
pub fn wall_bucket() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

/// What [`super::Client::raise_notify_floor`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FloorRaise {
    /// Whether this call moved the floor (another caller may have moved it first).
    pub raised: bool,
    /// Notify keys found below the new floor after it was raised (put by writers that had
    /// not seen it yet), moved above it.
    pub relocated: usize,
}

/// One notify key to put: the cell, the notification's timestamp and its record.
pub(crate) type NotifyEntry = (Cell, u64, Vec<u8>);

impl Shared {
    /// The bucket for notify keys put now: this second, or the floor last seen if this
    /// process's clock is behind it.
    pub(crate) fn notify_bucket(&self) -> u64 {
        wall_bucket().max(self.notify_floor_seen.load(Ordering::Relaxed))
    }

    /// Reads the published notify floor (0 if none).
    pub(crate) async fn read_notify_floor(&self) -> TxnResult<u64> {
        let key = self.codec.meta(NOTIFY_FLOOR_META);
        let floor = decode_floor(&key, self.kv.get(&key).await?.as_deref())?;
        self.notify_floor_seen.fetch_max(floor, Ordering::Relaxed);
        Ok(floor)
    }

    /// Puts notify keys for `entries` in a bucket that scanners will reach, and returns it.
    pub(crate) async fn put_notify_keys(&self, entries: &[NotifyEntry]) -> TxnResult<u64> {
        let bucket = self.notify_bucket();
        let puts = entries
            .iter()
            .map(|(cell, ts, record)| (self.codec.notify(cell, *ts, bucket), record.clone()))
            .collect();
        self.kv.batch_put(puts).await?;
        self.settle_notify_keys(bucket, entries).await
    }

    /// After notify keys for `entries` were put in `bucket`: reads the floor, and while it is
    /// above the bucket (a scanner raised it past the keys before seeing them), puts them
    /// again in a bucket at or above it and deletes the old ones. Returns the final bucket.
    /// The floor read must come after the put: that order is what the argument rests on.
    pub(crate) async fn settle_notify_keys(
        &self,
        mut bucket: u64,
        entries: &[NotifyEntry],
    ) -> TxnResult<u64> {
        loop {
            let floor = self.read_notify_floor().await?;
            if floor <= bucket {
                return Ok(bucket);
            }
            let moved = self.notify_bucket().max(floor);
            tracing::debug!(
                bucket,
                floor,
                moved,
                "notify keys put below the floor; moving them"
            );
            let puts = entries
                .iter()
                .map(|(cell, ts, record)| (self.codec.notify(cell, *ts, moved), record.clone()))
                .collect();
            self.kv.batch_put(puts).await?;
            let old = entries
                .iter()
                .map(|(cell, ts, _)| self.codec.notify(cell, *ts, bucket))
                .collect();
            self.kv.batch_delete(old).await?;
            bucket = moved;
        }
    }

    /// Raises the floor from `from` to `to` (one CAS), then moves every notify key still
    /// below `to` above it.
    pub(crate) async fn raise_notify_floor(&self, from: u64, to: u64) -> TxnResult<FloorRaise> {
        if to <= from {
            return Ok(FloorRaise::default());
        }
        let key = self.codec.meta(NOTIFY_FLOOR_META);
        let expected = (from > 0).then(|| from.to_be_bytes().to_vec());
        let new = to.to_be_bytes().to_vec();
        let out = self
            .kv
            .compare_and_swap(key.clone(), expected.clone(), new.clone())
            .await?;
        // Floors only grow, so the bytes of `to` found after a CAS reported failed are ours
        // or an equal raise's: either way the rescan below is owed.
        let raised = out.swapped || out.previous.as_deref() == Some(new.as_slice());
        if !raised {
            if let Some(found) = out.previous.as_deref() {
                let found = decode_floor(&key, Some(found))?;
                self.notify_floor_seen.fetch_max(found, Ordering::Relaxed);
            }
            return Ok(FloorRaise::default());
        }
        self.notify_floor_seen.fetch_max(to, Ordering::Relaxed);
        // Writers that put keys in [from, to) and read the floor before the CAS did not move
        // them: they are found here, as their puts came before the CAS.
        let mut relocated = 0;
        let range = self.codec.notify_between(from, to);
        let mut pager = RangePager::new(self.kv.as_ref(), range, ScanOrder::Forward, 1024);
        while let Some(page) = pager.next_page().await? {
            for (old, record) in page {
                let Ok(Key::Notify { cell, ts, .. }) = self.codec.decode(&old) else {
                    continue;
                };
                self.put_notify_keys(&[(cell, ts, record)]).await?;
                self.kv.delete(old).await?;
                relocated += 1;
            }
        }
        if relocated > 0 {
            tracing::debug!(
                from,
                to,
                relocated,
                "notify keys moved above the raised floor"
            );
        }
        Ok(FloorRaise {
            raised: true,
            relocated,
        })
    }
}

fn decode_floor(key: &[u8], bytes: Option<&[u8]>) -> TxnResult<u64> {
    match bytes {
        None => Ok(0),
        Some(bytes) => <[u8; 8]>::try_from(bytes)
            .map(u64::from_be_bytes)
            .map_err(|_| {
                TxnError::corrupt(
                    key,
                    crate::record::RecordError::Truncated {
                        field: "notify floor",
                    },
                )
            }),
    }
}
