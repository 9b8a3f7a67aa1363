//! What a log is: its first bytes, not its path. A log's offset record is keyed by the
//! fingerprint of its first [`FINGERPRINT_WINDOW`] bytes (`id:<hex>`), so a log renamed or
//! moved to another directory is still the log it was, and a new file at its old path is a
//! new log. A log shorter than the window (young) is keyed by the fingerprint of its first
//! line and its path (`young:<hex>:<path>`); its record's fingerprint covers every byte
//! loaded, so a young log renamed away is recognized by its content too, and its record
//! moves with it (and to `id:` once the log reaches the window), in the transaction of the
//! batch that follows. Records written by earlier versions (keyed by the canonical path)
//! are used while the file at that path is still the file they describe.
//!
//! NUL bytes a log begins with are not part of its head: they are the hole a writer without
//! `O_APPEND` leaves when its file is truncated under it (copytruncate), and every such log
//! would otherwise be known by the same window of NULs. Its head is its first bytes after
//! the hole (its record's offsets stay the file's).

use super::input::{resume, Input};
use super::offset_cell;
use super::record::{fnv1a, parse_record, Progress, Record, FINGERPRINT_WINDOW};
use crate::load::LoadError;
use percolator::Transaction;
use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};

/// The first (up to) [`FINGERPRINT_WINDOW`] bytes of a log file after the NUL bytes it
/// begins with: what identifies it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Head {
    bytes: Vec<u8>,
    /// NUL bytes before them (a hole left by copytruncate).
    pub(super) skipped: u64,
}

impl Head {
    /// Reads the head of a log from `reader`, at its start.
    pub(super) fn read_from(mut reader: impl BufRead) -> std::io::Result<Head> {
        let mut skipped = 0;
        loop {
            let buf = reader.fill_buf()?;
            let (len, nuls) = (buf.len(), buf.iter().take_while(|b| **b == 0).count());
            reader.consume(nuls);
            skipped += nuls as u64;
            if len == 0 || nuls < len {
                break;
            }
        }
        let mut bytes = Vec::with_capacity(FINGERPRINT_WINDOW);
        Read::take(reader, FINGERPRINT_WINDOW as u64).read_to_end(&mut bytes)?;
        Ok(Head { bytes, skipped })
    }

    /// The fingerprint of the whole window, once the log has that many bytes.
    fn settled(&self) -> Option<u64> {
        (self.bytes.len() == FINGERPRINT_WINDOW).then(|| fnv1a(&self.bytes))
    }

    /// The fingerprint of the first line (of the window, if the line is longer); `None`
    /// while the first line is incomplete.
    fn first_line(&self) -> Option<u64> {
        match self.bytes.iter().position(|b| *b == b'\n') {
            Some(i) => Some(fnv1a(&self.bytes[..=i])),
            None => self.settled(),
        }
    }

    /// Whether this is the log of young record `progress`: the record's fingerprint covers
    /// every byte it loaded, and they are this head's first bytes.
    fn starts_with(&self, progress: &Progress) -> bool {
        let Some(Ok(n)) = progress
            .offset
            .checked_sub(self.skipped)
            .map(usize::try_from)
        else {
            return false;
        };
        n <= self.bytes.len() && progress.fingerprint == Some(fnv1a(&self.bytes[..n]))
    }

    /// Whether this is the log of the record stored under `key` (without looking at the
    /// bytes a record of an earlier version describes).
    pub(super) fn is_log_of(&self, key: &str, record: &Record) -> bool {
        match Key::parse(key) {
            Key::Id(id) => self.settled() == Some(id),
            Key::Young { first_line, .. } => {
                self.first_line() == Some(first_line) && self.starts_with(&record.progress)
            }
            Key::Legacy(_) => false,
        }
    }
}

/// Opens a log file and reads its head; a file that is not a regular file (a directory with
/// a log's name, a FIFO) is an error like one that cannot be opened, and opening it does
/// not wait (see [`super::input`]).
pub(super) fn open(path: &Path) -> std::io::Result<(Input, Head)> {
    Input::open(path)
}

/// `path` made absolute and free of symlinks where it exists.
pub(super) fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The kinds of row keys of the loader table.
pub(super) enum Key {
    /// `id:<fingerprint of the first window>`.
    Id(u64),
    /// `young:<fingerprint of the first line>:<path>`.
    Young { first_line: u64, path: PathBuf },
    /// A canonical path (records of earlier versions).
    Legacy(PathBuf),
}

const ID: &str = "id:";
const YOUNG: &str = "young:";

impl Key {
    pub(super) fn parse(key: &str) -> Key {
        if let Some(Ok(id)) = key.strip_prefix(ID).map(|h| u64::from_str_radix(h, 16)) {
            return Key::Id(id);
        }
        if let Some((Ok(first_line), path)) = key
            .strip_prefix(YOUNG)
            .and_then(|rest| rest.split_once(':'))
            .map(|(h, p)| (u64::from_str_radix(h, 16), p))
        {
            return Key::Young {
                first_line,
                path: PathBuf::from(path),
            };
        }
        Key::Legacy(PathBuf::from(key))
    }
}

fn id_key(id: u64) -> String {
    format!("{ID}{id:016x}")
}

fn young_prefix(first_line: u64) -> String {
    format!("{YOUNG}{first_line:016x}:")
}

fn young_key(first_line: u64, path: &Path) -> String {
    format!("{}{}", young_prefix(first_line), canonical(path).display())
}

/// A stored record and its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Found {
    pub(super) key: String,
    pub(super) record: Record,
}

/// The record of the log `path` whose head is `head`, read in `txn` from the loader table
/// `table`: under its `id:` key; or
/// a young record of a log beginning like it (its own path's first, else one whose file is
/// no longer at its path: renamed or moved); or an earlier version's record of the path,
/// if the file is still the one it describes. `None`: a log not loaded yet.
pub(super) async fn lookup(
    txn: &Transaction,
    table: &str,
    path: &Path,
    head: &Head,
) -> Result<Option<Found>, LoadError> {
    if let Some(id) = head.settled() {
        let key = id_key(id);
        if let Some(v) = txn.get(&offset_cell(table, &key)).await? {
            return parse_record(path, Some(v)).map(|record| Some(Found { key, record }));
        }
    }
    if let Some(first_line) = head.first_line() {
        let prefix = young_prefix(first_line);
        let end = format!("{}{:016x};", YOUNG, first_line);
        let own = young_key(first_line, path);
        let rows = txn
            .scan(table.as_bytes(), prefix.as_bytes(), Some(end.as_bytes()))
            .await?;
        let mut adopt = None;
        for (cell, v) in rows.into_iter().filter(|(c, _)| c.column == b"offset") {
            let key = String::from_utf8_lossy(&cell.row).into_owned();
            let record = parse_record(path, Some(v))?;
            if !head.starts_with(&record.progress) {
                continue;
            }
            if key == own {
                return Ok(Some(Found { key, record }));
            }
            if adopt.is_none() {
                let Key::Young { path: at, .. } = Key::parse(&key) else {
                    continue;
                };
                // A file still at the record's path with its content is the record's log;
                // this one is a copy.
                let still_there = at != canonical(path)
                    && open(&at).is_ok_and(|(_, h)| h.is_log_of(&key, &record));
                if !still_there {
                    adopt = Some(Found { key, record });
                }
            }
        }
        if adopt.is_some() {
            return Ok(adopt);
        }
    }
    let key = canonical(path).display().to_string();
    if let Some(v) = txn.get(&offset_cell(table, &key)).await? {
        let record = parse_record(path, Some(v))?;
        let same_file = open(path).is_ok_and(|(mut input, head)| {
            resume(&mut input, path, &record.progress, head.skipped).is_ok()
        });
        if same_file {
            return Ok(Some(Found { key, record }));
        }
    }
    Ok(None)
}

/// The key a batch that loaded `path` up to `offset` commits its record under: `id:` once
/// the log has a whole window, else `young:` with its path. `head` is the head read before
/// the batch; `input` the log, read again if the head is too short to say.
pub(super) fn target_key(
    input: &mut Input,
    path: &Path,
    head: &Head,
    offset: u64,
) -> Result<String, LoadError> {
    let young = |h: &Head| offset.saturating_sub(h.skipped) < FINGERPRINT_WINDOW as u64;
    let decides = |h: &Head| h.settled().is_some() || (h.first_line().is_some() && young(h));
    let reread;
    let head = if decides(head) {
        head
    } else {
        reread = input
            .reader_at(0)
            .and_then(Head::read_from)
            .map_err(|source| LoadError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        &reread
    };
    match (head.settled(), head.first_line()) {
        (Some(id), _) => Ok(id_key(id)),
        (None, Some(first_line)) if young(head) => Ok(young_key(first_line, path)),
        _ => Err(LoadError::Changed {
            path: path.to_path_buf(),
            offset,
        }),
    }
}

/// The key of the record of the log at `path` (what a batch loading it now would commit
/// under; `None` while its first line is incomplete).
pub fn file_key(path: &Path) -> std::io::Result<Option<String>> {
    let (_, head) = open(path)?;
    Ok(match (head.settled(), head.first_line()) {
        (Some(id), _) => Some(id_key(id)),
        (None, Some(first_line)) => Some(young_key(first_line, path)),
        (None, None) => None,
    })
}
