//! Reading and compare-and-swapping head records, and the other per-cell store accesses.

use super::{Shared, TxnError, TxnResult};
use crate::codec::Cell;
use crate::record::{Head, Version};

/// A head as read from the store: its exact bytes (the CAS expectation) and its decoding.
#[derive(Clone, Debug)]
pub(crate) struct HeadSnapshot {
    /// The stored bytes; `None` if the cell has no head yet.
    pub raw: Option<Vec<u8>>,
    /// The decoded head (the default head if absent).
    pub head: Head,
}

impl HeadSnapshot {
    pub(crate) fn decode(key: &[u8], raw: Option<Vec<u8>>) -> TxnResult<HeadSnapshot> {
        let head = match &raw {
            None => Head::default(),
            Some(bytes) => Head::decode(bytes).map_err(|source| TxnError::Corrupt {
                key: key.escape_ascii().to_string(),
                source,
            })?,
        };
        Ok(HeadSnapshot { raw, head })
    }
}

impl Shared {
    /// Reads the head of `cell`.
    pub(crate) async fn read_head(&self, cell: &Cell) -> TxnResult<HeadSnapshot> {
        let key = self.codec.head(cell);
        let raw = self.kv.get(&key).await?;
        HeadSnapshot::decode(&key, raw)
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
        let out = self
            .kv
            .compare_and_swap(key.clone(), expected.raw.clone(), bytes.clone())
            .await?;
        if out.swapped || out.previous.as_deref() == Some(bytes.as_slice()) {
            return Ok(Ok(HeadSnapshot {
                raw: Some(bytes),
                head: new,
            }));
        }
        Ok(Err(HeadSnapshot::decode(&key, out.previous)?))
    }

    /// The committed version of `cell` visible at `ts`, given its head.
    pub(crate) async fn visible_version(
        &self,
        cell: &Cell,
        head: &Head,
        ts: u64,
    ) -> TxnResult<Option<Version>> {
        if let Some(latest) = &head.latest {
            if latest.commit_ts <= ts {
                return Ok(Some(latest.clone()));
            }
        }
        let range = self.codec.versions_at_or_below(cell, ts);
        let page = self
            .kv
            .scan(range, 1, crate::kv::ScanOrder::Forward)
            .await?;
        let Some((key, bytes)) = page.into_iter().next() else {
            return Ok(None);
        };
        let version = Version::decode(&bytes).map_err(|source| TxnError::Corrupt {
            key: key.escape_ascii().to_string(),
            source,
        })?;
        if version.commit_ts < head.floor {
            // Garbage below the GC floor (a stale write that landed after GC).
            return Ok(None);
        }
        Ok(Some(version))
    }

    /// The value a version holds (`None` for a delete), fetching out-of-line values.
    pub(crate) async fn version_value(
        &self,
        cell: &Cell,
        version: &Version,
    ) -> TxnResult<Option<Vec<u8>>> {
        use crate::record::Op;
        match &version.op {
            Op::Delete => Ok(None),
            Op::Put(value) => Ok(Some(value.clone())),
            Op::PutExternal(len) => {
                let key = self.codec.data(cell, version.start_ts);
                match self.kv.get(&key).await? {
                    Some(value) if value.len() as u64 == *len => Ok(Some(value)),
                    found => Err(TxnError::Corrupt {
                        key: key.escape_ascii().to_string(),
                        source: crate::record::RecordError::Truncated {
                            field: if found.is_some() {
                                "out-of-line value (wrong length)"
                            } else {
                                "out-of-line value (missing)"
                            },
                        },
                    }),
                }
            }
        }
    }
}
