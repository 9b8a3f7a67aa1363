//! Reading a log's lines from a resumed position, in bounded memory.
//!
//! - A line longer than the limit is skipped to its line break without being held: its
//!   first [`KEPT_OF_LONG_LINE`] bytes are kept for the report. Following a growing file,
//!   such a line is skipped as far as it goes (its offset committed inside it, so it is not
//!   read again at each poll); the next batch, finding its offset inside a line, skips the
//!   rest of it ([`LineReader::skip_rest`]).
//! - NUL bytes at the start of a line are skipped and counted: the hole a writer without
//!   `O_APPEND` leaves when its file is truncated under it (copytruncate) ends where its next
//!   line starts. NULs not followed by a line yet are not consumed.
//! - A last line without its line break waits for it while following; in bounded input
//!   it is read as it is.
//! - The bytes consumed are kept at the end of a tail (from `floor` on: the NUL hole a log
//!   begins with is not part of it), for the fingerprint committed with the batch.

use super::input::Reader;
use super::record::FINGERPRINT_WINDOW;
use std::io::{self, BufRead};

/// Bytes of a line longer than the limit kept for its report.
pub(super) const KEPT_OF_LONG_LINE: usize = 1024;

/// What [`LineReader::next`] read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Item {
    /// A line, in the buffer (its line break included, if it has one): `nuls` NUL bytes
    /// skipped before it.
    Line {
        /// NUL bytes skipped before it.
        nuls: u64,
    },
    /// A line longer than the limit, skipped: its first bytes in the buffer.
    TooLong {
        /// Its length (without NULs before it), as far as it was read.
        len: u64,
        /// NUL bytes skipped before it.
        nuls: u64,
    },
    /// Nothing more to read now.
    End,
}

/// Lines of a log from a position on.
pub(super) struct LineReader {
    reader: Reader,
    /// The offset after the last item read.
    pos: u64,
    /// Bytes before this offset are not kept in the tail.
    floor: u64,
    tail: Vec<u8>,
    max: usize,
    follow: bool,
    /// The reader went past `pos` (bytes read but not taken: NULs or a line not complete).
    ahead: bool,
}

impl LineReader {
    /// A reader of lines at most `max` bytes long from `reader`, at offset `pos`, after the
    /// loaded bytes `tail` (kept from `floor` on); `follow`: the input may still grow.
    pub(super) fn new(
        reader: Reader,
        pos: u64,
        floor: u64,
        tail: Vec<u8>,
        max: usize,
        follow: bool,
    ) -> LineReader {
        LineReader {
            reader,
            pos,
            floor,
            tail,
            max,
            follow,
            ahead: false,
        }
    }

    /// The offset after what was read.
    pub(super) fn pos(&self) -> u64 {
        self.pos
    }

    /// The last (up to) [`FINGERPRINT_WINDOW`] bytes read or resumed after (from the floor).
    pub(super) fn tail(&self) -> &[u8] {
        &self.tail[self.tail.len().saturating_sub(FINGERPRINT_WINDOW)..]
    }

    /// The reader at [`LineReader::pos`] and its tail, to go on with (`None` if it read past
    /// it).
    pub(super) fn into_parts(self) -> Option<(Reader, Vec<u8>)> {
        (!self.ahead).then_some((self.reader, self.tail))
    }

    /// Whether the position is inside a line (after bytes of it that were loaded or
    /// skipped).
    pub(super) fn mid_line(&self) -> bool {
        self.tail.last().is_some_and(|b| *b != b'\n')
    }

    /// Takes `nuls` NUL bytes and then `bytes` (the end of what was read) into the tail,
    /// and moves the position past `nuls + len` bytes.
    fn take(&mut self, nuls: u64, bytes: &[u8], len: u64) {
        let kept = (self.pos + nuls).saturating_sub(self.pos.max(self.floor));
        let kept = kept.min(FINGERPRINT_WINDOW as u64) as usize;
        self.tail.extend(std::iter::repeat_n(0u8, kept));
        self.tail.extend_from_slice(bytes);
        if self.tail.len() > 2 * FINGERPRINT_WINDOW {
            self.tail.drain(..self.tail.len() - FINGERPRINT_WINDOW);
        }
        self.pos += nuls + len;
    }

    /// Skips the rest of the line the position is inside of, through its line break (as
    /// far as it goes, if it has none yet). Returns the bytes skipped.
    pub(super) fn skip_rest(&mut self) -> io::Result<u64> {
        let start = self.pos;
        loop {
            let buf = self.reader.fill_buf()?;
            if buf.is_empty() {
                return Ok(self.pos - start);
            }
            let (n, found) = match buf.iter().position(|b| *b == b'\n') {
                Some(i) => (i + 1, true),
                None => (buf.len(), false),
            };
            let chunk = buf[..n].to_vec();
            self.reader.consume(n);
            self.take(0, &chunk, n as u64);
            if found {
                return Ok(self.pos - start);
            }
        }
    }

    /// Reads the next line into `line` (cleared first).
    pub(super) fn next(&mut self, line: &mut Vec<u8>) -> io::Result<Item> {
        line.clear();
        // NULs first: taken only once a line follows them.
        let mut nuls = 0u64;
        loop {
            let buf = self.reader.fill_buf()?;
            if buf.is_empty() {
                self.ahead |= nuls > 0;
                return Ok(Item::End);
            }
            let (len, run) = (buf.len(), buf.iter().take_while(|b| **b == 0).count());
            self.reader.consume(run);
            nuls += run as u64;
            if run < len {
                break;
            }
        }
        // The line, held up to the limit; past it, only its last bytes (for the tail).
        let mut len = 0u64;
        let mut long = false;
        let mut end = Vec::new();
        let terminated = loop {
            let buf = self.reader.fill_buf()?;
            if buf.is_empty() {
                break false;
            }
            let (n, found) = match buf.iter().position(|b| *b == b'\n') {
                Some(i) => (i + 1, true),
                None => (buf.len(), false),
            };
            len += n as u64;
            if long {
                end.extend_from_slice(&buf[..n]);
                if end.len() > 2 * FINGERPRINT_WINDOW {
                    end.drain(..end.len() - FINGERPRINT_WINDOW);
                }
            } else {
                line.extend_from_slice(&buf[..n]);
                let content = line.len() - usize::from(found);
                if content > self.max {
                    long = true;
                    end = line[line.len().saturating_sub(FINGERPRINT_WINDOW)..].to_vec();
                    line.truncate(KEPT_OF_LONG_LINE);
                }
            }
            self.reader.consume(n);
            if found {
                break true;
            }
        };
        if !terminated && self.follow && !long {
            // A line still being written: its line break is waited for.
            self.ahead = true;
            return Ok(Item::End);
        }
        if long {
            self.take(nuls, &end, len);
            Ok(Item::TooLong {
                len: len - u64::from(terminated),
                nuls,
            })
        } else {
            let bytes = std::mem::take(line);
            self.take(nuls, &bytes, len);
            *line = bytes;
            Ok(Item::Line { nuls })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(bytes: &[u8], max: usize, follow: bool) -> LineReader {
        LineReader::new(
            Box::new(std::io::Cursor::new(bytes.to_vec())),
            0,
            0,
            Vec::new(),
            max,
            follow,
        )
    }

    fn read_all(r: &mut LineReader) -> Vec<(Item, Vec<u8>)> {
        let mut out = Vec::new();
        let mut line = Vec::new();
        loop {
            match r.next(&mut line).unwrap() {
                Item::End => return out,
                item => out.push((item, line.clone())),
            }
        }
    }

    /// The last line without its line break is read in bounded input, waited for while
    /// following.
    #[test]
    fn a_last_line_without_its_break_is_read_only_in_bounded_input() {
        let mut bounded = reader(b"a\nb", 10, false);
        let items = read_all(&mut bounded);
        assert_eq!(items.len(), 2);
        assert_eq!(items[1].1, b"b");
        assert_eq!(bounded.pos(), 3);
        let mut following = reader(b"a\nb", 10, true);
        assert_eq!(read_all(&mut following).len(), 1);
        assert_eq!(following.pos(), 2);
        assert!(following.into_parts().is_none(), "read past its position");
    }

    /// A long line is skipped with its first bytes kept, in bounded memory; following, a
    /// long line still being written is skipped as far as it goes, and the rest later.
    #[test]
    fn long_lines_are_skipped_and_their_rest_too() {
        let long = vec![b'x'; 5000];
        let mut text = b"ok\n".to_vec();
        text.extend_from_slice(&long);
        text.extend_from_slice(b"\nafter\n");
        let mut r = reader(&text, 100, false);
        let items = read_all(&mut r);
        assert_eq!(items.len(), 3);
        assert_eq!(items[1].0, Item::TooLong { len: 5000, nuls: 0 });
        assert_eq!(items[1].1.len(), KEPT_OF_LONG_LINE);
        assert_eq!(items[2].1, b"after\n");
        assert_eq!(r.pos(), text.len() as u64);
        // Following: the line has no break yet.
        let mut r = reader(&text[..3 + 5000], 100, true);
        let items = read_all(&mut r);
        assert_eq!(items[1].0, Item::TooLong { len: 5000, nuls: 0 });
        assert!(r.mid_line());
        let (_, tail) = r.into_parts().unwrap();
        let mut rest = LineReader::new(
            Box::new(std::io::Cursor::new(b"xxx\nafter\n".to_vec())),
            5003,
            0,
            tail,
            100,
            true,
        );
        assert!(rest.mid_line());
        assert_eq!(rest.skip_rest().unwrap(), 4);
        assert!(!rest.mid_line());
        assert_eq!(read_all(&mut rest)[0].1, b"after\n");
    }

    /// NULs before a line are skipped and counted, and kept in the tail from the floor on;
    /// NULs not followed by a line are not taken.
    #[test]
    fn nul_holes_are_skipped() {
        let mut text = vec![0u8; 10_000];
        text.extend_from_slice(b"line\n");
        text.extend_from_slice(&[0u8; 7]);
        text.extend_from_slice(b"two\n");
        text.extend_from_slice(&[0u8; 3]);
        let mut r = LineReader::new(
            Box::new(std::io::Cursor::new(text.clone())),
            0,
            10_000,
            Vec::new(),
            100,
            false,
        );
        let items = read_all(&mut r);
        assert_eq!(items[0], (Item::Line { nuls: 10_000 }, b"line\n".to_vec()));
        assert_eq!(items[1], (Item::Line { nuls: 7 }, b"two\n".to_vec()));
        assert_eq!(r.pos(), text.len() as u64 - 3);
        let mut expected = b"line\n".to_vec();
        expected.extend_from_slice(&[0u8; 7]);
        expected.extend_from_slice(b"two\n");
        assert_eq!(r.tail(), &expected[..]);
    }
}
