//! The seeded background task that splits, merges and moves leaders at runtime
//! ([`crate::Churn`]).

use crate::{cluster, service, Churn, LayoutError};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Splits, merges and moves leaders at random every `churn.interval` until `stopped`.
pub(crate) async fn churn_task(
    state: Arc<service::State>,
    churn: Churn,
    mut stopped: watch::Receiver<bool>,
) {
    let dice = cluster::Dice::new(churn.seed);
    let mut tick = tokio::time::interval(churn.interval.max(Duration::from_millis(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stopped.changed() => return,
        }
        if *stopped.borrow() {
            return;
        }
        let layout = &state.layout;
        let regions = layout.all();
        let pick = &regions[(dice.next_u64() % regions.len() as u64) as usize];
        let roll = dice.next_u64() % 3;
        let result = if (roll == 0 && regions.len() < churn.max_regions)
            || regions.len() < churn.min_regions
        {
            // Split where the data is, as TiKV splits a region that grew: at one of the
            // region's first keys, else at a key derived from its start.
            let range = percolator::kv::KeyRange {
                start: pick.start.clone(),
                end: (!pick.end.is_empty()).then(|| pick.end.clone()),
            };
            let keys = state
                .store
                .scan(range, 64, percolator::kv::ScanOrder::Forward)
                .await
                .unwrap_or_default();
            let key = if keys.len() > 1 {
                keys[(dice.next_u64() % keys.len() as u64) as usize]
                    .0
                    .clone()
            } else {
                let mut key = pick.start.clone();
                key.push((dice.next_u64() % 255) as u8 + 1);
                key
            };
            if !pick.end.is_empty() && key >= pick.end {
                Err(LayoutError::AlreadyBoundary(key))
            } else {
                layout.split(&key).map(|_| ())
            }
        } else if roll == 1 && regions.len() > churn.min_regions.max(1) && !pick.start.is_empty() {
            layout.merge(&pick.start)
        } else {
            let store = dice.next_u64() % layout.stores + 1;
            layout.transfer_leader(pick.id, store)
        };
        tracing::debug!(?result, regions = layout.len(), "minitikv churn");
    }
}
