//! Opening a log file and reading its bytes from an offset.
//!
//! - Only regular files are read, and opening never blocks: a FIFO, socket or device named
//!   like a log is opened non-blocking, found not to be a regular file, and refused like a
//!   file that cannot be opened ([`open_regular`]). A plain `open` of a FIFO waits for a
//!   writer, forever, and holds the runtime's thread with it (signals went unheard).
//! - A `*.gz` file is read as its decompressed bytes: a log gzipped right after rotation
//!   (logrotate without `delaycompress`) is known by the same first bytes, and resumed at the
//!   same offset, as the plain file it was (as Filebeat's `compression: auto` does).
//! - A loaded file is resumed after checking the bytes just before its offset against the
//!   stored fingerprint ([`resume`]): a file shorter than what was loaded is
//!   [`LoadError::Truncated`], other bytes there [`LoadError::Changed`].

use super::identity::Head;
use super::record::{fingerprint, Progress, FINGERPRINT_WINDOW};
use crate::load::LoadError;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

/// Opens `path` for reading if it is a regular file (after symlinks), without ever waiting
/// on it: a FIFO, a socket, a device or a directory is an error
/// ([`io::ErrorKind::InvalidInput`], naming its type), reported like a file that cannot be
/// opened.
pub fn open_regular(path: &Path) -> io::Result<File> {
    #[cfg(unix)]
    let file = {
        use std::os::unix::fs::OpenOptionsExt;
        // O_NONBLOCK: opening a FIFO without a writer returns at once (Linux ignores the
        // flag for regular files' reads, so it is left on).
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)?
    };
    #[cfg(not(unix))]
    let file = {
        let kind = std::fs::metadata(path)?.file_type();
        if !kind.is_file() {
            return Err(not_regular(kind));
        }
        File::open(path)?
    };
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        return Err(not_regular(kind));
    }
    Ok(file)
}

/// The error of a file that is not a regular file, naming what it is.
fn not_regular(kind: std::fs::FileType) -> io::Error {
    let what = if kind.is_dir() {
        "a directory"
    } else {
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileTypeExt;
            if kind.is_fifo() {
                "a FIFO"
            } else if kind.is_socket() {
                "a socket"
            } else if kind.is_char_device() || kind.is_block_device() {
                "a device"
            } else {
                "not a regular file"
            }
        }
        #[cfg(not(unix))]
        {
            "not a regular file"
        }
    };
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("not a regular file ({what}); only regular files are loaded"),
    )
}

/// How a log's bytes are stored, by its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Compression {
    /// As they are.
    Plain,
    /// gzip (`*.gz`): read decompressed.
    Gzip,
}

impl Compression {
    /// The compression of the file at `path`: gzip for `*.gz`.
    pub(super) fn of(path: &Path) -> Compression {
        match path.extension().and_then(|e| e.to_str()) {
            Some("gz") => Compression::Gzip,
            _ => Compression::Plain,
        }
    }
}

/// A reader of a log's (decompressed) bytes.
pub(super) type Reader = Box<dyn BufRead + Send + Sync>;

/// A log file opened: its (decompressed) bytes readable from any offset.
#[derive(Debug)]
pub(super) struct Input {
    file: File,
    compression: Compression,
}

impl Input {
    /// Opens the regular file at `path` ([`open_regular`]) and reads its head.
    pub(super) fn open(path: &Path) -> io::Result<(Input, Head)> {
        let mut input = Input {
            file: open_regular(path)?,
            compression: Compression::of(path),
        };
        let head = Head::read_from(input.reader_at(0)?)?;
        Ok((input, head))
    }

    /// Whether the file is compressed (read forward only: each reader decompresses from the
    /// start).
    pub(super) fn compressed(&self) -> bool {
        self.compression != Compression::Plain
    }

    /// A reader of the bytes from `offset` on (fewer than asked if the file is shorter).
    pub(super) fn reader_at(&mut self, offset: u64) -> io::Result<Reader> {
        let mut file = self.file.try_clone()?;
        match self.compression {
            Compression::Plain => {
                file.seek(SeekFrom::Start(offset))?;
                Ok(Box::new(BufReader::with_capacity(1 << 16, file)))
            }
            Compression::Gzip => {
                file.seek(SeekFrom::Start(0))?;
                let decoder = flate2::read::MultiGzDecoder::new(BufReader::new(file));
                let mut reader = BufReader::with_capacity(1 << 16, decoder);
                io::copy(&mut Read::take(&mut reader, offset), &mut io::sink())?;
                Ok(Box::new(reader))
            }
        }
    }

    /// Whether the log holds nothing past `offset`, if that is known without reading it:
    /// for a gzip file, by the length its trailer records (ISIZE, the length modulo 2^32 of
    /// its last member; a single member for logrotate and gzip). `None`: unknown.
    pub(super) fn ends_at(&mut self, offset: u64) -> io::Result<Option<bool>> {
        if self.compression != Compression::Gzip {
            return Ok(None);
        }
        let len = self.file.metadata()?.len();
        if len < 4 {
            return Ok(None);
        }
        let mut trailer = [0u8; 4];
        self.file.seek(SeekFrom::Start(len - 4))?;
        self.file.read_exact(&mut trailer)?;
        Ok(Some(
            u64::from(u32::from_le_bytes(trailer)) == offset & 0xffff_ffff,
        ))
    }

    /// The length of the plain file (`None` for a compressed one).
    fn plain_len(&self) -> io::Result<Option<u64>> {
        match self.compression {
            Compression::Plain => Ok(Some(self.file.metadata()?.len())),
            Compression::Gzip => Ok(None),
        }
    }
}

/// Where a loaded log resumes: a reader at `progress.offset`, and the loaded bytes just
/// before it (from `floor` on, the end of the NUL hole the log begins with, if any), checked
/// against the stored fingerprint.
pub(super) fn resume(
    input: &mut Input,
    path: &Path,
    progress: &Progress,
    floor: u64,
) -> Result<(Reader, Vec<u8>), LoadError> {
    let io = |source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let offset = progress.offset;
    let truncated = |len| LoadError::Truncated {
        path: path.to_path_buf(),
        offset,
        len,
    };
    if let Some(len) = input.plain_len().map_err(io)? {
        if len < offset {
            return Err(truncated(len));
        }
    }
    let start = offset
        .saturating_sub(FINGERPRINT_WINDOW as u64)
        .max(floor.min(offset));
    let mut reader = input.reader_at(start).map_err(io)?;
    let mut tail = Vec::with_capacity(FINGERPRINT_WINDOW);
    Read::take(&mut reader, offset - start)
        .read_to_end(&mut tail)
        .map_err(io)?;
    if (tail.len() as u64) < offset - start {
        return Err(truncated(start + tail.len() as u64));
    }
    if progress
        .fingerprint
        .is_some_and(|f| f != fingerprint(&tail))
    {
        return Err(LoadError::Changed {
            path: path.to_path_buf(),
            offset,
        });
    }
    Ok((reader, tail))
}
