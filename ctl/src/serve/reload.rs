//! The dashboard's client, rebuilt when the namespace's table ids change under it.
//!
//! A dashboard started before the application (a supervisor starts both at once) opens the
//! store before the application declares its table ids: its client keys tables by name, and
//! would read the application's keys with the wrong map. Rather than stop (as it used to,
//! for a restart that every supervisor then had to make), it compares the store's map with
//! its client's every sample period and, when they differ, builds a new client keyed by the
//! store's map on the same store and oracle ([`Client::with_config`]); requests then use the
//! new one. Maps only grow (`percolator::design::layout`, "Table ids": an id once given is
//! never changed or reused), so a reload never makes a name mean other keys.

use percolator::{Client, ClientConfig, TxnError};
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

    /// Reads the store's table ids; if they differ from the current client's, replaces it
    /// with a client keyed by them (same store, oracle and settings). Returns whether it did.
    pub async fn reload_if_changed(&self) -> Result<bool, TxnError> {
        let client = self.get();
        let namespace = client.codec().namespace();
        let now = percolator::txn::stored_table_ids(client.store().as_ref(), &namespace).await?;
        if &now == client.codec().table_ids() {
            return Ok(false);
        }
        tracing::info!(
            was = %client.codec().table_ids().describe_ids(),
            now = %now.describe_ids(),
            "the namespace's table ids changed; reading with the new map"
        );
        let config = ClientConfig {
            table_ids: now,
            ..client.config().clone()
        };
        let fresh = Client::with_config(client.store().clone(), client.oracle().clone(), config);
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = fresh;
        Ok(true)
    }
}

/// Calls [`CurrentClient::reload_if_changed`] every `every`, for as long as the task runs
/// (a failed read is retried at the next tick).
pub async fn watch(current: CurrentClient, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(error) = current.reload_if_changed().await {
            tracing::debug!(%error, "reading the table ids failed");
        }
    }
}
