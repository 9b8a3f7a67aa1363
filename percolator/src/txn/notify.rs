//! The notify space's floor: notify keys are ordered by the second they were put in (their
//! bucket), and a published floor says below which bucket no notification is left, so a
//! scan starts there instead of walking every notification ever handled (their delete
//! markers stay in an LSM store until compaction). The protocol and its argument that no
//! notification is ever missed are in `percolator::design::notify`.
//!
//! The floor record holds two buckets: the `floor` writers settle their keys against, and
//! `scan_from`, where every reader starts. A raise moves `floor` and leaves `scan_from`
//! where it was, so the range it skipped stays visible to every reader until a rescan of
//! it has moved what writers left there (keys put by writers that read the floor before
//! the raise); a second CAS then moves `scan_from` up. A raise cut short anywhere (a crash,
//! a failed call, a CAS whose outcome is unknown) leaves the owed rescan in the record,
//! where the next pass finds and redoes it.

use super::{Shared, TxnError, TxnResult};
use crate::codec::{Cell, Key};
use crate::kv::{RangePager, ScanOrder};
use std::sync::atomic::Ordering;

/// Name of the meta record holding the notify floor ([`NotifyFloor`]).
pub const NOTIFY_FLOOR_META: &[u8] = b"notify_floor";

/// The version byte of the floor record's current layout: version, floor, scan_from (big
/// endian u64 each). The first layout was the floor alone (8 bytes).
const FLOOR_RECORD_V2: u8 = 2;

/// The current second of the system clock: the bucket new notify keys go to (unless the
/// floor is already above it) in a client on the default
/// [`crate::ClientConfig::wall_clock`]; [`crate::Client::wall_bucket`] reads the client's.
pub fn wall_bucket() -> u64 {
    use crate::clock::WallClock;
    crate::clock::SystemClock.now_secs()
}

/// The notify floor record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NotifyFloor {
    /// Writers put notify keys at or above this bucket, and move the keys they put below it
    /// (they read it after their put).
    pub floor: u64,
    /// Readers (scanners, GC, backlog counts, drain checks) start at this bucket. Below
    /// `floor` it marks a rescan still owed by a raise: `[scan_from, floor)` may hold keys
    /// of writers that read the floor before the raise.
    pub scan_from: u64,
}

impl NotifyFloor {
    /// Whether a raise left its rescan unfinished.
    pub fn owes_rescan(&self) -> bool {
        self.scan_from < self.floor
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(17);
        out.push(FLOOR_RECORD_V2);
        out.extend_from_slice(&self.floor.to_be_bytes());
        out.extend_from_slice(&self.scan_from.to_be_bytes());
        out
    }

    fn decode(key: &[u8], bytes: Option<&[u8]>) -> TxnResult<NotifyFloor> {
        let corrupt = || {
            TxnError::corrupt(
                key,
                crate::record::RecordError::Truncated {
                    field: "notify floor",
                },
            )
        };
        let word = |b: &[u8]| <[u8; 8]>::try_from(b).map(u64::from_be_bytes);
        match bytes {
            None => Ok(NotifyFloor::default()),
            // The first layout: a raise by an older binary may have been cut short before
            // its rescan ended, so the range below it is owed one rescan.
            Some(b) if b.len() == 8 => Ok(NotifyFloor {
                floor: word(b).map_err(|_| corrupt())?,
                scan_from: 0,
            }),
            Some(b) if b.len() == 17 && b[0] == FLOOR_RECORD_V2 => {
                let floor = word(&b[1..9]).map_err(|_| corrupt())?;
                let scan_from = word(&b[9..17]).map_err(|_| corrupt())?;
                if scan_from > floor {
                    return Err(corrupt());
                }
                Ok(NotifyFloor { floor, scan_from })
            }
            Some(_) => Err(corrupt()),
        }
    }
}

/// What [`super::Client::raise_notify_floor`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FloorRaise {
    /// Whether this call moved the floor (another caller may have moved it first).
    pub raised: bool,
    /// Notify keys found below the floor by the owed rescan (put by writers that had not
    /// seen a raise yet), moved above it.
    pub relocated: usize,
}

/// What a removal conditional on the bytes read found ([`super::Client::remove_rolled_back_notification`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyRecheck {
    /// The key still held what was read, and is deleted.
    Deleted,
    /// The key holds something else now (`None`: it is gone), and was left alone.
    Changed(Option<Vec<u8>>),
}

/// One notify key to put: the cell, the notification's timestamp and its record.
pub(crate) type NotifyEntry = (Cell, u64, Vec<u8>);

/// The floor record as read: its stored bytes (the CAS expectation) and their meaning.
struct FloorRead {
    raw: Option<Vec<u8>>,
    record: NotifyFloor,
}

impl Shared {
    /// The bucket for notify keys put now: this second, or the floor last seen if this
    /// process's clock is behind it.
    pub(crate) fn notify_bucket(&self) -> u64 {
        self.config
            .wall_clock
            .now_secs()
            .max(self.notify_floor_seen.load(Ordering::Relaxed))
    }

    async fn read_floor(&self) -> TxnResult<FloorRead> {
        let key = self.codec.meta(NOTIFY_FLOOR_META);
        let raw = self.kv.get(&key).await?;
        let record = NotifyFloor::decode(&key, raw.as_deref())?;
        self.notify_floor_seen
            .fetch_max(record.floor, Ordering::Relaxed);
        Ok(FloorRead { raw, record })
    }

    /// Deletes the value at `key` only if it still holds `expected`, read again now: the
    /// step that makes a removal decided on bytes read earlier conditional on them
    /// (`percolator::design::gc`, "decisions on a rolled-back fate"). The store has no
    /// conditional delete (a CAS never deletes), so this is a re-read and a delete; it is
    /// exact because nothing rewrites a key holding `expected` between the two unless the
    /// decision taken on `expected` was wrong, and the callers' decisions ("rolled back") can
    /// only be wrong once the key was already rewritten (which the re-read sees).
    pub(crate) async fn delete_if_unchanged(
        &self,
        key: &[u8],
        expected: &[u8],
    ) -> TxnResult<KeyRecheck> {
        match self.kv.get(key).await? {
            Some(current) if current == expected => {
                self.kv.delete(key.to_vec()).await?;
                Ok(KeyRecheck::Deleted)
            }
            current => Ok(KeyRecheck::Changed(current)),
        }
    }

    /// Deletes notify keys (handled, moved or dead-lettered), counting them in
    /// [`super::NotifyCounts::removed`].
    pub(crate) async fn remove_notify_keys(&self, keys: Vec<Vec<u8>>) -> TxnResult<()> {
        let count = keys.len();
        match keys.as_slice() {
            [] => return Ok(()),
            [key] => self.kv.delete(key.clone()).await?,
            _ => self.kv.batch_delete(keys).await?,
        }
        self.count_removed(count);
        Ok(())
    }

    /// Reads the published notify floor record (zeros if none).
    pub(crate) async fn read_notify_floor(&self) -> TxnResult<NotifyFloor> {
        Ok(self.read_floor().await?.record)
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
        // Every put of notify keys is followed by this call, once: it counts them.
        self.count_put(entries.len());
        loop {
            let floor = self.read_notify_floor().await?.floor;
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

    /// Raises the floor to `to` (a CAS that keeps `scan_from`, so the range skipped stays
    /// owed), then does the rescan the record owes, if any, and moves `scan_from` up to the
    /// floor it rescanned below (a second CAS). `from` is where the caller's scan began (a
    /// [`NotifyFloor::scan_from`] it read).
    ///
    /// Any error leaves the record saying what is owed: readers keep starting below the
    /// skipped range, and the next call redoes the rescan (it is idempotent). A CAS whose
    /// outcome is unknown is decided by the record found next, not by this call's memory.
    pub(crate) async fn raise_notify_floor(&self, from: u64, to: u64) -> TxnResult<FloorRaise> {
        let read = self.read_floor().await?;
        #[cfg(feature = "planted")]
        if crate::planted::active(crate::planted::Bug::FloorRaiseCutShort) {
            return self.raise_notify_floor_in_one_cas(read, from, to).await;
        }
        // The caller's scan began at `from`, at or below where readers start now
        // (`scan_from` only grows), and found nothing left below `to`.
        let (read, raised) = self
            .update_floor(read, |r| {
                (to > from && r.floor < to).then_some(NotifyFloor {
                    floor: to,
                    scan_from: r.scan_from,
                })
            })
            .await?;
        self.notify_floor_seen
            .fetch_max(read.record.floor, Ordering::Relaxed);
        let relocated = if read.record.owes_rescan() {
            self.rescan_below_floor(read.record).await?
        } else {
            0
        };
        Ok(FloorRaise { raised, relocated })
    }

    /// The planted [`crate::planted::Bug::FloorRaiseCutShort`]: the raise moves `floor` and
    /// `scan_from` together in one CAS and rescans the range it skipped from its memory of
    /// that CAS, so a rescan cut short (a failed scan, a crash) is owed nowhere and the keys
    /// writers left there (their floor read before the raise, their put after its scan) are
    /// below every reader's start for good.
    #[cfg(feature = "planted")]
    async fn raise_notify_floor_in_one_cas(
        &self,
        read: FloorRead,
        from: u64,
        to: u64,
    ) -> TxnResult<FloorRaise> {
        let skipped_from = read.record.scan_from;
        let (read, raised) = self
            .update_floor(read, |r| {
                (to > from && r.floor < to).then_some(NotifyFloor {
                    floor: to,
                    scan_from: to,
                })
            })
            .await?;
        self.notify_floor_seen
            .fetch_max(read.record.floor, Ordering::Relaxed);
        let mut relocated = 0;
        if raised {
            // The rescan, from memory: what this call's CAS skipped.
            relocated = self.relocate_notify_keys(skipped_from, to).await?;
        } else if read.record.owes_rescan() {
            relocated = self.rescan_below_floor(read.record).await?;
        }
        Ok(FloorRaise { raised, relocated })
    }

    /// The rescan `owed` records: moves every notify key in `[owed.scan_from, owed.floor)`
    /// above the floor, then raises `scan_from` to `owed.floor`. Every key put there before
    /// the floor reached `owed.floor` is found (the scan runs after that raise was read);
    /// a key put there later is moved by its writer, whose floor read follows its put.
    async fn rescan_below_floor(&self, owed: NotifyFloor) -> TxnResult<usize> {
        let relocated = self
            .relocate_notify_keys(owed.scan_from, owed.floor)
            .await?;
        if relocated > 0 {
            tracing::debug!(
                scan_from = owed.scan_from,
                floor = owed.floor,
                relocated,
                "notify keys moved above the raised floor"
            );
        }
        let read = self.read_floor().await?;
        self.update_floor(read, |r| {
            (r.scan_from < owed.floor).then_some(NotifyFloor {
                floor: r.floor,
                scan_from: owed.floor,
            })
        })
        .await?;
        Ok(relocated)
    }

    /// Moves every notify key in the buckets `[from, to)` above the floor (put again, in
    /// the bucket of the floor this client last saw or above); returns how many moved.
    async fn relocate_notify_keys(&self, from: u64, to: u64) -> TxnResult<usize> {
        let mut relocated = 0;
        let range = self.codec.notify_between(from, to);
        let mut pager = RangePager::new(self.kv.as_ref(), range, ScanOrder::Forward, 1024);
        while let Some(page) = pager.next_page().await? {
            let mut entries = Vec::new();
            let mut old = Vec::new();
            for (key, record) in page {
                let Ok(Key::Notify { cell, ts, .. }) = self.codec.decode(&key) else {
                    continue;
                };
                entries.push((cell, ts, record));
                old.push(key);
            }
            if entries.is_empty() {
                continue;
            }
            // Put above the floor before the old keys go: a crash in between leaves a
            // duplicate (handled as one by the acknowledgment), never a gap.
            self.put_notify_keys(&entries).await?;
            relocated += old.len();
            // The old copies go in one batch delete, counted as removed (the put above
            // counted the new ones).
            let moved = old.len();
            self.kv.batch_delete(old).await?;
            self.count_removed(moved);
        }
        Ok(relocated)
    }

    /// CASes the floor record from `read` to `want(current)` until it applies or `want`
    /// says nothing is left to change (`None`), deciding again on every record found.
    /// Returns the record as it stands and whether this call's CAS applied; a CAS that
    /// reports failure but finds exactly our bytes is ours (the retry hazard).
    async fn update_floor(
        &self,
        mut read: FloorRead,
        want: impl Fn(&NotifyFloor) -> Option<NotifyFloor>,
    ) -> TxnResult<(FloorRead, bool)> {
        let key = self.codec.meta(NOTIFY_FLOOR_META);
        while let Some(next) = want(&read.record) {
            let new = next.encode();
            let out = self
                .kv
                .compare_and_swap(key.clone(), read.raw.clone(), new.clone())
                .await?;
            if out.swapped || out.previous.as_deref() == Some(new.as_slice()) {
                let read = FloorRead {
                    raw: Some(new),
                    record: next,
                };
                return Ok((read, true));
            }
            read = FloorRead {
                record: NotifyFloor::decode(&key, out.previous.as_deref())?,
                raw: out.previous,
            };
        }
        Ok((read, false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_records_round_trip_and_old_ones_owe_a_rescan() {
        let key = b"k";
        let r = NotifyFloor {
            floor: 9,
            scan_from: 4,
        };
        assert_eq!(NotifyFloor::decode(key, Some(&r.encode())).unwrap(), r);
        assert!(r.owes_rescan());
        assert_eq!(
            NotifyFloor::decode(key, None).unwrap(),
            NotifyFloor::default()
        );
        let old = NotifyFloor::decode(key, Some(&7u64.to_be_bytes())).unwrap();
        assert_eq!(
            old,
            NotifyFloor {
                floor: 7,
                scan_from: 0
            }
        );
        assert!(NotifyFloor::decode(key, Some(b"short")).is_err());
        let backwards = NotifyFloor {
            floor: 1,
            scan_from: 2,
        };
        assert!(NotifyFloor::decode(key, Some(&backwards.encode())).is_err());
    }
}
