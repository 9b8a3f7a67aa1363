//! What "now" is when a click's horizon is checked: the event-time watermark of the loaded
//! query logs (`observers::time`), or the wall clock.
//!
//! In event time a click at `t` expires once the loader has loaded query logs past `t` plus
//! the horizon (plus the allowed out-of-orderness): replaying week-old logs joins every click
//! whose query is in the input within the horizon, and expires exactly those whose query
//! never came, whatever the wall clock says. The loader publishes the watermark of
//! `queries/event` ([`crate::load::PhotonLogs`]); until one has been published (events
//! written by other means, stores of earlier versions) event time falls back to the wall
//! clock.

use crate::schema::{EVENT, QUERIES};
use observers::time::Column;
use percolator::{Transaction, TxnError};
use std::time::Duration;

/// The clock a click's horizon is measured on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Expiry {
    /// The published event-time watermark of the query logs (the wall clock until the
    /// loader publishes one).
    #[default]
    EventTime,
    /// The wall clock of the process deciding.
    WallClock,
}

/// How long a click waits for its query, on which clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Horizon {
    /// The wait.
    pub length: Duration,
    /// The clock.
    pub expiry: Expiry,
}

impl Horizon {
    /// The wait in ms.
    pub fn ms(&self) -> u64 {
        self.length.as_millis() as u64
    }
}

impl From<Duration> for Horizon {
    /// `length` in event time ([`Expiry::EventTime`]).
    fn from(length: Duration) -> Self {
        Horizon {
            length,
            expiry: Expiry::default(),
        }
    }
}

/// The timed column whose watermark event-time expiry reads.
pub fn queries_column() -> Column {
    Column::new(QUERIES, EVENT)
}

/// Now, in ms, on `expiry`'s clock, as of `txn`'s snapshot. The wall clock is the one of
/// `txn`'s client ([`Transaction::wall_ms`], `percolator::ClientConfig::wall_clock`), not
/// the host's directly.
pub async fn now(txn: &Transaction, expiry: Expiry) -> Result<u64, TxnError> {
    match expiry {
        Expiry::WallClock => Ok(txn.wall_ms()),
        Expiry::EventTime => Ok(observers::time::published(txn, &queries_column())
            .await?
            .unwrap_or_else(|| txn.wall_ms())),
    }
}
