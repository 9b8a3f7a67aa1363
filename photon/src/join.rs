//! The join observers: a click observer that joins a click with its query exactly once (the
//! IdRegistry entry and the output commit together), a query observer that wakes the clicks
//! waiting for it, and the check run after each loaded batch of queries that notifies it.

use crate::event::{day_of, Joined, Kind};
use crate::legacy::LegacyEntries;
use crate::outcome::Outcome;
use crate::registry::boundary;
use crate::schema::*;
use observers::{Observer, ObserverError, Registry, WorkerError};
use percolator::{Cell, Client, Transaction};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

impl JoinConfig {
    /// The default of [`JoinConfig::process`]: this OS process's id.
    pub fn this_process() -> String {
        std::process::id().to_string()
    }
}

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
    /// The process named in the IdRegistry token ([`JoinConfig::this_process`] by default:
    /// this OS process's id).
    pub process: String,
    /// Clicks whose query has not arrived this long after the click's event time are
    /// reported as expired instead of waiting forever.
    pub horizon: Duration,
    /// The clock the horizon is measured on ([`crate::expiry`]).
    pub expiry: crate::expiry::Expiry,
    /// Optional application hook.
    pub adapter: Option<Arc<dyn Adapter>>,
    /// Whether IdRegistry entries of the earlier layout are read beside each click's entry
    /// ([`LegacyEntries::checked`]: while the last scan of their rows found some).
    pub legacy_entries: LegacyEntries,
}

/// Counters of the join observers (attempts: a retried transaction counts again).
#[derive(Debug, Default)]
pub struct JoinStats {
    /// Joins written.
    pub joined: AtomicU64,
    /// Runs that found the click already registered by a join of the same change (the same
    /// click write's notification, or a delivery the join read when the run's notification
    /// is unknown): work done twice.
    pub wasted: AtomicU64,
    /// Runs on another delivery of an already joined click (a duplicate click line, loaded
    /// before or after the join): the IdRegistry rejected it, as it is there to do.
    pub deduplicated: AtomicU64,
    /// Runs on a click already settled without a join (expired, filtered, too old): nothing
    /// written (a sweep or wake-up that reached the click after it was settled).
    pub settled: AtomicU64,
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
    /// Planted bug `JoinTrustsStaleRegistry` (feature `planted`, `percolator::planted`):
    /// the pipeline's memory of the IdRegistry lookups it made, by click id.
    #[cfg(feature = "planted")]
    #[doc(hidden)]
    pub planted_lookups: std::sync::Mutex<std::collections::BTreeMap<String, Option<Vec<u8>>>>,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

fn bad_data(what: &str, cell: &Cell, e: serde_json::Error) -> ObserverError {
    ObserverError::failed(format!("malformed {what} at {cell}: {e}"))
}

/// A click of a batch as read: the stored event, the commit_ts of its delivery (the newest
/// write of the click's cell), and that of the click write whose notification this run is
/// for (`None` if unknown, or if the notification was not a click write's: a wake-up, a
/// sweep, a forced renotify, whose commit_ts is above the delivery's).
struct ReadClick {
    event: ClickIds,
    stored: StoredEvent,
    delivery_ts: Option<u64>,
    notified_ts: Option<u64>,
}

/// A stored click's ids and event time (taken from its [`StoredEvent`]).
struct ClickIds {
    click_id: String,
    query_id: String,
    event_time: u64,
}

/// The click join, a strong observer on `clicks/event` that handles a batch of clicks in one
/// transaction with batched reads (two rounds: the clicks and the boundary, then the
/// IdRegistry entries and the queries).
struct ClickJoin {
    config: Arc<JoinConfig>,
    stats: Arc<JoinStats>,
}

#[async_trait::async_trait]
impl Observer for ClickJoin {
    async fn observe(&self, txn: Transaction, cell: Cell) -> Result<(), ObserverError> {
        self.observe_change(txn, cell, None).await
    }

    async fn observe_change(
        &self,
        txn: Transaction,
        cell: Cell,
        commit_ts: Option<u64>,
    ) -> Result<(), ObserverError> {
        let cells = std::slice::from_ref(&cell);
        join_clicks(&txn, cells, &[commit_ts], &self.config, &self.stats).await
    }

    async fn observe_changes(
        &self,
        txn: Transaction,
        cells: &[Cell],
        commit_ts: &[Option<u64>],
    ) -> Result<(), ObserverError> {
        join_clicks(&txn, cells, commit_ts, &self.config, &self.stats).await
    }
}

/// The largest batch a burst of clicks grows a join run to (`WorkerConfig::max_batch_size`):
/// four times the batch size. The join reads and writes a batch's cells in a few batched
/// calls, so a burst of clicks (a loader's batch at saturation) costs fewer transactions
/// and store calls per click in larger runs (`observers::BURST_RUNS`); a batch size of 1
/// stays 1.
pub fn max_batch_size(batch_size: usize) -> usize {
    batch_size.saturating_mul(4)
}

/// Joins the clicks in `cells` (distinct cells) in `txn`, in order.
///
/// Reads are batched: first every click (with its delivery's commit_ts, which `get_many`
/// does not return; the join is guarded, so the worker read nothing of these cells before
/// it) and the IdRegistry boundary, then in one round the IdRegistry entries of the clicks at
/// or above the boundary (below it the registry may be being deleted, so it is not read) and
/// every click's query. What a click writes never changes what a later click of the batch read
/// (its own IdRegistry entry, outcome and output; queries are not written here), except the
/// pending lists, which [`park_click`] reads itself, after the writes of earlier clicks.
async fn join_clicks(
    txn: &Transaction,
    cells: &[Cell],
    notified_ts: &[Option<u64>],
    config: &JoinConfig,
    stats: &JoinStats,
) -> Result<(), ObserverError> {
    // A click write's notification names its commit_ts: the run reads that delivery or a
    // newer one, from memory only if this process remembers one (`photon::design::join`,
    // "Events read from memory"); a wake-up's, newer than every delivery, reads the store.
    let (clicks, boundary) =
        futures::future::try_join(txn.get_many_recent_from(cells, notified_ts), boundary(txn))
            .await?;
    let mut read = Vec::with_capacity(cells.len());
    for ((cell, (bytes, delivery_ts)), notified_ts) in
        cells.iter().zip(clicks).zip(notified_ts.iter().copied())
    {
        let Some(bytes) = bytes else {
            continue;
        };
        let mut stored =
            StoredEvent::read(bytes, Kind::Click).map_err(|e| bad_data("click", cell, e))?;
        let event = ClickIds {
            // A click's text has its id (`StoredEvent::read` of a click checks it).
            click_id: stored.click_id.take().unwrap_or_default(),
            query_id: std::mem::take(&mut stored.query_id),
            event_time: stored.event_time,
        };
        // A click write's notification is at or below the delivery read; a later one was
        // made by a wake-up, a sweep or a renotify, and names no write.
        let notified_ts = notified_ts.filter(|n| delivery_ts.is_some_and(|d| *n <= d));
        read.push(ReadClick {
            event,
            stored,
            delivery_ts,
            notified_ts,
        });
    }
    // The boundary first: below it the IdRegistry may already be gone, so an entry's absence
    // proves nothing; such a click is never joined (and keeps its first terminal outcome).
    let (current, old): (Vec<ReadClick>, Vec<ReadClick>) = read
        .into_iter()
        .partition(|click| day_of(click.event.event_time) >= boundary);
    let old: Vec<String> = old.into_iter().map(|click| click.event.click_id).collect();
    crate::registry::settle_below_boundary(txn, &old, boundary, stats).await?;
    if current.is_empty() {
        return Ok(());
    }
    // The entry is the click id's, whatever the delivery's event time; an entry of the
    // earlier layout (keyed by the event day) is read too while any may exist
    // (`crate::legacy`).
    let legacy = config.legacy_entries.may_exist().await;
    let mut wanted = Vec::with_capacity(4 * current.len());
    for click in &current {
        let event = &click.event;
        wanted.push(idregistry_cell(&event.click_id));
        if legacy {
            wanted.push(legacy_idregistry_cell(
                day_of(event.event_time),
                &event.click_id,
            ));
        }
        wanted.push(query_cell(&event.query_id));
        wanted.push(outcome_cell(&event.click_id));
    }
    let values = txn.get_many_recent(&wanted).await?;
    let mut values = values.into_iter().map(|(value, _)| value);
    let read: Vec<(ReadClick, Guard, Option<Vec<u8>>)> = current
        .into_iter()
        .map(|click| {
            let token = values.next().unwrap_or_default();
            let legacy_token = if legacy {
                values.next().unwrap_or_default()
            } else {
                None
            };
            let (query, outcome) = (
                values.next().unwrap_or_default(),
                values.next().unwrap_or_default(),
            );
            let token = token.or(legacy_token);
            // Planted bug `JoinTrustsStaleRegistry`: the lookup answered from what the
            // pipeline read before, not from this transaction's snapshot.
            #[cfg(feature = "planted")]
            let token =
                if percolator::planted::active(percolator::planted::Bug::JoinTrustsStaleRegistry) {
                    let mut lookups = stats
                        .planted_lookups
                        .lock()
                        .unwrap_or_else(|p| p.into_inner());
                    lookups
                        .entry(click.event.click_id.clone())
                        .or_insert(token)
                        .clone()
                } else {
                    token
                };
            (click, Guard { token, outcome }, query)
        })
        .collect();
    // The pending lists of the clicks that may park (no entry, no query yet, no final
    // outcome), read in one round: `park_click` then finds them in the transaction.
    let pending: std::collections::BTreeSet<Cell> = read
        .iter()
        .filter(|(_, guard, query)| {
            query.is_none()
                && guard.token.is_none()
                && !guard.outcome().is_some_and(Outcome::is_final)
        })
        .map(|(click, _, _)| pending_cell(&click.event.query_id))
        .collect();
    if !pending.is_empty() {
        txn.get_many(&pending.into_iter().collect::<Vec<_>>())
            .await?;
    }
    for (click, guard, query) in read {
        join_click(txn, click, guard, query, config, stats).await?;
    }
    Ok(())
}

/// What a click's earlier runs left: its IdRegistry entry and its outcome. The click join is
/// a guarded observer (`observers::Registry::guarded`): every run that has an effect writes
/// one of them (a join or a filter the entry, a park the outcome `Waiting`, an expiry both),
/// and a run that finds the entry or a final outcome writes nothing.
struct Guard {
    token: Option<Vec<u8>>,
    outcome: Option<Vec<u8>>,
}

impl Guard {
    /// The outcome, decoded.
    fn outcome(&self) -> Option<Outcome> {
        self.outcome
            .as_ref()
            .and_then(|b| Outcome::decode(&String::from_utf8_lossy(b)))
    }
}

/// What an IdRegistry token says: `pipeline/worker/pid/n<notified>/<start_ts>`, the join's
/// pipeline, worker and process, which click write's notification it ran for (the low 32
/// bits of that write's commit_ts in hex; `n` alone if unknown; tokens written before it was
/// recorded lack the part), and the joining transaction's start_ts. Only the join's
/// counters read it back: 32 bits tell two writes of a click apart, and keep the entry and
/// the output key short (19 decimal digits measurably cost CPU).
struct JoinToken {
    notified: Option<u32>,
    start_ts: Option<u64>,
}

impl JoinToken {
    fn format(config: &JoinConfig, notified_ts: Option<u64>, start_ts: u64) -> String {
        let notified = notified_ts.map_or(String::new(), |n| format!("{:x}", n as u32));
        format!(
            "{}/{}/{}/n{notified}/{start_ts}",
            config.pipeline, config.worker, config.process,
        )
    }

    fn parse(token: &[u8]) -> JoinToken {
        let token = String::from_utf8_lossy(token);
        let mut parts = token.rsplit('/');
        let start_ts = parts.next().and_then(|ts| ts.parse::<u64>().ok());
        let notified = parts
            .next()
            .and_then(|n| n.strip_prefix('n'))
            .and_then(|n| u32::from_str_radix(n, 16).ok());
        JoinToken { notified, start_ts }
    }

    /// Whether the join ran for the notification of the same click write as `notified_ts`
    /// (`None` when either is unknown).
    fn same_write(&self, notified_ts: Option<u64>) -> Option<bool> {
        Some(notified_ts? as u32 == self.notified?)
    }
}

/// Joins one click given what was read for it: its guard (IdRegistry entry and outcome)
/// and its query.
async fn join_click(
    txn: &Transaction,
    click: ReadClick,
    guard: Guard,
    query: Option<Vec<u8>>,
    config: &JoinConfig,
    stats: &JoinStats,
) -> Result<(), ObserverError> {
    let ReadClick {
        event: click,
        stored,
        delivery_ts,
        notified_ts,
    } = click;
    let day = day_of(click.event_time);
    let outcome = guard.outcome();
    if outcome.is_some_and(Outcome::is_final) {
        // A final outcome: an earlier run (or the boundary's settling) decided this click.
        bump(&stats.settled);
        return Ok(());
    }
    if let Some(token) = guard.token {
        let token = JoinToken::parse(&token);
        // Known on both sides, the notifications decide: another click write's than the
        // join ran for is a duplicate line the IdRegistry turned away, the same one is a
        // repeat. Else a delivery later than the join read is a duplicate (loaded after it).
        let duplicate = match token.same_write(notified_ts) {
            Some(same) => !same,
            None => token
                .start_ts
                .is_some_and(|ts| delivery_ts.unwrap_or(0) > ts),
        };
        if duplicate {
            bump(&stats.deduplicated);
        } else {
            bump(&stats.wasted);
        }
        return Ok(());
    }
    match query {
        Some(qbytes) => {
            let q = StoredEvent::read(qbytes, Kind::Query)
                .map_err(|e| bad_data("query", &query_cell(&click.query_id), e))?;
            if q.query_id != click.query_id {
                return Err(ObserverError::failed(format!(
                    "malformed query at {}: it is query {:?}",
                    query_cell(&click.query_id),
                    q.query_id
                )));
            }
            let joined_at = txn.wall_ms();
            let token = JoinToken::format(config, notified_ts, txn.start_ts().0);
            let arrived_at = stored.loaded_at.max(q.loaded_at);
            let click_id = click.click_id;
            crate::registry::write_entry(txn, day, &click_id, token.clone());
            if outcome == Some(Outcome::Waiting) {
                // Parked before: the join clears it, and so conflicts with a run that
                // expires the click from an older snapshot (both write the outcome).
                txn.delete(outcome_cell(&click_id));
            }
            let failed = |e: serde_json::Error| ObserverError::failed(e.to_string());
            // Without an adapter the events' texts go into the output as stored; an
            // adapter is given the events parsed.
            let out = match &config.adapter {
                None => Some(
                    Joined::text(stored.text(), q.text(), &token, joined_at, arrived_at)
                        .map_err(failed)?,
                ),
                Some(adapter) => {
                    let joined = Joined {
                        click: serde_json::from_slice(stored.text())
                            .map_err(|e| bad_data("click", &click_cell(&click_id), e))?,
                        query: serde_json::from_slice(q.text())
                            .map_err(|e| bad_data("query", &query_cell(&click.query_id), e))?,
                        token: token.clone(),
                        joined_at,
                        arrived_at,
                    };
                    adapter
                        .adapt(joined)
                        .map(|out| serde_json::to_vec(&out).map_err(failed))
                        .transpose()?
                }
            };
            match out {
                Some(value) => {
                    txn.set(joined_cell(&click_id, &token), value);
                    bump(&stats.joined);
                }
                None => {
                    txn.set(outcome_cell(&click_id), Outcome::Filtered.encode());
                    bump(&stats.filtered);
                }
            }
        }
        None => {
            let now = crate::expiry::now(txn, config.expiry).await?;
            let age = now.saturating_sub(click.event_time);
            if age > config.horizon.as_millis() as u64 {
                // The IdRegistry entry too: a run joining the click from a newer snapshot
                // (its query arrived meanwhile) writes it as well, so only one commits.
                crate::registry::write_entry(
                    txn,
                    day,
                    &click.click_id,
                    format!("expired/{}/{}", config.pipeline, txn.start_ts()),
                );
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
            park_click(txn, &click, stats).await?;
        }
    }
    Ok(())
}

/// Parks `click` on its query's pending list (the query has not arrived yet), to be woken
/// by the query's wake observer or the sweep.
async fn park_click(
    txn: &Transaction,
    click: &ClickIds,
    stats: &JoinStats,
) -> Result<(), ObserverError> {
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
    // The IdRegistry entry, which this run read absent, deleted (it stays absent): the cell
    // every join writes, so a join of the click from a snapshot with its query conflicts
    // with this park instead of both committing (a joined click left `waiting` on the
    // pending list; found by the deterministic simulation).
    txn.delete(idregistry_cell(&click.click_id));
    // The index the sweep reads instead of the whole pending table (crate::parked).
    crate::parked::file(txn, &click.query_id, &click.click_id);
    bump(&stats.parked);
    // A query committed while this transaction ran may have been loaded before we parked
    // (its batch's wake check then found no click waiting). Notifying the query's wake cell makes its
    // wake observer run after this park commits (durably: the notify key is written with
    // our prewrite); see `photon::design::join`.
    txn.notify(wake_cell(&click.query_id));
    Ok(())
}

/// Wakes the clicks waiting for the queries in `cells`' rows (a weak observer: waking twice
/// is harmless). It runs on the query's wake cell, notified after each park on the query
/// and by the wake check of the loader's batch that loaded the query ([`CheckWakes`]). A batch
/// reads every query, then the pending lists of those present, each in one `get_many`.
struct WakeClicks {
    stats: Arc<JoinStats>,
}

#[async_trait::async_trait]
impl Observer for WakeClicks {
    async fn observe(&self, txn: Transaction, cell: Cell) -> Result<(), ObserverError> {
        self.observe_batch(txn, std::slice::from_ref(&cell)).await
    }

    async fn observe_batch(&self, txn: Transaction, cells: &[Cell]) -> Result<(), ObserverError> {
        wake_clicks(&txn, cells, &self.stats).await
    }
}

/// The body of [`WakeClicks`]: `cells` are wake cells (or, from before wake cells, event
/// cells) of distinct queries.
async fn wake_clicks(
    txn: &Transaction,
    cells: &[Cell],
    stats: &JoinStats,
) -> Result<(), ObserverError> {
    // Notified by a park before the query arrived: nothing to wake yet (waking would only
    // park the clicks again, and each park notifies this cell again).
    let query_cells: Vec<Cell> = cells
        .iter()
        .map(|c| Cell::new(QUERIES, &c.row, EVENT))
        .collect();
    let queries = txn.get_many_recent(&query_cells).await?;
    let pending: Vec<Cell> = cells
        .iter()
        .zip(queries)
        .filter(|(_, (query, _))| query.is_some())
        .map(|(cell, _)| pending_cell(&String::from_utf8_lossy(&cell.row)))
        .collect();
    if pending.is_empty() {
        return Ok(());
    }
    let lists = txn.get_many(&pending).await?;
    for (pending, list) in pending.into_iter().zip(lists) {
        let Some(bytes) = list else {
            continue;
        };
        let waiting: Vec<String> =
            serde_json::from_slice(&bytes).map_err(|e| bad_data("pending list", &pending, e))?;
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
    // Guarded (`Registry::guarded`, no acknowledgment): see `Guard`.
    registry.guarded(
        CLICKS,
        EVENT,
        &format!("join@{}", config.pipeline),
        Arc::new(ClickJoin {
            config: Arc::new(config.clone()),
            stats: stats.clone(),
        }),
    )?;
    registry.weak(
        QUERIES,
        WAKE,
        &format!("wake@{}", config.pipeline),
        Arc::new(WakeClicks {
            stats: stats.clone(),
        }),
    )?;
    registry.weak(
        WAKE_CHECKS,
        QUERY_IDS,
        &format!("wakecheck@{}", config.pipeline),
        Arc::new(CheckWakes),
    )?;
    // Notifications of query events written before queries stopped notifying (a store not
    // drained before the upgrade, or an older loader): handled as wake-ups, so they do not
    // pin the notify floor or keep drains waiting.
    registry.weak(
        QUERIES,
        EVENT,
        &format!("wake-legacy@{}", config.pipeline),
        Arc::new(WakeClicks { stats }),
    )?;
    Ok(())
}

/// The wake check of a loader's batch that loaded queries: notifies the wake cell of each of
/// the batch's queries that clicks wait for, then deletes the check (a weak observer: a
/// second run notifies again, which is harmless).
///
/// Why no wake-up is lost (`photon::design::join`): a park on query `q` commits at `p`
/// and notifies `q`'s wake cell, whose run has a snapshot `w > p`. The batch loading `q`
/// commits at `c`, with its check cell and the check's notify key (written in its prewrite,
/// so the check runs even if the loader dies), and the check runs at a snapshot `r > c`. If
/// `c < w`, the park's wake run sees the query and wakes the click. Otherwise `r > c > w > p`:
/// the check sees the park and notifies the wake cell again.
struct CheckWakes;

#[async_trait::async_trait]
impl Observer for CheckWakes {
    async fn observe(&self, txn: Transaction, cell: Cell) -> Result<(), ObserverError> {
        self.observe_batch(txn, std::slice::from_ref(&cell)).await
    }

    async fn observe_batch(&self, txn: Transaction, cells: &[Cell]) -> Result<(), ObserverError> {
        check_wakes(&txn, cells).await
    }
}

/// The body of [`CheckWakes`]: `cells` are distinct wake checks.
async fn check_wakes(txn: &Transaction, cells: &[Cell]) -> Result<(), ObserverError> {
    let checks = txn.get_many(cells).await?;
    let mut queries: Vec<String> = Vec::new();
    for (cell, check) in cells.iter().zip(checks) {
        // Absent: an earlier run of this check did it.
        let Some(bytes) = check else {
            continue;
        };
        let ids: Vec<String> =
            serde_json::from_slice(&bytes).map_err(|e| bad_data("wake check", cell, e))?;
        queries.extend(ids);
        txn.delete(cell.clone());
    }
    queries.sort_unstable();
    queries.dedup();
    let pending: Vec<Cell> = queries.iter().map(|q| pending_cell(q)).collect();
    let lists = txn.get_many(&pending).await?;
    for (query, list) in queries.iter().zip(lists) {
        if list.is_some() {
            txn.notify(wake_cell(query));
        }
    }
    Ok(())
}

/// The durable fallback of the wake-up: notifies the parked clicks whose query has arrived
/// or whose horizon has passed (so they are joined or reported), reading only the index of
/// parked clicks that fell due since the last pass ([`crate::parked::sweep`]), not the
/// whole pending table. Returns clicks notified.
pub async fn sweep_pending(
    client: &Client,
    horizon: impl Into<crate::expiry::Horizon>,
) -> Result<u64, percolator::TxnError> {
    Ok(crate::parked::sweep(client, horizon).await?.notified)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Click, Query};
    use percolator::kv::MemoryKv;
    use percolator::ts::LocalClock;

    fn stored<T: serde::Serialize>(event: T) -> Vec<u8> {
        serde_json::to_vec(&Stored {
            event,
            loaded_at: now_ms(),
        })
        .unwrap_or_default()
    }

    /// Pipeline `A`, worker `w`, a 10-minute horizon.
    fn test_config() -> JoinConfig {
        JoinConfig {
            pipeline: "A".to_string(),
            worker: "w".to_string(),
            process: JoinConfig::this_process(),
            horizon: Duration::from_secs(600),
            expiry: Default::default(),
            adapter: None,
            legacy_entries: LegacyEntries::always_read(),
        }
    }

    fn query(id: &str, at: u64) -> Query {
        Query {
            query_id: id.to_string(),
            event_time: at,
            fields: Default::default(),
        }
    }

    fn click(id: &str, query: &str, at: u64) -> Click {
        Click {
            click_id: id.to_string(),
            query_id: query.to_string(),
            event_time: at,
            fields: Default::default(),
        }
    }

    /// The joined output reads back as the [`Joined`] of the click and its query, for events
    /// stored as the loader stores them (their text, `stored_text`) and as earlier versions
    /// did (a serialized `Stored`), without an adapter (the texts go into the output) and
    /// with one (it is given the events parsed, and its answer is written).
    #[tokio::test]
    async fn the_output_holds_the_joined_events_however_they_were_stored() {
        struct Mark;
        impl Adapter for Mark {
            fn adapt(&self, mut joined: Joined) -> Option<Joined> {
                joined.click.fields.insert("adapted".into(), true.into());
                Some(joined)
            }
        }
        let at = now_ms();
        let mut q = query("q\"1", at - 5_000);
        q.fields
            .insert("terms".into(), serde_json::json!(["a", {"b": 1.5}]));
        let mut c = click("c1", "q\"1", at - 1_000);
        c.fields.insert("ad".into(), serde_json::json!("x\u{e9}"));
        for (as_text, adapter) in [(true, false), (false, false), (true, true), (false, true)] {
            let client = Client::new(Arc::new(MemoryKv::new()), Arc::new(LocalClock::new()));
            crate::schema::declare_columns(&client);
            let store = |event: String| match as_text {
                true => stored_text(&event, at - 100),
                false => stored(serde_json::from_str::<serde_json::Value>(&event).unwrap()),
            };
            let setup = client.begin().await.unwrap();
            setup.set(
                query_cell(&q.query_id),
                store(serde_json::to_string(&q).unwrap()),
            );
            setup.set(click_cell("c1"), store(serde_json::to_string(&c).unwrap()));
            setup.commit().await.unwrap();
            let config = JoinConfig {
                adapter: adapter.then(|| Arc::new(Mark) as Arc<dyn Adapter>),
                ..test_config()
            };
            let stats = JoinStats::default();
            let txn = client.begin().await.unwrap();
            join_clicks(&txn, &[click_cell("c1")], &[None], &config, &stats)
                .await
                .unwrap();
            txn.commit().await.unwrap();
            assert_eq!(stats.joined.load(Ordering::Relaxed), 1);
            let read = client.begin().await.unwrap();
            let outputs = read
                .scan(JOINED.as_bytes(), b"c1", Some(b"c1\0"))
                .await
                .unwrap();
            assert_eq!(outputs.len(), 1);
            let joined: Joined = serde_json::from_slice(&outputs[0].1).unwrap();
            let mut expected = c.clone();
            if adapter {
                expected.fields.insert("adapted".into(), true.into());
            }
            assert_eq!(
                (&joined.click, &joined.query),
                (&expected, &q),
                "{as_text} {adapter}"
            );
            assert!(joined.token.starts_with("A/w/"), "{}", joined.token);
        }
    }

    /// A click logged twice, both deliveries loaded before its first run: that run (for the
    /// first delivery's notification) reads the second and joins; the run for the second
    /// delivery's notification is a duplicate turned away (`deduplicated`), and only a run
    /// for the same notification again repeats work (`wasted`).
    #[tokio::test]
    async fn a_duplicate_delivery_read_by_the_join_is_deduplicated_not_wasted() {
        let client = Client::new(Arc::new(MemoryKv::new()), Arc::new(LocalClock::new()));
        crate::schema::declare_columns(&client);
        let at = now_ms();
        let config = test_config();
        let stats = JoinStats::default();
        let mut deliveries = Vec::new();
        for n in 0..2 {
            let load = client.begin().await.unwrap();
            load.set(click_cell("c1"), stored(click("c1", "q", at)));
            // A common ordinary cell, as the loader's offset: the primary.
            load.set(Cell::new("loader", "f", "offset"), n.to_string());
            if n == 0 {
                load.set(query_cell("q"), stored(query("q", at)));
            }
            deliveries.push(Some(load.commit().await.unwrap().0));
        }
        let run = |notified: Option<u64>| {
            let (client, config, stats) = (&client, &config, &stats);
            async move {
                let txn = client.begin().await.unwrap();
                join_clicks(&txn, &[click_cell("c1")], &[notified], config, stats)
                    .await
                    .unwrap();
                txn.commit().await.unwrap();
            }
        };
        run(deliveries[0]).await;
        assert_eq!(stats.joined.load(Ordering::Relaxed), 1);
        run(deliveries[1]).await;
        assert_eq!(stats.deduplicated.load(Ordering::Relaxed), 1);
        assert_eq!(stats.wasted.load(Ordering::Relaxed), 0);
        run(deliveries[0]).await;
        assert_eq!(
            stats.wasted.load(Ordering::Relaxed),
            1,
            "the same change again"
        );
        // A wake-up's notification (committed after the delivery) names no click write:
        // the delivery rule decides (the join read this delivery: a repeat).
        let later = client.begin().await.unwrap().start_ts().0;
        run(Some(later)).await;
        assert_eq!(stats.wasted.load(Ordering::Relaxed), 2);
        assert_eq!(stats.deduplicated.load(Ordering::Relaxed), 1);
        assert_eq!(stats.joined.load(Ordering::Relaxed), 1);
        let read = client.begin().await.unwrap();
        let token = read.get(&idregistry_cell("c1")).await.unwrap().unwrap();
        let token = String::from_utf8(token).unwrap();
        let first = deliveries[0].unwrap() as u32;
        assert!(token.contains(&format!("/n{first:x}/")), "{token}");
    }

    /// A click delivered twice with event times on two UTC days (1 ms before and after
    /// midnight), the second delivery loaded after the first was joined: one join, the second
    /// run turned away by the IdRegistry (issue 39, item 1).
    #[tokio::test]
    async fn deliveries_of_one_click_on_two_days_are_joined_once() {
        let client = Client::new(Arc::new(MemoryKv::new()), Arc::new(LocalClock::new()));
        crate::schema::declare_columns(&client);
        let midnight = now_ms() / 86_400_000 * 86_400_000;
        let config = test_config();
        let stats = JoinStats::default();
        let setup = client.begin().await.unwrap();
        setup.set(query_cell("q"), stored(query("q", midnight - 5_000)));
        setup.commit().await.unwrap();
        for (n, at) in [midnight - 1, midnight + 1].into_iter().enumerate() {
            let load = client.begin().await.unwrap();
            load.set(click_cell("c1"), stored(click("c1", "q", at)));
            load.set(Cell::new("loader", "f", "offset"), n.to_string());
            let delivery = load.commit().await.unwrap().0;
            let txn = client.begin().await.unwrap();
            join_clicks(
                &txn,
                &[click_cell("c1")],
                &[Some(delivery)],
                &config,
                &stats,
            )
            .await
            .unwrap();
            txn.commit().await.unwrap();
        }
        assert_eq!(stats.joined.load(Ordering::Relaxed), 1);
        assert_eq!(stats.deduplicated.load(Ordering::Relaxed), 1);
        let read = client.begin().await.unwrap();
        let outputs = read
            .scan(JOINED.as_bytes(), b"c1", Some(b"c1\0"))
            .await
            .unwrap();
        assert_eq!(outputs.len(), 1, "one joined event");
    }

    /// A join that read the IdRegistry boundary before GC raised it past the click's day,
    /// and a run on the same click (another delivery, another pipeline) that read the raised
    /// boundary and so settles the click `too_old`, finding no joined output in its
    /// snapshot: only one of them may commit. Both did (the join wrote no cell the settling
    /// run writes), leaving a joined click `too_old`, which `photon verify` counts as a join
    /// of a click that is not joinable. Found by the deterministic simulation (issue 40,
    /// seed 68 of `run --seeds 100 --from 30`).
    #[tokio::test]
    async fn a_join_and_a_settling_run_from_a_raised_boundary_do_not_both_commit() {
        let at = now_ms();
        let day = day_of(at);
        // The boundary at the click's day, or unset (the first raise closes every day).
        for initial in [Some(day), None] {
            let client = Client::new(Arc::new(MemoryKv::new()), Arc::new(LocalClock::new()));
            crate::schema::declare_columns(&client);
            let setup = client.begin().await.unwrap();
            setup.set(click_cell("c1"), stored(click("c1", "q", at)));
            setup.set(query_cell("q"), stored(query("q", at)));
            if let Some(boundary) = initial {
                setup.set(boundary_cell(), boundary.to_string());
            }
            setup.commit().await.unwrap();
            let config = test_config();
            let stats = JoinStats::default();
            // The join, from a snapshot with the click's day open.
            let join = client.begin().await.unwrap();
            join_clicks(&join, &[click_cell("c1")], &[None], &config, &stats)
                .await
                .unwrap();
            assert_eq!(stats.joined.load(Ordering::Relaxed), 1);
            // GC closes the day meanwhile.
            let raise = client.begin().await.unwrap();
            raise.set(boundary_cell(), (day + 1).to_string());
            raise.commit().await.unwrap();
            // A run from the raised boundary settles the click: no output in its snapshot.
            let settle = client.begin().await.unwrap();
            join_clicks(&settle, &[click_cell("c1")], &[None], &config, &stats)
                .await
                .unwrap();
            assert_eq!(stats.too_old.load(Ordering::Relaxed), 1);
            let settled = settle.commit().await;
            let joined = join.commit().await;
            assert!(
                settled.is_err() || joined.is_err(),
                "boundary {initial:?}: both committed: settled {settled:?}, joined {joined:?}"
            );
            assert_not_joined_with_an_outcome(&client, &format!("boundary {initial:?}")).await;
        }
    }

    /// Click `c1` is not both joined (an output) and given an outcome.
    async fn assert_not_joined_with_an_outcome(client: &Client, case: &str) {
        let read = client.begin().await.unwrap();
        let outputs = read
            .scan(JOINED.as_bytes(), b"c1", Some(b"c1\0"))
            .await
            .unwrap();
        let outcome = read.get(&outcome_cell("c1")).await.unwrap();
        assert!(
            outputs.is_empty() || outcome.is_none(),
            "{case}: joined ({} outputs) with outcome {outcome:?}",
            outputs.len()
        );
    }

    /// A park from a snapshot without the click's query and a join of the same click from
    /// a snapshot with it (another delivery, the other pipeline): only one of them may
    /// commit. Both did (they wrote no common cell), leaving a joined click with the outcome
    /// `waiting` and on its query's pending list. Found by the deterministic simulation
    /// (issue 40, seed 200 of `run --seeds 100 --from 130`).
    #[tokio::test]
    async fn a_park_and_a_join_of_one_click_do_not_both_commit() {
        let client = Client::new(Arc::new(MemoryKv::new()), Arc::new(LocalClock::new()));
        crate::schema::declare_columns(&client);
        let at = now_ms();
        let setup = client.begin().await.unwrap();
        setup.set(click_cell("c1"), stored(click("c1", "q", at)));
        setup.commit().await.unwrap();
        let config = test_config();
        let stats = JoinStats::default();
        let park = client.begin().await.unwrap();
        join_clicks(&park, &[click_cell("c1")], &[None], &config, &stats)
            .await
            .unwrap();
        assert_eq!(stats.parked.load(Ordering::Relaxed), 1);
        let load = client.begin().await.unwrap();
        load.set(query_cell("q"), stored(query("q", at)));
        load.commit().await.unwrap();
        let join = client.begin().await.unwrap();
        join_clicks(&join, &[click_cell("c1")], &[None], &config, &stats)
            .await
            .unwrap();
        assert_eq!(stats.joined.load(Ordering::Relaxed), 1);
        let joined = join.commit().await;
        let parked = park.commit().await;
        assert!(
            joined.is_err() || parked.is_err(),
            "both committed: joined {joined:?}, parked {parked:?}"
        );
        assert_not_joined_with_an_outcome(&client, "park and join").await;
    }

    /// A wall clock stopped at a fixed time.
    #[derive(Debug)]
    struct Stopped(u64);

    impl percolator::clock::WallClock for Stopped {
        fn now_ms(&self) -> u64 {
            self.0
        }
    }

    /// The join reads "now" on its client's wall clock (`ClientConfig::wall_clock`), not the
    /// host's: on a client whose clock stands at `T`, a click logged 1 s before `T` whose
    /// query is missing parks (on the host's clock, years later, it expired), and a joined
    /// click carries `joined_at` `T`, in event time (no watermark published: the wall
    /// clock) as in wall-clock expiry. (It read the host's clock before the deterministic
    /// simulation, whose clocks are simulated, ran the join: issue 40.)
    #[tokio::test]
    async fn the_join_reads_now_on_the_clients_wall_clock() {
        const T: u64 = 1_000_000_000_000;
        for expiry in [
            crate::expiry::Expiry::EventTime,
            crate::expiry::Expiry::WallClock,
        ] {
            let client = Client::with_config(
                Arc::new(MemoryKv::new()),
                Arc::new(LocalClock::new()),
                percolator::ClientConfig {
                    wall_clock: Arc::new(Stopped(T)),
                    ..percolator::ClientConfig::default()
                },
            );
            crate::schema::declare_columns(&client);
            let setup = client.begin().await.unwrap();
            setup.set(click_cell("c1"), stored(click("c1", "missing", T - 1_000)));
            setup.set(click_cell("c2"), stored(click("c2", "q", T - 1_000)));
            setup.set(query_cell("q"), stored(query("q", T - 2_000)));
            setup.commit().await.unwrap();
            let config = JoinConfig {
                expiry,
                ..test_config()
            };
            let stats = JoinStats::default();
            let txn = client.begin().await.unwrap();
            join_clicks(
                &txn,
                &[click_cell("c1"), click_cell("c2")],
                &[None; 2],
                &config,
                &stats,
            )
            .await
            .unwrap();
            txn.commit().await.unwrap();
            assert_eq!(stats.expired.load(Ordering::Relaxed), 0, "{expiry:?}");
            assert_eq!(stats.parked.load(Ordering::Relaxed), 1, "{expiry:?}");
            assert_eq!(stats.joined.load(Ordering::Relaxed), 1, "{expiry:?}");
            let read = client.begin().await.unwrap();
            let outputs = read
                .scan(JOINED.as_bytes(), b"c2", Some(b"c2\0"))
                .await
                .unwrap();
            assert_eq!(outputs.len(), 1);
            let joined: Joined = serde_json::from_slice(&outputs[0].1).unwrap();
            assert_eq!(joined.joined_at, T, "{expiry:?}");
        }
    }

    /// One batch of four clicks: two park on the same missing query (both stay on its
    /// pending list: the second park reads the first one's write), two join their query.
    #[tokio::test]
    async fn a_batch_parks_clicks_of_one_query_together_and_joins_the_rest() {
        let client = Client::new(Arc::new(MemoryKv::new()), Arc::new(LocalClock::new()));
        crate::schema::declare_columns(&client);
        let at = now_ms();
        let setup = client.begin().await.unwrap();
        for (id, query) in [
            ("c1", "missing"),
            ("c2", "q"),
            ("c3", "missing"),
            ("c4", "q"),
        ] {
            setup.set(click_cell(id), stored(click(id, query, at)));
        }
        setup.set(query_cell("q"), stored(query("q", now_ms())));
        setup.commit().await.unwrap();
        let config = test_config();
        let stats = JoinStats::default();
        let cells: Vec<Cell> = ["c1", "c2", "c3", "c4"].map(click_cell).to_vec();
        let txn = client.begin().await.unwrap();
        join_clicks(&txn, &cells, &[None; 4], &config, &stats)
            .await
            .unwrap();
        txn.commit().await.unwrap();
        assert_eq!(stats.parked.load(Ordering::Relaxed), 2);
        assert_eq!(stats.joined.load(Ordering::Relaxed), 2);
        let r = client.begin().await.unwrap();
        let pending: Vec<String> =
            serde_json::from_slice(&r.get(&pending_cell("missing")).await.unwrap().unwrap())
                .unwrap();
        assert_eq!(pending, vec!["c1".to_string(), "c3".to_string()]);
        for id in ["c2", "c4"] {
            assert!(
                r.get(&idregistry_cell(id)).await.unwrap().is_some(),
                "{id} registered"
            );
        }
    }
}
