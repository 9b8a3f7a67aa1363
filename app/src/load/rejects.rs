//! The rejects report: malformed input (`file:line: error: text`) and sources that cannot
//! be opened (`file: error`), each also logged. Everything written is escaped as the log's
//! echo is ([`escape`]): control characters (terminal escapes included) and bytes that are
//! not UTF-8 appear as `\u{1b}`, `\n`, `\xff`, and a backslash as `\\`, so `cat` of the
//! file cannot retitle or clear the operator's terminal, and each entry is one line.

use super::{LoadError, LoadStats};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

/// Rejected input: its line (or record number), what is wrong, and the input as it was
/// (maybe not UTF-8).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reject {
    /// Line number (1-based) in its source.
    pub line: u64,
    /// What is wrong with it.
    pub error: String,
    /// The input as it was.
    pub text: Vec<u8>,
}

/// The rejects file of a load, created on first use (a load that rejects nothing writes
/// none).
#[derive(Debug)]
pub struct Rejects {
    path: PathBuf,
    file: Mutex<Option<std::fs::File>>,
}

/// Bytes of a rejected line echoed to the log (the rejects file keeps the whole line).
pub const ECHO_PREFIX: usize = 200;

/// The first [`ECHO_PREFIX`] bytes of `text`, escaped ([`escape`]), with the length of the
/// rest if cut.
fn echo(text: &[u8]) -> String {
    let shown = &text[..text.len().min(ECHO_PREFIX)];
    let mut out = escape(shown);
    if text.len() > shown.len() {
        out.push_str(&format!("... ({} more bytes)", text.len() - shown.len()));
    }
    out
}

/// `text` made printable on one line: control characters (`\n`, `\u{1b}`: terminal escape
/// sequences are inert) and bytes that are not UTF-8 (`\xff`) escaped, and a backslash
/// doubled, so an escape in the text is told from one made here.
pub fn escape(text: &[u8]) -> String {
    let mut out = String::with_capacity(text.len());
    for chunk in text.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c.is_control() || c == '\\' {
                out.extend(c.escape_default());
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// Rejected lines logged one by one (WARN) in a process; after them, a count at each power
/// of ten (every rejected line is in the rejects file and counted in the summary).
pub const WARN_REJECTS: u64 = 20;

/// What to log of the `n`th rejected line of a process.
enum Warn {
    Line,
    Count(u64),
    None,
}

fn warn_reject(n: u64) -> Warn {
    if n <= WARN_REJECTS {
        Warn::Line
    } else if n >= 100 && is_power_of_ten(n) {
        Warn::Count(n)
    } else {
        Warn::None
    }
}

fn is_power_of_ten(mut n: u64) -> bool {
    while n >= 10 && n.is_multiple_of(10) {
        n /= 10;
    }
    n == 1
}

impl Rejects {
    /// A report appended to `path`.
    pub fn new(path: impl Into<PathBuf>) -> Rejects {
        Rejects {
            path: path.into(),
            file: Mutex::new(None),
        }
    }

    /// Appends `entries` to the rejects file, opening (creating) it on first use.
    fn append(&self, entries: &[u8]) -> Result<(), LoadError> {
        let io = |source| LoadError::Io {
            path: self.path.clone(),
            source,
        };
        let mut guard = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if guard.is_none() {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)
                .map_err(io)?;
            *guard = Some(f);
        }
        match guard.as_mut() {
            Some(f) => f.write_all(entries).map_err(io),
            None => Ok(()),
        }
    }

    /// Reports the rejected input `bad` of source `name`.
    pub fn lines(&self, stats: &LoadStats, name: &str, bad: &[Reject]) -> Result<(), LoadError> {
        if bad.is_empty() {
            return Ok(());
        }
        let mut entries = Vec::new();
        let before = stats
            .rejected
            .fetch_add(bad.len() as u64, Ordering::Relaxed);
        for (i, r) in bad.iter().enumerate() {
            let at = format!(
                "{}:{}: {}",
                escape(name.as_bytes()),
                r.line,
                escape(r.error.as_bytes())
            );
            // The log gets a bounded, escaped prefix (of the first lines only, then counts);
            // the rejects file the whole line, escaped too.
            match warn_reject(before + i as u64 + 1) {
                Warn::Line => tracing::warn!("rejected {at}: {}", echo(&r.text)),
                Warn::Count(n) => tracing::warn!(
                    "{n} lines rejected so far (the latest {at}); only the first {WARN_REJECTS} \
                     are logged one by one, every one is in {}",
                    self.path.display()
                ),
                Warn::None => {}
            }
            entries.extend_from_slice(format!("{at}: {}\n", escape(&r.text)).as_bytes());
        }
        self.append(&entries)
    }

    /// Reports a source quarantined for a fault of its input (`error`, which says the
    /// cause): once per source and error in a process, as [`Rejects::unreadable`]; the load
    /// goes on with the others.
    pub fn quarantined(
        &self,
        stats: &LoadStats,
        name: &str,
        error: &LoadError,
    ) -> Result<(), LoadError> {
        self.source_once(
            stats,
            name,
            "quarantined",
            &error.to_string(),
            &stats.quarantined,
        )
    }

    /// Reports a source that cannot be opened (once per source and error in a process, however
    /// often `--follow` meets it); the load goes on with the others.
    pub fn unreadable(
        &self,
        stats: &LoadStats,
        name: &str,
        error: &std::io::Error,
    ) -> Result<(), LoadError> {
        self.source_once(
            stats,
            name,
            "cannot be loaded",
            &error.to_string(),
            &stats.unreadable,
        )
    }

    /// Writes `name: what: error` (escaped) to the log and the rejects file and counts it in
    /// `counter`, the first time this process meets that entry.
    fn source_once(
        &self,
        stats: &LoadStats,
        name: &str,
        what: &str,
        error: &str,
        counter: &std::sync::atomic::AtomicU64,
    ) -> Result<(), LoadError> {
        let entry = format!(
            "{}: {what}: {}",
            escape(name.as_bytes()),
            escape(error.as_bytes())
        );
        let new = stats
            .unreadable_seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(entry.clone());
        if !new {
            return Ok(());
        }
        tracing::warn!("{entry}");
        counter.fetch_add(1, Ordering::Relaxed);
        self.append(format!("{entry}\n").as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rejected line holding terminal escape sequences (retitle, clear), a carriage return,
    /// a backslash and bytes that are not UTF-8 is written escaped, one entry a line: `cat`
    /// of the file prints it inert (issue 39, item 10).
    #[test]
    fn rejected_lines_are_written_escaped() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("rejects.txt");
        let rejects = Rejects::new(&path);
        let hostile = b"\x1b]0;pwned\x07\x1b[2J\rx\\u{1b}\xff{".to_vec();
        let bad = [Reject {
            line: 7,
            error: "expected value".to_string(),
            text: hostile,
        }];
        rejects
            .lines(&LoadStats::default(), "clicks\x1b[31m.jsonl", &bad)
            .expect("written");
        let written = std::fs::read(&path).expect("read");
        assert!(
            !written.iter().any(|b| b.is_ascii_control() && *b != b'\n'),
            "control bytes written: {written:?}"
        );
        assert_eq!(written.iter().filter(|b| **b == b'\n').count(), 1);
        let text = String::from_utf8(written).expect("UTF-8");
        assert_eq!(
            text,
            "clicks\\u{1b}[31m.jsonl:7: expected value: \\u{1b}]0;pwned\\u{7}\\u{1b}[2J\\rx\\\\u{1b}\\xff{\n"
        );
    }

    /// The first rejected lines are logged one by one, then a count at each power of ten.
    #[test]
    fn rejected_lines_are_logged_first_then_counted() {
        let logged: Vec<u64> = (1..=100_000)
            .filter(|n| !matches!(warn_reject(*n), Warn::None))
            .collect();
        let mut expected: Vec<u64> = (1..=WARN_REJECTS).collect();
        expected.extend([100, 1_000, 10_000, 100_000]);
        assert_eq!(logged, expected);
        assert!(matches!(warn_reject(1_000), Warn::Count(1_000)));
    }
}
