//! The order-preserving key layout (see `percolator::design::layout`).
//!
//! Every key is `namespace ‖ space ‖ …`, where the namespace and every part of a cell
//! (table, row, column) are *memcomparable*-encoded: each `0x00` byte becomes `0x00 0xFF` and
//! the part ends with `0x00 0x01`. The encoding is self-delimiting and preserves order, so the
//! keys of a namespace never collide with those of a namespace it is a prefix of ("app" vs
//! "appN"), and cells sort by (table, row, column). Timestamps in version and data keys are
//! stored as the big-endian bitwise NOT, so the newest version of a cell sorts first.

use crate::kv::KeyRange;

mod split;
mod tables;

pub use split::{is_notify_key, notify_sides, notify_split, NotifySplit};
pub use tables::{TableIds, TableIdsError, TABLE_IDS_META};

/// Byte that escapes a `0x00` inside an encoded part.
const ESCAPE: u8 = 0xFF;
/// Byte that, after a `0x00`, ends an encoded part.
const TERMINATOR: u8 = 0x01;

/// A key space: which kind of record a key holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Space {
    /// `D`: a large value written out of line at prewrite, keyed by the writer's start_ts.
    Data,
    /// `H`: the head record of a cell (latest version, lock, rollback mark). CAS only.
    Head,
    /// `M`: metadata (oracle window, GC safe point, worker registry, …).
    Meta,
    /// `Q`: a notification marking a cell dirty, ordered by the second it was put in (its
    /// bucket) so that scans start at the notify floor instead of walking every
    /// notification ever handled (`percolator::design::notify`). (Before the buckets,
    /// notify keys had the tag `N`; they are not read.)
    Notify,
    /// `V`: a committed version that is no longer the latest, keyed by commit_ts.
    Version,
    /// `W`: a record of a write-once cell, keyed by its writer's start_ts (newest first); its
    /// fate is its writer's primary's (`percolator::design::once`).
    Once,
}

impl Space {
    /// The tag byte of the space.
    pub fn tag(self) -> u8 {
        match self {
            Space::Data => b'D',
            Space::Head => b'H',
            Space::Meta => b'M',
            Space::Notify => b'Q',
            Space::Version => b'V',
            Space::Once => b'W',
        }
    }

    /// The space with this tag byte.
    pub fn from_tag(tag: u8) -> Option<Space> {
        Some(match tag {
            b'D' => Space::Data,
            b'H' => Space::Head,
            b'M' => Space::Meta,
            b'Q' => Space::Notify,
            b'V' => Space::Version,
            b'W' => Space::Once,
            _ => return None,
        })
    }
}

/// A cell address: (table, row, column), each arbitrary bytes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cell {
    /// Table name.
    pub table: Vec<u8>,
    /// Row key within the table.
    pub row: Vec<u8>,
    /// Column name within the row.
    pub column: Vec<u8>,
}

impl Cell {
    /// A cell from anything byte-like.
    pub fn new(table: impl AsRef<[u8]>, row: impl AsRef<[u8]>, column: impl AsRef<[u8]>) -> Self {
        Cell {
            table: table.as_ref().to_vec(),
            row: row.as_ref().to_vec(),
            column: column.as_ref().to_vec(),
        }
    }
}

impl std::fmt::Display for Cell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{}/{}",
            self.table.escape_ascii(),
            self.row.escape_ascii(),
            self.column.escape_ascii()
        )
    }
}

/// A decoded key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Key {
    /// The head record of a cell.
    Head(Cell),
    /// A committed version of a cell at `commit_ts`.
    Version(Cell, u64),
    /// An out-of-line value written by the transaction with this `start_ts`.
    Data(Cell, u64),
    /// A notification on a cell, at timestamp `ts` (the writer's start_ts, or the commit_ts
    /// of a weak or notify-only commit), put during second `bucket`.
    Notify {
        /// The wall-clock second (Unix time) the key was put in, or the notify floor then.
        bucket: u64,
        /// The dirty cell.
        cell: Cell,
        /// The notification's timestamp.
        ts: u64,
    },
    /// A metadata record.
    Meta(Vec<u8>),
    /// A record of a write-once cell written by the transaction with this `start_ts`.
    Once(Cell, u64),
}

/// Why a key could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// The key does not start with this codec's namespace.
    #[error("key is outside the namespace")]
    WrongNamespace,
    /// The key ends before a complete part or timestamp.
    #[error("key is truncated")]
    Truncated,
    /// A `0x00` byte is followed by something other than the escape or terminator.
    #[error("bad escape byte {byte:#04x} at offset {offset}")]
    BadEscape {
        /// Offset of the offending byte within the encoded part.
        offset: usize,
        /// The byte found.
        byte: u8,
    },
    /// The space tag is unknown.
    #[error("unknown key space tag {0:#04x}")]
    UnknownSpace(u8),
    /// Bytes are left after a complete key.
    #[error("{0} trailing bytes after the key")]
    TrailingBytes(usize),
    /// A table id this codec's [`TableIds`] do not have.
    #[error("unknown table id {0}")]
    UnknownTableId(u16),
}

/// Appends the memcomparable encoding of `part` to `out`.
pub fn encode_part(out: &mut Vec<u8>, part: &[u8]) {
    out.reserve(part.len() + 2);
    for &b in part {
        out.push(b);
        if b == 0 {
            out.push(ESCAPE);
        }
    }
    out.push(0);
    out.push(TERMINATOR);
}

/// Decodes one memcomparable part from the front of `input`; returns it and the rest.
pub fn decode_part(input: &[u8]) -> Result<(Vec<u8>, &[u8]), CodecError> {
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    while i < input.len() {
        let b = input[i];
        if b != 0 {
            out.push(b);
            i += 1;
            continue;
        }
        match input.get(i + 1) {
            None => return Err(CodecError::Truncated),
            Some(&ESCAPE) => {
                out.push(0);
                i += 2;
            }
            Some(&TERMINATOR) => return Ok((out, &input[i + 2..])),
            Some(&byte) => {
                return Err(CodecError::BadEscape {
                    offset: i + 1,
                    byte,
                })
            }
        }
    }
    Err(CodecError::Truncated)
}

/// Encodes a timestamp so that larger timestamps sort first.
pub fn encode_desc_ts(out: &mut Vec<u8>, ts: u64) {
    out.extend_from_slice(&(!ts).to_be_bytes());
}

fn take_u64(input: &[u8]) -> Result<(u64, &[u8]), CodecError> {
    if input.len() < 8 {
        return Err(CodecError::Truncated);
    }
    let (head, rest) = input.split_at(8);
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(head);
    Ok((u64::from_be_bytes(bytes), rest))
}

/// Builds and parses the keys of one namespace.
///
/// Its table ids can grow ([`KeyCodec::grow_table_ids`]: a map that keeps every table of the
/// current one under its id), and a clone shares them: every clone of a client's codec keys
/// tables by one map.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KeyCodec {
    /// The encoded namespace, a prefix of every key of this codec.
    prefix: Vec<u8>,
    /// Tables keyed by an id instead of their name.
    tables: GrowingIds,
}

/// The table ids of a codec and its clones; replaced only by a map that extends them.
#[derive(Clone, Debug, Default)]
struct GrowingIds(std::sync::Arc<std::sync::RwLock<TableIds>>);

impl GrowingIds {
    fn new(ids: TableIds) -> GrowingIds {
        GrowingIds(std::sync::Arc::new(std::sync::RwLock::new(ids)))
    }

    /// The current map, read in place (for one key).
    fn read(&self) -> std::sync::RwLockReadGuard<'_, TableIds> {
        self.0.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The current map (a cheap handle).
    fn current(&self) -> TableIds {
        self.read().clone()
    }
}

impl PartialEq for GrowingIds {
    fn eq(&self, other: &GrowingIds) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0) || self.current() == other.current()
    }
}

impl Eq for GrowingIds {}

impl std::hash::Hash for GrowingIds {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.current().hash(state)
    }
}

impl KeyCodec {
    /// A codec for keys of the namespace `namespace` (any bytes, the empty name included),
    /// every table keyed by its name.
    pub fn new(namespace: impl AsRef<[u8]>) -> Self {
        Self::with_table_ids(namespace, TableIds::default())
    }

    /// A codec for keys of `namespace` whose tables in `tables` are keyed by their ids
    /// (`percolator::design::layout`, "Table ids").
    pub fn with_table_ids(namespace: impl AsRef<[u8]>, tables: TableIds) -> Self {
        let mut prefix = Vec::new();
        encode_part(&mut prefix, namespace.as_ref());
        KeyCodec {
            prefix,
            tables: GrowingIds::new(tables),
        }
    }

    /// The table ids this codec keys tables by now.
    pub fn table_ids(&self) -> TableIds {
        self.tables.current()
    }

    /// Keys tables by `grown` from now on, in this codec and its clones, if it extends the
    /// current map ([`TableIds::extends`]: a namespace's map only grows, an id once given is
    /// never changed or reused); returns whether the map changed. A map that does not extend
    /// the current one is refused ([`TableIdsError::Mismatch`]): adopting it would make a
    /// table's name mean other keys (invariant S4).
    pub fn grow_table_ids(&self, grown: &TableIds) -> Result<bool, TableIdsError> {
        let mut current = self.tables.0.write().unwrap_or_else(|p| p.into_inner());
        if *current == *grown {
            return Ok(false);
        }
        if !grown.extends(&current) {
            return Err(TableIdsError::Mismatch {
                stored: grown.describe_ids(),
                declared: current.describe_ids(),
            });
        }
        *current = grown.clone();
        Ok(true)
    }

    /// The bytes every key of this namespace starts with.
    pub fn namespace_prefix(&self) -> &[u8] {
        &self.prefix
    }

    /// The namespace's name, as given to [`KeyCodec::new`] (metrics label their series
    /// with it).
    pub fn namespace(&self) -> Vec<u8> {
        decode_part(&self.prefix)
            .map(|(name, _)| name)
            .unwrap_or_default()
    }

    fn start(&self, space: Space) -> Vec<u8> {
        let mut key = Vec::with_capacity(self.prefix.len() + 48);
        key.extend_from_slice(&self.prefix);
        key.push(space.tag());
        key
    }

    fn cell_key(&self, space: Space, cell: &Cell) -> Vec<u8> {
        let mut key = self.start(space);
        self.tables.read().encode_table(&mut key, &cell.table);
        encode_part(&mut key, &cell.row);
        encode_part(&mut key, &cell.column);
        key
    }

    /// The key of `cell` in `space` (Version, Data or Once) at `ts`.
    fn cell_ts_key(&self, space: Space, cell: &Cell, ts: u64) -> Vec<u8> {
        let mut k = self.cell_key(space, cell);
        encode_desc_ts(&mut k, ts);
        k
    }

    fn notify_key(&self, bucket: u64, cell: &Cell, ts: u64) -> Vec<u8> {
        let mut k = self.start(Space::Notify);
        k.extend_from_slice(&bucket.to_be_bytes());
        self.tables.read().encode_table(&mut k, &cell.table);
        encode_part(&mut k, &cell.row);
        encode_part(&mut k, &cell.column);
        k.extend_from_slice(&ts.to_be_bytes());
        k
    }

    /// Encodes a key.
    pub fn encode(&self, key: &Key) -> Vec<u8> {
        match key {
            Key::Head(cell) => self.cell_key(Space::Head, cell),
            Key::Version(cell, ts) => self.cell_ts_key(Space::Version, cell, *ts),
            Key::Data(cell, ts) => self.cell_ts_key(Space::Data, cell, *ts),
            Key::Once(cell, ts) => self.cell_ts_key(Space::Once, cell, *ts),
            Key::Notify { bucket, cell, ts } => self.notify_key(*bucket, cell, *ts),
            Key::Meta(name) => {
                let mut k = self.start(Space::Meta);
                encode_part(&mut k, name);
                k
            }
        }
    }

    /// The head key of `cell`.
    pub fn head(&self, cell: &Cell) -> Vec<u8> {
        self.cell_key(Space::Head, cell)
    }

    /// The key of the version of `cell` committed at `commit_ts`.
    pub fn version(&self, cell: &Cell, commit_ts: u64) -> Vec<u8> {
        self.cell_ts_key(Space::Version, cell, commit_ts)
    }

    /// The key of the out-of-line value of `cell` written by transaction `start_ts`.
    pub fn data(&self, cell: &Cell, start_ts: u64) -> Vec<u8> {
        self.cell_ts_key(Space::Data, cell, start_ts)
    }

    /// The key of the record of write-once `cell` written by transaction `start_ts`.
    pub fn once(&self, cell: &Cell, start_ts: u64) -> Vec<u8> {
        self.cell_ts_key(Space::Once, cell, start_ts)
    }

    /// The notify key of `cell` at `ts` in bucket `bucket`.
    pub fn notify(&self, cell: &Cell, ts: u64, bucket: u64) -> Vec<u8> {
        self.notify_key(bucket, cell, ts)
    }

    /// The notify keys of buckets `from` and later, oldest bucket first.
    pub fn notify_from(&self, from: u64) -> KeyRange {
        let mut start = self.start(Space::Notify);
        let end = KeyRange::prefix(&start).end;
        start.extend_from_slice(&from.to_be_bytes());
        KeyRange { start, end }
    }

    /// The notify keys of buckets in `[from, to)`.
    pub fn notify_between(&self, from: u64, to: u64) -> KeyRange {
        let mut start = self.start(Space::Notify);
        let mut end = start.clone();
        start.extend_from_slice(&from.to_be_bytes());
        end.extend_from_slice(&to.to_be_bytes());
        KeyRange {
            start,
            end: Some(end),
        }
    }

    /// The key of metadata record `name`.
    pub fn meta(&self, name: impl AsRef<[u8]>) -> Vec<u8> {
        self.encode(&Key::Meta(name.as_ref().to_vec()))
    }

    /// Every meta key whose name starts with `name_prefix` (e.g. all `workers/...` records).
    pub fn meta_prefix_range(&self, name_prefix: impl AsRef<[u8]>) -> KeyRange {
        let mut start = self.meta(name_prefix);
        // Drop the name's terminator: what remains prefixes every longer name.
        start.truncate(start.len() - 2);
        KeyRange::prefix(&start)
    }

    /// Every key of the namespace.
    pub fn namespace_range(&self) -> KeyRange {
        KeyRange::prefix(&self.prefix)
    }

    /// Every key of one space of the namespace.
    pub fn space_range(&self, space: Space) -> KeyRange {
        KeyRange::prefix(&self.start(space))
    }

    /// Every key of `space` belonging to `cell` (e.g. all its versions, newest first).
    pub fn cell_range(&self, space: Space, cell: &Cell) -> KeyRange {
        KeyRange::prefix(&self.cell_key(space, cell))
    }

    /// The versions of `cell` with commit_ts at or below `ts`, newest first.
    pub fn versions_at_or_below(&self, cell: &Cell, ts: u64) -> KeyRange {
        let all = self.cell_range(Space::Version, cell);
        KeyRange {
            start: self.version(cell, ts),
            end: all.end,
        }
    }

    /// Every key of `space` in `table` whose row lies in `[row_start, row_end)`
    /// (`row_end: None`: to the end of the table), in (row, column) order.
    pub fn rows_range(
        &self,
        space: Space,
        table: &[u8],
        row_start: &[u8],
        row_end: Option<&[u8]>,
    ) -> KeyRange {
        let mut table_prefix = self.start(space);
        self.tables.read().encode_table(&mut table_prefix, table);
        let mut start = table_prefix.clone();
        encode_part(&mut start, row_start);
        let end = match row_end {
            Some(row_end) => {
                let mut end = table_prefix;
                encode_part(&mut end, row_end);
                Some(end)
            }
            None => KeyRange::prefix(&table_prefix).end,
        };
        KeyRange { start, end }
    }

    /// Decodes a key of this namespace.
    pub fn decode(&self, key: &[u8]) -> Result<Key, CodecError> {
        let rest = key
            .strip_prefix(self.prefix.as_slice())
            .ok_or(CodecError::WrongNamespace)?;
        let (&tag, rest) = rest.split_first().ok_or(CodecError::Truncated)?;
        let space = Space::from_tag(tag).ok_or(CodecError::UnknownSpace(tag))?;
        if space == Space::Meta {
            let (name, rest) = decode_part(rest)?;
            return finish(rest, Key::Meta(name));
        }
        let (bucket, rest) = if space == Space::Notify {
            let (bucket, rest) = take_u64(rest)?;
            (Some(bucket), rest)
        } else {
            (None, rest)
        };
        let (table, rest) = self.tables.read().decode_table(rest)?;
        let (row, rest) = decode_part(rest)?;
        let (column, rest) = decode_part(rest)?;
        let cell = Cell { table, row, column };
        match space {
            Space::Head => finish(rest, Key::Head(cell)),
            Space::Version => {
                let (ts, rest) = take_u64(rest)?;
                finish(rest, Key::Version(cell, !ts))
            }
            Space::Data => {
                let (ts, rest) = take_u64(rest)?;
                finish(rest, Key::Data(cell, !ts))
            }
            Space::Once => {
                let (ts, rest) = take_u64(rest)?;
                finish(rest, Key::Once(cell, !ts))
            }
            Space::Notify => {
                let (ts, rest) = take_u64(rest)?;
                let bucket = bucket.unwrap_or_default();
                finish(rest, Key::Notify { bucket, cell, ts })
            }
            Space::Meta => unreachable!("handled above"),
        }
    }
}

fn finish(rest: &[u8], key: Key) -> Result<Key, CodecError> {
    if rest.is_empty() {
        Ok(key)
    } else {
        Err(CodecError::TrailingBytes(rest.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bytes() -> impl Strategy<Value = Vec<u8>> {
        // Bias towards the bytes that matter for the escape scheme.
        prop::collection::vec(
            prop_oneof![Just(0u8), Just(1u8), Just(0xFFu8), any::<u8>()],
            0..12,
        )
    }

    fn cell() -> impl Strategy<Value = Cell> {
        (bytes(), bytes(), bytes()).prop_map(|(table, row, column)| Cell { table, row, column })
    }

    fn key() -> impl Strategy<Value = Key> {
        prop_oneof![
            cell().prop_map(Key::Head),
            (cell(), any::<u64>()).prop_map(|(c, t)| Key::Version(c, t)),
            (cell(), any::<u64>()).prop_map(|(c, t)| Key::Data(c, t)),
            (cell(), any::<u64>()).prop_map(|(c, t)| Key::Once(c, t)),
            (cell(), any::<u64>(), any::<u64>()).prop_map(|(cell, ts, bucket)| Key::Notify {
                bucket,
                cell,
                ts
            }),
            bytes().prop_map(Key::Meta),
        ]
    }

    proptest! {
        #[test]
        fn keys_round_trip(ns in bytes(), k in key()) {
            let codec = KeyCodec::new(&ns);
            prop_assert_eq!(codec.decode(&codec.encode(&k)), Ok(k));
        }

        #[test]
        fn parts_preserve_order(a in bytes(), b in bytes()) {
            let (mut ea, mut eb) = (Vec::new(), Vec::new());
            encode_part(&mut ea, &a);
            encode_part(&mut eb, &b);
            prop_assert_eq!(a.cmp(&b), ea.cmp(&eb));
        }

        #[test]
        fn cells_sort_by_table_row_column(a in cell(), b in cell()) {
            let codec = KeyCodec::new("ns");
            prop_assert_eq!(a.cmp(&b), codec.head(&a).cmp(&codec.head(&b)));
        }

        #[test]
        fn versions_sort_newest_first(c in cell(), t1 in any::<u64>(), t2 in any::<u64>()) {
            let codec = KeyCodec::new("ns");
            prop_assert_eq!(t2.cmp(&t1), codec.version(&c, t1).cmp(&codec.version(&c, t2)));
            let all = codec.cell_range(Space::Version, &c);
            prop_assert!(all.contains(&codec.version(&c, t1)));
        }

        #[test]
        fn namespaces_never_overlap(a in bytes(), b in bytes(), k in key()) {
            prop_assume!(a != b);
            let (ca, cb) = (KeyCodec::new(&a), KeyCodec::new(&b));
            prop_assert!(!cb.namespace_range().contains(&ca.encode(&k)));
            prop_assert_eq!(cb.decode(&ca.encode(&k)), Err(CodecError::WrongNamespace));
        }

        #[test]
        fn rows_range_holds_exactly_its_rows(
            c in cell(), lo in bytes(), hi in bytes(), ts in any::<u64>()
        ) {
            let codec = KeyCodec::new("ns");
            let range = codec.rows_range(Space::Head, &c.table, &lo, Some(&hi));
            let inside = c.row >= lo && c.row < hi;
            prop_assert_eq!(range.contains(&codec.head(&c)), inside);
            let open = codec.rows_range(Space::Version, &c.table, &lo, None);
            prop_assert_eq!(open.contains(&codec.version(&c, ts)), c.row >= lo);
        }

        #[test]
        fn keys_round_trip_with_table_ids(k in key(), named in bytes(), id in any::<u16>()) {
            // The key's own table has an id in half the cases; `named` has one always.
            let table = match &k {
                Key::Head(c) | Key::Version(c, _) | Key::Data(c, _) | Key::Once(c, _) => {
                    Some(c.table.clone())
                }
                Key::Notify { cell, .. } => Some(cell.table.clone()),
                Key::Meta(_) => None,
            };
            let mut tables = vec![(named.clone(), id)];
            if let Some(table) = table.filter(|t| *t != named && id % 2 == 0) {
                tables.push((table, id.wrapping_add(1)));
            }
            let codec = KeyCodec::with_table_ids("ns", TableIds::new(tables).expect("ids"));
            prop_assert_eq!(codec.decode(&codec.encode(&k)), Ok(k));
        }

        #[test]
        fn table_ids_never_collide_with_names(
            a in cell(), b in cell(), id in any::<u16>(), ts in any::<u64>()
        ) {
            // `a`'s table has an id, `b`'s is keyed by name: their keys never meet, and
            // each table's rows stay in their own range.
            prop_assume!(a.table != b.table);
            let ids = TableIds::new([(a.table.clone(), id)]).expect("ids");
            let codec = KeyCodec::with_table_ids("ns", ids);
            prop_assert_ne!(codec.head(&a), codec.head(&b));
            let a_rows = codec.rows_range(Space::Once, &a.table, b"", None);
            let b_rows = codec.rows_range(Space::Once, &b.table, b"", None);
            prop_assert!(a_rows.contains(&codec.once(&a, ts)));
            prop_assert!(!a_rows.contains(&codec.once(&b, ts)));
            prop_assert!(b_rows.contains(&codec.once(&b, ts)));
            prop_assert!(!b_rows.contains(&codec.once(&a, ts)));
            prop_assert!(codec.head(&a).len() <= KeyCodec::new("ns").head(&a).len() + 2);
        }

        #[test]
        fn table_ids_records_round_trip(names in prop::collection::vec(bytes(), 0..6)) {
            let mut names = names;
            names.sort();
            names.dedup();
            let ids = TableIds::new(names.iter().enumerate().map(|(i, n)| (n, i as u16 * 7)))
                .expect("ids");
            prop_assert_eq!(TableIds::decode(&ids.encode()), Ok(ids));
        }

        #[test]
        fn garbage_never_panics(ns in bytes(), garbage in prop::collection::vec(any::<u8>(), 0..64)) {
            let codec = KeyCodec::new(&ns);
            let mut key = codec.namespace_prefix().to_vec();
            key.extend_from_slice(&garbage);
            let _ = codec.decode(&key);
            let _ = codec.decode(&garbage);
        }
    }

    /// A codec's map grows only by a map that keeps each of its ids, for it and its clones;
    /// any other map is refused and the codec keeps its own.
    #[test]
    fn table_ids_grow_in_every_clone_and_other_maps_are_refused() {
        let small = TableIds::new([("clicks", 1)]).expect("ids");
        let grown = TableIds::new([("clicks", 1), ("queries", 2)]).expect("ids");
        let codec = KeyCodec::with_table_ids("ns", small.clone());
        let clone = codec.clone();
        let cell = Cell::new("queries", "q1", "event");
        let by_name = codec.head(&cell);
        assert_eq!(codec.grow_table_ids(&small), Ok(false), "the same map");
        assert_eq!(codec.grow_table_ids(&grown), Ok(true));
        assert_eq!(clone.table_ids(), grown, "a clone shares the map");
        assert_ne!(clone.head(&cell), by_name, "keyed by its id now");
        assert_eq!(
            KeyCodec::with_table_ids("ns", grown.clone()).head(&cell),
            clone.head(&cell)
        );
        for other in [
            small,
            TableIds::new([("clicks", 2), ("queries", 1)]).expect("ids"),
            TableIds::new([("clicks", 1), ("queries", 3)]).expect("ids"),
        ] {
            assert!(matches!(
                codec.grow_table_ids(&other),
                Err(TableIdsError::Mismatch { .. })
            ));
            assert_eq!(codec.table_ids(), grown, "kept");
        }
    }

    #[test]
    fn table_ids_are_a_bijection_and_unknown_ids_are_refused() {
        assert!(TableIds::new([("a", 1), ("b", 1)]).is_err());
        assert!(TableIds::new([("a", 1), ("a", 2)]).is_err());
        let ids = TableIds::new([("clicks", 1), ("idregistry", 2)]).expect("ids");
        assert_eq!(ids.id(b"idregistry"), Some(2));
        assert_eq!(ids.name(1), Some(&b"clicks"[..]));
        let codec = KeyCodec::with_table_ids("ns", ids);
        let cell = Cell::new("idregistry", "20261126/c1", "token");
        let key = codec.head(&cell);
        assert_eq!(key.len() + 8, KeyCodec::new("ns").head(&cell).len());
        let other = KeyCodec::with_table_ids("ns", TableIds::new([("clicks", 1)]).expect("ids"));
        assert_eq!(other.decode(&key), Err(CodecError::UnknownTableId(2)));
        assert_eq!(TableIds::decode(b"\x02"), Err(TableIdsError::Malformed));
        assert_eq!(
            TableIds::decode(b"\x01\x00\x01\x00\x09ab"),
            Err(TableIdsError::Malformed)
        );
    }

    #[test]
    fn notify_keys_sort_by_bucket_first() {
        let codec = KeyCodec::new("ns");
        let (a, z) = (Cell::new("a", "a", "a"), Cell::new("z", "z", "z"));
        assert!(codec.notify(&z, 1, 5) < codec.notify(&a, 9, 6));
        assert!(codec.notify_from(6).contains(&codec.notify(&a, 9, 6)));
        assert!(!codec.notify_from(6).contains(&codec.notify(&z, 1, 5)));
        let between = codec.notify_between(5, 6);
        assert!(between.contains(&codec.notify(&z, u64::MAX, 5)));
        assert!(!between.contains(&codec.notify(&a, 0, 6)));
        assert!(codec
            .space_range(Space::Notify)
            .contains(&codec.notify(&a, 0, 0)));
    }

    #[test]
    fn prefix_namespaces_are_disjoint() {
        let app = KeyCodec::new("app");
        let app_n = KeyCodec::new("appN");
        let cell = Cell::new("t", "r", "c");
        assert!(!app.namespace_range().contains(&app_n.head(&cell)));
        assert!(!app_n.namespace_range().contains(&app.head(&cell)));
    }

    #[test]
    fn versions_at_or_below_starts_at_ts() {
        let codec = KeyCodec::new("ns");
        let cell = Cell::new("t", "r", "c");
        let range = codec.versions_at_or_below(&cell, 10);
        assert!(range.contains(&codec.version(&cell, 10)));
        assert!(range.contains(&codec.version(&cell, 3)));
        assert!(!range.contains(&codec.version(&cell, 11)));
        assert!(!range.contains(&codec.head(&cell)));
    }
}
