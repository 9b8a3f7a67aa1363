//! The relayed-hint path: notify keys that clients in other processes committed, received
//! by the process's [`crate::relay::HintListener`], read from the store and dispatched with
//! the value read, as hinted keys are (`crate::relay` says why only pacing rests on a
//! datagram).
//!
//! Invariants it keeps:
//! - A key is dispatched only with the value read from the store after the datagram came:
//!   its payload (and through it the writer's fate) is the store's, never the datagram's.
//! - Only keys of cells this worker observes and owns are read, each once per batch; the
//!   rest are dropped. A second key of a cell goes to dispatch too, which queues it for the
//!   run on that cell (as a hinted key), so a cell written twice in a row is not left to a
//!   scan.
//! - Nothing is taken before the worker has settled (it owns nothing before).

use super::dispatch::dispatch;
use super::Inner;
use crate::process::{Item, Payload};
use crate::relay::HINT_ADDRS_META;
use percolator::codec::Key;
use std::sync::Arc;
use tokio::sync::mpsc;

impl Inner {
    /// This worker's record of where it takes relayed hints.
    pub(super) fn hint_addr_key(&self) -> Vec<u8> {
        self.own_meta_key(HINT_ADDRS_META)
    }
}

/// Publishes the listener's address, then dispatches the keys of each datagram that comes.
pub(super) async fn relayed_loop(
    inner: Arc<Inner>,
    advertised: String,
    mut datagrams: mpsc::Receiver<Vec<Vec<u8>>>,
) {
    let mut shutdown = inner.shutdown.clone();
    // Published until it lands; a loader knows this worker only after that.
    loop {
        match inner
            .client
            .store()
            .put(inner.hint_addr_key(), advertised.clone().into_bytes())
            .await
        {
            Ok(()) => break,
            Err(e) => {
                tracing::warn!(error = %e, "publishing the worker's hint address failed; will retry")
            }
        }
        tokio::select! {
            biased;
            _ = tokio::time::sleep(inner.config.heartbeat) => {}
            _ = shutdown.changed() => return,
        }
    }
    inner.wait_until_settled().await;
    while !inner.stopping() {
        let keys = tokio::select! {
            biased;
            keys = datagrams.recv() => keys,
            _ = shutdown.changed() => return,
        };
        let Some(mut keys) = keys else {
            return;
        };
        // Datagrams that queued up meanwhile join this one, up to a batch, or up to a
        // burst's worth when bursts may grow batches (`dispatch::run_size`).
        while keys.len() < super::dispatch::gather_limit(&inner.config) {
            match datagrams.try_recv() {
                Ok(more) => keys.extend(more),
                Err(_) => break,
            }
        }
        let mut wanted: Vec<(percolator::Cell, Vec<u8>)> = Vec::new();
        for key in keys {
            // A key named twice (a repeated datagram, a forged one) is read once.
            if wanted.iter().any(|(_, k)| *k == key) {
                continue;
            }
            let Some(Key::Notify { cell, .. }) = inner.decode_notify(&key).await else {
                continue;
            };
            if inner.registry.get(&cell).is_none() || !inner.membership.owns(&cell) {
                continue;
            }
            if inner.ledger.handled_recently(&key) || inner.ledger.backing_off(&key) {
                continue;
            }
            wanted.push((cell, key));
        }
        if wanted.is_empty() {
            continue;
        }
        // Only datagrams that name keys of this worker hold young keys back from its
        // scanners (garbage or another share's keys do not).
        inner.hints.note_relayed();
        let read: Vec<Vec<u8>> = wanted.iter().map(|(_, key)| key.clone()).collect();
        let values = match inner.client.store().batch_get(&read).await {
            Ok(values) => values,
            Err(e) => {
                // The scanners find them.
                tracing::debug!(error = %e, "reading relayed notify keys");
                continue;
            }
        };
        let items: Vec<Item> = wanted
            .into_iter()
            .zip(values)
            .filter_map(|((cell, key), value)| {
                Some(Item {
                    cell,
                    key,
                    payload: Payload::decode(&value?),
                })
            })
            .collect();
        let dispatched = dispatch(&inner, items, true).await;
        inner.metrics.add_hinted(dispatched.started as u64);
        if dispatched.stopped {
            return;
        }
    }
}
