//! A log's lines from its start as the loader reads them, for tools that check what was loaded
//! against the logs (`photon verify`): the same decompression, NUL skipping, length limit and
//! trimming, so that a tool and the loader never disagree on which lines a log holds.

use super::input::Input;
use super::reader::{Item, LineReader};
use std::io;
use std::path::Path;

/// The lines of one log, from its start to its end as it is now.
pub struct LogLines {
    reader: LineReader,
    line: Vec<u8>,
}

/// One line of a log ([`LogLines::next_line`]).
#[derive(Debug, PartialEq, Eq)]
pub enum LogLine<'a> {
    /// A line as the loader parses it: without its line break and the ASCII whitespace at
    /// its end (possibly empty: the loader skips those), with NUL bytes before it dropped.
    Text(&'a [u8]),
    /// A line longer than the limit: the loader reports it and loads nothing of it.
    TooLong,
}

impl LogLines {
    /// The lines of the regular file at `path` (`*.gz`: decompressed; a FIFO or other
    /// special file is refused without blocking, as the loader refuses it), each at most
    /// `max_line_bytes` long ([`crate::load::LoadOptions::max_line_bytes`]).
    pub fn open(path: &Path, max_line_bytes: usize) -> io::Result<LogLines> {
        let (mut input, _) = Input::open(path)?;
        let reader = input.reader_at(0)?;
        Ok(LogLines {
            reader: LineReader::new(reader, 0, 0, Vec::new(), max_line_bytes.max(1), false),
            line: Vec::new(),
        })
    }

    /// The next line (`None`: the end of the log).
    pub fn next_line(&mut self) -> io::Result<Option<LogLine<'_>>> {
        Ok(match self.reader.next(&mut self.line)? {
            Item::End => None,
            Item::TooLong { .. } => Some(LogLine::TooLong),
            Item::Line { .. } => Some(LogLine::Text(self.line.trim_ascii_end())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn lines_of(path: &Path, max: usize) -> Vec<String> {
        let mut lines = LogLines::open(path, max).unwrap();
        let mut out = Vec::new();
        while let Some(line) = lines.next_line().unwrap() {
            out.push(match line {
                LogLine::Text(t) => String::from_utf8_lossy(t).into_owned(),
                LogLine::TooLong => "<too long>".to_string(),
            });
        }
        out
    }

    /// NULs before a line dropped, a long line reported, trailing whitespace trimmed, a last
    /// line without its line break read; the same log gzipped reads the same.
    #[test]
    fn a_log_reads_as_the_loader_reads_it_plain_or_gzipped() {
        let dir = tempfile::tempdir().unwrap();
        let text = format!("a\n\0\0\0b \r\n{}\n\n  c\t\nlast", "x".repeat(100));
        let plain = dir.path().join("clicks.jsonl");
        std::fs::write(&plain, &text).unwrap();
        let expected = vec!["a", "b", "<too long>", "", "  c", "last"];
        assert_eq!(lines_of(&plain, 50), expected);
        let gz = dir.path().join("clicks.jsonl.1.gz");
        let mut encoder =
            flate2::write::GzEncoder::new(std::fs::File::create(&gz).unwrap(), Default::default());
        encoder.write_all(text.as_bytes()).unwrap();
        encoder.finish().unwrap();
        assert_eq!(lines_of(&gz, 50), expected);
    }
}
