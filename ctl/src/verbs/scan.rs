//! `scan`: cells of a table with their commit_ts, lock and a value preview.

use super::PREVIEW;
use crate::cli::ScanArgs;
use crate::render::{self, table};
use crate::{Answer, CtlError};
use observers::admin::{self, RowRange};
use percolator::{Client, Timestamp};
use serde_json::json;

/// The cells `args` select (raw: locks are shown, not resolved).
/// Write-once cells (records without heads) are shown too; a table the namespace's table ids
/// do not name is refused.
pub async fn scan(client: &Client, args: &ScanArgs) -> Result<Answer, CtlError> {
    super::known_table(client, &args.table)?;
    let rows = match (&args.prefix, &args.from, &args.to) {
        (Some(prefix), _, _) => RowRange::prefix(prefix.as_bytes()),
        (None, from, to) => RowRange {
            start: from.clone().unwrap_or_default().into_bytes(),
            end: to.clone().map(String::into_bytes),
        },
    };
    let cells = admin::scan(
        client,
        args.table.as_bytes(),
        &rows,
        args.at.map(Timestamp),
        args.versions,
        args.limit,
    )
    .await?;
    let mut lines = Vec::new();
    for c in &cells {
        let lock = c.lock.as_ref().map_or("-".to_string(), render::lock);
        if c.versions.is_empty() {
            lines.push(vec![
                render::text(&c.cell.row),
                render::text(&c.cell.column),
                "-".to_string(),
                lock.clone(),
                "(nothing committed)".to_string(),
            ]);
        }
        for (i, v) in c.versions.iter().enumerate() {
            let first = i == 0;
            lines.push(vec![
                if first {
                    render::text(&c.cell.row)
                } else {
                    String::new()
                },
                if first {
                    render::text(&c.cell.column)
                } else {
                    String::new()
                },
                v.commit_ts.to_string(),
                if first { lock.clone() } else { String::new() },
                render::value(&v.value, PREVIEW),
            ]);
        }
    }
    let mut text = table(&["ROW", "COLUMN", "COMMIT_TS", "LOCK", "VALUE"], &lines);
    text.push_str(&format!("{} cells\n", cells.len()));
    let json = json!({
        "table": args.table,
        "at": args.at,
        "cells": cells.iter().map(|c| json!({
            "row": render::text(&c.cell.row),
            "column": render::text(&c.cell.column),
            "lock": c.lock.as_ref().map(render::lock_json),
            "versions": c.versions.iter().map(render::version_json).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    });
    Ok(Answer::ok(text, json))
}
