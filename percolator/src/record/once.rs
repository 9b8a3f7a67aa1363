//! The value of a write-once record (`W` key): a write whose fate is its primary's
//! (`percolator::design::once`).

use super::{Op, Reader, RecordError, Writer, FORMAT};
use crate::codec::Cell;

const ONCE_MAGIC: u8 = b'w';

/// A record of a write-once cell. The writer's start_ts is in the key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OnceRecord {
    /// As the prewrite puts it: decided by `primary` (it may still roll back).
    Pending {
        /// The writer's primary cell.
        primary: Cell,
        /// The writer's lease when the record was put (ms after physical(start_ts)), for
        /// deciding when an undecided writer may be fenced.
        ttl_ms: u64,
        /// What the writer wrote (`Put` or `Delete`; values are inline).
        op: Op,
    },
    /// A record whose writer is known to have committed at `commit_ts`.
    Committed {
        /// The writer's commit_ts.
        commit_ts: u64,
        /// What the writer wrote.
        op: Op,
    },
}

impl OnceRecord {
    /// What the writer wrote.
    pub fn op(&self) -> &Op {
        match self {
            OnceRecord::Pending { op, .. } | OnceRecord::Committed { op, .. } => op,
        }
    }

    /// Encodes the record.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer(Vec::with_capacity(48));
        w.u8(ONCE_MAGIC);
        w.u8(FORMAT);
        match self {
            OnceRecord::Pending {
                primary,
                ttl_ms,
                op,
            } => {
                w.u8(0);
                w.u64(*ttl_ms);
                w.bytes(&primary.table);
                w.bytes(&primary.row);
                w.bytes(&primary.column);
                w.op(op);
            }
            OnceRecord::Committed { commit_ts, op } => {
                w.u8(1);
                w.u64(*commit_ts);
                w.op(op);
            }
        }
        w.0
    }

    /// Decodes a record.
    pub fn decode(bytes: &[u8]) -> Result<OnceRecord, RecordError> {
        let mut r = Reader(bytes);
        r.magic("write-once record", ONCE_MAGIC)?;
        let record = match r.u8("write-once record kind")? {
            0 => OnceRecord::Pending {
                ttl_ms: r.u64("ttl")?,
                primary: Cell {
                    table: r.bytes("primary table")?,
                    row: r.bytes("primary row")?,
                    column: r.bytes("primary column")?,
                },
                op: r.op()?,
            },
            1 => OnceRecord::Committed {
                commit_ts: r.u64("commit_ts")?,
                op: r.op()?,
            },
            tag => {
                return Err(RecordError::BadTag {
                    field: "write-once record kind",
                    tag,
                })
            }
        };
        r.finish()?;
        Ok(record)
    }
}

/// Encodes the `Pending` records of one writer (one primary and lease, many cells) without
/// copying the primary or the values into an [`OnceRecord`] first: the part they share is
/// encoded once, and each record is sized exactly before it is written.
pub struct PendingRecords {
    front: Vec<u8>,
}

impl PendingRecords {
    /// The records of a writer decided by `primary`, with lease `ttl_ms`.
    pub fn new(primary: &Cell, ttl_ms: u64) -> Self {
        let mut w = Writer(Vec::with_capacity(
            3 + 8 * 4 + primary.table.len() + primary.row.len() + primary.column.len(),
        ));
        w.u8(ONCE_MAGIC);
        w.u8(FORMAT);
        w.u8(0);
        w.u64(ttl_ms);
        w.bytes(&primary.table);
        w.bytes(&primary.row);
        w.bytes(&primary.column);
        PendingRecords { front: w.0 }
    }

    /// The record of a write of `value` (`None`: a delete): the same bytes as
    /// [`OnceRecord::encode`] of `Pending { primary, ttl_ms, op }`.
    pub fn encode(&self, value: Option<&[u8]>) -> Vec<u8> {
        let op_len = value.map_or(1, |v| 1 + 8 + v.len());
        let mut w = Writer(Vec::with_capacity(self.front.len() + op_len));
        w.0.extend_from_slice(&self.front);
        match value {
            None => w.u8(0),
            Some(v) => {
                w.u8(1);
                w.bytes(v);
            }
        }
        w.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::tests::{cell, inline_op as op};
    use proptest::prelude::*;

    fn record() -> impl Strategy<Value = OnceRecord> {
        prop_oneof![
            (cell(), any::<u64>(), op()).prop_map(|(primary, ttl_ms, op)| OnceRecord::Pending {
                primary,
                ttl_ms,
                op
            }),
            (any::<u64>(), op())
                .prop_map(|(commit_ts, op)| OnceRecord::Committed { commit_ts, op }),
        ]
    }

    proptest! {
        #[test]
        fn records_round_trip(rec in record()) {
            prop_assert_eq!(OnceRecord::decode(&rec.encode()), Ok(rec));
        }

        #[test]
        fn pending_records_encode_as_records_do(primary in cell(), ttl_ms in any::<u64>(), value in prop::option::of(prop::collection::vec(any::<u8>(), 0..300))) {
            let op = match &value {
                Some(v) => Op::Put(v.clone()),
                None => Op::Delete,
            };
            let record = OnceRecord::Pending { primary: primary.clone(), ttl_ms, op };
            prop_assert_eq!(
                PendingRecords::new(&primary, ttl_ms).encode(value.as_deref()),
                record.encode()
            );
        }

        #[test]
        fn garbage_and_truncation_are_errors(rec in record(), bytes in prop::collection::vec(any::<u8>(), 0..64), cut in any::<prop::sample::Index>()) {
            let _ = OnceRecord::decode(&bytes);
            let encoded = rec.encode();
            prop_assert!(OnceRecord::decode(&encoded[..cut.index(encoded.len())]).is_err());
        }
    }
}
