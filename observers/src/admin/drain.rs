//! **Drained, seen from another process** ([`is_drained`]). A run in flight always has its
//! notify key in the store: a worker deletes the key only after the run's transaction
//! committed, and a run's own notifications (chains) are put in its prewrite, before that
//! commit. So "no notify key left" implies "no run in flight that can still produce work".
//! A scan of the notify space is not atomic, though: a run that finishes during the scan may
//! put its chained key behind the scan's position and delete its own ahead of it, and the
//! scan sees neither. Workers publish, with every heartbeat, how many notifications they
//! have handled (`workers/<id>`: beat and progress); a run that deleted its key during the
//! scan has counted itself before the worker's second heartbeat after the scan. So a check
//! reads the worker records, scans, and then waits until every live worker has beaten twice
//! since the scan ended: drained only if the scan found nothing and no worker's progress
//! moved. A worker that left (clean shutdown) or appeared meanwhile makes the check answer
//! "not drained" (asked again, it settles).
//!
//! A check in a process that runs workers itself ([`is_drained_beside`]) reads those
//! workers' own counters instead of waiting for their heartbeats: a mark of each
//! ([`Worker::runs_mark`]) before the scan and one after it, drained only if both found no
//! run in flight and no run started between them. The heartbeat wait had also given a key
//! that another writer (a sweep, another process's loader) put behind the scan time to
//! reach a local worker and move its count; instead the check compares the put counts
//! before the scan and `PUBLISHED_WITHIN` after it: this process's (exact) and the other
//! processes' (as they publish them, which is pacing-grade: a publication later than that
//! is missed, as a run later than two heartbeats was). A caller stops its own periodic
//! writers before it checks (Photon stops its sweep: `photon::run`). With no other live
//! worker the check takes one scan and 200 ms, not two heartbeats.

use super::oracle_ms;
use super::workers::worker_records;
use crate::error::WorkerError;
use crate::worker::Worker;
use percolator::codec::Key;
use percolator::kv::{KeyRange, ScanOrder};
use percolator::{Cell, Client};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long after its puts a client has published them to the shared counts, in the usual
/// case (`percolator::ClientConfig::publish_notify_counts`, 50 ms by default, plus the
/// write).
const PUBLISHED_WITHIN: Duration = Duration::from_millis(200);

/// Why [`is_drained`] said the work is not drained.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotDrained {
    /// A notification is waiting (the first one met).
    Backlog {
        /// Its cell.
        cell: Cell,
    },
    /// A worker handled a notification while the notify space was scanned (its run may
    /// have put a notification behind the scan), or joined or left meanwhile.
    Busy {
        /// The worker.
        worker: String,
    },
    /// A live worker did not heartbeat again within the liveness horizon, so whether it
    /// was busy is unknown.
    Silent {
        /// The worker.
        worker: String,
    },
    /// Notify keys were put while the check ran (by a writer of this process other than its
    /// workers, or by another process, as the shared counts say): one may be behind the
    /// scan ([`is_drained_beside`]).
    Put {
        /// How many.
        keys: u64,
    },
}

impl std::fmt::Display for NotDrained {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotDrained::Backlog { cell } => write!(
                f,
                "a notification is waiting ({}/{}/{})",
                cell.table.escape_ascii(),
                cell.row.escape_ascii(),
                cell.column.escape_ascii()
            ),
            NotDrained::Busy { worker } => write!(f, "worker {worker} was busy during the check"),
            NotDrained::Silent { worker } => {
                write!(f, "worker {worker} did not heartbeat during the check")
            }
            NotDrained::Put { keys } => write!(f, "{keys} notify keys were put during the check"),
        }
    }
}

/// Whether the work is drained: no notification left in the notify space and no observer
/// run in flight in any worker of any process (see `observers/src/admin/drain.rs` for how runs in flight
/// are seen from another process). Takes about two heartbeats of the workers when nothing
/// is waiting. Workers whose last heartbeat is older than `liveness` count as dead.
pub async fn is_drained(
    client: &Client,
    liveness: Duration,
) -> Result<Result<(), NotDrained>, WorkerError> {
    is_drained_beside(client, liveness, &[]).await
}

/// [`is_drained`] from a process that runs `local` workers itself: those are checked by
/// their own counters ([`Worker::runs_mark`], before and after the scan), the others by
/// their heartbeats, and notify keys put meanwhile by anyone ([`NotDrained::Put`]) by the
/// put counts 200 ms after the scan. With no other live worker it answers then. The caller
/// stops its own periodic writers first (see the module documentation).
pub async fn is_drained_beside(
    client: &Client,
    liveness: Duration,
    local: &[&Worker],
) -> Result<Result<(), NotDrained>, WorkerError> {
    let is_local = |id: &str| local.iter().any(|w| w.id() == id);
    let local_before: Vec<Option<u64>> = local.iter().map(|w| w.runs_mark()).collect();
    if let Some(busy) = local
        .iter()
        .zip(&local_before)
        .find(|(_, mark)| mark.is_none())
    {
        return Ok(Err(NotDrained::Busy {
            worker: busy.0.id().to_string(),
        }));
    }
    // Without the heartbeat wait for local workers, keys other writers put during the scan
    // are watched by the put counts: this process's own (exact, in memory) and the other
    // processes' (as published, within `PUBLISHED_WITHIN` of their puts).
    let puts_before = if local.is_empty() {
        None
    } else {
        let own = client.notify_counts().put;
        Some((own, client.shared_notify_counts().await?.others().put))
    };
    let before: HashMap<String, (u64, Option<u64>)> = worker_records(client)
        .await?
        .into_iter()
        .filter(|(id, _, _)| !is_local(id))
        .map(|(id, beat, handled)| (id, (beat, handled)))
        .collect();
    // Any notify key at all, from the floor on.
    let floor = client.notify_floor().await?;
    let range: KeyRange = client.codec().notify_from(floor);
    if let Some((key, _)) = client
        .store()
        .scan(range, 1, ScanOrder::Forward)
        .await?
        .into_iter()
        .next()
    {
        let cell = match client.codec().decode(&key) {
            Ok(Key::Notify { cell, .. }) => cell,
            _ => Cell::new("?", key.escape_ascii().to_string(), "?"),
        };
        return Ok(Err(NotDrained::Backlog { cell }));
    }
    // The local workers: no run in flight during the scan (the marks are equal and idle).
    for (worker, before) in local.iter().zip(&local_before) {
        if worker.runs_mark() != *before {
            return Ok(Err(NotDrained::Busy {
                worker: worker.id().to_string(),
            }));
        }
    }
    let scanned = oracle_ms(client).await?;
    let horizon = liveness.as_millis() as u64;
    let live: Vec<(&String, &(u64, Option<u64>))> = before
        .iter()
        .filter(|(_, (beat, _))| beat.saturating_add(horizon) >= scanned)
        .collect();
    // Per live worker: the first beat seen after the scan, then a second one after it.
    let mut first_beat: HashMap<&String, u64> = HashMap::new();
    let started = Instant::now();
    loop {
        let now: HashMap<String, (u64, Option<u64>)> = worker_records(client)
            .await?
            .into_iter()
            .filter(|(id, _, _)| !is_local(id))
            .map(|(id, beat, handled)| (id, (beat, handled)))
            .collect();
        for (id, (beat, handled)) in &now {
            if !before.contains_key(id)
                && beat.saturating_add(horizon) >= scanned
                && handled.unwrap_or(0) > 0
            {
                return Ok(Err(NotDrained::Busy { worker: id.clone() }));
            }
        }
        let mut waiting = false;
        for (id, (_, handled_before)) in &live {
            let Some((beat, handled)) = now.get(*id) else {
                return Ok(Err(NotDrained::Busy {
                    worker: (*id).clone(),
                }));
            };
            if handled != handled_before {
                return Ok(Err(NotDrained::Busy {
                    worker: (*id).clone(),
                }));
            }
            let done = match first_beat.get(id) {
                None if *beat > scanned => {
                    first_beat.insert(id, *beat);
                    false
                }
                None => false,
                Some(first) => beat > first,
            };
            waiting |= !done;
        }
        if !waiting {
            if let Some((own, others)) = puts_before {
                tokio::time::sleep(PUBLISHED_WITHIN).await;
                let others_now = client.shared_notify_counts().await?.others().put;
                let keys =
                    client.notify_counts().put.saturating_sub(own) + others_now.abs_diff(others);
                if keys > 0 {
                    return Ok(Err(NotDrained::Put { keys }));
                }
            }
            return Ok(Ok(()));
        }
        if started.elapsed() > 2 * liveness {
            let silent = live
                .iter()
                .find(|(id, _)| {
                    now.get(*id)
                        .zip(first_beat.get(id))
                        .is_none_or(|((beat, _), first)| beat <= first)
                })
                .map(|(id, _)| (*id).clone())
                .unwrap_or_default();
            return Ok(Err(NotDrained::Silent { worker: silent }));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Checks [`is_drained`] until it holds (`Ok(true)`) or `timeout` has passed (`Ok(false)`),
/// pausing `poll` between checks.
pub async fn wait_until_drained(
    client: &Client,
    liveness: Duration,
    poll: Duration,
    timeout: Option<Duration>,
) -> Result<bool, WorkerError> {
    let started = Instant::now();
    loop {
        match is_drained(client, liveness).await? {
            Ok(()) => return Ok(true),
            Err(why) => tracing::debug!(%why, "not drained yet"),
        }
        if timeout.is_some_and(|t| started.elapsed() >= t) {
            return Ok(false);
        }
        tokio::time::sleep(poll).await;
    }
}
