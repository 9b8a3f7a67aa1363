//! The dashboard's client, whose table ids grow when the namespace's map grows under it.
//!
//! A dashboard started before the application (a supervisor starts both at once) opens the
//! store before the application declares its table ids: its client keys tables by name, and
//! would read the application's keys with the wrong map. Rather than stop (as it used to,
//! for a restart that every supervisor then had to make), it reads the store's map every
//! sample period and, when it grew, its client keys tables by it from now on
//! ([`Client::reload_table_ids`], as workers and GC do on meeting an unknown table id). Maps
//! only grow (`percolator::design::layout`, "Table ids": an id once given is never changed
//! or reused); a stored map that differs otherwise is refused, so a reload never makes a
//! name mean other keys.

use percolator::{Client, TxnError};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// The client the dashboard's requests use now.
#[derive(Clone)]
pub struct CurrentClient(Arc<RwLock<Client>>);

impl CurrentClient {
    /// Starts with `client`.
    pub fn new(client: Client) -> CurrentClient {
        CurrentClient(Arc::new(RwLock::new(client)))
    }

    /// The client to use for one request (a cheap handle).
    pub fn get(&self) -> Client {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Reads the store's table ids; if they grew past the current client's, the client keys
    /// tables by them from now on ([`Client::reload_table_ids`]). Returns whether they grew.
    /// A stored map that is not a growth of the client's is refused (`Mismatch`): the
    /// dashboard keeps reading with its map rather than let a name mean other keys.
    pub async fn reload_if_changed(&self) -> Result<bool, TxnError> {
        self.get().reload_table_ids().await
    }
}

/// Calls [`CurrentClient::reload_if_changed`] every `every`, for as long as the task runs
/// (a failed read is retried at the next tick).
pub async fn watch(current: CurrentClient, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match current.reload_if_changed().await {
            Err(TxnError::TableIds(error)) => {
                tracing::warn!(%error, "the store's table ids are refused; reading with the dashboard's map")
            }
            Err(error) => tracing::debug!(%error, "reading the table ids failed"),
            Ok(_) => {}
        }
    }
}
