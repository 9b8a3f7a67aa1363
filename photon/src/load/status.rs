//! How far the loader is, read from the store: each log file's committed offset against the
//! bytes it holds up to its last complete line. Used by `photon work --until-drained`.

use super::progress::parse_progress;
use super::{file_key, log_files, LoadError};
use crate::schema::{offset_cell, LOADER};
use percolator::Client;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// One log file's progress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileStatus {
    /// The file.
    pub path: PathBuf,
    /// Bytes loaded (the committed offset).
    pub loaded: u64,
    /// Bytes up to its last complete line (what a loader can load now).
    pub loadable: u64,
}

impl FileStatus {
    /// Whether everything loadable is loaded.
    pub fn done(&self) -> bool {
        self.loaded >= self.loadable
    }
}

/// Bytes of `path` up to and including its last newline.
fn loadable_len(path: &Path) -> Result<u64, LoadError> {
    let io = |source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    let mut end = len;
    let mut buf = vec![0u8; 4096];
    while end > 0 {
        let start = end.saturating_sub(buf.len() as u64);
        let chunk = &mut buf[..(end - start) as usize];
        file.seek(SeekFrom::Start(start)).map_err(io)?;
        file.read_exact(chunk).map_err(io)?;
        if let Some(i) = chunk.iter().rposition(|b| *b == b'\n') {
            return Ok(start + i as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

async fn status_of(client: &Client, path: &Path, key: &str) -> Result<FileStatus, LoadError> {
    let txn_error = |source| LoadError::Txn {
        path: path.to_path_buf(),
        source,
    };
    let txn = client.begin().await.map_err(txn_error)?;
    let stored = txn.get(&offset_cell(key)).await.map_err(txn_error)?;
    let progress = parse_progress(path, stored)?;
    Ok(FileStatus {
        path: path.to_path_buf(),
        loaded: progress.offset,
        loadable: loadable_len(path)?,
    })
}

/// The progress of every log file of `dir`.
pub async fn dir_status(client: &Client, dir: &Path) -> Result<Vec<FileStatus>, LoadError> {
    let mut out = Vec::new();
    for (path, _) in log_files(dir)? {
        out.push(status_of(client, &path, &file_key(&path)).await?);
    }
    Ok(out)
}

/// The progress of every file the loader has committed an offset for whose path this host
/// can read (files of other hosts are left out).
pub async fn started_status(client: &Client) -> Result<Vec<FileStatus>, LoadError> {
    let loader = Path::new("loader table");
    let txn_error = |source| LoadError::Txn {
        path: loader.to_path_buf(),
        source,
    };
    let txn = client.begin().await.map_err(txn_error)?;
    let rows = txn
        .scan(LOADER.as_bytes(), b"", None)
        .await
        .map_err(txn_error)?;
    let mut out = Vec::new();
    for (cell, _) in rows.into_iter().filter(|(c, _)| c.column == b"offset") {
        let key = String::from_utf8_lossy(&cell.row).into_owned();
        let path = PathBuf::from(&key);
        if path.is_file() {
            out.push(status_of(client, &path, &key).await?);
        }
    }
    Ok(out)
}
