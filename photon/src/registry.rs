//! The IdRegistry boundary: the event day below which the registry may be gone, so clicks of
//! those days are never joined (`photon::design::join`).
//!
//! - [`today`]: the day the boundary is counted from is the oracle's, not the local clock's:
//!   a host whose clock runs a day ahead must not close days still in use.
//! - [`gc_registry`] raises the boundary (never back, and by more than a day only when forced),
//!   waits in oracle time until no transaction that read the old boundary can commit, then
//!   deletes the registry's days below it.
//! - `settle_below_boundary`: what the join does with a click below the boundary (its first
//!   terminal outcome stays).
//! - [`write_entry`]: an entry is keyed by click id alone (one join per click id, whatever the
//!   event times of its deliveries) and filed in a day index, through which GC deletes it
//!   once the boundary is more than [`MAX_SKEW_DAYS`] past that day.

use crate::event::day_of;
use crate::join::JoinStats;
use crate::outcome::Outcome;
use crate::schema::Purged;
use crate::schema::{
    boundary_cell, idregistry_cell, idregistry_day_cell, outcome_cell, IDREGISTRY, JOINED,
    REGISTRY_DAY_PREFIX, REGISTRY_ENTRY_PREFIX,
};
use percolator::{Client, Timestamp, Transaction, TxnError};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The most the boundary moves in one raise without `force`, in days.
pub const MAX_STEP_DAYS: u64 = 1;

/// How many days apart the event times of two deliveries of one click may be for the
/// IdRegistry to turn the later one away after GC moved the boundary past the earlier one's
/// day: an entry filed under day `d` is deleted once the boundary is above `d +
/// MAX_SKEW_DAYS` (until then, deliveries of any event time find it). The argument:
/// `photon::design::join`, "IdRegistry".
pub const MAX_SKEW_DAYS: u64 = 1;

/// Writes `click_id`'s IdRegistry entry (`token`) in `txn`, filed in the day index under
/// `day`, the event day of the delivery the run read. Every run that writes the entry of a
/// click writes the same cell, so two of them conflict whatever their deliveries' days.
pub fn write_entry(txn: &Transaction, day: u64, click_id: &str, token: String) {
    txn.set(idregistry_cell(click_id), token);
    txn.set(idregistry_day_cell(day, click_id), day.to_string());
}

/// Errors of [`gc_registry`] (and of the periodic GC pass that calls it).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// A transaction or the oracle failed.
    #[error(transparent)]
    Txn(#[from] TxnError),
    /// The boundary would move by more than [`MAX_STEP_DAYS`] at once: a clock ahead (of
    /// the oracle, or the oracle's own) would close days still in use, so it needs `force`.
    #[error(
        "refusing to move the IdRegistry boundary from day {current} to day {requested} \
         (more than {MAX_STEP_DAYS} day at once: is a clock ahead?); clicks of the days \
         between would be reported too old; use `photon gc --force` if this is intended"
    )]
    Jump {
        /// The boundary in force.
        current: u64,
        /// The boundary asked for.
        requested: u64,
    },
}

impl percolator::txn::RunError for RegistryError {
    fn as_txn_error(&self) -> Option<&TxnError> {
        match self {
            RegistryError::Txn(e) => Some(e),
            RegistryError::Jump { .. } => None,
        }
    }
}

/// Reads the IdRegistry boundary day inside `txn` (0: never set).
pub async fn boundary(txn: &Transaction) -> Result<u64, TxnError> {
    Ok(txn
        .get(&boundary_cell())
        .await?
        .and_then(|b| String::from_utf8(b).ok()?.parse().ok())
        .unwrap_or(0))
}

/// Today (UTC day number) by the oracle's clock.
pub async fn today(client: &Client) -> Result<u64, TxnError> {
    let now = client.oracle().get_timestamp().await?;
    Ok(day_of(now.physical_ms()))
}

/// The day an IdRegistry retention is counted back from, as of oracle time `oracle_ms`:
/// the oracle's day, or the day of the query logs' event-time watermark when that is
/// behind (`photon::expiry`; a backfill of week-old logs keeps the registry of its days
/// until its watermark passes them, so its clicks are joined, not reported too old). Once
/// the input ends (`u64::MAX`) or while no watermark is published, the oracle's day.
pub async fn retention_day(client: &Client, oracle_ms: u64) -> Result<RetentionDay, TxnError> {
    let oracle_day = day_of(oracle_ms);
    let snapshot = client.begin().await?;
    let watermark = observers::time::published(&snapshot, &crate::expiry::queries_column()).await?;
    Ok(match watermark {
        Some(w) if w != u64::MAX && day_of(w) < oracle_day => RetentionDay {
            day: day_of(w),
            by_watermark: true,
        },
        _ => RetentionDay {
            day: oracle_day,
            by_watermark: false,
        },
    })
}

/// What [`retention_day`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetentionDay {
    /// The day (UTC day number).
    pub day: u64,
    /// It is the query logs' watermark's, behind the oracle's day. A boundary that follows
    /// the watermark may move by more than [`MAX_STEP_DAYS`] at once (a backfill's logs
    /// end, live ones load): the step limit guards against a clock ahead, and this day is
    /// behind the oracle's.
    pub by_watermark: bool,
}

/// Advances the IdRegistry boundary to `day` (never backwards; by more than
/// [`MAX_STEP_DAYS`] over a boundary already set only with `force`), waits until no
/// transaction that could have read the old boundary can still commit, then deletes the
/// registry's days below it outright, each entry once GC has resolved the transactions that
/// wrote it (the rest on a later call: see `purge_below`).
///
/// The wait is in oracle time, as transaction lifetimes are: a transaction whose snapshot
/// is below the boundary's commit_ts can only commit with a commit_ts at most
/// `max_lifetime` (physical) above its start_ts, so once the oracle has handed out a
/// timestamp physically past the boundary's commit_ts plus `max_lifetime`, none can. (The
/// local clock is not enough: after a takeover the oracle may lead it and run at half speed.)
pub async fn gc_registry(
    client: &Client,
    day: u64,
    force: bool,
) -> Result<RegistryPurge, RegistryError> {
    let boundary = client
        .run(|txn| async move {
            let current = boundary(&txn).await?;
            if day <= current {
                txn.rollback();
                return Ok(current);
            }
            if current > 0 && day - current > MAX_STEP_DAYS && !force {
                txn.rollback();
                return Err(RegistryError::Jump {
                    current,
                    requested: day,
                });
            }
            txn.set(boundary_cell(), day.to_string());
            Ok::<_, RegistryError>(day)
        })
        .await?;
    // Above the commit_ts of the boundary in force (ours committed before this call, an older
    // one before our snapshot).
    let written = client
        .oracle()
        .get_timestamp()
        .await
        .map_err(TxnError::from)?;
    let lifetime = client.config().max_lifetime;
    wait_for_oracle_past(client, written.physical_ms() + lifetime.as_millis() as u64).await?;
    let purged = purge_below(client, boundary).await?;
    tracing::info!(
        boundary,
        deleted = purged.deleted,
        deferred = purged.deferred,
        rewritten = purged.rewritten,
        "IdRegistry days below the boundary deleted (deferred: entries whose transactions GC \
         has not resolved yet; rewritten: entries kept, written by another run than their old \
         index cell's)"
    );
    Ok(RegistryPurge {
        boundary,
        deleted: purged.deleted,
        deferred: purged.deferred,
        rewritten: purged.rewritten,
    })
}

/// What [`gc_registry`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegistryPurge {
    /// The boundary in force (day number).
    pub boundary: u64,
    /// Keys deleted.
    pub deleted: usize,
    /// Entries below the boundary kept for a later pass: a transaction that wrote them is
    /// not resolved by GC yet (their index cells stay with them).
    pub deferred: usize,
    /// Index cells below the boundary whose entry another transaction wrote than the
    /// cell's (its run never committed, or a later run decided the click under a later
    /// day): the entry is kept, the index cell deleted.
    pub rewritten: usize,
}

/// Deletes the IdRegistry behind `boundary`: the entries filed under days below `boundary -
/// MAX_SKEW_DAYS` (each through its index cell: the entry first, so a crash leaves an index
/// cell that the next pass finds again) and then those index cells, and the entries of the
/// earlier layout keyed by days below `boundary`. The registry is never observed, so it has
/// no notify keys.
///
/// An entry is the primary of the join batch that wrote it, whose other writes (joined
/// outputs, index cells) are write-once records that stay pending until a GC pass resolves
/// them: deleted before that, the entry would make them read as rolled back. So an entry is
/// deleted only once GC has resolved below its last commit
/// ([`crate::schema::purge_settled_rows`]); the others, and the index cells of the pass, wait
/// for a later pass. An entry is deleted only through the index cell of the transaction that
/// wrote its latest version; another's index cell is deleted alone (`photon::design::join`,
/// "Whose entry").
async fn purge_below(client: &Client, boundary: u64) -> Result<Purged, TxnError> {
    use percolator::codec::{Key, Space};
    use percolator::kv::{RangePager, ScanOrder};
    use percolator::txn::Settlement;
    /// Index cells read per store call.
    const PAGE: usize = 1000;
    // Read once, before the heads it is compared with: it only rises.
    let resolved_below = client.gc_resolved_below().await?;
    let mut purged = purge_legacy_below(client, boundary, resolved_below).await?;
    let (start, end) = (
        REGISTRY_DAY_PREFIX.to_string(),
        format!(
            "{REGISTRY_DAY_PREFIX}{:08}",
            boundary.saturating_sub(MAX_SKEW_DAYS)
        ),
    );
    // Index cells are write-once records (`schema::declare_columns`), or heads in stores
    // written before they were declared so, or by a client that did not declare them.
    for space in [Space::Once, Space::Head] {
        let range = client.codec().rows_range(
            space,
            IDREGISTRY.as_bytes(),
            start.as_bytes(),
            Some(end.as_bytes()),
        );
        let mut pager = RangePager::new(client.store().as_ref(), range, ScanOrder::Forward, PAGE);
        while let Some(page) = pager.next_page().await? {
            for (key, _) in page {
                // The transaction that wrote the index cell, and so the entry with it.
                let (cell, writer) = match client.codec().decode(&key) {
                    Ok(Key::Once(cell, start_ts)) => (cell, Some(Timestamp(start_ts))),
                    Ok(Key::Head(cell)) => match client.settlement(&cell, resolved_below).await? {
                        Settlement::Unsettled => {
                            purged.deferred += 1;
                            continue;
                        }
                        Settlement::Settled { latest_writer } => (cell, latest_writer),
                    },
                    _ => continue,
                };
                // `day/<day:08>/<click_id>`.
                let Some(click_id) = cell
                    .row
                    .strip_prefix(REGISTRY_DAY_PREFIX.as_bytes())
                    .and_then(|rest| rest.get(9..))
                else {
                    continue;
                };
                let mut row = REGISTRY_ENTRY_PREFIX.as_bytes().to_vec();
                row.extend_from_slice(click_id);
                let mut row_end = row.clone();
                row_end.push(0);
                // Only the entry as that transaction left it: one a later run wrote (the index
                // cell's run never committed, or the click was decided again under a later
                // day) is filed under that run's own index cell.
                let Some(writer) = writer else {
                    purged.rewritten += 1;
                    continue;
                };
                let entry = crate::schema::purge_settled_rows(
                    client,
                    IDREGISTRY,
                    &row,
                    &row_end,
                    resolved_below,
                    Some(writer),
                )
                .await?;
                purged.deleted += entry.deleted;
                purged.deferred += entry.deferred;
                purged.rewritten += entry.rewritten;
            }
        }
    }
    // The index cells only once every entry they lead to is gone.
    if purged.deferred == 0 {
        purged.deleted +=
            crate::schema::purge_rows(client, IDREGISTRY, start.as_bytes(), end.as_bytes()).await?;
    }
    Ok(purged)
}

/// Deletes the entries of the earlier layout (`<day:08>/<click_id>`, no index) of days below
/// `boundary`, row by row (a row one purge fenced and could not delete, left by a crash, holds
/// up no other), then whatever is left of the range once every row went.
async fn purge_legacy_below(
    client: &Client,
    boundary: u64,
    resolved_below: Timestamp,
) -> Result<Purged, TxnError> {
    use percolator::codec::{Key, Space};
    use percolator::kv::{RangePager, ScanOrder};
    /// Heads read per store call.
    const PAGE: usize = 1000;
    let legacy_end = format!("{boundary:08}");
    let range = client.codec().rows_range(
        Space::Head,
        IDREGISTRY.as_bytes(),
        b"",
        Some(legacy_end.as_bytes()),
    );
    let mut purged = Purged::default();
    let mut pager = RangePager::new(client.store().as_ref(), range, ScanOrder::Forward, PAGE);
    while let Some(page) = pager.next_page().await? {
        for (key, _) in page {
            let Ok(Key::Head(cell)) = client.codec().decode(&key) else {
                continue;
            };
            let mut row_end = cell.row.clone();
            row_end.push(0);
            let row = crate::schema::purge_settled_rows(
                client,
                IDREGISTRY,
                &cell.row,
                &row_end,
                resolved_below,
                None,
            )
            .await?;
            purged.deleted += row.deleted;
            purged.deferred += row.deferred;
            purged.rewritten += row.rewritten;
        }
    }
    if purged.deferred == 0 && purged.rewritten == 0 {
        purged.deleted +=
            crate::schema::purge_rows(client, IDREGISTRY, b"", legacy_end.as_bytes()).await?;
    }
    Ok(purged)
}

/// Waits until the oracle hands out a timestamp whose physical time is past `physical_ms`.
/// Returns that timestamp.
async fn wait_for_oracle_past(client: &Client, physical_ms: u64) -> Result<Timestamp, TxnError> {
    loop {
        let now = client.oracle().get_timestamp().await?;
        if now.physical_ms() > physical_ms {
            return Ok(now);
        }
        // Oracle time runs at least at half the local clock's speed (after a takeover that
        // had to start ahead of it), so this converges; the floor bounds the polling rate.
        let left = physical_ms + 1 - now.physical_ms();
        tokio::time::sleep(Duration::from_millis(left.max(10))).await;
    }
}

/// Settles the clicks of a join batch that are below the boundary `boundary` (read in
/// `txn`; their registry may be gone, so they are never joined): each one that has no
/// terminal outcome yet gets `too_old`. A click already joined keeps its output and no
/// outcome (a later delivery of a click joined before the boundary passed its day, the case
/// the IdRegistry is there for); one already filtered, expired or too old keeps that
/// outcome. A click still waiting for its query becomes too old.
///
/// Settling writes the click's IdRegistry entry too (`too_old/<start_ts>`, filed in the day
/// index under `boundary`), the cell every run that joins or expires the click writes: a
/// join from a snapshot before the boundary was raised, not committed yet when this run
/// read (no output found), conflicts with it, so they do not both commit (a joined click
/// settled `too_old`, found by the deterministic simulation; the first raise, from an unset
/// boundary, closes every earlier day at once). Filed under the boundary it read, as a join
/// files under a day at or above it, the entry is deleted by the same GC, by the same
/// argument.
pub(crate) async fn settle_below_boundary(
    txn: &Transaction,
    click_ids: &[String],
    boundary: u64,
    stats: &JoinStats,
) -> Result<(), TxnError> {
    if click_ids.is_empty() {
        return Ok(());
    }
    let cells: Vec<_> = click_ids.iter().map(|id| outcome_cell(id)).collect();
    let outcomes = txn.get_many(&cells).await?;
    for ((id, cell), outcome) in click_ids.iter().zip(cells).zip(outcomes) {
        let outcome = outcome.and_then(|b| Outcome::decode(&String::from_utf8_lossy(&b)));
        match outcome {
            Some(Outcome::TooOld | Outcome::Filtered | Outcome::Expired { .. }) => {
                stats.too_old.fetch_add(1, Ordering::Relaxed);
            }
            None | Some(Outcome::Waiting) => {
                // Below the boundary a click is rare (a late duplicate line): one row scan.
                let mut row_end = id.as_bytes().to_vec();
                row_end.push(0);
                let joined = txn
                    .scan(JOINED.as_bytes(), id.as_bytes(), Some(&row_end))
                    .await?;
                if joined.is_empty() {
                    txn.set(cell, Outcome::TooOld.encode());
                    write_entry(txn, boundary, id, format!("too_old/{}", txn.start_ts()));
                    stats.too_old.fetch_add(1, Ordering::Relaxed);
                } else {
                    stats.deduplicated.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
    Ok(())
}
