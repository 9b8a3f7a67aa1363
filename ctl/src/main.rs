//! `percolator-ctl`: dispatches the command line ([`percolator_ctl::cli`]), opens the store
//! as the other binaries do, asks [`observers::admin`] and prints text or JSON.

use anyhow::Context;
use clap::Parser;
use observers::admin::{self, DeadLetterInfo, RowRange};
use percolator::{Client, Timestamp};
use percolator_cli::store::open_client;
use percolator_ctl::cli::{Cli, Command, DeadLetterCommand, ScanArgs, StoreArgs};
use percolator_ctl::render::{self, table};
use serde_json::{json, Value};
use std::time::Duration;

/// Value bytes shown in text output.
const PREVIEW: usize = 48;

/// What a verb produced: the text, the JSON document and the exit status.
struct Answer {
    text: String,
    json: Value,
    status: i32,
}

impl Answer {
    fn ok(text: String, json: Value) -> Answer {
        Answer {
            text,
            json,
            status: 0,
        }
    }
}

/// mimalloc, not glibc's malloc, as in every binary of the workspace (see its Cargo.toml).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    percolator_cli::init_tracing("warn");
    let cli = Cli::parse();
    let answer = match run(&cli).await {
        Ok(answer) => answer,
        Err(e) => {
            // Scripts reading --json get a document on failures too.
            if cli.json {
                println!("{}", json!({"error": format!("{e:#}")}));
            }
            eprintln!("Error: {e:#}");
            std::process::exit(1);
        }
    };
    if cli.json {
        println!("{}", serde_json::to_string_pretty(&answer.json)?);
    } else {
        print!("{}", answer.text);
    }
    if answer.status != 0 {
        std::process::exit(answer.status);
    }
    Ok(())
}

async fn run(cli: &Cli) -> anyhow::Result<Answer> {
    let client = open_client(
        &cli.store.store,
        &cli.store.namespace,
        &cli.store.oracle,
        cli.store.durability,
    )
    .await?;
    Ok(match &cli.command {
        Command::Status => status(&client, &cli.store).await?,
        Command::Scan(args) => scan(&client, args).await?,
        Command::Notifications { limit } => notifications(&client, *limit).await?,
        Command::DeadLetters(command) => dead_letters(&client, command).await?,
        Command::Locks { resolve } => locks(&client, *resolve).await?,
        Command::Gc => gc(&client).await?,
        Command::Wait { timeout, poll_ms } => wait(&client, &cli.store, *timeout, *poll_ms).await?,
    })
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

async fn status(client: &Client, store: &StoreArgs) -> anyhow::Result<Answer> {
    let now = client.oracle().get_timestamp().await?;
    let workers = admin::workers(client, store.liveness()).await?;
    let backlog = admin::backlog(client).await?;
    let letters = admin::dead_letters(client).await?;
    let locks = admin::locks(client).await?;
    let safe_point = client.gc_safe_point().await?;
    let oracle_ns = store.oracle_namespace();
    let record = client
        .store()
        .get(&oracle::record_key(&oracle_ns))
        .await?
        .map(|bytes| oracle::OracleRecord::decode(&bytes))
        .transpose()
        .context("decoding the oracle record")?;
    let expired: Vec<_> = locks.iter().filter(|l| l.expired).collect();

    let mut text = format!(
        "store      {} (namespace {})\n",
        store.store, store.namespace
    );
    let window_left = |end: u64| Timestamp(end).physical_ms() as i64 - now.physical_ms() as i64;
    match &record {
        Some(r) => {
            let leader = r
                .leader
                .as_ref()
                .map_or("none (released)".to_string(), |l| {
                    format!("{:016x} at {}", l.id, l.addr)
                });
            text.push_str(&format!(
                "oracle     leader {leader}, epoch {}, window ends {} ms ahead (record {oracle_ns})\n",
                r.epoch,
                window_left(r.window_end)
            ));
        }
        None => text.push_str(&format!("oracle     no record in namespace {oracle_ns}\n")),
    }
    text.push_str(&format!(
        "gc         safe point {}{}\n",
        safe_point,
        if safe_point == Timestamp::ZERO {
            " (never collected)"
        } else {
            ""
        }
    ));
    let live = workers.iter().filter(|w| w.live).count();
    text.push_str(&format!(
        "workers    {live} live, {} not heartbeating\n",
        workers.len() - live
    ));
    if !workers.is_empty() {
        let rows: Vec<Vec<String>> = workers
            .iter()
            .map(|w| {
                vec![
                    w.id.clone(),
                    if w.live { "live" } else { "dead" }.to_string(),
                    render::duration(w.heartbeat_age),
                    w.share_index
                        .map_or("-".to_string(), |i| format!("{}/{}", i + 1, w.live_workers)),
                    w.handled.map_or("-".to_string(), |h| h.to_string()),
                ]
            })
            .collect();
        text.push_str(&indent(&table(
            &["ID", "STATE", "HEARTBEAT", "SHARE", "HANDLED"],
            &rows,
        )));
    }
    text.push_str(&format!(
        "backlog    {} notifications (notify floor {})\n",
        backlog.total(),
        backlog.floor
    ));
    if !backlog.columns.is_empty() {
        let rows: Vec<Vec<String>> = backlog
            .columns
            .iter()
            .map(|c| {
                vec![
                    render::text(&c.table),
                    render::text(&c.column),
                    c.count.to_string(),
                    render::duration(c.oldest_age),
                ]
            })
            .collect();
        text.push_str(&indent(&table(
            &["TABLE", "COLUMN", "COUNT", "OLDEST"],
            &rows,
        )));
    }
    text.push_str(&format!("dead       {} dead letters\n", letters.len()));
    text.push_str(&format!(
        "locks      {} held, {} older than their TTL\n",
        locks.len(),
        expired.len()
    ));
    for l in &expired {
        text.push_str(&format!(
            "  {}  {}\n",
            render::cell(&l.cell),
            render::lock(l)
        ));
    }

    let json = json!({
        "store": store.store.to_string(),
        "namespace": store.namespace,
        "oracle": record.as_ref().map(|r| json!({
            "namespace": oracle_ns,
            "epoch": r.epoch,
            "leader": r.leader.as_ref().map(|l| json!({"id": format!("{:016x}", l.id), "addr": l.addr})),
            "window_end": r.window_end,
            "window_ahead_ms": window_left(r.window_end),
        })),
        "gc_safe_point": safe_point.0,
        "workers": workers.iter().map(|w| json!({
            "id": w.id,
            "live": w.live,
            "heartbeat_age_ms": ms(w.heartbeat_age),
            "share_index": w.share_index,
            "live_workers": w.live_workers,
            "handled": w.handled,
        })).collect::<Vec<_>>(),
        "backlog": {
            "floor": backlog.floor,
            "total": backlog.total(),
            "columns": backlog.columns.iter().map(|c| json!({
                "table": render::text(&c.table),
                "column": render::text(&c.column),
                "count": c.count,
                "oldest_age_ms": ms(c.oldest_age),
            })).collect::<Vec<_>>(),
        },
        "dead_letters": letters.len(),
        "locks": {
            "total": locks.len(),
            "expired": expired.iter().map(|l| render::lock_json(l)).collect::<Vec<_>>(),
        },
    });
    Ok(Answer::ok(text, json))
}

fn indent(block: &str) -> String {
    block.lines().map(|l| format!("  {l}\n")).collect()
}

async fn scan(client: &Client, args: &ScanArgs) -> anyhow::Result<Answer> {
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

fn notification_kind(n: Option<&percolator::record::Notification>) -> (String, Value) {
    use percolator::record::Notification;
    match n {
        Some(Notification::Strong {
            start_ts, primary, ..
        }) => (
            format!(
                "strong (writer {start_ts}, primary {})",
                render::cell(primary)
            ),
            json!({"kind": "strong", "start_ts": start_ts, "primary": render::cell_json(primary)}),
        ),
        Some(Notification::Committed { commit_ts }) => (
            format!("committed at {commit_ts}"),
            json!({"kind": "committed", "commit_ts": commit_ts}),
        ),
        Some(Notification::Weak) => ("weak".to_string(), json!({"kind": "weak"})),
        None => ("corrupt".to_string(), json!({"kind": "corrupt"})),
    }
}

async fn notifications(client: &Client, limit: usize) -> anyhow::Result<Answer> {
    let list = admin::notifications(client, limit).await?;
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|n| {
            vec![
                render::duration(n.age),
                render::cell(&n.cell),
                n.ts.to_string(),
                notification_kind(n.notification.as_ref()).0,
            ]
        })
        .collect();
    let mut text = table(&["AGE", "CELL", "TS", "NOTIFICATION"], &rows);
    text.push_str(&format!(
        "{} notifications shown (oldest bucket first, --limit {limit})\n",
        list.len()
    ));
    let json = json!({
        "notifications": list.iter().map(|n| json!({
            "cell": render::cell_json(&n.cell),
            "bucket": n.bucket,
            "ts": n.ts,
            "age_ms": ms(n.age),
            "notification": notification_kind(n.notification.as_ref()).1,
        })).collect::<Vec<_>>(),
    });
    Ok(Answer::ok(text, json))
}

fn letter_json(d: &DeadLetterInfo) -> Value {
    json!({
        "id": d.id,
        "cell": d.cell.as_ref().map(render::cell_json),
        "ts": d.ts,
        "age_ms": d.age.map(ms),
        "notification": notification_kind(d.notification.as_ref()).1,
        "error": d.letter.error,
        "notify_key": render::text(&d.letter.notify_key),
    })
}

fn letter_rows(letters: &[DeadLetterInfo]) -> String {
    let rows: Vec<Vec<String>> = letters
        .iter()
        .map(|d| {
            vec![
                d.id.clone(),
                d.cell.as_ref().map_or("?".to_string(), render::cell),
                d.age.map_or("?".to_string(), render::duration),
                d.letter.error.clone(),
            ]
        })
        .collect();
    table(&["ID", "CELL", "AGE", "ERROR"], &rows)
}

/// The letters `id` (a unique prefix) or `all` name; an error if `id` names none or several.
async fn select(
    client: &Client,
    id: Option<&str>,
    all: bool,
) -> anyhow::Result<Vec<DeadLetterInfo>> {
    if all {
        return Ok(admin::dead_letters(client).await?);
    }
    let id = id.unwrap_or_default();
    let found = admin::find_dead_letters(client, id).await?;
    match found.len() {
        0 => anyhow::bail!("no dead letter with id {id:?} (see `dead-letters list`)"),
        1 => Ok(found),
        n => anyhow::bail!("{n} dead letters have ids starting with {id:?}: give more digits"),
    }
}

async fn dead_letters(client: &Client, command: &DeadLetterCommand) -> anyhow::Result<Answer> {
    match command {
        DeadLetterCommand::List => {
            let letters = admin::dead_letters(client).await?;
            let mut text = letter_rows(&letters);
            text.push_str(&format!("{} dead letters\n", letters.len()));
            let json = json!({"dead_letters": letters.iter().map(letter_json).collect::<Vec<_>>()});
            Ok(Answer::ok(text, json))
        }
        DeadLetterCommand::Show { id } => {
            let letters = select(client, Some(id), false).await?;
            let d = &letters[0];
            let text = format!(
                "id            {}\ncell          {}\nts            {}\nage           {}\nnotification  {}\nnotify key    {}\nerror         {}\n",
                d.id,
                d.cell.as_ref().map_or("?".to_string(), render::cell),
                d.ts.map_or("?".to_string(), |t| t.to_string()),
                d.age.map_or("?".to_string(), render::duration),
                notification_kind(d.notification.as_ref()).0,
                render::text(&d.letter.notify_key),
                d.letter.error
            );
            Ok(Answer::ok(text, letter_json(d)))
        }
        DeadLetterCommand::Replay { id, all } => {
            let letters = select(client, id.as_deref(), *all).await?;
            for d in &letters {
                d.letter.replay(client).await?;
            }
            let mut text = letter_rows(&letters);
            text.push_str(&format!(
                "replayed {} dead letters: workers will run their observers again\n",
                letters.len()
            ));
            let json = json!({"replayed": letters.iter().map(letter_json).collect::<Vec<_>>()});
            Ok(Answer::ok(text, json))
        }
        DeadLetterCommand::Drop { id, all, yes } => {
            let letters = select(client, id.as_deref(), *all).await?;
            let mut text = letter_rows(&letters);
            if !*yes {
                text.push_str(&format!(
                    "would drop {} dead letters; nothing dropped: pass --yes to drop them\n",
                    letters.len()
                ));
                let json = json!({
                    "dropped": [],
                    "would_drop": letters.iter().map(letter_json).collect::<Vec<_>>(),
                    "confirmed": false,
                });
                return Ok(Answer {
                    text,
                    json,
                    status: 1,
                });
            }
            for d in &letters {
                d.letter.discard(client).await?;
            }
            text.push_str(&format!(
                "dropped {} dead letters for good\n",
                letters.len()
            ));
            let json = json!({
                "dropped": letters.iter().map(letter_json).collect::<Vec<_>>(),
                "confirmed": true,
            });
            Ok(Answer::ok(text, json))
        }
    }
}

async fn locks(client: &Client, resolve: bool) -> anyhow::Result<Answer> {
    let locks = admin::locks(client).await?;
    let rows: Vec<Vec<String>> = locks
        .iter()
        .map(|l| vec![render::cell(&l.cell), render::lock(l)])
        .collect();
    let mut text = table(&["CELL", "LOCK"], &rows);
    text.push_str(&format!(
        "{} locks, {} older than their TTL\n",
        locks.len(),
        locks.iter().filter(|l| l.expired).count()
    ));
    let mut resolved = None;
    if resolve {
        let n = client.resolve_all_locks().await?;
        text.push_str(&format!("resolved {n} locks\n"));
        resolved = Some(n);
    }
    let json = json!({
        "locks": locks.iter().map(render::lock_json).collect::<Vec<_>>(),
        "resolved": resolved,
    });
    Ok(Answer::ok(text, json))
}

async fn gc(client: &Client) -> anyhow::Result<Answer> {
    let now = client.oracle().get_timestamp().await?;
    let lag = client.config().gc_lag;
    // The newest safe point the policy allows: the GC lag (longer than any transaction's
    // lifetime) behind the oracle.
    let safe_point = Timestamp::compose(now.physical_ms().saturating_sub(ms(lag)), 0);
    let before = client.gc_safe_point().await?;
    let stats = client.gc(safe_point).await?;
    let text = format!(
        "gc at safe point {} ({} behind the oracle; previous safe point {})\n{}",
        safe_point,
        render::duration(lag),
        before,
        table(
            &[
                "LOCKS_RESOLVED",
                "VERSIONS_DELETED",
                "DATA_DELETED",
                "HEADS_TOMBSTONED",
                "NOTIFICATIONS_RESOLVED"
            ],
            &[vec![
                stats.locks_resolved.to_string(),
                stats.versions_deleted.to_string(),
                stats.data_deleted.to_string(),
                stats.heads_tombstoned.to_string(),
                stats.notifications_resolved.to_string(),
            ]],
        )
    );
    let json = json!({
        "safe_point": safe_point.0,
        "previous_safe_point": before.0,
        "gc_lag_ms": ms(lag),
        "locks_resolved": stats.locks_resolved,
        "versions_deleted": stats.versions_deleted,
        "data_deleted": stats.data_deleted,
        "heads_tombstoned": stats.heads_tombstoned,
        "notifications_resolved": stats.notifications_resolved,
    });
    Ok(Answer::ok(text, json))
}

async fn wait(
    client: &Client,
    store: &StoreArgs,
    timeout: Option<f64>,
    poll_ms: u64,
) -> anyhow::Result<Answer> {
    let started = std::time::Instant::now();
    let timeout = timeout
        .map(Duration::try_from_secs_f64)
        .transpose()
        .context("--timeout")?;
    let drained = admin::wait_until_drained(
        client,
        store.liveness(),
        Duration::from_millis(poll_ms),
        timeout,
    )
    .await?;
    let waited = started.elapsed();
    let (text, status) = if drained {
        (format!("drained after {}\n", render::duration(waited)), 0)
    } else {
        let backlog = admin::backlog(client).await?;
        (
            format!(
                "timed out after {}: {} notifications waiting\n",
                render::duration(waited),
                backlog.total()
            ),
            2,
        )
    };
    let json = json!({"drained": drained, "waited_ms": ms(waited)});
    Ok(Answer { text, json, status })
}
