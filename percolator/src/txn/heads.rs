//! Reading and compare-and-swapping head records, and the other per-cell store accesses.

use super::{Shared, TxnError, TxnResult};
use crate::codec::Cell;
use crate::record::{Head, Version};
use crate::ts::Timestamp;
use std::future::Future;
use std::sync::Arc;

/// At most this many versions are kept in a head's `recent` list.
pub(crate) const RECENT_MAX: usize = 4;
/// At most about this many bytes of versions (inline values included) are kept in a head's
/// `recent` list, so heads of cells with large inline values stay small.
pub(crate) const RECENT_BYTES: usize = 512;

/// Whether a commit on top of `head` would overflow its `recent` list, so the prewrite must
/// first spill `recent` to `V`: one `V` write per [`RECENT_MAX`] commits of small values
/// instead of one per commit.
pub(crate) fn recent_full(head: &Head) -> bool {
    let incoming = head.latest.as_ref();
    let count = head.recent.len() + usize::from(incoming.is_some());
    let bytes: usize = head
        .recent
        .iter()
        .chain(incoming)
        .map(|v| {
            24 + match &v.op {
                crate::record::Op::Put(value) => value.len(),
                _ => 8,
            }
        })
        .sum();
    count > RECENT_MAX || bytes > RECENT_BYTES
}

/// The remembered heads of a client's own commits, bounded by an estimate of their bytes.
pub(crate) type CommittedHeads =
    quick_cache::sync::Cache<Cell, std::sync::Arc<HeadSnapshot>, HeadWeight>;

/// The cache of remembered heads holding about `bytes` (`None` when 0: remember nothing).
pub(crate) fn committed_heads(bytes: u64) -> Option<CommittedHeads> {
    (bytes > 0).then(|| {
        let estimated_entries = (bytes / 256).clamp(16, 1 << 20) as usize;
        quick_cache::sync::Cache::with_weighter(estimated_entries, bytes, HeadWeight)
    })
}

/// The weight of a remembered head: about the bytes it holds (the cell, the stored bytes and
/// their decoding, which repeats the values, plus bookkeeping).
#[derive(Clone, Copy, Debug)]
pub(crate) struct HeadWeight;

impl quick_cache::Weighter<Cell, std::sync::Arc<HeadSnapshot>> for HeadWeight {
    fn weight(&self, cell: &Cell, snap: &std::sync::Arc<HeadSnapshot>) -> u64 {
        let cell_bytes = cell.table.len() + cell.row.len() + cell.column.len();
        let raw = snap.raw.as_ref().map_or(0, Vec::len);
        (cell_bytes + 2 * raw + 128) as u64
    }
}

/// A head as read from the store: its exact bytes (the CAS expectation) and its decoding.
#[derive(Clone, Debug)]
pub(crate) struct HeadSnapshot {
    /// The stored bytes; `None` if the cell has no head yet.
    pub raw: Option<Vec<u8>>,
    /// The decoded head (the default head if absent).
    pub head: Head,
}

impl HeadSnapshot {
    /// The snapshot of a cell without a head.
    pub(crate) fn absent() -> HeadSnapshot {
        HeadSnapshot {
            raw: None,
            head: Head::default(),
        }
    }

    pub(crate) fn decode(key: &[u8], raw: Option<Vec<u8>>) -> TxnResult<HeadSnapshot> {
        let Some(bytes) = &raw else {
            return Ok(HeadSnapshot::absent());
        };
        let head = Head::decode(bytes).map_err(|why| TxnError::corrupt(key, why))?;
        Ok(HeadSnapshot { raw, head })
    }
}

/// The heads a transaction read, by head key: the expectations of its prewrite CASes and
/// the answers to its later reads of those cells (exact under SI: a kept head holds no lock
/// at or below start_ts, and anything written to the cell since commits above it).
///
/// A head found is kept decoded; an absent one (the cell has no head) only by its key. A
/// wake check reads the pending lists of thousands of queries, nearly all absent, and
/// writes none of them: a decoded head and a map entry of a few hundred bytes each took
/// fresh pages on every check.
#[derive(Debug, Default)]
pub(crate) struct ReadHeads {
    found: crate::FastMap<Vec<u8>, HeadSnapshot>,
    absent: crate::FastSet<Vec<u8>>,
}

impl ReadHeads {
    /// Keeps `snap`, read at head key `key`, in place of what was kept for it. A kept head
    /// answers later reads, so a key is read again only by reads that ran at once (clones of
    /// a transaction); a head found then replaces an absent one (heads are never deleted, so
    /// it is the newer state), as the one map this replaced kept the last insert.
    pub(crate) fn keep(&mut self, key: Vec<u8>, snap: HeadSnapshot) {
        if snap.raw.is_some() {
            if !self.absent.is_empty() {
                self.absent.remove(&key);
            }
            self.found.insert(key, snap);
        } else if !self.found.contains_key(&key) {
            self.absent.insert(key);
        }
    }

    /// Room for `found` more heads found.
    pub(crate) fn reserve_found(&mut self, found: usize) {
        self.found.reserve(found);
    }

    /// The head kept for `key`.
    pub(crate) fn get(&self, key: &[u8]) -> Option<HeadSnapshot> {
        match self.found.get(key) {
            Some(snap) => Some(snap.clone()),
            None => self.absent.contains(key).then(HeadSnapshot::absent),
        }
    }

    /// Takes the head kept for `key`.
    pub(crate) fn take(&mut self, key: &[u8]) -> Option<HeadSnapshot> {
        match self.found.remove(key) {
            Some(snap) => Some(snap),
            None => self.absent.remove(key).then(HeadSnapshot::absent),
        }
    }
}

impl Shared {
    /// Reads the head of `cell`.
    pub(crate) async fn read_head(&self, cell: &Cell) -> TxnResult<HeadSnapshot> {
        self.read_head_at(&self.codec.head(cell)).await
    }

    /// Reads the head stored at head key `key`.
    pub(crate) async fn read_head_at(&self, key: &[u8]) -> TxnResult<HeadSnapshot> {
        let raw = self.kv.get(key).await?;
        HeadSnapshot::decode(key, raw)
    }

    /// Remembers `snap`, the head of `cell` as one of our commits left it, as the expected
    /// value of a later blind write of the cell (see `ClientConfig::head_cache_bytes`).
    ///
    /// Only a cell written before is remembered (its head keeps the version ours
    /// superseded in `recent`): most cells are written once (events, outputs, registry
    /// entries), and remembering each cost a cache insert (3 % of `photon demo`'s CPU) and
    /// evicted the heads worth keeping. A second write of a cell not remembered guesses it
    /// absent; that CAS fails and returns the head (what the read it replaces would have
    /// cost; one call more than a remembered head, as the cell leaves the batched prewrite),
    /// and the commit then remembers the cell.
    pub(crate) fn remember_committed_head(&self, cell: &Cell, snap: HeadSnapshot) {
        if let Some(cache) = &self.committed_heads {
            if snap.head.lock.is_none() && !snap.head.recent.is_empty() {
                cache.insert(cell.clone(), std::sync::Arc::new(snap));
            }
        }
    }

    /// The head of `cell` as this client's last commit of it left it, if remembered. It may
    /// be stale, so it serves only as a CAS expectation: a stale one fails the CAS, which
    /// returns the current head. Conflict checks on it are sound because a lock-free head
    /// only ever gains commits and raises `rollback_ts` (GC tombstones only drop versions
    /// below a safe point, which every prewriter is above).
    pub(crate) fn remembered_head(&self, cell: &Cell) -> Option<Arc<HeadSnapshot>> {
        self.committed_heads.as_ref()?.get(cell)
    }

    /// CAS of the head of `cell` from `expected` to `new`. `Ok` carries the new snapshot;
    /// `Err` the head found instead. A swap reported failed whose current value is exactly
    /// our bytes (tikv-client's retry hazard; heads never repeat thanks to `seq`) is a success.
    pub(crate) async fn cas_head(
        &self,
        cell: &Cell,
        expected: &HeadSnapshot,
        new: Head,
    ) -> TxnResult<Result<HeadSnapshot, HeadSnapshot>> {
        let key = self.codec.head(cell);
        let bytes = new.encode();
        let sent = tokio::time::Instant::now();
        let out = self
            .kv
            .compare_and_swap(key.clone(), expected.raw.clone(), bytes.clone())
            .await?;
        // Every answered CAS measures the round trip that leases must outlast: a commit on a
        // slow machine whose batched rounds failed (an outage) or fell back to this path
        // still widens the next lease (found by the simulator, seed 1198 at e0d19f4).
        self.round_trips.note_since(sent);
        if out.swapped || out.previous.as_deref() == Some(bytes.as_slice()) {
            return Ok(Ok(HeadSnapshot {
                raw: Some(bytes),
                head: new,
            }));
        }
        Ok(Err(HeadSnapshot::decode(&key, out.previous)?))
    }

    /// The read-modify-CAS loop on the head of `cell`, written once: starting from `start`
    /// (the head as the caller last saw it, or `None` to read it), asks `decide` what to do
    /// with the head; a [`HeadStep::Write`] is one CAS from exactly the bytes `decide` saw,
    /// and when it fails (the head moved) `decide` runs again on the head found. So whatever
    /// `decide` concluded holds for the head it replaced, never for a head it did not see.
    ///
    /// Returns what `decide` kept with the head it kept it on, or the head written.
    ///
    /// `decide` gets the head in an `Arc` and returns a future that owns it (rather than an
    /// async closure borrowing it): a future borrowing the argument would need a
    /// higher-ranked lifetime, which defeats the compiler's proof that callers' futures are
    /// `Send` (they are spawned on tokio).
    pub(crate) async fn update_head<T, F, Fut>(
        &self,
        cell: &Cell,
        start: Option<HeadSnapshot>,
        mut decide: F,
    ) -> TxnResult<HeadUpdate<T>>
    where
        F: FnMut(Arc<HeadSnapshot>) -> Fut,
        Fut: Future<Output = TxnResult<HeadStep<T>>>,
    {
        let mut snap = Arc::new(match start {
            Some(snap) => snap,
            None => self.read_head(cell).await?,
        });
        loop {
            let found = match decide(snap.clone()).await? {
                HeadStep::Keep(value) => {
                    return Ok(HeadUpdate::Kept(value, Arc::unwrap_or_clone(snap)))
                }
                HeadStep::Reread => self.read_head(cell).await?,
                HeadStep::Write(next) => match self.cas_head(cell, &snap, next).await? {
                    Ok(written) => return Ok(HeadUpdate::Written(written)),
                    Err(current) => current,
                },
            };
            snap = Arc::new(found);
        }
    }

    /// Writes `versions` of `cell` to `V` (one batch), so a head may drop them afterwards.
    pub(crate) async fn spill_versions(&self, cell: &Cell, versions: &[Version]) -> TxnResult<()> {
        if versions.is_empty() {
            return Ok(());
        }
        let puts = versions
            .iter()
            .map(|v| (self.codec.version(cell, v.commit_ts), v.encode()))
            .collect();
        self.kv.batch_put(puts).await?;
        Ok(())
    }

    /// The committed version of `cell` visible at `ts`, given its head.
    pub(crate) async fn visible_version(
        &self,
        cell: &Cell,
        head: &Head,
        ts: Timestamp,
    ) -> TxnResult<Option<Version>> {
        if let Some(version) = head.visible_at(ts.0) {
            return Ok(Some(version.clone()));
        }
        let range = self.codec.versions_at_or_below(cell, ts.0);
        let page = self
            .kv
            .scan(range, 1, crate::kv::ScanOrder::Forward)
            .await?;
        let Some((key, bytes)) = page.into_iter().next() else {
            return Ok(None);
        };
        let version = Version::decode(&bytes).map_err(|why| TxnError::corrupt(&key, why))?;
        if version.commit_ts < head.floor {
            // Garbage below the GC floor (a stale write that landed after GC).
            return Ok(None);
        }
        Ok(Some(version))
    }

    /// The value a version holds (`None` for a delete), fetching out-of-line values.
    /// An out-of-line value that is not there comes back as [`ValueFetch::Missing`]: GC may
    /// have removed it under a reader that outlived its snapshot, which only the reader can
    /// tell from corruption (by comparing its snapshot with the published safe point).
    pub(crate) async fn version_value(
        &self,
        cell: &Cell,
        version: Version,
    ) -> TxnResult<ValueFetch> {
        use crate::record::Op;
        match version.op {
            Op::Delete => Ok(ValueFetch::Value(None)),
            Op::Put(value) => Ok(ValueFetch::Value(Some(value))),
            Op::PutExternal(len) => {
                let key = self.codec.data(cell, version.start_ts);
                match self.kv.get(&key).await? {
                    Some(value) if value.len() as u64 == len => Ok(ValueFetch::Value(Some(value))),
                    Some(_) => Err(TxnError::corrupt(
                        &key,
                        crate::record::RecordError::Truncated {
                            field: "out-of-line value (wrong length)",
                        },
                    )),
                    None => Ok(ValueFetch::Missing { key }),
                }
            }
        }
    }
}

/// What [`Shared::update_head`] should do with the head its decision saw.
pub(crate) enum HeadStep<T> {
    /// Leave the head as it is and finish with this value.
    Keep(T),
    /// CAS the head to this record (its `seq` one above the head seen, see `Head::next`).
    Write(Head),
    /// The head was changed by other means meanwhile (e.g. a lock met on it was resolved):
    /// read it again and decide again.
    Reread,
}

/// How [`Shared::update_head`] finished.
pub(crate) enum HeadUpdate<T> {
    /// The decision kept the head (the last one read), with its value.
    Kept(T, HeadSnapshot),
    /// The decision's write applied; the head is now this.
    Written(HeadSnapshot),
}

/// What fetching a version's value found.
pub(crate) enum ValueFetch {
    /// The value (`None` for a delete).
    Value(Option<Vec<u8>>),
    /// The version's out-of-line value is not in the store (removed by GC, or corruption).
    Missing {
        /// The `D` key that was read.
        key: Vec<u8>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found() -> HeadSnapshot {
        HeadSnapshot {
            raw: Some(b"head".to_vec()),
            head: Head::default(),
        }
    }

    #[test]
    fn a_head_found_replaces_an_absent_one_never_the_reverse() {
        let mut heads = ReadHeads::default();
        heads.keep(b"k".to_vec(), HeadSnapshot::absent());
        assert_eq!(heads.get(b"k").map(|s| s.raw), Some(None));
        heads.keep(b"k".to_vec(), found());
        assert_eq!(heads.get(b"k").and_then(|s| s.raw), Some(b"head".to_vec()));
        // A read that began before the head was written and ends after: the newer state stays.
        heads.keep(b"k".to_vec(), HeadSnapshot::absent());
        assert_eq!(heads.get(b"k").and_then(|s| s.raw), Some(b"head".to_vec()));
        assert_eq!(heads.take(b"k").and_then(|s| s.raw), Some(b"head".to_vec()));
        assert!(
            heads.take(b"k").is_none(),
            "taken once: nothing is left for the key"
        );
        assert!(heads.get(b"other").is_none());
        heads.keep(b"gone".to_vec(), HeadSnapshot::absent());
        assert_eq!(heads.take(b"gone").map(|s| s.raw), Some(None));
        assert!(heads.get(b"gone").is_none());
    }
}
