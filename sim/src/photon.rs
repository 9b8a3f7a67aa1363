//! Photon's join in the simulation (`photon::design::join`): its observers on every
//! process's worker (two redundant pipelines, `A` on processes 0 and 2, `B` on process 1,
//! splitting the clicks between their workers), loaders writing query and click logs through
//! photon's own batch transactions (`app::load::load_source` with `photon::load::PhotonLogs`),
//! the periodic sweep of parked clicks (in half the seeds; in the others only wake-ups wake
//! parked clicks, and the drain checks that none was lost), the purge of the handled parked
//! index (with every GC pass) and the IdRegistry GC; at the end, photon's join verified
//! ([`check_join`]).
//!
//! The logs: queries logged at random times, some never (their clicks park, then expire),
//! some late (clicks park, then are woken, or expire if the query is past the horizon);
//! clicks logged around their query's time (often before it: out of order), each in one of
//! two click logs, some delivered again in the other log (a redundant logger) or twice in
//! the same one (a duplicate line). The query log is loaded by two processes at once (a
//! duplicated loader: their batches conflict on the log's offset).
//!
//! Runs start 30 s before a UTC midnight ([`crate::clock::SIM_EPOCH_MS`]): the clicks of
//! the first 30 s are of one day, the rest of the next, and a click delivered again by the
//! other logger, whose clock is up to 0.3 s off, may be of the other day (the IdRegistry's
//! one entry per click id, whatever the days). The IdRegistry GC runs with a retention of 0
//! days: it sets the boundary to the first day, then after midnight raises it to the second,
//! while clicks of the first are still being joined (those not joined by then are settled
//! `too_old`). A backfill of a few queries and clicks three days back, logged in the first
//! seconds, is mostly joined before the first raise (from unset: days at once), which then
//! purges those entries while the joins' outputs may still be pending records; the run's
//! own entries would go only once the boundary is two days past their day (out of reach).
//! A reader records every joined output it sees along the way ([`output_watcher`]); each
//! must still be there at the end.

use crate::model::Shared;
use crate::rng::SimRng;
use crate::workload::Ctx;
use app::load::lines::MappingSink;
use app::load::{Batch, Context, LoadError, LoadOptions, LoadStats, Rejects, Source};
use observers::Registry;
use percolator::{Cell, Client, Transaction, TxnError};
use photon::event::{Click, Query};
use photon::expiry::{Expiry, Horizon};
use photon::join::{JoinConfig, JoinStats};
use photon::load::{Parsed, PhotonLogs};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How long a click waits for its query (in event time; no watermark is published, so on
/// the deciding client's wall clock).
pub const HORIZON: Duration = Duration::from_secs(8);

/// How much earlier than a click's horizon its query's load must have been acknowledged for
/// the click to be joined for sure: a run that expires a click reads "now" (its host's
/// clock, up to 0.4 s off) at most `max_lifetime` (5 s) after its snapshot, so a query
/// acknowledged this long before the horizon is in that snapshot.
pub const MUST_JOIN_MARGIN: Duration = Duration::from_secs(6);

/// Queries in a run's logs.
const QUERIES: u64 = 40;
/// Queries are logged within this many ms of the run's start (so every click's horizon
/// passes before the chaos ends).
const LOGGED_WITHIN_MS: u64 = 44_000;

/// Backfill queries in a run's logs (of three days before the run, each with one click).
const BACKFILL_QUERIES: u64 = 4;
/// Backfill queries are logged within this many ms of the run's start.
const BACKFILL_WITHIN_MS: u64 = 3_000;

/// The query log's name (two processes load it).
pub const QUERY_LOG: &str = "queries";
/// The click logs' names.
pub const CLICK_LOGS: [&str; 2] = ["clicks-a", "clicks-b"];

/// A line of a log: when it is appended (since the run began) and its event.
#[derive(Clone, Debug)]
pub struct Line {
    /// When the line is appended to its log, since the run began.
    pub at: Duration,
    /// The event.
    pub event: Event,
}

/// A logged event.
#[derive(Clone, Debug)]
pub enum Event {
    /// A query.
    Query(Query),
    /// A click.
    Click(Click),
}

impl Event {
    fn parsed(&self) -> Parsed {
        match self {
            Event::Query(q) => Parsed::query(q),
            Event::Click(c) => Parsed::click(c),
        }
    }

    fn event_time(&self) -> u64 {
        match self {
            Event::Query(q) => q.event_time,
            Event::Click(c) => c.event_time,
        }
    }
}

/// What the harness knows of photon's side of a run.
#[derive(Debug, Default)]
pub struct PhotonModel {
    /// Every log by name, its lines in the order they are appended.
    pub logs: BTreeMap<String, Arc<Vec<Line>>>,
    /// When the first acknowledged load of each query id was acknowledged.
    pub queries_acked: BTreeMap<String, Instant>,
    /// When the first acknowledged load of each click id was acknowledged.
    pub clicks_acked: BTreeMap<String, Instant>,
    /// When the run began (line times and event times count from it).
    pub began: Option<Instant>,
    /// Whether the processes sweep parked clicks periodically (drawn per seed). Without,
    /// only wake-ups wake a parked click whose query arrives, and the drain checks that none
    /// was lost ([`lost_wakeups`]).
    pub sweeps: bool,
    /// Joined outputs (click id, token) a reader saw committed during the run, with when it
    /// first saw each: a committed output is never lost, whatever GC and the IdRegistry
    /// purge do ([`output_watcher`]).
    pub outputs_seen: BTreeMap<(String, String), Duration>,
}

/// The pipeline of process `p`: redundant pipelines `A` and `B` share the clicks.
pub fn pipeline_of(p: usize) -> &'static str {
    if p.is_multiple_of(2) {
        "A"
    } else {
        "B"
    }
}

/// The horizon as the join and the sweep measure it.
pub fn horizon() -> Horizon {
    Horizon {
        length: HORIZON,
        expiry: Expiry::EventTime,
    }
}

/// Registers process `p`'s pipeline (its worker named `worker`) in `registry`.
pub fn register(
    registry: &mut Registry,
    p: usize,
    worker: &str,
    client: &percolator::Client,
) -> Arc<JoinStats> {
    // As a pipeline does: the process's loads are read back from memory by its join.
    photon::schema::remember_loaded_events(client);
    let stats = Arc::new(JoinStats::default());
    let config = JoinConfig {
        pipeline: pipeline_of(p).to_string(),
        worker: worker.to_string(),
        // The simulated process (an OS process id would change the trace between runs).
        process: format!("p{p}"),
        horizon: HORIZON,
        expiry: Expiry::EventTime,
        adapter: None,
        legacy_entries: photon::legacy::LegacyEntries::checked(client),
    };
    photon::join::register(registry, config, stats.clone()).expect("photon's columns are free");
    stats
}

/// The logs of a run, drawn from the seed: event times are the simulated wall clock
/// ([`crate::clock::SIM_EPOCH_MS`] plus the time since the run began) when the line is
/// logged, late query lines keeping their event time.
pub fn logs(rng: &SimRng) -> BTreeMap<String, Arc<Vec<Line>>> {
    let epoch = crate::clock::SIM_EPOCH_MS;
    let mut queries = Vec::new();
    let mut clicks: [Vec<Line>; 2] = [Vec::new(), Vec::new()];
    for q in 0..QUERIES {
        let t = rng.range(0, LOGGED_WITHIN_MS);
        let query_id = format!("q{q:03}");
        // One in eight never logged (its clicks expire), one in eight logged late (past
        // the horizon at times).
        let logged = if rng.chance(0.125) {
            None
        } else if rng.chance(0.14) {
            Some(t + rng.range(3_000, 14_000))
        } else {
            Some(t)
        };
        if let Some(at) = logged {
            queries.push(Line {
                at: Duration::from_millis(at),
                event: Event::Query(Query {
                    query_id: query_id.clone(),
                    event_time: epoch + t,
                    fields: Default::default(),
                }),
            });
        }
        for k in 0..rng.range(0, 4) {
            // Up to 1.5 s before its query (out of order) or 3 s after it.
            let at = (t + rng.range(0, 4_500)).saturating_sub(1_500);
            let click = Click {
                click_id: format!("c{q:03}-{k}"),
                query_id: query_id.clone(),
                event_time: epoch + at,
                fields: Default::default(),
            };
            let log = rng.index(2);
            let line = |at: u64| Line {
                at: Duration::from_millis(at),
                event: Event::Click(click.clone()),
            };
            clicks[log].push(line(at));
            if rng.chance(0.1) {
                // A duplicate line in the same log.
                clicks[log].push(line(at + rng.range(0, 5_000)));
            }
            if rng.chance(0.15) {
                // Delivered again by the other logger, whose clock is up to 0.3 s off (the
                // click's event time re-stamped: around midnight, on another day).
                let skewed = Click {
                    event_time: (click.event_time + rng.range(0, 601)).saturating_sub(300),
                    ..click.clone()
                };
                clicks[1 - log].push(Line {
                    at: Duration::from_millis(at + rng.range(0, 4_000)),
                    event: Event::Click(skewed),
                });
            }
        }
    }
    // A backfill: queries of three days ago, each with a click logged just after it, in the
    // first seconds, so most are joined before the IdRegistry GC first sets the boundary
    // (from unset: a jump of days). Their entries are then purged while the joins' outputs
    // may still be pending records (drawn last, so the lines above do not depend on them).
    for q in 0..BACKFILL_QUERIES {
        let t = rng.range(0, BACKFILL_WITHIN_MS);
        let event_time = epoch - 3 * 86_400_000 + t;
        let query_id = format!("bq{q}");
        queries.push(Line {
            at: Duration::from_millis(t),
            event: Event::Query(Query {
                query_id: query_id.clone(),
                event_time,
                fields: Default::default(),
            }),
        });
        let click = Click {
            click_id: format!("b{q}"),
            query_id,
            event_time,
            fields: Default::default(),
        };
        clicks[rng.index(2)].push(Line {
            at: Duration::from_millis(t + rng.range(300, 1_500)),
            event: Event::Click(click),
        });
    }
    let mut out = BTreeMap::new();
    let mut sorted = |name: &str, mut lines: Vec<Line>| {
        lines.sort_by_key(|l| l.at);
        out.insert(name.to_string(), Arc::new(lines));
    };
    sorted(QUERY_LOG, queries);
    let [a, b] = clicks;
    sorted(CLICK_LOGS[0], a);
    sorted(CLICK_LOGS[1], b);
    out
}

/// A log as the loader's [`Source`]: the lines appended so far, its offset a line number
/// in a cell of photon's loader table.
struct SimLog {
    name: String,
    lines: Arc<Vec<Line>>,
    /// Lines appended so far.
    available: usize,
}

fn offset_cell(log: &str) -> Cell {
    photon::schema::offset_cell(&format!("sim/{log}"))
}

#[async_trait::async_trait]
impl Source for SimLog {
    type Record = Parsed;
    type Offset = u64;

    fn name(&self) -> String {
        self.name.clone()
    }

    async fn committed(&self, txn: &Transaction) -> Result<u64, LoadError> {
        Ok(crate::schema::number(txn.get(&offset_cell(&self.name)).await?).unwrap_or(0))
    }

    async fn next_batch(
        &mut self,
        from: &u64,
        max: usize,
    ) -> Result<Option<Batch<Parsed, u64>>, LoadError> {
        let from = *from as usize;
        if from >= self.available {
            return Ok(None);
        }
        let end = (from + max).min(self.available);
        let lines = &self.lines[from..end];
        let times = lines.iter().map(|l| l.event.event_time());
        let event_times = times.clone().min().zip(times.max());
        Ok(Some(Batch {
            records: lines.iter().map(|l| l.event.parsed()).collect(),
            rejects: Vec::new(),
            offset: end as u64,
            id: format!("{}@{from}", self.name),
            units: (end - from) as u64,
            event_times,
            long_lines: 0,
            nul_bytes: 0,
        }))
    }

    fn write_offset(&self, txn: &Transaction, _from: &u64, to: &u64) -> Result<(), LoadError> {
        txn.set(offset_cell(&self.name), to.to_string());
        Ok(())
    }
}

/// A loader of log `log`: every 100-500 ms it loads the lines appended so far through
/// photon's loader (`app::load::load_source` with [`PhotonLogs`], batches of 1-6 lines each
/// committed with the log's offset); once it has, every one of them is acknowledged.
pub async fn loader(ctx: Ctx, log: String) {
    let (lines, began) = ctx
        .model
        .with(|m| (m.photon.logs[&log].clone(), m.photon.began));
    let Some(began) = began else { return };
    // Never written: the logs hold no malformed line.
    let rejects = Rejects::new(std::env::temp_dir().join("percolator-sim-rejects.txt"));
    loop {
        tokio::time::sleep(ctx.rng.millis(100, 500)).await;
        let elapsed = began.elapsed();
        let available = lines.partition_point(|l| l.at <= elapsed);
        let mut source = SimLog {
            name: log.clone(),
            lines: lines.clone(),
            available,
        };
        let options = LoadOptions {
            batch: ctx.rng.range(1, 7) as usize,
            max_backlog: 0,
            ..LoadOptions::default()
        };
        let stats = LoadStats::default();
        let load = Context {
            options: &options,
            stats: &stats,
            rejects: &rejects,
            backlog: None,
            align: None,
            pace: None,
            watermarks: None,
        };
        match app::load::load_source(&ctx.client, &mut source, &MappingSink(&PhotonLogs), &load)
            .await
        {
            Ok(_) => {
                // Every line appended so far is committed (by this loader or another).
                let now = Instant::now();
                ctx.model.with(|m| {
                    for line in &lines[..available] {
                        match &line.event {
                            Event::Query(q) => {
                                m.photon
                                    .queries_acked
                                    .entry(q.query_id.clone())
                                    .or_insert(now);
                            }
                            Event::Click(c) => {
                                m.photon
                                    .clicks_acked
                                    .entry(c.click_id.clone())
                                    .or_insert(now);
                            }
                        }
                    }
                });
            }
            Err(e) => {
                ctx.model
                    .violation(format!("p{} photon loader of {log}: {e}", ctx.process));
                return;
            }
        }
    }
}

/// The periodic sweep of parked clicks (`photon::join::sweep_pending`, as `photon work`
/// runs it), every 1-3 s.
pub async fn sweeper(ctx: Ctx) {
    loop {
        tokio::time::sleep(ctx.rng.millis(1_000, 3_000)).await;
        if let Err(e) = photon::join::sweep_pending(&ctx.client, horizon()).await {
            if !e.is_transient() {
                ctx.model
                    .violation(format!("p{} sweep of parked clicks: {e}", ctx.process));
            }
        }
    }
}

/// The IdRegistry GC (`photon::registry::gc_registry`) every 5-15 s, with a retention of
/// 0 days (see the module doc).
pub async fn registry_gc(ctx: Ctx) {
    loop {
        tokio::time::sleep(ctx.rng.millis(5_000, 15_000)).await;
        let today = match photon::registry::today(&ctx.client).await {
            Ok(today) => today,
            Err(_) => continue,
        };
        match photon::registry::gc_registry(&ctx.client, today, false).await {
            Ok(_) => {}
            Err(photon::registry::RegistryError::Txn(e)) if e.is_transient() => {}
            Err(e) => ctx
                .model
                .violation(format!("p{} IdRegistry GC: {e}", ctx.process)),
        }
    }
}

/// Reads every joined output every 2-4 s, in a snapshot of a reader's client, and records
/// those it sees in the model; the final check finds each of them still there. (A lost
/// committed output that a later run on the click masks, settling it `too_old` once its
/// IdRegistry entry is gone, leaves the final state looking legal: only a reader along the
/// way sees that the output was committed.) A failed read (faults, a snapshot too old) is
/// skipped.
pub async fn output_watcher(ctx: Ctx) {
    loop {
        tokio::time::sleep(ctx.rng.millis(2_000, 4_000)).await;
        let Ok(txn) = ctx.client.begin().await else {
            continue;
        };
        let Ok(rows) = txn.scan(photon::schema::JOINED.as_bytes(), b"", None).await else {
            continue;
        };
        txn.rollback();
        ctx.model.with(|m| {
            let at = m.photon.began.map(|b| b.elapsed()).unwrap_or_default();
            for (cell, _) in rows {
                let key = (
                    String::from_utf8_lossy(&cell.row).into_owned(),
                    String::from_utf8_lossy(&cell.column).into_owned(),
                );
                m.photon.outputs_seen.entry(key).or_insert(at);
            }
        });
    }
}

/// The handled part of the parked-click index purged below the sweep's cursor and GC's
/// safe point, as photon's GC pass does after version GC (`photon::maintenance`). A
/// failure is left to the next pass (as there).
pub async fn purge_parked(client: &Client, safe_ms: u64) -> Result<(), TxnError> {
    photon::parked::purge_handled(client, safe_ms, 0)
        .await
        .map(|_| ())
}

/// Why photon's drain ([`drain`]) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DrainError {
    /// Waiting for the workers failed.
    #[error(transparent)]
    Worker(#[from] observers::WorkerError),
    /// A transaction (a sweep, the lost wake-ups' read) failed otherwise than transiently.
    #[error(transparent)]
    Txn(#[from] TxnError),
    /// Sweeps still woke clicks after `rounds` rounds.
    #[error("a sweep still woke clicks after {rounds} rounds")]
    NotDrained {
        /// Rounds run.
        rounds: usize,
    },
}

/// Photon's drain in the liveness phase: waits until the horizon of every click the
/// loaders could load (appended before `loaders_stopped`) has passed, then until the
/// workers are quiescent and a sweep of parked clicks wakes none (as
/// `photon::pipeline::drain` does) with no cell of the parked index left ahead of its
/// cursor (not due yet), at most `rounds` times.
pub async fn drain(
    client: &Client,
    worker: &observers::Worker,
    model: &Shared,
    loaders_stopped: Instant,
    rounds: usize,
) -> Result<(), DrainError> {
    let due = model.with(|m| {
        let began = m.photon.began?;
        let last = m
            .photon
            .logs
            .values()
            .flat_map(|lines| lines.iter())
            .filter(|l| matches!(l.event, Event::Click(_)) && began + l.at <= loaders_stopped)
            .map(|l| l.at)
            .max()?;
        // A click still waiting when a sweep looks at it is filed again at the later of its
        // horizon and the sweeping transaction's commit deadline (`photon::parked`: a cell is
        // committed before its bucket), so one whose horizon passes just after such a look
        // is due up to a transaction's lifetime after its horizon, and a pass handles a
        // bucket once the next second has begun.
        let lifetime = client.config().max_lifetime;
        Some(began + last + HORIZON + lifetime + Duration::from_secs(2))
    });
    if let Some(due) = due {
        tokio::time::sleep_until(due).await;
    }
    if !model.with(|m| m.photon.sweeps) {
        // No sweep has run: every parked click whose query is in the store was woken by
        // the park's own wake run or by its query's batch's wake check, or a wake-up was
        // lost. A wake run in flight on another worker once the notify keys are gone
        // finishes within a transaction's lifetime: a click still parked then is reported.
        worker.wait_until_quiescent().await?;
        let mut lost = lost_wakeups_retrying(client).await?;
        if !lost.is_empty() {
            tokio::time::sleep(Duration::from_secs(6)).await;
            worker.wait_until_quiescent().await?;
            let again = lost_wakeups_retrying(client).await?;
            lost.retain(|c| again.contains(c));
        }
        for (click, query) in lost {
            model.violation(format!(
                "photon click {click} still parked on query {query}, which is in the store, \
                 with the workers quiescent and no sweep run: a wake-up was lost"
            ));
        }
    }
    // A cell of the index is filed at most a transaction's lifetime after the horizon it
    // waits for (and past `due` by the oracle clock's lead at most): waits beyond that are
    // not spent, so a cell filed for an absurd second leaves its click to the final checks.
    let mut waits_left = (HORIZON + client.config().max_lifetime).as_secs() + 10;
    for _ in 0..rounds {
        worker.wait_until_quiescent().await?;
        loop {
            match photon::join::sweep_pending(client, horizon()).await {
                // A sweep that woke nothing may only have found no bucket due yet: a click
                // filed again falls due at the later of its horizon and the filing
                // transaction's commit deadline, on the oracle's clock, which may run
                // seconds ahead of the hosts' (`due` above counts on the hosts'). Its
                // horizon has passed, so a later sweep wakes it: wait for that one.
                Ok(0) => match parked_ahead(client).await {
                    Ok(true) if waits_left > 0 => {
                        waits_left -= 1;
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    Ok(_) => return Ok(()),
                    Err(e) if e.is_transient() => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(e) => return Err(e.into()),
                },
                Ok(_) => break,
                Err(e) if e.is_transient() => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    Err(DrainError::NotDrained { rounds })
}

/// Whether photon's index of parked clicks holds a cell no sweep has handled yet
/// (`photon::parked::filed_ahead`).
async fn parked_ahead(client: &Client) -> Result<bool, TxnError> {
    photon::parked::filed_ahead(&client.snapshot().await?).await
}

/// [`lost_wakeups`], read again after a transient failure: a read may meet a write-once
/// record whose writer rolled back, left pending below a GC safe point until the GC pass
/// that published it deletes it (`CommitUnknown` until then: `percolator::design::once`).
/// The drain's own bound ends a read that never passes. (The harness failed on the first
/// such error: seed 19532.)
async fn lost_wakeups_retrying(client: &Client) -> Result<Vec<(String, String)>, TxnError> {
    loop {
        match lost_wakeups(client).await {
            Err(e) if e.is_transient() => tokio::time::sleep(Duration::from_millis(100)).await,
            answer => return answer,
        }
    }
}

/// The clicks parked (outcome `waiting`) whose query is in the store, with the query.
pub async fn lost_wakeups(client: &Client) -> Result<Vec<(String, String)>, TxnError> {
    use photon::schema::{click_cell, query_cell, Stored, OUTCOMES};
    let txn = client.begin().await?;
    let mut lost = Vec::new();
    for (cell, outcome) in txn.scan(OUTCOMES.as_bytes(), b"", None).await? {
        if outcome != b"waiting" {
            continue;
        }
        let click = String::from_utf8_lossy(&cell.row).into_owned();
        let Some(stored) = txn.get(&click_cell(&click)).await? else {
            continue;
        };
        let Ok(stored) = serde_json::from_slice::<Stored<Click>>(&stored) else {
            continue;
        };
        let query = stored.event.query_id;
        if txn.get(&query_cell(&query)).await?.is_some() {
            lost.push((click, query));
        }
    }
    txn.rollback();
    Ok(lost)
}

fn harness(step: &'static str) -> impl FnOnce(TxnError) -> crate::SimError {
    move |source| crate::SimError::Harness { step, source }
}

/// Photon's join verified, on a quiet system after the drain: every click loaded is in
/// the store; no click has two joined outputs (across both pipelines); a joined click has
/// its query, one IdRegistry entry naming the join's token and no outcome left; a click not
/// joined expired (outcome `expired`, entry `expired/...`) or, with a delivery of a day
/// below the final IdRegistry boundary, was settled `too_old`; a click with no such
/// delivery is not joined only if its query's load was not acknowledged
/// [`MUST_JOIN_MARGIN`] before its (earliest) horizon; a click never loaded left nothing.
/// Returns the clicks joined, expired and settled `too_old`.
pub async fn check_join(
    client: &Client,
    model: &Shared,
) -> Result<(u64, u64, u64), crate::SimError> {
    use photon::outcome::Outcome;
    use photon::schema::{click_cell, idregistry_cell, outcome_cell, query_cell, JOINED};
    let (logs, queries_acked, clicks_acked, began, outputs_seen) = model.with(|m| {
        (
            m.photon.logs.clone(),
            m.photon.queries_acked.clone(),
            m.photon.clicks_acked.clone(),
            m.photon.began,
            m.photon.outputs_seen.clone(),
        )
    });
    let Some(began) = began else {
        return Ok((0, 0, 0));
    };
    let (mut joined_clicks, mut expired_clicks, mut too_old_clicks) = (0, 0, 0);
    let mut clicks: BTreeMap<String, Click> = BTreeMap::new();
    for line in logs.values().flat_map(|l| l.iter()) {
        if let Event::Click(c) = &line.event {
            // The earliest event time of its deliveries (the earliest horizon, the earliest
            // day).
            let first = clicks
                .entry(c.click_id.clone())
                .or_insert_with(|| c.clone());
            first.event_time = first.event_time.min(c.event_time);
        }
    }
    let txn = client.begin().await.map_err(harness("photon begin"))?;
    // Clicks of a delivery below the IdRegistry boundary may be settled `too_old`.
    let boundary = photon::registry::boundary(&txn)
        .await
        .map_err(harness("photon boundary"))?;
    let mut present_queries: BTreeSet<String> = BTreeSet::new();
    let wanted: BTreeSet<&String> = clicks.values().map(|c| &c.query_id).collect();
    for q in wanted {
        if txn
            .get(&query_cell(q))
            .await
            .map_err(harness("photon query"))?
            .is_some()
        {
            present_queries.insert(q.clone());
        }
    }
    for (id, click) in &clicks {
        let bad = |what: String| model.violation(format!("photon click {id}: {what}"));
        let present = txn
            .get(&click_cell(id))
            .await
            .map_err(harness("photon click"))?
            .is_some();
        let mut row_end = id.as_bytes().to_vec();
        row_end.push(0);
        let joined: Vec<String> = txn
            .scan(JOINED.as_bytes(), id.as_bytes(), Some(&row_end))
            .await
            .map_err(harness("photon joined"))?
            .into_iter()
            .map(|(cell, _)| String::from_utf8_lossy(&cell.column).into_owned())
            .collect();
        let entry = txn
            .get(&idregistry_cell(id))
            .await
            .map_err(harness("photon entry"))?
            .map(|b| String::from_utf8_lossy(&b).into_owned());
        let outcome = txn
            .get(&outcome_cell(id))
            .await
            .map_err(harness("photon outcome"))?
            .map(|b| String::from_utf8_lossy(&b).into_owned());
        if !present {
            if clicks_acked.contains_key(id) {
                bad("its load was acknowledged but it is not in the store".into());
            }
            if !joined.is_empty() || entry.is_some() || outcome.is_some() {
                bad(format!(
                    "never loaded, yet joined {joined:?}, entry {entry:?}, outcome {outcome:?}"
                ));
            }
            continue;
        }
        let seen_of_click = outputs_seen
            .range((id.clone(), String::new())..)
            .take_while(|((click, _), _)| click == id);
        for ((_, token), seen) in seen_of_click {
            if !joined.contains(token) {
                bad(format!(
                    "its joined output {token}, read committed {seen:?} into the run, is gone \
                     (joined now: {joined:?}, outcome {outcome:?}, entry {entry:?})"
                ));
            }
        }
        let query_loaded = present_queries.contains(&click.query_id);
        let below = photon::event::day_of(click.event_time) < boundary;
        // The IdRegistry GC deleted the entry (filed under the delivery's day).
        let purged = entry.is_none()
            && photon::event::day_of(click.event_time) + photon::registry::MAX_SKEW_DAYS < boundary;
        let decoded = outcome.as_deref().and_then(Outcome::decode);
        match joined.as_slice() {
            [] if below && decoded == Some(Outcome::TooOld) => {
                too_old_clicks += 1;
                if !entry.as_deref().is_some_and(|e| e.starts_with("too_old/")) {
                    bad(format!(
                        "settled too_old, but its IdRegistry entry is {entry:?}"
                    ));
                }
            }
            [] => {
                let expired = matches!(decoded, Some(Outcome::Expired { .. }));
                expired_clicks += u64::from(expired);
                let entry_ok =
                    purged || entry.as_deref().is_some_and(|e| e.starts_with("expired/"));
                if !expired || !entry_ok {
                    bad(format!(
                        "neither joined nor expired after the drain: outcome {outcome:?}, \
                         entry {entry:?} (query loaded: {query_loaded}, IdRegistry boundary \
                         {boundary})"
                    ));
                }
                if below {
                    // Its first day was closed: it may have been settled `too_old` first.
                    continue;
                }
                // A click may be timed before the run's first instant (a redelivery of the
                // day before, re-stamped back): its horizon is that much earlier.
                let offset = click.event_time as i64 - crate::clock::SIM_EPOCH_MS as i64;
                let horizon_at = if offset >= 0 {
                    Some(began + Duration::from_millis(offset as u64) + HORIZON)
                } else {
                    (began + HORIZON).checked_sub(Duration::from_millis(offset.unsigned_abs()))
                };
                if let (Some(&acked), Some(horizon_at)) =
                    (queries_acked.get(&click.query_id), horizon_at)
                {
                    if acked + MUST_JOIN_MARGIN <= horizon_at {
                        bad(format!(
                            "not joined, though its query {}'s load was acknowledged {:?} \
                             before its horizon (outcome {outcome:?})",
                            click.query_id,
                            horizon_at - acked
                        ));
                    }
                }
            }
            [token] => {
                joined_clicks += 1;
                if !purged && entry.as_deref() != Some(token.as_str()) {
                    bad(format!(
                        "joined by {token}, but its IdRegistry entry is {entry:?}"
                    ));
                }
                if outcome.is_some() {
                    bad(format!("joined by {token}, yet its outcome is {outcome:?}"));
                }
                if !query_loaded {
                    bad(format!("joined by {token} without its query in the store"));
                }
            }
            many => bad(format!(
                "joined {} times (tokens {many:?}; IdRegistry entry {entry:?})",
                many.len()
            )),
        }
    }
    txn.rollback();
    Ok((joined_clicks, expired_clicks, too_old_clicks))
}
