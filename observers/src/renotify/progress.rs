//! The progress record of a renotify pass: one meta record per (table, column, row prefix),
//! `M renotify/<len table><table><len column><column><prefix>`, holding what the pass has
//! done so far. It is written by CAS after each page's notify keys are in the store, so a
//! pass cut short anywhere resumes after the last page it recorded (a page whose keys were
//! put but not recorded is done again: the same keys, see the parent module). It is deleted
//! when the pass reaches the end of the rows.

use crate::error::WorkerError;
use percolator::codec::Key;
use percolator::kv::{scan_all, ScanOrder};
use percolator::Client;

/// Prefix of the names of the progress records in the meta space.
pub const RENOTIFY_META: &[u8] = b"renotify/";

/// First byte of the record's current layout.
const RECORD_V1: u8 = 1;

/// How far a renotify pass over one column has come (its meta record).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenotifyProgress {
    /// The table.
    pub table: Vec<u8>,
    /// The column.
    pub column: Vec<u8>,
    /// Only rows starting with this (empty: every row).
    pub prefix: Vec<u8>,
    /// Oracle timestamp at which the pass began.
    pub started_ts: u64,
    /// With `force`: the timestamp every notification of the pass carries at least (drawn
    /// when the pass began, so a page done again puts the very same keys).
    pub force_ts: Option<u64>,
    /// The last row whose cell is notified (`None`: no page done yet). The pass resumes
    /// with the rows after it.
    pub last_row: Option<Vec<u8>>,
    /// Rows holding a cell of the column gone through so far.
    pub rows_done: u64,
    /// Notifications put so far (rows whose cell holds a value).
    pub notified: u64,
}

impl RenotifyProgress {
    /// A pass not begun yet.
    pub(crate) fn new(
        table: &[u8],
        column: &[u8],
        prefix: &[u8],
        started_ts: u64,
        force: bool,
    ) -> RenotifyProgress {
        RenotifyProgress {
            table: table.to_vec(),
            column: column.to_vec(),
            prefix: prefix.to_vec(),
            started_ts,
            force_ts: force.then_some(started_ts),
            last_row: None,
            rows_done: 0,
            notified: 0,
        }
    }

    /// The meta name of the record of the pass over `table`/`column` (rows with `prefix`).
    pub(crate) fn name(table: &[u8], column: &[u8], prefix: &[u8]) -> Vec<u8> {
        let mut name = RENOTIFY_META.to_vec();
        put_part(&mut name, table);
        put_part(&mut name, column);
        name.extend_from_slice(prefix);
        name
    }

    /// The record's bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = vec![RECORD_V1];
        for word in [self.started_ts, self.rows_done, self.notified] {
            out.extend_from_slice(&word.to_be_bytes());
        }
        put_optional(&mut out, self.force_ts.map(|t| t.to_be_bytes().to_vec()));
        put_part(&mut out, &self.table);
        put_part(&mut out, &self.column);
        put_part(&mut out, &self.prefix);
        put_optional(&mut out, self.last_row.clone());
        out
    }

    /// Decodes a record stored at `key`.
    pub(crate) fn decode(key: &[u8], bytes: &[u8]) -> Result<RenotifyProgress, WorkerError> {
        let corrupt = |reason: &str| WorkerError::CorruptRenotify {
            key: key.escape_ascii().to_string(),
            reason: reason.to_string(),
        };
        let mut r = Reader(bytes);
        if r.take(1).ok_or_else(|| corrupt("empty"))? != [RECORD_V1] {
            return Err(corrupt("unknown layout"));
        }
        let mut word = || {
            r.take(8)
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .map(u64::from_be_bytes)
                .ok_or_else(|| corrupt("truncated"))
        };
        let (started_ts, rows_done, notified) = (word()?, word()?, word()?);
        let truncated = || corrupt("truncated");
        let force_ts = match r.optional().ok_or_else(truncated)? {
            None => None,
            Some(b) => Some(u64::from_be_bytes(
                <[u8; 8]>::try_from(b).map_err(|_| truncated())?,
            )),
        };
        let table = r.part().ok_or_else(truncated)?.to_vec();
        let column = r.part().ok_or_else(truncated)?.to_vec();
        let prefix = r.part().ok_or_else(truncated)?.to_vec();
        let last_row = r.optional().ok_or_else(truncated)?.map(<[u8]>::to_vec);
        if !r.0.is_empty() {
            return Err(corrupt("trailing bytes"));
        }
        Ok(RenotifyProgress {
            table,
            column,
            prefix,
            started_ts,
            force_ts,
            last_row,
            rows_done,
            notified,
        })
    }
}

fn put_part(out: &mut Vec<u8>, part: &[u8]) {
    out.extend_from_slice(&(part.len() as u32).to_be_bytes());
    out.extend_from_slice(part);
}

fn put_optional(out: &mut Vec<u8>, part: Option<Vec<u8>>) {
    match part {
        None => out.push(0),
        Some(part) => {
            out.push(1);
            put_part(out, &part);
        }
    }
}

/// Reads the parts [`RenotifyProgress::encode`] wrote.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn part(&mut self) -> Option<&'a [u8]> {
        let len = u32::from_be_bytes(self.take(4)?.try_into().ok()?);
        self.take(usize::try_from(len).ok()?)
    }

    fn optional(&mut self) -> Option<Option<&'a [u8]>> {
        match self.take(1)? {
            [0] => Some(None),
            [1] => self.part().map(Some),
            _ => None,
        }
    }
}

/// The stored record of one pass: its raw bytes (the CAS expectation) and their meaning.
pub(crate) async fn read(
    client: &Client,
    key: &[u8],
) -> Result<Option<(Vec<u8>, RenotifyProgress)>, WorkerError> {
    let Some(raw) = client.store().get(key).await? else {
        return Ok(None);
    };
    let progress = RenotifyProgress::decode(key, &raw)?;
    Ok(Some((raw, progress)))
}

/// Every renotify pass in progress in the namespace (begun and not finished: cut short, or
/// running now), in key order.
pub async fn renotifies_in_progress(client: &Client) -> Result<Vec<RenotifyProgress>, WorkerError> {
    let pairs = scan_all(
        client.store().as_ref(),
        client.codec().meta_prefix_range(RENOTIFY_META),
        ScanOrder::Forward,
    )
    .await?;
    let mut out = Vec::with_capacity(pairs.len());
    for (key, value) in pairs {
        if let Ok(Key::Meta(_)) = client.codec().decode(&key) {
            out.push(RenotifyProgress::decode(&key, &value)?);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_garbage_is_refused() {
        let mut p = RenotifyProgress::new(b"t/x", b"c\x00", b"", 77, true);
        assert_eq!(RenotifyProgress::decode(b"k", &p.encode()).unwrap(), p);
        p.last_row = Some(b"row\xff".to_vec());
        p.rows_done = 5;
        p.notified = 4;
        p.force_ts = None;
        let bytes = p.encode();
        assert_eq!(RenotifyProgress::decode(b"k", &bytes).unwrap(), p);
        for cut in 0..bytes.len() {
            assert!(
                RenotifyProgress::decode(b"k", &bytes[..cut]).is_err(),
                "{cut}"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(RenotifyProgress::decode(b"k", &longer).is_err());
    }

    #[test]
    fn names_do_not_collide_across_table_and_column_boundaries() {
        assert_ne!(
            RenotifyProgress::name(b"ab", b"c", b""),
            RenotifyProgress::name(b"a", b"bc", b"")
        );
        assert_ne!(
            RenotifyProgress::name(b"a", b"b", b"c"),
            RenotifyProgress::name(b"a", b"bc", b"")
        );
    }
}
