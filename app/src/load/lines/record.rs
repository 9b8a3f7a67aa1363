//! Progress through one log file as stored with each batch (offset, line, fingerprint of
//! the loaded bytes before the offset; the check that they were not changed in place since
//! is [`super::input::resume`]).

use crate::load::LoadError;
use std::path::{Path, PathBuf};

/// Progress through one file: byte offset and line number of the next line to load, and
/// the fingerprint of the loaded bytes just before the offset. Stored as
/// `offset,line,fingerprint` (hex) with each batch; offsets stored without a fingerprint
/// (`offset,line`, by earlier versions) are accepted and only checked against the file size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Progress {
    pub(super) offset: u64,
    pub(super) line: u64,
    pub(super) fingerprint: Option<u64>,
}

/// Bytes of a log just before the stored offset that its fingerprint covers. A rewrite in
/// place changes them unless it leaves the whole window as it was (and checking them costs
/// one small read per batch, where hashing the whole prefix would re-read the file).
pub const FINGERPRINT_WINDOW: usize = 4096;

/// FNV-1a, 64 bits: a stable hash (same value on every platform and version) of `bytes`.
pub(super) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The fingerprint of the loaded prefix `tail` ends (its last [`FINGERPRINT_WINDOW`] bytes).
pub(super) fn fingerprint(tail: &[u8]) -> u64 {
    fnv1a(&tail[tail.len().saturating_sub(FINGERPRINT_WINDOW)..])
}

/// A stored offset record: the progress through a log, the tag of its file (what the
/// mapping said of its name, e.g. `q` for a query log), and the path it was last loaded at
/// (a hint for finding it again and for status; the log itself is known by its content, see
/// [`super::identity`]). Stored as `offset,line,fingerprint,tag,path`; records of earlier
/// versions (`offset,line[,fingerprint]`, keyed by the file's path) have neither.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Record {
    pub(super) progress: Progress,
    pub(super) tag: Option<String>,
    pub(super) hint: Option<PathBuf>,
}

impl Record {
    pub(super) fn encode(&self) -> String {
        let fingerprint = self.progress.fingerprint.unwrap_or_default();
        // A tag never holds a comma (`Lines` replaces them).
        let kind = self.tag.as_deref().unwrap_or_default();
        let hint = self
            .hint
            .as_deref()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        format!(
            "{},{},{fingerprint:016x},{kind},{hint}",
            self.progress.offset, self.progress.line
        )
    }
}

/// Parses a stored record (`None`: no record, the start of the log).
pub(super) fn parse_record(path: &Path, v: Option<Vec<u8>>) -> Result<Record, LoadError> {
    let Some(v) = v else {
        return Ok(Record::default());
    };
    let text = String::from_utf8_lossy(&v).into_owned();
    let corrupt = || LoadError::CorruptOffset {
        path: path.to_path_buf(),
        value: text.clone(),
    };
    // The path is last and may hold commas.
    let mut parts = text.splitn(5, ',');
    let (Some(offset), Some(line)) = (parts.next(), parts.next()) else {
        return Err(corrupt());
    };
    let fingerprint = parts.next();
    let tag = parts.next().filter(|t| !t.is_empty()).map(str::to_string);
    let hint = parts.next().filter(|h| !h.is_empty()).map(PathBuf::from);
    Ok(Record {
        progress: Progress {
            offset: offset.parse().map_err(|_| corrupt())?,
            line: line.parse().map_err(|_| corrupt())?,
            fingerprint: fingerprint
                .map(|f| u64::from_str_radix(f, 16))
                .transpose()
                .map_err(|_| corrupt())?,
        },
        tag,
        hint,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_old_records_parse() {
        let record = Record {
            progress: Progress {
                offset: 120,
                line: 3,
                fingerprint: Some(0xabc),
            },
            tag: Some("c".into()),
            hint: Some(PathBuf::from("/logs/a,b/clicks.jsonl")),
        };
        let path = Path::new("x");
        let encoded = record.encode().into_bytes();
        assert_eq!(parse_record(path, Some(encoded)).unwrap(), record);
        let old = parse_record(path, Some(b"10,2".to_vec())).unwrap();
        assert_eq!((old.progress.offset, old.progress.line), (10, 2));
        assert_eq!(
            (old.tag, old.hint, old.progress.fingerprint),
            (None, None, None)
        );
        assert!(parse_record(path, Some(b"10".to_vec())).is_err());
        assert!(parse_record(path, Some(b"10,2,zz".to_vec())).is_err());
    }
}
