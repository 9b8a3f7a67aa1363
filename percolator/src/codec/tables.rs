//! Table ids: a fixed bijection between table names and small numbers that an application
//! declares for its tables, so that keys carry 4 bytes for the table instead of its name
//! (`percolator::design::layout`, "Table ids").
//!
//! In a key, a table with an id is the part `0x00 0x02 id_hi id_lo`. An encoded name never
//! starts that way (a `0x00` inside a name is followed by `0xFF`, its end by `0x01`), so the
//! two forms never collide, and a table's cells stay contiguous. The store keeps the map in
//! the meta record [`TABLE_IDS_META`]; every client of a namespace must use it (see
//! `percolator::txn::declare_table_ids`).

use super::CodecError;
use std::sync::Arc;

/// The byte that, after a `0x00` at the start of a table part, marks a table id.
pub(super) const TABLE_ID_MARK: u8 = 0x02;

/// Name of the meta record holding a namespace's table ids.
pub const TABLE_IDS_META: &[u8] = b"table_ids";

/// The version byte of the table ids record: version, then per table its id (u16), the
/// length of its name (u16) and the name, in id order (all big-endian).
const TABLE_IDS_RECORD_V1: u8 = 1;

/// Why a set of table ids is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TableIdsError {
    /// Two tables share an id, or a table is named twice.
    #[error("table ids are not a bijection: {0}")]
    NotABijection(String),
    /// A name longer than a record can hold (65,535 bytes).
    #[error("table name of {0} bytes is too long for an id")]
    NameTooLong(usize),
    /// A stored record that does not parse.
    #[error("the table ids record is malformed")]
    Malformed,
    /// The store keys the namespace's tables by other ids than the ones declared (another
    /// build of the application): keys written by one would be invisible to the other.
    #[error(
        "the store's table ids ({stored}) differ from this build's ({declared}): run the build \
         that wrote the store, or load into a new namespace"
    )]
    Mismatch {
        /// The store's map, as text.
        stored: String,
        /// The declared map, as text.
        declared: String,
    },
    /// The store holds keys of a table id that this client's map does not have, even after
    /// reading the store's map again (a client adopts a map that grew,
    /// `percolator::Client::reload_table_ids`). A pass that must see every key (GC) refuses
    /// to go on rather than skip them.
    #[error(
        "the store holds keys of table id {id}, which neither this client's table ids nor the \
         store's map have"
    )]
    UnknownId {
        /// The table id found in a key.
        id: u16,
    },
    /// A declared table already holds cells keyed by its name (written by a build without
    /// table ids): its id would hide them.
    #[error(
        "table {table} holds cells keyed by its name (written before table ids); this build keys \
         it by an id and would not see them: run the build that wrote the store, or load into a \
         new namespace"
    )]
    NamedTable {
        /// The table, escaped.
        table: String,
    },
}

/// A namespace's table ids (empty: every table is keyed by its name).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct TableIds {
    /// (id, name), ascending by id.
    tables: Arc<Vec<(u16, Vec<u8>)>>,
}

impl TableIds {
    /// Ids for `tables` (name, id). Refuses a name or an id given twice.
    pub fn new<N: AsRef<[u8]>>(
        tables: impl IntoIterator<Item = (N, u16)>,
    ) -> Result<TableIds, TableIdsError> {
        let mut by_id: Vec<(u16, Vec<u8>)> = tables
            .into_iter()
            .map(|(name, id)| (id, name.as_ref().to_vec()))
            .collect();
        if let Some((_, name)) = by_id
            .iter()
            .find(|(_, name)| name.len() > usize::from(u16::MAX))
        {
            return Err(TableIdsError::NameTooLong(name.len()));
        }
        by_id.sort();
        let ids_unique = by_id.windows(2).all(|w| w[0].0 != w[1].0);
        let mut names: Vec<&[u8]> = by_id.iter().map(|(_, n)| n.as_slice()).collect();
        names.sort();
        let names_unique = names.windows(2).all(|w| w[0] != w[1]);
        if !ids_unique || !names_unique {
            return Err(TableIdsError::NotABijection(Self::describe(&by_id)));
        }
        Ok(TableIds {
            tables: Arc::new(by_id),
        })
    }

    /// Whether no table has an id.
    pub fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }

    /// The id of table `name`, if it has one.
    pub fn id(&self, name: &[u8]) -> Option<u16> {
        // A handful of tables: comparing lengths first beats hashing every key's table.
        self.tables
            .iter()
            .find(|(_, n)| n.len() == name.len() && n.as_slice() == name)
            .map(|(id, _)| *id)
    }

    /// The name of table `id`, if the map has it.
    pub fn name(&self, id: u16) -> Option<&[u8]> {
        self.tables
            .binary_search_by_key(&id, |(i, _)| *i)
            .ok()
            .map(|at| self.tables[at].1.as_slice())
    }

    /// Whether this map keeps every table of `other` under the same id (it is `other`, or
    /// `other` grown by tables of their own ids): the only change a namespace's map makes.
    pub fn extends(&self, other: &TableIds) -> bool {
        other.iter().all(|(name, id)| self.id(name) == Some(id))
    }

    /// The tables, (name, id), ascending by id.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], u16)> {
        self.tables.iter().map(|(id, name)| (name.as_slice(), *id))
    }

    /// Appends the key part of `table`: its id if it has one, else its name.
    pub(super) fn encode_table(&self, out: &mut Vec<u8>, table: &[u8]) {
        match self.id(table) {
            Some(id) => {
                out.extend_from_slice(&[0, TABLE_ID_MARK]);
                out.extend_from_slice(&id.to_be_bytes());
            }
            None => super::encode_part(out, table),
        }
    }

    /// Decodes a table part from the front of `input` (an id is turned into its name);
    /// returns it and the rest.
    pub(super) fn decode_table<'a>(
        &self,
        input: &'a [u8],
    ) -> Result<(Vec<u8>, &'a [u8]), CodecError> {
        match input {
            [0, TABLE_ID_MARK, rest @ ..] => {
                let (id, rest) = rest.split_first_chunk::<2>().ok_or(CodecError::Truncated)?;
                let id = u16::from_be_bytes(*id);
                let name = self.name(id).ok_or(CodecError::UnknownTableId(id))?;
                Ok((name.to_vec(), rest))
            }
            _ => super::decode_part(input),
        }
    }

    /// The record stored under [`TABLE_IDS_META`].
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![TABLE_IDS_RECORD_V1];
        for (id, name) in self.tables.iter() {
            out.extend_from_slice(&id.to_be_bytes());
            // Names longer than u16::MAX are refused by `new`.
            out.extend_from_slice(&(name.len() as u16).to_be_bytes());
            out.extend_from_slice(name);
        }
        out
    }

    /// Parses a record made by [`TableIds::encode`].
    pub fn decode(bytes: &[u8]) -> Result<TableIds, TableIdsError> {
        let Some((&TABLE_IDS_RECORD_V1, mut rest)) = bytes.split_first() else {
            return Err(TableIdsError::Malformed);
        };
        let mut tables = Vec::new();
        while !rest.is_empty() {
            let (head, tail) = rest
                .split_first_chunk::<4>()
                .ok_or(TableIdsError::Malformed)?;
            let id = u16::from_be_bytes([head[0], head[1]]);
            let len = usize::from(u16::from_be_bytes([head[2], head[3]]));
            if tail.len() < len {
                return Err(TableIdsError::Malformed);
            }
            let (name, tail) = tail.split_at(len);
            tables.push((name.to_vec(), id));
            rest = tail;
        }
        TableIds::new(tables)
    }

    /// The map as text, for errors: `name=id, …`.
    pub fn describe_ids(&self) -> String {
        Self::describe(&self.tables)
    }

    fn describe(tables: &[(u16, Vec<u8>)]) -> String {
        let parts: Vec<String> = tables
            .iter()
            .map(|(id, name)| format!("{}={id}", name.escape_ascii()))
            .collect();
        parts.join(", ")
    }
}
