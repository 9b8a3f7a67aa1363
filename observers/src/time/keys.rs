//! Where event-time state lives: ordinary transactional cells in three reserved tables, so
//! every read and write of it has snapshot isolation, survives crashes and is collected by
//! version GC like any cell.
//!
//! - `_watermarks`: per timed column, one row per source (`s` ‖ column id ‖ source name,
//!   column `wm`: [`SourceMark`]), one per upstream column (`u` ‖ column id ‖ upstream
//!   column id, column `wm`: empty) and the published low watermark (`p` ‖ column id,
//!   column `wm`: 8 bytes).
//! - `_pending`: per timed column, one row per cell with a change not yet observed
//!   (column id ‖ row, column `e`: the smallest pending event time, 8 bytes).
//! - `_timers`: the queue (`q` ‖ observer ‖ kind ‖ time ‖ row ‖ tag, ordered by time) and the
//!   index by row (`r` ‖ observer ‖ row ‖ tag: kind ‖ time), so a timer is found both ways.
//!
//! Variable-length parts carry a 2-byte length before them, so every prefix scan is exact.

use percolator::{Cell, TxnError};

/// Table of the sources' and the columns' watermarks.
pub const WATERMARK_TABLE: &str = "_watermarks";
/// Table of the pending-change markers.
pub const PENDING_TABLE: &str = "_pending";
/// Table of the timers.
pub const TIMER_TABLE: &str = "_timers";
/// Table of the pending marks ordered by event time (column ‖ event time ‖ row), so an
/// advance reads the least from the published watermark on, not every mark.
pub const PENDING_BY_TIME_TABLE: &str = "_pending_by_time";
/// Table of the pending marks of dead-lettered changes, set aside until they are replayed.
pub const SET_ASIDE_TABLE: &str = "_pending_dead";

const WM_COLUMN: &str = "wm";
const PENDING_COLUMN: &str = "e";
const TIMER_COLUMN: &str = "t";

/// Appends `part` with its 2-byte length.
fn push_part(out: &mut Vec<u8>, part: &[u8]) -> Result<(), TxnError> {
    let len = u16::try_from(part.len()).map_err(|_| {
        TxnError::InvalidArgument(format!(
            "a name or row of {} bytes in event-time state (at most 65535)",
            part.len()
        ))
    })?;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(part);
    Ok(())
}

/// Reads a length-prefixed part at the start of `bytes`: (part, rest).
pub(crate) fn take_part(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u16::from_be_bytes(bytes.get(..2)?.try_into().ok()?) as usize;
    let part = bytes.get(2..2 + len)?;
    Some((part, &bytes[2 + len..]))
}

/// The id of column `table`/`column` inside the reserved tables.
pub(crate) fn column_id(table: &[u8], column: &[u8]) -> Result<Vec<u8>, TxnError> {
    let mut id = Vec::with_capacity(4 + table.len() + column.len());
    push_part(&mut id, table)?;
    push_part(&mut id, column)?;
    Ok(id)
}

/// The end (exclusive) of the rows starting with `prefix`; `None`: to the end of the table.
pub(crate) fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// Reads 8 big-endian bytes.
pub(crate) fn be_u64(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(bytes.get(..8)?.try_into().ok()?))
}

/// A corrupt value of event-time state.
pub(crate) fn corrupt(cell: &Cell, what: &str) -> TxnError {
    TxnError::InvalidArgument(format!("event-time state {cell} is corrupt: {what}"))
}

// ---- watermarks ----

/// The prefix of the source rows of a column.
pub(crate) fn source_prefix(column_id: &[u8]) -> Vec<u8> {
    let mut row = vec![b's'];
    row.extend_from_slice(column_id);
    row
}

/// The cell of source `source`'s watermark for a column.
pub(crate) fn source_cell(column_id: &[u8], source: &str) -> Cell {
    let mut row = source_prefix(column_id);
    row.extend_from_slice(source.as_bytes());
    Cell::new(WATERMARK_TABLE, row, WM_COLUMN)
}

/// The prefix of the upstream rows of a column.
pub(crate) fn upstream_prefix(column_id: &[u8]) -> Vec<u8> {
    let mut row = vec![b'u'];
    row.extend_from_slice(column_id);
    row
}

/// The cell that declares `upstream_id` an upstream column of a column.
pub(crate) fn upstream_cell(column_id: &[u8], upstream_id: &[u8]) -> Cell {
    let mut row = upstream_prefix(column_id);
    row.extend_from_slice(upstream_id);
    Cell::new(WATERMARK_TABLE, row, WM_COLUMN)
}

/// The source name of a source row under `prefix`.
pub(crate) fn source_name(prefix: &[u8], row: &[u8]) -> String {
    String::from_utf8_lossy(row.strip_prefix(prefix).unwrap_or(row)).into_owned()
}

/// The cell of a column's published low watermark.
pub(crate) fn published_cell(column_id: &[u8]) -> Cell {
    let mut row = vec![b'p'];
    row.extend_from_slice(column_id);
    Cell::new(WATERMARK_TABLE, row, WM_COLUMN)
}

/// What a source stored: its watermark, whether it is idle, and the wall-clock ms of the
/// write (for operators).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourceMark {
    /// Event time (ms) below which the source loads nothing more (`u64::MAX`: its input
    /// ended).
    pub watermark_ms: u64,
    /// The source had no input for its idle timeout: it does not hold the column back.
    pub idle: bool,
    /// Wall clock (ms since the epoch) of the writer when it stored this.
    pub updated_ms: u64,
}

impl SourceMark {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(17);
        out.extend_from_slice(&self.watermark_ms.to_be_bytes());
        out.push(u8::from(self.idle));
        out.extend_from_slice(&self.updated_ms.to_be_bytes());
        out
    }

    pub(crate) fn decode(cell: &Cell, bytes: &[u8]) -> Result<SourceMark, TxnError> {
        match (be_u64(bytes), bytes.get(8), bytes.get(9..).and_then(be_u64)) {
            (Some(watermark_ms), Some(flags), Some(updated_ms)) if bytes.len() == 17 => {
                Ok(SourceMark {
                    watermark_ms,
                    idle: flags & 1 == 1,
                    updated_ms,
                })
            }
            _ => Err(corrupt(cell, "a source watermark of the wrong length")),
        }
    }
}

// ---- pending changes ----

/// The marker cell of a pending change of `cell`.
pub(crate) fn pending_cell(cell: &Cell) -> Result<Cell, TxnError> {
    let mut row = column_id(&cell.table, &cell.column)?;
    row.extend_from_slice(&cell.row);
    Ok(Cell::new(PENDING_TABLE, row, PENDING_COLUMN))
}

/// The by-time index cell of a pending change of `cell` at event time `e`.
pub(crate) fn by_time_cell(cell: &Cell, e: u64) -> Result<Cell, TxnError> {
    let mut row = column_id(&cell.table, &cell.column)?;
    row.extend_from_slice(&e.to_be_bytes());
    row.extend_from_slice(&cell.row);
    Ok(Cell::new(PENDING_BY_TIME_TABLE, row, PENDING_COLUMN))
}

/// Where the mark of a dead-lettered change of `cell` waits for its replay.
pub(crate) fn set_aside_cell(cell: &Cell) -> Result<Cell, TxnError> {
    let mut row = column_id(&cell.table, &cell.column)?;
    row.extend_from_slice(&cell.row);
    Ok(Cell::new(SET_ASIDE_TABLE, row, PENDING_COLUMN))
}

// ---- timers ----

/// A timer's kind byte.
pub(crate) const EVENT_KIND: u8 = b'e';
/// A timer's kind byte.
pub(crate) const ORACLE_KIND: u8 = b'o';

/// The prefix of the queue of observer `name`'s timers of kind `kind`.
pub(crate) fn queue_prefix(name: &str, kind: u8) -> Result<Vec<u8>, TxnError> {
    let mut row = vec![b'q'];
    push_part(&mut row, name.as_bytes())?;
    row.push(kind);
    Ok(row)
}

/// The queue cell of a timer.
pub(crate) fn queue_cell(
    name: &str,
    kind: u8,
    at: u64,
    row: &[u8],
    tag: &str,
) -> Result<Cell, TxnError> {
    let mut key = queue_prefix(name, kind)?;
    key.extend_from_slice(&at.to_be_bytes());
    push_part(&mut key, row)?;
    key.extend_from_slice(tag.as_bytes());
    Ok(Cell::new(TIMER_TABLE, key, TIMER_COLUMN))
}

/// (time, row, tag) of a queue row under `prefix`.
pub(crate) fn parse_queue_row(prefix: &[u8], key: &[u8]) -> Option<(u64, Vec<u8>, String)> {
    let rest = key.strip_prefix(prefix)?;
    let at = be_u64(rest)?;
    let (row, tag) = take_part(&rest[8..])?;
    Some((at, row.to_vec(), String::from_utf8_lossy(tag).into_owned()))
}

/// The prefix of the index rows of observer `name`'s timers on `row`.
pub(crate) fn index_prefix(name: &str, row: &[u8]) -> Result<Vec<u8>, TxnError> {
    let mut key = vec![b'r'];
    push_part(&mut key, name.as_bytes())?;
    push_part(&mut key, row)?;
    Ok(key)
}

/// The index cell of observer `name`'s timer `tag` on `row`.
pub(crate) fn index_cell(name: &str, row: &[u8], tag: &str) -> Result<Cell, TxnError> {
    let mut key = index_prefix(name, row)?;
    key.extend_from_slice(tag.as_bytes());
    Ok(Cell::new(TIMER_TABLE, key, TIMER_COLUMN))
}

/// An index value: kind and time.
pub(crate) fn encode_index(kind: u8, at: u64) -> Vec<u8> {
    let mut out = vec![kind];
    out.extend_from_slice(&at.to_be_bytes());
    out
}

/// Decodes an index value.
pub(crate) fn decode_index(cell: &Cell, bytes: &[u8]) -> Result<(u8, u64), TxnError> {
    match (bytes.first(), bytes.get(1..).and_then(be_u64)) {
        (Some(&kind @ (EVENT_KIND | ORACLE_KIND)), Some(at)) if bytes.len() == 9 => Ok((kind, at)),
        _ => Err(corrupt(cell, "a timer index entry of the wrong form")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_rows_sort_by_time_and_parse_back() {
        let a = queue_cell("obs", EVENT_KIND, 5, b"row-b", "w").unwrap();
        let b = queue_cell("obs", EVENT_KIND, 7, b"row-a", "w").unwrap();
        assert!(a.row < b.row);
        let prefix = queue_prefix("obs", EVENT_KIND).unwrap();
        assert_eq!(
            parse_queue_row(&prefix, &a.row),
            Some((5, b"row-b".to_vec(), "w".to_string()))
        );
        // Another observer's or kind's queue is not under the prefix.
        let other = queue_cell("obs2", EVENT_KIND, 1, b"r", "w").unwrap();
        assert!(!other.row.starts_with(&prefix));
        let oracle = queue_cell("obs", ORACLE_KIND, 1, b"r", "w").unwrap();
        assert!(!oracle.row.starts_with(&prefix));
    }

    #[test]
    fn prefixes_are_exact_and_ends_follow_them() {
        let id = column_id(b"clicks", b"event").unwrap();
        let other = column_id(b"clicks", b"eventx").unwrap();
        assert!(!other.starts_with(&id));
        assert_eq!(prefix_end(b"ab\xff"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(b"\xff\xff"), None);
        let mark = SourceMark {
            watermark_ms: 42,
            idle: true,
            updated_ms: 7,
        };
        let cell = source_cell(&id, "x");
        assert_eq!(SourceMark::decode(&cell, &mark.encode()).unwrap(), mark);
        assert!(SourceMark::decode(&cell, b"short").is_err());
    }
}
