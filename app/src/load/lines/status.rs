//! How far the loader is, read from the store: each log file's committed offset against the
//! bytes it holds up to its last complete line (renamed logs included). Used by the drain
//! check ([`crate::drain`]).

use super::files::{discover, LogFile};
use super::identity::{self, Key};
use super::input::{open_regular, Input};
use super::record::parse_record;
use super::{LineMapping, Lines};
use crate::load::{retry_transient, LoadError};
use percolator::Client;
use std::collections::BTreeSet;
use std::io::{BufRead, Read, Seek, SeekFrom};
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

/// Bytes of the log `input` (at `path`, `loaded` of them loaded) up to and including its
/// last newline.
fn loadable_len(input: &mut Input, path: &Path, loaded: u64) -> Result<u64, LoadError> {
    let io = |source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    };
    if input.ends_at(loaded).map_err(io)? == Some(true) {
        return Ok(loaded);
    }
    if input.compressed() {
        // Read forward only: the offset after the last newline from the loaded offset on.
        let mut reader = input.reader_at(loaded).map_err(io)?;
        let (mut pos, mut last) = (loaded, 0);
        loop {
            let buf = reader.fill_buf().map_err(io)?;
            if buf.is_empty() {
                return Ok(last);
            }
            if let Some(i) = buf.iter().rposition(|b| *b == b'\n') {
                last = pos + i as u64 + 1;
            }
            let n = buf.len();
            pos += n as u64;
            reader.consume(n);
        }
    }
    let mut file = open_regular(path).map_err(io)?;
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

impl<M: LineMapping> Lines<M> {
    /// The log at `path` opened, and its committed offset (0: not started); `None` if it
    /// cannot be opened (the loader reports it and goes on).
    pub(super) async fn committed(
        &self,
        client: &Client,
        path: &Path,
    ) -> Result<Option<(Input, u64)>, LoadError> {
        let Ok((file, head)) = identity::open(path) else {
            return Ok(None);
        };
        let name = path.display().to_string();
        let found = retry_transient(&name, || async {
            let txn = client.begin().await?;
            identity::lookup(&txn, &self.table, path, &head).await
        })
        .await
        .map_err(|e| e.within(&name))?;
        Ok(Some((file, found.map_or(0, |f| f.record.progress.offset))))
    }

    /// The status of each log of `dir` (renamed logs included), and whether the loader
    /// started on it.
    async fn statuses(
        &self,
        client: &Client,
        dir: &Path,
    ) -> Result<Vec<(FileStatus, bool)>, LoadError> {
        let mut out = Vec::new();
        let (files, _) = discover(client, &self.table, &self.tagger(), dir).await?;
        for LogFile { path, .. } in files {
            let Some((mut input, loaded)) = self.committed(client, &path).await? else {
                continue;
            };
            let loadable = match loadable_len(&mut input, &path, loaded) {
                Ok(n) => n,
                Err(e) => {
                    tracing::debug!(file = %path.display(), error = %e, "not counted");
                    continue;
                }
            };
            let status = FileStatus {
                path,
                loaded,
                loadable,
            };
            out.push((status, loaded > 0));
        }
        Ok(out)
    }

    /// The progress of every log file of `dir`: its logs, and the logs the loader started on
    /// there that were renamed to other names since (files that cannot be opened are left
    /// out).
    pub async fn dir_status(
        &self,
        client: &Client,
        dir: &Path,
    ) -> Result<Vec<FileStatus>, LoadError> {
        Ok(self
            .statuses(client, dir)
            .await?
            .into_iter()
            .map(|(s, _)| s)
            .collect())
    }

    /// The progress of every file the loader has committed an offset for in the directories
    /// this host can read (files of other hosts are left out).
    pub async fn started_status(&self, client: &Client) -> Result<Vec<FileStatus>, LoadError> {
        let loader = Path::new("loader table");
        let within = |e: percolator::TxnError| LoadError::from(e).within("the loader table");
        let txn = client.begin().await.map_err(within)?;
        let rows = txn
            .scan(self.table.as_bytes(), b"", None)
            .await
            .map_err(within)?;
        let mut dirs = BTreeSet::new();
        for (cell, v) in rows.into_iter().filter(|(c, _)| c.column == b"offset") {
            let key = String::from_utf8_lossy(&cell.row).into_owned();
            let path = match Key::parse(&key) {
                Key::Legacy(path) => Some(path),
                _ => parse_record(loader, Some(v))?.hint,
            };
            if let Some(dir) = path.as_deref().and_then(Path::parent) {
                dirs.insert(dir.to_path_buf());
            }
        }
        let mut out = Vec::new();
        for dir in dirs.into_iter().filter(|d| d.is_dir()) {
            out.extend(
                self.statuses(client, &dir)
                    .await?
                    .into_iter()
                    .filter(|(_, started)| *started)
                    .map(|(s, _)| s),
            );
        }
        Ok(out)
    }
}
