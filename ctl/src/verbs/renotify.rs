//! `renotify TABLE COLUMN [--prefix P] [--page-size N] [--pages N] [--force]`: queue a
//! notification for every existing cell of a column ([`observers::renotify`]), and the
//! rendering of passes in progress (shown by `status`).

use crate::cli::RenotifyArgs;
use crate::render::{self, table};
use crate::{Answer, CtlError};
use observers::renotify::{self as library, RenotifyOptions, RenotifyProgress};
use percolator::Client;
use serde_json::{json, Value};

/// Runs (or resumes) the pass `args` name, up to `--pages` pages.
/// Write-once cells are covered ([`observers::renotify`]); a table the namespace's table ids
/// do not name is refused, and so is a column no cell of a table with cells is in (after a
/// pass that found nothing).
pub async fn renotify(client: &Client, args: &RenotifyArgs) -> Result<Answer, CtlError> {
    super::known_table(client, &args.table)?;
    if args.abandon {
        return abandon(client, args).await;
    }
    let options = RenotifyOptions {
        prefix: args.prefix.clone().unwrap_or_default().into_bytes(),
        page_size: args.page_size,
        max_pages: args.pages,
        force: args.force,
    };
    let report = library::renotify(
        client,
        args.table.as_bytes(),
        args.column.as_bytes(),
        &options,
    )
    .await?;
    let p = &report.progress;
    if report.finished && p.rows_done == 0 && options.prefix.is_empty() {
        unknown_column(client, &args.table, &args.column).await?;
    }
    let mut text = format!(
        "renotify {}/{}{}: {} {} pages: {} rows done, {} notified{}\n",
        render::text(&p.table),
        render::text(&p.column),
        if p.prefix.is_empty() {
            String::new()
        } else {
            format!(" (rows {}*)", render::text(&p.prefix))
        },
        if report.resumed { "resumed," } else { "ran" },
        report.pages,
        p.rows_done,
        p.notified,
        if p.force_ts.is_some() {
            " (forced)"
        } else {
            ""
        },
    );
    if report.finished {
        text.push_str("finished: workers will run the column's observers on these cells\n");
    } else {
        text.push_str(&format!(
            "stopped after --pages {}; last row {}: run it again to go on\n",
            report.pages,
            p.last_row.as_deref().map_or("-".to_string(), render::text)
        ));
    }
    let mut json = progress_json(p);
    json["finished"] = json!(report.finished);
    json["resumed"] = json!(report.resumed);
    json["pages"] = json!(report.pages);
    Ok(Answer::ok(text, json))
}

/// After a pass over every row found no cell of `column`: refuses it if the table has cells
/// (of other columns: a mistyped column), naming the columns of its first cells. An empty
/// table is not an error (nothing to do).
async fn unknown_column(client: &Client, table: &str, column: &str) -> Result<(), CtlError> {
    /// Cells looked at for column names.
    const SAMPLE: usize = 100;
    let cells = observers::admin::scan(
        client,
        table.as_bytes(),
        &observers::admin::RowRange::all(),
        None,
        true,
        SAMPLE,
    )
    .await?;
    if cells.is_empty() {
        return Ok(());
    }
    let mut columns: Vec<String> = cells.iter().map(|c| render::text(&c.cell.column)).collect();
    columns.sort();
    columns.dedup();
    Err(CtlError::Usage(format!(
        "table {table:?} has no cell in column {column:?} (columns of its first cells: {})",
        columns.join(", ")
    )))
}

/// `--abandon`: forgets the pass in progress, if any.
async fn abandon(client: &Client, args: &RenotifyArgs) -> Result<Answer, CtlError> {
    let prefix = args.prefix.clone().unwrap_or_default().into_bytes();
    let found = library::abandon(
        client,
        args.table.as_bytes(),
        args.column.as_bytes(),
        &prefix,
    )
    .await?;
    let text = match &found {
        Some(p) => format!(
            "abandoned the renotify of {}/{} after {} rows ({} notified, last row {}): its notifications stay queued\n",
            render::text(&p.table),
            render::text(&p.column),
            p.rows_done,
            p.notified,
            p.last_row.as_deref().map_or("-".to_string(), render::text)
        ),
        None => format!(
            "no renotify of {}/{} with prefix {:?} in progress\n",
            args.table,
            args.column,
            args.prefix.clone().unwrap_or_default()
        ),
    };
    let json = json!({"abandoned": found.as_ref().map(progress_json)});
    Ok(Answer::ok(text, json))
}

/// A pass's progress as JSON.
pub fn progress_json(p: &RenotifyProgress) -> Value {
    json!({
        "table": render::text(&p.table),
        "column": render::text(&p.column),
        "prefix": render::text(&p.prefix),
        "rows_done": p.rows_done,
        "notified": p.notified,
        "last_row": p.last_row.as_deref().map(render::text),
        "force": p.force_ts.is_some(),
        "started_ts": p.started_ts,
    })
}

/// Passes in progress as a text table.
pub fn progress_table(passes: &[RenotifyProgress]) -> String {
    let rows: Vec<Vec<String>> = passes
        .iter()
        .map(|p| {
            vec![
                render::text(&p.table),
                render::text(&p.column),
                if p.prefix.is_empty() {
                    "-".to_string()
                } else {
                    render::text(&p.prefix)
                },
                p.rows_done.to_string(),
                p.notified.to_string(),
                p.last_row.as_deref().map_or("-".to_string(), render::text),
                if p.force_ts.is_some() { "yes" } else { "no" }.to_string(),
            ]
        })
        .collect();
    table(
        &[
            "TABLE", "COLUMN", "PREFIX", "ROWS", "NOTIFIED", "LAST_ROW", "FORCE",
        ],
        &rows,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;
    use percolator::kv::MemoryKv;
    use percolator::ts::LocalClock;
    use percolator::Cell;
    use std::sync::Arc;

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(["percolator-ctl", "--store", "memory"].iter().chain(args))
            .expect("command line")
    }

    /// The verb stops at `--pages` and says so; `status` lists the pass until a second run
    /// finishes it.
    #[tokio::test]
    async fn a_pass_stopped_by_pages_shows_in_status_until_resumed() {
        let client = Client::new(Arc::new(MemoryKv::new()), Arc::new(LocalClock::new()));
        let txn = client.begin().await.expect("begin");
        for row in ["a", "b", "c"] {
            txn.set(Cell::new("t", row, "c"), "v");
        }
        txn.commit().await.expect("commit");

        let cli = parse(&["renotify", "t", "c", "--page-size", "2", "--pages", "1"]);
        let Command::Renotify(args) = &cli.command else {
            panic!("not renotify: {cli:?}");
        };
        let answer = renotify(&client, args).await.expect("renotify");
        assert_eq!(answer.json["finished"], false, "{}", answer.json);
        assert!(answer.text.contains("last row b"), "{}", answer.text);
        let status = crate::verbs::status::status(&client, &cli.store)
            .await
            .expect("status");
        assert!(
            status.text.contains("renotify   1 in progress"),
            "{}",
            status.text
        );
        assert_eq!(status.json["renotify"][0]["rows_done"], 2);

        let cli = parse(&["renotify", "t", "c"]);
        let Command::Renotify(args) = &cli.command else {
            panic!("not renotify: {cli:?}");
        };
        let answer = renotify(&client, args).await.expect("renotify");
        assert_eq!(answer.json["finished"], true, "{}", answer.json);
        assert_eq!(answer.json["notified"], 3, "{}", answer.json);
        let status = crate::verbs::status::status(&client, &cli.store)
            .await
            .expect("status");
        assert!(
            status.text.contains("renotify   0 in progress"),
            "{}",
            status.text
        );
    }

    async fn run(client: &Client, args: &[&str]) -> Answer {
        let cli = parse(args);
        let Command::Renotify(args) = &cli.command else {
            panic!("not renotify: {cli:?}");
        };
        renotify(client, args).await.expect("renotify")
    }

    /// `--abandon` forgets a pass in progress; the next run begins afresh.
    #[tokio::test]
    async fn an_abandoned_pass_begins_afresh() {
        let client = Client::new(Arc::new(MemoryKv::new()), Arc::new(LocalClock::new()));
        let txn = client.begin().await.expect("begin");
        for row in ["a", "b", "c"] {
            txn.set(Cell::new("t", row, "c"), "v");
        }
        txn.commit().await.expect("commit");
        let args = ["renotify", "t", "c", "--page-size", "1", "--pages", "2"];
        run(&client, &args).await;
        // It resumes only as it began.
        let cli = parse(&["renotify", "t", "c", "--force"]);
        let Command::Renotify(forced) = &cli.command else {
            panic!("not renotify: {cli:?}");
        };
        let refused = renotify(&client, forced).await;
        assert!(
            matches!(
                refused,
                Err(CtlError::Worker(observers::WorkerError::RenotifyMismatch {
                    force: false,
                    ..
                }))
            ),
            "{refused:?}"
        );
        let abandoned = run(&client, &["renotify", "t", "c", "--abandon"]).await;
        assert_eq!(
            abandoned.json["abandoned"]["rows_done"], 2,
            "{}",
            abandoned.json
        );
        let none = run(&client, &["renotify", "t", "c", "--abandon"]).await;
        assert_eq!(none.json["abandoned"], Value::Null, "{}", none.json);
        let fresh = run(&client, &["renotify", "t", "c"]).await;
        assert_eq!(fresh.json["resumed"], false, "{}", fresh.json);
        assert_eq!(fresh.json["rows_done"], 3, "{}", fresh.json);
    }
}
