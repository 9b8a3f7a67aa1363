//! Which files of an input directory to load: its logs (the files the mapping tags, e.g.
//! `queries*.jsonl`), and logs the loader started on that were renamed to a name it does not
//! match
//! (`clicks.jsonl.1`, logrotate's default), found among the directory's other files by
//! their content (see [`super::identity`]) so that the lines written to them after the last
//! batch are loaded too. Files that cannot be opened are returned apart, to be reported.
//!
//! A log reached through a symlink (the Kubernetes layout: `/var/log/containers/*.log`
//! linking to `/var/log/pods/<pod>/<container>/0.log`) is known by its target's content, and
//! rotates in its target's directory: renamed logs are looked for there too. Renamed logs
//! compressed at rotation (`*.gz`) are known by their decompressed bytes.

use super::identity::{self, canonical, Head, Key};
use super::record::parse_record;
use crate::load::{retry_transient, LoadError};
use percolator::Client;
use std::path::{Path, PathBuf};

/// A file to load and its tag (what the mapping said of its name).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct LogFile {
    /// The file.
    pub path: PathBuf,
    /// Its tag.
    pub tag: String,
}

/// A file of the directory that looks like a log but cannot be loaded, and why.
#[derive(Debug)]
pub(super) struct Unreadable {
    pub(super) path: PathBuf,
    pub(super) error: std::io::Error,
}

/// The files of `dir` to load, in name order (logs first, then renamed logs), and the files
/// named like logs that cannot be opened.
pub(super) async fn discover(
    client: &Client,
    table: &str,
    tag_of: &(dyn Fn(&Path) -> Option<String> + Sync),
    dir: &Path,
) -> Result<(Vec<LogFile>, Vec<Unreadable>), LoadError> {
    let io = |source| LoadError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    let mut logs: Vec<(LogFile, Head)> = Vec::new();
    let mut others = Vec::new();
    let mut unreadable = Vec::new();
    for path in entries {
        match tag_of(&path) {
            Some(tag) => match identity::open(&path) {
                Ok((_, head)) => logs.push((LogFile { path, tag }, head)),
                Err(error) => unreadable.push(Unreadable { path, error }),
            },
            // Only regular files can be renamed logs; their heads are read when needed.
            None if path.is_file() => others.push((path, None::<Option<Head>>)),
            None => {}
        }
    }
    // The directories logs rotate in: this one, and those of symlinked logs' targets.
    let mut dirs = vec![canonical(dir)];
    let targets: Vec<PathBuf> = logs.iter().map(|(f, _)| canonical(&f.path)).collect();
    for (f, _) in &logs {
        let linked = std::fs::symlink_metadata(&f.path).is_ok_and(|m| m.file_type().is_symlink());
        let Some(target_dir) = linked
            .then(|| canonical(&f.path))
            .and_then(|t| t.parent().map(Path::to_path_buf))
        else {
            continue;
        };
        if dirs.contains(&target_dir) {
            continue;
        }
        let Ok(listing) = std::fs::read_dir(&target_dir) else {
            continue;
        };
        let mut found: Vec<PathBuf> = listing
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && !targets.contains(&canonical(p)))
            .collect();
        found.sort();
        others.extend(found.into_iter().map(|p| (p, None)));
        dirs.push(target_dir);
    }
    let renamed = renamed_logs(client, table, dir, &dirs, &logs, &mut others).await?;
    let mut files: Vec<LogFile> = logs.into_iter().map(|(f, _)| f).collect();
    files.extend(renamed);
    Ok((files, unreadable))
}

/// Logs the loader started on in `dirs` (by their records' paths: the input directory `dir`
/// and its symlinked logs' directories) that none of `logs` is, found among `others` (files
/// not named like logs, with their heads once read).
async fn renamed_logs(
    client: &Client,
    table: &str,
    dir: &Path,
    dirs: &[PathBuf],
    logs: &[(LogFile, Head)],
    others: &mut [(PathBuf, Option<Option<Head>>)],
) -> Result<Vec<LogFile>, LoadError> {
    if others.is_empty() {
        return Ok(Vec::new());
    }
    let dir = canonical(dir);
    let rows = retry_transient(&dir.display().to_string(), || async {
        let txn = client.begin().await?;
        txn.scan(table.as_bytes(), b"", None).await
    })
    .await
    .map_err(|source| LoadError::In {
        name: dir.display().to_string(),
        source,
    })?;
    let mut found = Vec::new();
    let mut taken = vec![false; others.len()];
    for (cell, v) in rows.into_iter().filter(|(c, _)| c.column == b"offset") {
        let key = String::from_utf8_lossy(&cell.row).into_owned();
        if matches!(Key::parse(&key), Key::Legacy(_)) {
            continue; // Records of earlier versions are followed at their path only.
        }
        let record = parse_record(Path::new(&key), Some(v))?;
        let (Some(tag), Some(hint)) = (record.tag.as_ref(), record.hint.as_deref()) else {
            continue;
        };
        if !hint.parent().is_some_and(|p| dirs.iter().any(|d| d == p)) {
            continue;
        }
        if logs.iter().any(|(_, head)| head.is_log_of(&key, &record)) {
            continue;
        }
        for (i, (path, head)) in others.iter_mut().enumerate() {
            if taken[i] {
                continue;
            }
            // A file that cannot be read is not a log we started on: passed over.
            let head = head.get_or_insert_with(|| identity::open(path).ok().map(|(_, h)| h));
            if head.as_ref().is_some_and(|h| h.is_log_of(&key, &record)) {
                taken[i] = true;
                tracing::debug!(file = %path.display(), was = %hint.display(), "following a renamed log");
                found.push(LogFile {
                    path: path.clone(),
                    tag: tag.clone(),
                });
                break;
            }
        }
    }
    found.sort();
    Ok(found)
}
