//! `status`: workers, the oracle's leadership record, GC, the backlog per column, dead
//! letters, input files the loader quarantined and locks older than their TTL.

use super::ms;
use crate::cli::StoreArgs;
use crate::render::{self, indent, table};
use crate::{Answer, CtlError};
use observers::admin;
use percolator::{Client, Timestamp};
use serde_json::json;

/// The state of the application in `store` as `client` sees it.
pub async fn status(client: &Client, store: &StoreArgs) -> Result<Answer, CtlError> {
    let now = client.oracle().get_timestamp().await?;
    let workers = admin::workers(client, store.liveness()).await?;
    let backlog = admin::backlog(client).await?;
    let letters = admin::dead_letters(client).await?;
    let locks = admin::locks(client).await?;
    let renotifies = observers::renotify::renotifies_in_progress(client).await?;
    let quarantined = admin::quarantined(client).await?;
    let wall_ms = client.wall_ms();
    let since = |q: &admin::Quarantined| {
        std::time::Duration::from_millis(wall_ms.saturating_sub(q.since_ms))
    };
    let safe_point = client.gc_safe_point().await?;
    let oracle_ns = store.oracle_namespace();
    let record = client
        .store()
        .get(&oracle::record_key(&oracle_ns))
        .await?
        .map(|bytes| oracle::OracleRecord::decode(&bytes))
        .transpose()?;
    let expired: Vec<_> = locks.iter().filter(|l| l.expired).collect();
    let (timed, timers) = {
        let snapshot = client.snapshot_at(now).await?;
        (
            observers::time::columns(&snapshot).await?,
            observers::time::all_pending_timers(&snapshot).await?,
        )
    };
    let lag = |w: Option<u64>| match w {
        Some(u64::MAX) | None => None,
        Some(w) => Some(now.physical_ms() as i64 - w as i64),
    };

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
                    w.hint_addr.clone().unwrap_or_else(|| "-".to_string()),
                ]
            })
            .collect();
        text.push_str(&indent(&table(
            &["ID", "STATE", "HEARTBEAT", "SHARE", "HANDLED", "HINTS AT"],
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
        "quarantine {} input files not loaded\n",
        quarantined.len()
    ));
    for q in &quarantined {
        text.push_str(&format!(
            "  {}  since {} ago: {}\n",
            q.source,
            render::duration(since(q)),
            q.cause
        ));
    }
    text.push_str(&format!("renotify   {} in progress\n", renotifies.len()));
    if !renotifies.is_empty() {
        text.push_str(&indent(&super::renotify::progress_table(&renotifies)));
    }
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
    if !timed.is_empty() {
        text.push_str(&format!("event time {} timed columns\n", timed.len()));
        let rows: Vec<Vec<String>> = timed
            .iter()
            .map(|c| {
                vec![
                    c.column.to_string(),
                    match c.published_ms {
                        None => "-".to_string(),
                        Some(u64::MAX) => "end of input".to_string(),
                        Some(w) => w.to_string(),
                    },
                    lag(c.published_ms).map_or("-".to_string(), |l| format!("{l} ms")),
                    {
                        let mut inputs = format!(
                            "{} ({} idle)",
                            c.sources.len(),
                            c.sources.iter().filter(|(_, m)| m.idle).count()
                        );
                        for upstream in &c.upstreams {
                            inputs.push_str(&format!(", after {upstream}"));
                        }
                        inputs
                    },
                    c.pending.1.to_string(),
                ]
            })
            .collect();
        text.push_str(&indent(&table(
            &["COLUMN", "WATERMARK", "LAG", "INPUTS", "PENDING"],
            &rows,
        )));
    }
    for (observer, event, oracle) in &timers {
        text.push_str(&format!(
            "timers     {observer}: {event} on event time, {oracle} on oracle time\n"
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
            "hint_addr": w.hint_addr,
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
        "event_time": timed.iter().map(|c| json!({
            "column": c.column.to_string(),
            "watermark_ms": c.published_ms,
            "lag_ms": lag(c.published_ms),
            "sources": c.sources.iter().map(|(name, m)| json!({
                "name": name,
                "watermark_ms": m.watermark_ms,
                "idle": m.idle,
                "updated_ms": m.updated_ms,
            })).collect::<Vec<_>>(),
            "upstreams": c.upstreams.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "pending": c.pending.1,
            "least_pending_ms": c.pending.0,
        })).collect::<Vec<_>>(),
        "timers": timers.iter().map(|(o, e, r)| json!({
            "observer": o, "event_time": e, "oracle_time": r,
        })).collect::<Vec<_>>(),
        "quarantined": quarantined.iter().map(|q| json!({
            "source": q.source,
            "cause": q.cause,
            "since_ms": q.since_ms,
            "age_ms": ms(since(q)),
        })).collect::<Vec<_>>(),
        "renotify": renotifies.iter().map(super::renotify::progress_json).collect::<Vec<_>>(),
        "locks": {
            "total": locks.len(),
            "expired": expired.iter().map(|l| render::lock_json(l)).collect::<Vec<_>>(),
        },
    });
    Ok(Answer::ok(text, json))
}
