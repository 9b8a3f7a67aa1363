//! The join observers: a click observer that joins a click with its query exactly once (the
//! IdRegistry entry and the output commit together), and a query observer that wakes the
//! clicks waiting for it.

use crate::event::{day_of, Click, Joined, Query};
use crate::outcome::Outcome;
use crate::schema::*;
use observers::{observer_fn, ObserverError, Registry, WorkerError};
use percolator::{Cell, Client, Transaction};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Application hook: filter (return `None`) or enrich a joined event before it is written.
pub trait Adapter: Send + Sync + 'static {
    /// The event to write, or `None` to drop it (the click is still registered).
    fn adapt(&self, joined: Joined) -> Option<Joined>;
}

/// Settings of one pipeline's join observers.
#[derive(Clone)]
pub struct JoinConfig {
    /// Pipeline name (redundant pipelines run the same observers under different names).
    pub pipeline: String,
    /// Worker name, part of the IdRegistry token.
    pub worker: String,
    /// Clicks whose query has not arrived this long after the click's event time are
    /// reported as expired instead of waiting forever.
    pub horizon: Duration,
    /// Optional application hook.
    pub adapter: Option<Arc<dyn Adapter>>,
}

/// Counters of the join observers (attempts: a retried transaction counts again).
#[derive(Debug, Default)]
pub struct JoinStats {
    /// Joins written.
    pub joined: AtomicU64,
    /// Runs that found the click already registered by a join that had read this very
    /// delivery of it (work done twice: wasted).
    pub wasted: AtomicU64,
    /// Runs on a later delivery of an already joined click (a duplicate click line): the
    /// IdRegistry rejected it, as it is there to do.
    pub deduplicated: AtomicU64,
    /// Clicks parked to wait for their query.
    pub parked: AtomicU64,
    /// Waiting clicks woken by their query.
    pub woken: AtomicU64,
    /// Clicks reported expired (query past the horizon).
    pub expired: AtomicU64,
    /// Clicks older than the IdRegistry boundary.
    pub too_old: AtomicU64,
    /// Clicks dropped by the adapter.
    pub filtered: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

fn parse_u64(v: Option<Vec<u8>>) -> u64 {
    v.and_then(|b| String::from_utf8(b).ok()?.parse().ok())
        .unwrap_or(0)
}

/// Reads the IdRegistry boundary day inside `txn`.
pub async fn boundary(txn: &Transaction) -> Result<u64, percolator::TxnError> {
    Ok(parse_u64(txn.get(&boundary_cell()).await?))
}

fn bad_data(what: &str, cell: &Cell, e: serde_json::Error) -> ObserverError {
    ObserverError::failed(format!("malformed {what} at {cell}: {e}"))
}

async fn join_click(
    txn: Transaction,
    cell: Cell,
    config: &JoinConfig,
    stats: &JoinStats,
) -> Result<(), ObserverError> {
    let (bytes, delivery_ts) = txn.get_versioned(&cell).await?;
    let Some(bytes) = bytes else {
        return Ok(());
    };
    let stored: Stored<Click> =
        serde_json::from_slice(&bytes).map_err(|e| bad_data("click", &cell, e))?;
    let click = stored.event;
    let day = day_of(click.event_time);
    // The boundary first: below it the IdRegistry may already be gone, so an entry's absence
    // proves nothing; such a click gets its own outcome and is never joined.
    if day < boundary(&txn).await? {
        txn.set(outcome_cell(&click.click_id), Outcome::TooOld.encode());
        bump(&stats.too_old);
        return Ok(());
    }
    let registry_cell = idregistry_cell(day, &click.click_id);
    if let Some(token) = txn.get(&registry_cell).await? {
        // The token ends with the joining transaction's start_ts: a delivery committed after
        // it was a duplicate line the join never saw; otherwise this run repeats its work.
        let joined_at_ts = String::from_utf8_lossy(&token)
            .rsplit('/')
            .next()
            .and_then(|ts| ts.parse::<u64>().ok());
        if joined_at_ts.is_some_and(|ts| delivery_ts.unwrap_or(0) > ts) {
            bump(&stats.deduplicated);
        } else {
            bump(&stats.wasted);
        }
        return Ok(());
    }
    match txn.get(&query_cell(&click.query_id)).await? {
        Some(qbytes) => {
            let q: Stored<Query> = serde_json::from_slice(&qbytes)
                .map_err(|e| bad_data("query", &query_cell(&click.query_id), e))?;
            let joined_at = now_ms();
            let token = format!(
                "{}/{}/{}/{}",
                config.pipeline,
                config.worker,
                std::process::id(),
                txn.start_ts()
            );
            let joined = Joined {
                arrived_at: stored.loaded_at.max(q.loaded_at),
                click,
                query: q.event,
                token: token.clone(),
                joined_at,
            };
            let click_id = joined.click.click_id.clone();
            txn.set(registry_cell, token.clone());
            match config
                .adapter
                .as_ref()
                .map_or(Some(joined.clone()), |a| a.adapt(joined))
            {
                Some(out) => {
                    let value = serde_json::to_vec(&out)
                        .map_err(|e| ObserverError::failed(e.to_string()))?;
                    txn.set(joined_cell(&click_id, &token), value);
                    bump(&stats.joined);
                }
                None => {
                    txn.set(outcome_cell(&click_id), Outcome::Filtered.encode());
                    bump(&stats.filtered);
                }
            }
        }
        None => park_click(&txn, click, config, stats).await?,
    }
    Ok(())
}

/// The click's query is absent: report the click expired if it is past the horizon, else
/// park it on the query's pending list (the wake observer and the sweep take it off).
async fn park_click(
    txn: &Transaction,
    click: Click,
    config: &JoinConfig,
    stats: &JoinStats,
) -> Result<(), ObserverError> {
    let age = now_ms().saturating_sub(click.event_time);
    if age > config.horizon.as_millis() as u64 {
        // With the horizon, for verify to name it.
        txn.set(
            outcome_cell(&click.click_id),
            Outcome::Expired {
                horizon_secs: Some(config.horizon.as_secs()),
            }
            .encode(),
        );
        bump(&stats.expired);
        return Ok(());
    }
    // Park on the query's pending list (the wake observer and the sweep take the
    // click off it when they wake it).
    let pending = pending_cell(&click.query_id);
    let mut waiting: Vec<String> = match txn.get(&pending).await? {
        Some(b) => serde_json::from_slice(&b).map_err(|e| bad_data("pending list", &pending, e))?,
        None => Vec::new(),
    };
    if !waiting.contains(&click.click_id) {
        waiting.push(click.click_id.clone());
    }
    txn.set(pending, serde_json::to_vec(&waiting).unwrap_or_default());
    txn.set(outcome_cell(&click.click_id), Outcome::Waiting.encode());
    // The index the sweep reads instead of the whole pending table (crate::parked).
    crate::parked::file(txn, &click.query_id, &click.click_id);
    bump(&stats.parked);
    // The wake observer writes nothing when no click waits, so a query committed
    // while this transaction ran may have looked before we parked. Notifying the
    // query's cell here makes its wake observer run again after this park commits
    // (durably: the notify key is written with our prewrite); see ARCHITECTURE.md.
    txn.notify(query_cell(&click.query_id));
    Ok(())
}

/// Wakes the clicks waiting for the query in `cell`'s row (a weak observer: waking twice is
/// harmless, and a query nobody waits for costs two reads and no write). It runs when the
/// query is written and again after each park on it (the park notifies the query's cell).
async fn wake_clicks(txn: Transaction, cell: Cell, stats: &JoinStats) -> Result<(), ObserverError> {
    // Notified by a park before the query arrived: nothing to wake yet (waking would only
    // park the clicks again, and each park notifies this cell again).
    if txn.get(&cell).await?.is_none() {
        return Ok(());
    }
    let query_id = String::from_utf8_lossy(&cell.row).into_owned();
    let pending = pending_cell(&query_id);
    if let Some(b) = txn.get(&pending).await? {
        let waiting: Vec<String> =
            serde_json::from_slice(&b).map_err(|e| bad_data("pending list", &pending, e))?;
        for click_id in waiting {
            txn.notify(click_cell(&click_id));
            bump(&stats.woken);
        }
        // A click parking concurrently writes this cell too: the two conflict and one
        // retries; a park committed after our snapshot notifies this cell again.
        txn.delete(pending);
    }
    Ok(())
}

/// Registers the pipeline's click and query observers.
pub fn register(
    registry: &mut Registry,
    config: JoinConfig,
    stats: Arc<JoinStats>,
) -> Result<(), WorkerError> {
    let click_config = Arc::new(config.clone());
    let click_stats = stats.clone();
    registry.strong(
        CLICKS,
        EVENT,
        &format!("join@{}", config.pipeline),
        observer_fn(move |txn, cell| {
            let (config, stats) = (click_config.clone(), click_stats.clone());
            async move { join_click(txn, cell, &config, &stats).await }
        }),
    )?;
    registry.weak(
        QUERIES,
        EVENT,
        &format!("wake@{}", config.pipeline),
        observer_fn(move |txn, cell| {
            let stats = stats.clone();
            async move { wake_clicks(txn, cell, &stats).await }
        }),
    )?;
    Ok(())
}

/// The durable fallback of the wake-up: notifies the parked clicks whose query has arrived
/// or whose horizon has passed (so they are joined or reported), reading only the index of
/// parked clicks that fell due since the last pass ([`crate::parked::sweep`]), not the
/// whole pending table. Returns clicks notified.
pub async fn sweep_pending(
    client: &Client,
    horizon: Duration,
) -> Result<u64, percolator::TxnError> {
    Ok(crate::parked::sweep(client, horizon).await?.notified)
}

/// Advances the IdRegistry boundary to `day` (never backwards), waits until every
/// transaction that could have read the old boundary has ended (the client's maximum
/// transaction lifetime), then deletes the registry's days below it outright.
/// Returns the boundary in force and the keys deleted.
pub async fn gc_registry(client: &Client, day: u64) -> Result<(u64, usize), percolator::TxnError> {
    let boundary = client
        .run(|txn| async move {
            let current = boundary(&txn).await?;
            if day > current {
                txn.set(boundary_cell(), day.to_string());
            }
            Ok::<_, percolator::TxnError>(day.max(current))
        })
        .await?;
    tokio::time::sleep(client.config().max_lifetime + Duration::from_millis(100)).await;
    use percolator::codec::Space;
    let mut deleted = 0;
    let end = format!("{boundary:08}");
    // No notify space: the registry's column is never observed, so it has no notify keys
    // (and notify keys are ordered by bucket, not by row).
    for space in [Space::Head, Space::Version, Space::Data] {
        let range =
            client
                .codec()
                .rows_range(space, IDREGISTRY.as_bytes(), b"", Some(end.as_bytes()));
        let keys: Vec<Vec<u8>> = percolator::kv::scan_all(
            client.store().as_ref(),
            range,
            percolator::ScanOrder::Forward,
        )
        .await?
        .into_iter()
        .map(|(k, _)| k)
        .collect();
        deleted += keys.len();
        for chunk in keys.chunks(1000) {
            client.store().batch_delete(chunk.to_vec()).await?;
        }
    }
    Ok((boundary, deleted))
}
