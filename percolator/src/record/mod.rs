//! Records stored in the head (`H`) and version (`V`) spaces, and their binary encoding.
//!
//! Every record decodes with a typed [`RecordError`] on corrupt or truncated bytes, never a
//! panic. Encoding: a magic byte and a format version, then fixed-width big-endian integers
//! and length-prefixed byte strings.

use crate::codec::Cell;

mod once;
pub use once::{OnceRecord, PendingRecords};

const HEAD_MAGIC: u8 = b'h';
const VERSION_MAGIC: u8 = b'v';
const FORMAT: u8 = 1;

/// The value a committed or pending write puts in a cell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// The cell holds this value, stored inline in the record.
    Put(Vec<u8>),
    /// The cell holds a value of this many bytes stored out of line, in the `D` key of the
    /// cell at the writer's start_ts.
    PutExternal(u64),
    /// The cell was deleted.
    Delete,
}

/// A committed version of a cell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    /// When the writing transaction committed.
    pub commit_ts: u64,
    /// When the writing transaction started (identifies it).
    pub start_ts: u64,
    /// What it wrote.
    pub op: Op,
}

/// A pending write: the lock a transaction holds on a cell between prewrite and commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lock {
    /// The transaction's start_ts.
    pub start_ts: u64,
    /// The transaction's primary cell; `None` when this cell is the primary.
    pub primary: Option<Cell>,
    /// The pending write.
    pub op: Op,
    /// The lock expires when oracle time passes `physical(start_ts) + ttl_ms`.
    pub ttl_ms: u64,
}

/// The head record of a cell: the newest committed versions, the lock, the rollback mark.
/// Written only by compare-and-swap; `seq` grows with every swap, so its bytes never repeat.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Head {
    /// Incremented by every CAS of the head.
    pub seq: u64,
    /// The newest committed version.
    pub latest: Option<Version>,
    /// The versions just older than `latest`, newest first (commit_ts descending): kept in
    /// the head so a commit need not write the version it supersedes to `V` at once; they
    /// are spilled to `V` together when the list is full. Every committed version is in the
    /// head or in `V` (or both) until GC removes it.
    pub recent: Vec<Version>,
    /// At most one pending write.
    pub lock: Option<Lock>,
    /// No transaction with start_ts <= rollback_ts may lock this cell any more.
    pub rollback_ts: u64,
    /// Versions in `V` with commit_ts below `floor` are garbage and must be ignored.
    pub floor: u64,
}

/// Why a stored record could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// The bytes end in the middle of a field.
    #[error("record truncated while reading {field}")]
    Truncated {
        /// The field being read.
        field: &'static str,
    },
    /// The record does not start with the expected magic byte and format version.
    #[error("not a {kind} record (magic {magic:#04x}, format {format})")]
    BadMagic {
        /// The record kind expected.
        kind: &'static str,
        /// The first byte found.
        magic: u8,
        /// The second byte found.
        format: u8,
    },
    /// A tag byte has no meaning.
    #[error("bad {field} tag {tag:#04x}")]
    BadTag {
        /// The field whose tag is wrong.
        field: &'static str,
        /// The tag found.
        tag: u8,
    },
    /// Bytes are left after a complete record.
    #[error("{0} trailing bytes after the record")]
    TrailingBytes(usize),
}

struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn bytes(&mut self, v: &[u8]) {
        self.u64(v.len() as u64);
        self.0.extend_from_slice(v);
    }
    fn op(&mut self, op: &Op) {
        match op {
            Op::Delete => self.u8(0),
            Op::Put(value) => {
                self.u8(1);
                self.bytes(value);
            }
            Op::PutExternal(len) => {
                self.u8(2);
                self.u64(*len);
            }
        }
    }
    fn version(&mut self, v: &Version) {
        self.u64(v.commit_ts);
        self.u64(v.start_ts);
        self.op(&v.op);
    }
    fn lock(&mut self, lock: &Lock) {
        self.u64(lock.start_ts);
        self.u64(lock.ttl_ms);
        match &lock.primary {
            None => self.u8(0),
            Some(cell) => {
                self.u8(1);
                self.bytes(&cell.table);
                self.bytes(&cell.row);
                self.bytes(&cell.column);
            }
        }
        self.op(&lock.op);
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], RecordError> {
        if self.0.len() < n {
            return Err(RecordError::Truncated { field });
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self, field: &'static str) -> Result<u8, RecordError> {
        Ok(self.take(1, field)?[0])
    }
    fn u64(&mut self, field: &'static str) -> Result<u64, RecordError> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8, field)?);
        Ok(u64::from_be_bytes(b))
    }
    fn bytes(&mut self, field: &'static str) -> Result<Vec<u8>, RecordError> {
        let len = self.u64(field)?;
        let len = usize::try_from(len).map_err(|_| RecordError::Truncated { field })?;
        Ok(self.take(len, field)?.to_vec())
    }
    fn magic(&mut self, kind: &'static str, expected: u8) -> Result<(), RecordError> {
        let magic = self.u8("magic")?;
        let format = self.u8("format")?;
        if magic != expected || format != FORMAT {
            return Err(RecordError::BadMagic {
                kind,
                magic,
                format,
            });
        }
        Ok(())
    }
    fn op(&mut self) -> Result<Op, RecordError> {
        match self.u8("op")? {
            0 => Ok(Op::Delete),
            1 => Ok(Op::Put(self.bytes("value")?)),
            2 => Ok(Op::PutExternal(self.u64("value length")?)),
            tag => Err(RecordError::BadTag { field: "op", tag }),
        }
    }
    fn version(&mut self) -> Result<Version, RecordError> {
        Ok(Version {
            commit_ts: self.u64("commit_ts")?,
            start_ts: self.u64("start_ts")?,
            op: self.op()?,
        })
    }
    fn lock(&mut self) -> Result<Lock, RecordError> {
        let start_ts = self.u64("lock start_ts")?;
        let ttl_ms = self.u64("lock ttl")?;
        let primary = match self.u8("primary")? {
            0 => None,
            1 => Some(Cell {
                table: self.bytes("primary table")?,
                row: self.bytes("primary row")?,
                column: self.bytes("primary column")?,
            }),
            tag => {
                return Err(RecordError::BadTag {
                    field: "primary",
                    tag,
                })
            }
        };
        Ok(Lock {
            start_ts,
            primary,
            op: self.op()?,
            ttl_ms,
        })
    }
    fn finish(self) -> Result<(), RecordError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(RecordError::TrailingBytes(self.0.len()))
        }
    }
}

/// Encoded length of `op` (what `Writer::op` writes).
fn op_len(op: &Op) -> usize {
    match op {
        Op::Delete => 1,
        Op::Put(value) => 1 + 8 + value.len(),
        Op::PutExternal(_) => 1 + 8,
    }
}

/// Encoded length of a version (what `Writer::version` writes).
fn version_len(v: &Version) -> usize {
    16 + op_len(&v.op)
}

impl Head {
    /// The length of [`Head::encode`]'s bytes, computed without encoding: the buffer is
    /// allocated once (a head with a few inline values grew it four times, 8 % of a blind
    /// write's CPU in the txn bench).
    pub fn encoded_len(&self) -> usize {
        let lock = self.lock.as_ref().map_or(0, |l| {
            let primary = l
                .primary
                .as_ref()
                .map_or(0, |c| 24 + c.table.len() + c.row.len() + c.column.len());
            17 + primary + op_len(&l.op)
        });
        let recent = if self.recent.is_empty() {
            0
        } else {
            1 + self.recent[..self.recent.len().min(u8::MAX as usize)]
                .iter()
                .map(version_len)
                .sum::<usize>()
        };
        27 + self.latest.as_ref().map_or(0, version_len) + lock + recent
    }

    /// Encodes the head.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer(Vec::with_capacity(self.encoded_len()));
        w.u8(HEAD_MAGIC);
        w.u8(FORMAT);
        w.u64(self.seq);
        w.u64(self.rollback_ts);
        w.u64(self.floor);
        let flags = u8::from(self.latest.is_some())
            | (u8::from(self.lock.is_some()) << 1)
            | (u8::from(!self.recent.is_empty()) << 2);
        w.u8(flags);
        if let Some(v) = &self.latest {
            w.version(v);
        }
        if let Some(l) = &self.lock {
            w.lock(l);
        }
        if !self.recent.is_empty() {
            // At most RECENT_MAX (far below 256) entries are ever kept; clamp regardless.
            let n = self.recent.len().min(u8::MAX as usize);
            w.u8(n as u8);
            for v in &self.recent[..n] {
                w.version(v);
            }
        }
        w.0
    }

    /// Decodes a head.
    pub fn decode(bytes: &[u8]) -> Result<Head, RecordError> {
        let mut r = Reader(bytes);
        r.magic("head", HEAD_MAGIC)?;
        let seq = r.u64("seq")?;
        let rollback_ts = r.u64("rollback_ts")?;
        let floor = r.u64("floor")?;
        let flags = r.u8("flags")?;
        if flags > 7 {
            return Err(RecordError::BadTag {
                field: "flags",
                tag: flags,
            });
        }
        let latest = if flags & 1 != 0 {
            Some(r.version()?)
        } else {
            None
        };
        let lock = if flags & 2 != 0 {
            Some(r.lock()?)
        } else {
            None
        };
        let mut recent = Vec::new();
        if flags & 4 != 0 {
            let n = r.u8("recent count")?;
            for _ in 0..n {
                recent.push(r.version()?);
            }
        }
        r.finish()?;
        Ok(Head {
            seq,
            latest,
            recent,
            lock,
            rollback_ts,
            floor,
        })
    }

    /// The committed version visible at `ts` if the head holds it: `latest` or one of
    /// `recent`. `None` means it is older than every version the head holds (look in `V`)
    /// or there is none.
    pub fn visible_at(&self, ts: u64) -> Option<&Version> {
        self.latest
            .iter()
            .chain(self.recent.iter())
            .find(|v| v.commit_ts <= ts)
    }

    /// The version the head holds that transaction `start_ts` committed, if any.
    pub fn committed_by(&self, start_ts: u64) -> Option<&Version> {
        self.latest
            .iter()
            .chain(self.recent.iter())
            .find(|v| v.start_ts == start_ts)
    }

    /// A copy with `seq` advanced, the starting point of every CAS.
    pub fn next(&self) -> Head {
        Head {
            seq: self.seq.saturating_add(1),
            ..self.clone()
        }
    }
}

impl Version {
    /// Encodes the version (the value of a `V` key).
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer(Vec::with_capacity(32));
        w.u8(VERSION_MAGIC);
        w.u8(FORMAT);
        w.version(self);
        w.0
    }

    /// Decodes a version.
    pub fn decode(bytes: &[u8]) -> Result<Version, RecordError> {
        let mut r = Reader(bytes);
        r.magic("version", VERSION_MAGIC)?;
        let v = r.version()?;
        r.finish()?;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A delete or a put of a value inline (of up to 40 bytes).
    pub(super) fn inline_op() -> impl Strategy<Value = Op> {
        prop_oneof![
            Just(Op::Delete),
            prop::collection::vec(any::<u8>(), 0..40).prop_map(Op::Put),
        ]
    }

    /// Any operation: inline, or a put of a value out of line.
    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![2 => inline_op(), 1 => any::<u64>().prop_map(Op::PutExternal)]
    }

    /// A cell of short names (up to 7 bytes each).
    pub(super) fn cell() -> impl Strategy<Value = Cell> {
        (
            prop::collection::vec(any::<u8>(), 0..8),
            prop::collection::vec(any::<u8>(), 0..8),
            prop::collection::vec(any::<u8>(), 0..8),
        )
            .prop_map(|(t, r, c)| Cell::new(t, r, c))
    }

    fn version() -> impl Strategy<Value = Version> {
        (any::<u64>(), any::<u64>(), op()).prop_map(|(commit_ts, start_ts, op)| Version {
            commit_ts,
            start_ts,
            op,
        })
    }

    fn lock() -> impl Strategy<Value = Lock> {
        (any::<u64>(), prop::option::of(cell()), op(), any::<u64>()).prop_map(
            |(start_ts, primary, op, ttl_ms)| Lock {
                start_ts,
                primary,
                op,
                ttl_ms,
            },
        )
    }

    fn head() -> impl Strategy<Value = Head> {
        (
            any::<u64>(),
            prop::option::of(version()),
            prop::option::of(lock()),
            any::<u64>(),
            any::<u64>(),
            prop::collection::vec(version(), 0..5),
        )
            .prop_map(|(seq, latest, lock, rollback_ts, floor, recent)| Head {
                seq,
                latest,
                recent,
                lock,
                rollback_ts,
                floor,
            })
    }

    proptest! {
        #[test]
        fn heads_round_trip(h in head()) {
            let bytes = h.encode();
            prop_assert_eq!(bytes.len(), h.encoded_len());
            prop_assert_eq!(Head::decode(&bytes), Ok(h));
        }

        #[test]
        fn versions_round_trip(v in version()) {
            prop_assert_eq!(Version::decode(&v.encode()), Ok(v));
        }

        #[test]
        fn garbage_is_an_error_not_a_panic(bytes in prop::collection::vec(any::<u8>(), 0..128)) {
            let _ = Head::decode(&bytes);
            let _ = Version::decode(&bytes);
        }

        #[test]
        fn truncation_and_corruption_are_errors(h in head(), cut in any::<prop::sample::Index>(), flip in any::<prop::sample::Index>(), bit in 0u8..8) {
            let bytes = h.encode();
            let cut = cut.index(bytes.len());
            prop_assert!(Head::decode(&bytes[..cut]).is_err());
            let mut corrupt = bytes.clone();
            let i = flip.index(corrupt.len());
            corrupt[i] ^= 1 << bit;
            // A flipped bit either fails to decode or decodes to a different head.
            if let Ok(other) = Head::decode(&corrupt) {
                prop_assert_ne!(other, h);
            }
            let mut longer = bytes;
            longer.push(0);
            prop_assert_eq!(Head::decode(&longer), Err(RecordError::TrailingBytes(1)));
        }
    }
}

/// The value of a notify (`N`) key: who made the cell dirty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Notification {
    /// Written at prewrite by transaction `start_ts` with primary `primary`; its fate is
    /// decided by the primary (it may still roll back).
    Strong {
        /// The writer's start_ts.
        start_ts: u64,
        /// The writer's primary cell.
        primary: Cell,
        /// The writer's lock TTL, for deciding when an undecided writer may be fenced.
        ttl_ms: u64,
    },
    /// A strong notification whose writer is known to have committed at `commit_ts`.
    Committed {
        /// The writer's commit_ts.
        commit_ts: u64,
    },
    /// A non-transactional notification: run the observer at least once.
    Weak,
}

const NOTIFY_MAGIC: u8 = b'n';

impl Notification {
    /// The commit timestamp it states (`Committed`), `None` otherwise (a strong one not yet
    /// decided, a weak one).
    pub fn commit_ts(&self) -> Option<u64> {
        match self {
            Notification::Committed { commit_ts } => Some(*commit_ts),
            _ => None,
        }
    }

    /// Encodes the notification.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer(Vec::with_capacity(48));
        w.u8(NOTIFY_MAGIC);
        w.u8(FORMAT);
        match self {
            Notification::Strong {
                start_ts,
                primary,
                ttl_ms,
            } => {
                w.u8(0);
                w.u64(*start_ts);
                w.u64(*ttl_ms);
                w.bytes(&primary.table);
                w.bytes(&primary.row);
                w.bytes(&primary.column);
            }
            Notification::Committed { commit_ts } => {
                w.u8(1);
                w.u64(*commit_ts);
            }
            Notification::Weak => w.u8(2),
        }
        w.0
    }

    /// Decodes a notification.
    pub fn decode(bytes: &[u8]) -> Result<Notification, RecordError> {
        let mut r = Reader(bytes);
        r.magic("notification", NOTIFY_MAGIC)?;
        let n = match r.u8("notification kind")? {
            0 => Notification::Strong {
                start_ts: r.u64("start_ts")?,
                ttl_ms: r.u64("ttl")?,
                primary: Cell {
                    table: r.bytes("primary table")?,
                    row: r.bytes("primary row")?,
                    column: r.bytes("primary column")?,
                },
            },
            1 => Notification::Committed {
                commit_ts: r.u64("commit_ts")?,
            },
            2 => Notification::Weak,
            tag => {
                return Err(RecordError::BadTag {
                    field: "notification kind",
                    tag,
                })
            }
        };
        r.finish()?;
        Ok(n)
    }
}

#[cfg(test)]
mod notification_tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn notifications_round_trip(start_ts in any::<u64>(), ttl_ms in any::<u64>(), row in prop::collection::vec(any::<u8>(), 0..8), kind in 0u8..3) {
            let n = match kind {
                0 => Notification::Strong { start_ts, primary: Cell::new("t", &row, "c"), ttl_ms },
                1 => Notification::Committed { commit_ts: start_ts },
                _ => Notification::Weak,
            };
            prop_assert_eq!(Notification::decode(&n.encode()), Ok(n));
        }

        #[test]
        fn notification_garbage_is_an_error(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            let _ = Notification::decode(&bytes);
        }
    }
}
