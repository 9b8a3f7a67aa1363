//! The rejects report: malformed lines (`file:line: error: text`) and files named like logs
//! that cannot be opened (`file: error`), each also logged.

use super::{LoadError, LoadOptions, LoadStats};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

/// A malformed line: its number, what is wrong, and the line as it was (maybe not UTF-8).
pub(super) struct Rejected {
    pub(super) line: u64,
    pub(super) error: String,
    pub(super) text: Vec<u8>,
}

/// Bytes of a rejected line echoed to the log (the rejects file keeps the whole line).
pub const ECHO_PREFIX: usize = 200;

/// The first [`ECHO_PREFIX`] bytes of `text`, printable: control characters and bytes that
/// are not UTF-8 escaped (`\n`, `\xff`), with the length of the rest if cut.
fn echo(text: &[u8]) -> String {
    let shown = &text[..text.len().min(ECHO_PREFIX)];
    let mut out = String::new();
    for chunk in shown.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c.is_control() {
                out.extend(c.escape_default());
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    if text.len() > shown.len() {
        out.push_str(&format!("... ({} more bytes)", text.len() - shown.len()));
    }
    out
}

/// Appends `entries` to the rejects file, opening (creating) it on first use.
fn append(
    options: &LoadOptions,
    rejects: &Mutex<Option<std::fs::File>>,
    entries: &[u8],
) -> Result<(), LoadError> {
    let io = |source| LoadError::Io {
        path: options.rejects.clone(),
        source,
    };
    let mut guard = rejects.lock().unwrap_or_else(|p| p.into_inner());
    if guard.is_none() {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&options.rejects)
            .map_err(io)?;
        *guard = Some(f);
    }
    match guard.as_mut() {
        Some(f) => f.write_all(entries).map_err(io),
        None => Ok(()),
    }
}

/// Reports the malformed lines `bad` of `path`.
pub(super) fn lines(
    options: &LoadOptions,
    rejects: &Mutex<Option<std::fs::File>>,
    stats: &LoadStats,
    path: &Path,
    bad: &[Rejected],
) -> Result<(), LoadError> {
    if bad.is_empty() {
        return Ok(());
    }
    let mut entries = Vec::new();
    for r in bad {
        let at = format!("{}:{}: {}", path.display(), r.line, r.error);
        // The log gets a bounded, escaped prefix; the rejects file the whole line.
        tracing::warn!("rejected {at}: {}", echo(&r.text));
        entries.extend_from_slice(format!("{at}: ").as_bytes());
        entries.extend_from_slice(&r.text);
        entries.push(b'\n');
    }
    append(options, rejects, &entries)?;
    stats
        .rejected
        .fetch_add(bad.len() as u64, Ordering::Relaxed);
    Ok(())
}

/// Reports a file named like a log that cannot be opened (once per file and error in a
/// process, however often `--follow` meets it); the load goes on with the others.
pub(super) fn unreadable(
    options: &LoadOptions,
    rejects: &Mutex<Option<std::fs::File>>,
    stats: &LoadStats,
    path: &Path,
    error: &std::io::Error,
) -> Result<(), LoadError> {
    let entry = format!("{}: cannot be loaded: {error}", path.display());
    let new = stats
        .unreadable_seen
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(entry.clone());
    if !new {
        return Ok(());
    }
    tracing::warn!("skipping {entry}");
    stats.unreadable.fetch_add(1, Ordering::Relaxed);
    append(options, rejects, format!("{entry}\n").as_bytes())
}
