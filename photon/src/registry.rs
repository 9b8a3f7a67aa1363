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

use crate::event::day_of;
use crate::join::JoinStats;
use crate::outcome::Outcome;
use crate::schema::{boundary_cell, outcome_cell, IDREGISTRY, JOINED};
use percolator::{Client, Timestamp, Transaction, TxnError};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The most the boundary moves in one raise without `force`, in days.
pub const MAX_STEP_DAYS: u64 = 1;

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

/// Today (UTC day number) by the oracle's clock: the day every IdRegistry retention is
/// counted back from.
pub async fn today(client: &Client) -> Result<u64, TxnError> {
    let now = client.oracle().get_timestamp().await?;
    Ok(day_of(now.physical_ms()))
}

/// Advances the IdRegistry boundary to `day` (never backwards; by more than
/// [`MAX_STEP_DAYS`] over a boundary already set only with `force`), waits until no
/// transaction that could have read the old boundary can still commit, then deletes the
/// registry's days below it outright. Returns the boundary in force and the keys deleted.
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
) -> Result<(u64, usize), RegistryError> {
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
    let end = format!("{boundary:08}");
    // The registry's column is never observed, so it has no notify keys.
    let deleted = crate::schema::purge_rows(client, IDREGISTRY, b"", end.as_bytes()).await?;
    tracing::info!(
        boundary,
        deleted,
        "IdRegistry days below the boundary deleted"
    );
    Ok((boundary, deleted))
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

/// Settles the clicks of a join batch that are below the boundary (their registry may be
/// gone, so they are never joined): each one that has no terminal outcome yet gets `too_old`.
/// A click already joined keeps its output and no outcome (a later delivery of a click joined
/// before the boundary passed its day, the case the IdRegistry is there for); one already
/// filtered, expired or too old keeps that outcome. A click still waiting for its query
/// becomes too old.
pub(crate) async fn settle_below_boundary(
    txn: &Transaction,
    click_ids: &[String],
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
                    stats.too_old.fetch_add(1, Ordering::Relaxed);
                } else {
                    stats.deduplicated.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
    Ok(())
}
