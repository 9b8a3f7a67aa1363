//! Handling notify keys (`observers::design`): decide each writer's fate, run the
//! observer in a transaction guarded by the acknowledgment column, delete the keys.
//!
//! A strong observer's notifications are handled in batches: one transaction checks and sets
//! the acknowledgment of every cell of the batch, runs the observer for the cells not yet
//! covered (in turn, [`crate::Observer::observe_batch`]), commits once, and the handled keys
//! are deleted with one `batch_delete`. A batch that conflicts or fails is split in halves
//! and each half handled the same way, down to single cells, which run as before (retried on
//! conflicts by `Client::run`). The strong guarantee holds per cell: whichever transaction
//! commits a cell's acknowledgment is the only one that commits a run for that change.

use crate::deadletter::DeadLetter;
use crate::error::ObserverError;
use crate::metrics::{Event, Metrics};
use crate::registry::{ObserverKind, Registered, Registry};
use crate::telemetry::ObserverLabels;
use futures::FutureExt;
use percolator::record::Notification;
use percolator::txn::{KeyRecheck, RunError, TxnStatus};
use percolator::{Cell, Client, Timestamp, Transaction, TxnError};
use std::panic::AssertUnwindSafe;
use tokio::time::Instant;

/// The value of a notify key, decoded once where it was read (a scan) or made (a commit
/// hint), and passed on typed.
#[derive(Clone, Debug)]
pub(crate) enum Payload {
    /// A notification record.
    Record(Notification),
    /// Bytes that are no notification record (parked as a dead letter by [`handle`]).
    Corrupt {
        /// The value as stored.
        bytes: Vec<u8>,
        /// Why it does not decode.
        error: String,
    },
}

impl Payload {
    /// Decodes a notify key's stored value.
    pub(crate) fn decode(bytes: &[u8]) -> Payload {
        match Notification::decode(bytes) {
            Ok(n) => Payload::Record(n),
            Err(e) => Payload::Corrupt {
                bytes: bytes.to_vec(),
                error: e.to_string(),
            },
        }
    }

    /// The stored form (what a dead letter keeps). Decoding is strict, so a record encodes
    /// back to the very bytes it was decoded from.
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        match self {
            Payload::Record(n) => n.encode(),
            Payload::Corrupt { bytes, .. } => bytes.clone(),
        }
    }
}

/// What became of one notify key.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The observer ran and committed; the key is deleted.
    Ran,
    /// Already covered by the acknowledgment (a duplicate); the key is deleted.
    Covered,
    /// The writer rolled back; the key is deleted, nothing ran.
    RolledBack,
    /// The writer is undecided; the key stays, try later.
    Pending,
    /// No observer is registered on the column; the key stays.
    Unobserved,
    /// A transient error (store or oracle unavailable, a commit whose outcome is unknown)
    /// stopped the attempt: the key stays and is retried with backoff, and the attempt does
    /// not count towards a dead letter (the observer did not fail).
    Transient {
        /// The error.
        error: String,
    },
    /// The observer failed; the key stays (or is dead-lettered by the caller). `resolved` is
    /// the notification with the writer's fate decided (`Committed { c }`), to be parked
    /// instead of the raw strong record, whose evidence GC may remove later.
    Failed {
        /// The error.
        error: String,
        /// The decided notification record, if the writer's commit was established.
        resolved: Option<Notification>,
    },
}

fn parse_ack(bytes: Option<Vec<u8>>) -> u64 {
    bytes
        .and_then(|b| <[u8; 8]>::try_from(b.as_slice()).ok())
        .map(u64::from_be_bytes)
        .unwrap_or(0)
}

/// One notify key to handle: the cell it names, the key itself and its decoded value.
#[derive(Clone, Debug)]
pub(crate) struct Item {
    /// The notified cell.
    pub cell: Cell,
    /// The notify key.
    pub key: Vec<u8>,
    /// Its value, decoded.
    pub payload: Payload,
}

/// A notification whose writer committed (or a weak one): the observer is to run for it.
struct Runnable {
    /// Index into the items handed to [`handle_batch`].
    index: usize,
    cell: Cell,
    /// The commit the acknowledgment must reach, `None` for a run without the check (weak).
    covered: Option<u64>,
    /// The notification as decided (what a dead letter parks).
    notification: Notification,
    /// When the change was written: the physical part (Unix ms) of the writer's commit
    /// timestamp, else of the notify key's timestamp (a weak notification).
    written_ms: u64,
}

/// What [`resolve`] decided for one item.
enum Resolved {
    /// Nothing to run: this is the item's outcome.
    Done(Result<Outcome, TxnError>),
    /// The observer is to run: the acknowledgment must reach `covered` (`None`: no check).
    Run(Option<u64>, Notification),
}

/// Decides the writer's fate of one notify key: a corrupt record is dead-lettered, a rolled
/// back writer's key is deleted, an undecided one is left pending.
async fn resolve(
    client: &Client,
    registered: &Registered,
    metrics: &Metrics,
    item: &Item,
) -> Resolved {
    let notification = match &item.payload {
        Payload::Record(n) => n,
        Payload::Corrupt { bytes, error } => {
            // A corrupt notify key can never be processed: park it for the operator.
            let letter = DeadLetter {
                notify_key: item.key.clone(),
                notification: bytes.clone(),
                error: format!("corrupt notification: {error}"),
            };
            if let Err(e) = DeadLetter::park(client, &letter).await {
                return Resolved::Done(Err(e.into_txn()));
            }
            metrics.count(
                Event::DeadLettered,
                Some(&metrics.labels(&item.cell, &registered.name)),
            );
            return Resolved::Done(Ok(Outcome::Failed {
                error: letter.error,
                resolved: None,
            }));
        }
    };
    let Notification::Strong {
        start_ts,
        primary,
        ttl_ms,
    } = notification
    else {
        // Weak or committed: decided already, no store call.
        return decided_run(registered, notification);
    };
    let commit_ts = match client
        .txn_status_with_ttl(primary, Timestamp(*start_ts), *ttl_ms)
        .await
    {
        Ok(TxnStatus::Committed(commit_ts)) => commit_ts.0,
        // The key goes only if it still holds the strong record: "rolled back" is wrong
        // when GC rewrote the key as committed and then trimmed the evidence of the
        // commit while this check was under way, and then the key says so
        // (`observers::design::processing`).
        Ok(TxnStatus::RolledBack) => {
            match client
                .remove_rolled_back_notification(&item.key, notification)
                .await
            {
                Ok(KeyRecheck::Deleted) => {
                    metrics.count(
                        Event::RolledBack,
                        Some(&metrics.labels(&item.cell, &registered.name)),
                    );
                    return Resolved::Done(Ok(Outcome::RolledBack));
                }
                Ok(KeyRecheck::Changed(Some(bytes))) => match Notification::decode(&bytes) {
                    Ok(Notification::Committed { commit_ts }) => commit_ts,
                    // Anything else is left for the next scan to decide afresh.
                    _ => return Resolved::Done(Ok(Outcome::Pending)),
                },
                // Gone: handled by another worker or deleted by GC meanwhile.
                Ok(KeyRecheck::Changed(None)) => return Resolved::Done(Ok(Outcome::RolledBack)),
                Ok(_) => return Resolved::Done(Ok(Outcome::Pending)),
                Err(e) => return Resolved::Done(Err(e)),
            }
        }
        Ok(TxnStatus::Pending) => return Resolved::Done(Ok(Outcome::Pending)),
        Err(e) => return Resolved::Done(Err(e)),
    };
    // The decided record: `Committed { c }` instead of the raw strong record, whose evidence
    // GC may remove later.
    decided_run(registered, &Notification::Committed { commit_ts })
}

/// The run of a decided notification (`Committed` or `Weak`): [`resolve`] without a store
/// call. A weak observer given a strong notification still runs (at least once); a guarded
/// one runs without the acknowledgment check (its own guard makes a repeat write nothing); a
/// strong observer runs with the check up to the writer's commit_ts, and without it given a
/// weak one.
fn decided_run(registered: &Registered, decided: &Notification) -> Resolved {
    match registered.kind {
        ObserverKind::Weak | ObserverKind::Guarded => Resolved::Run(None, decided.clone()),
        ObserverKind::Strong => Resolved::Run(decided.commit_ts(), decided.clone()),
    }
}

/// When the change behind `item` was written (Unix ms): its commit timestamp once decided,
/// else the timestamp its notify key carries.
fn written_ms(client: &Client, item: &Item, decided: &Notification) -> u64 {
    let ts = match decided {
        Notification::Committed { commit_ts } => Some(*commit_ts),
        _ => match client.codec().decode(&item.key) {
            Ok(percolator::codec::Key::Notify { ts, .. }) => Some(ts),
            _ => None,
        },
    };
    ts.map_or(0, |ts| Timestamp(ts).physical_ms())
}

/// Handles notify keys of cells watched by one observer (distinct cells): decides each
/// writer's fate, then runs the observer for those that committed as one batch (split on
/// conflicts and failures; a weak observer's cells carry no acknowledgment check).
/// Returns each item's outcome, in order.
pub(crate) async fn handle_batch(
    client: &Client,
    registry: &Registry,
    metrics: &Metrics,
    items: &[Item],
) -> Vec<Result<Outcome, TxnError>> {
    let mut outcomes: Vec<Option<Result<Outcome, TxnError>>> = items.iter().map(|_| None).collect();
    let Some(registered) = items.first().and_then(|i| registry.get(&i.cell)) else {
        return items.iter().map(|_| Ok(Outcome::Unobserved)).collect();
    };
    // Decided notifications (every hinted one) are resolved in place: only the others become
    // futures, so a batch of hints is no `join_all` of futures (past 30 of them it boxes
    // each: 2.5 % of `photon demo`'s CPU).
    let mut resolved: Vec<Option<Resolved>> = items
        .iter()
        .map(|item| match &item.payload {
            Payload::Record(n) if !matches!(n, Notification::Strong { .. }) => {
                Some(decided_run(registered, n))
            }
            _ => None,
        })
        .collect();
    let slow: Vec<usize> = (0..items.len())
        .filter(|&i| resolved[i].is_none())
        .collect();
    if !slow.is_empty() {
        let decided = futures::future::join_all(
            slow.iter()
                .map(|&i| resolve(client, registered, metrics, &items[i])),
        )
        .await;
        for (i, r) in slow.into_iter().zip(decided) {
            resolved[i] = Some(r);
        }
    }
    let resolved = resolved
        .into_iter()
        .map(|r| r.expect("every item is resolved in place or by its future"));
    let mut runs = Vec::new();
    for (index, (item, r)) in items.iter().zip(resolved).enumerate() {
        if registry
            .get(&item.cell)
            .is_none_or(|r| r.name != registered.name)
        {
            outcomes[index] = Some(Ok(Outcome::Unobserved));
            continue;
        }
        match r {
            Resolved::Done(outcome) => outcomes[index] = Some(outcome),
            Resolved::Run(covered, notification) => runs.push(Runnable {
                index,
                cell: item.cell.clone(),
                written_ms: written_ms(client, item, &notification),
                covered,
                notification,
            }),
        }
    }
    let ctx = Ctx {
        client,
        registered,
        metrics,
        items,
    };
    for (index, outcome) in ctx.run_split(runs).await {
        outcomes[index] = Some(outcome);
    }
    outcomes
        .into_iter()
        .map(|o| o.unwrap_or(Ok(Outcome::Unobserved)))
        .collect()
}

/// What a batch run needs.
struct Ctx<'a> {
    client: &'a Client,
    registered: &'a Registered,
    metrics: &'a Metrics,
    items: &'a [Item],
}

impl Ctx<'_> {
    /// The labels of this batch's observer for `run`'s column.
    fn labels(&self, run: &Runnable) -> ObserverLabels {
        self.metrics.labels(&run.cell, &self.registered.name)
    }

    /// Runs `runs` as one batch; if it conflicts or fails, splits it in halves and runs each
    /// the same way, down to single cells. Returns (item index, outcome) pairs.
    fn run_split(
        &self,
        runs: Vec<Runnable>,
    ) -> futures::future::BoxFuture<'_, Vec<(usize, Result<Outcome, TxnError>)>> {
        Box::pin(async move {
            match runs.len() {
                0 => Vec::new(),
                1 => {
                    // Not paced by the lane: `Client::run` retries a single cell's conflicts
                    // itself (with backoff), which the lane would neither see nor want to
                    // wait behind.
                    let outcome = self.run_single(&runs[0]).await;
                    vec![(runs[0].index, outcome)]
                }
                _ => match self.run_batch_in_lane(&runs).await {
                    Ok(outcomes) => outcomes,
                    Err(ObserverError::Txn(e)) if is_outage(&e) => {
                        // An outage fails every half the same way: retry the batch whole,
                        // later (with backoff, not counted as a failure).
                        tracing::debug!(cells = runs.len(), error = %e, "batch met a transient error; retried later");
                        let error = e.to_string();
                        runs.iter()
                            .map(|r| {
                                let error = error.clone();
                                (r.index, Ok(Outcome::Transient { error }))
                            })
                            .collect()
                    }
                    Err(e) => {
                        // Split on every failure: a conflict (one hot cell must not starve
                        // the rest), the observer's failure (a failing cell fails alone), and
                        // anything else (a cell whose record is corrupt must not hold the
                        // others back; single cells report their own error).
                        let labels = self.labels(&runs[0]);
                        self.metrics.count(Event::Split, Some(&labels));
                        if e.as_txn_error().is_some_and(TxnError::is_retryable) {
                            self.metrics.count(Event::Conflict, Some(&labels));
                        }
                        tracing::debug!(cells = runs.len(), error = %e, "batch split");
                        let mut runs = runs;
                        let second = runs.split_off(runs.len() / 2);
                        let mut out = self.run_split(runs).await;
                        out.extend(self.run_split(second).await);
                        out
                    }
                },
            }
        })
    }

    /// [`Ctx::run_batch_once`] once the observer's lane lets it go ([`crate::lane`]); a
    /// write conflict lowers the lane's limit.
    async fn run_batch_in_lane(
        &self,
        runs: &[Runnable],
    ) -> Result<Vec<(usize, Result<Outcome, TxnError>)>, ObserverError> {
        let entered = self.registered.lane.enter().await;
        let result = self.run_batch_once(runs).await;
        entered.ended(
            matches!(&result, Err(e) if e.as_txn_error().is_some_and(TxnError::is_retryable)),
        );
        result
    }

    /// One attempt at `runs` (two or more cells) in one transaction: checks and sets each
    /// strong cell's acknowledgment, runs the observer for the cells not covered yet, commits, then
    /// deletes the handled keys with one `batch_delete`.
    async fn run_batch_once(
        &self,
        runs: &[Runnable],
    ) -> Result<Vec<(usize, Result<Outcome, TxnError>)>, ObserverError> {
        let started = Instant::now();
        let txn = self.client.begin().await?;
        let ran = match self.batch_body(&txn, runs).await {
            Ok(ran) => ran,
            Err(e) => {
                txn.rollback();
                return Err(e);
            }
        };
        txn.commit().await?;
        Metrics::add(&self.metrics.batches);
        let keys = runs
            .iter()
            .map(|r| self.items[r.index].key.clone())
            .collect();
        if let Err(e) = self.client.remove_notify_keys(keys).await {
            // Committed: the acknowledgments cover these keys (strong), so a later attempt
            // finds them covered and deletes them then; a weak observer runs again for them
            // (at least once).
            tracing::debug!(error = %e, "deleting a batch's notify keys failed; retried later");
            return Ok(runs
                .iter()
                .map(|r| (r.index, Ok(Outcome::Pending)))
                .collect());
        }
        let latency = started.elapsed();
        let labels = self.labels(&runs[0]);
        self.metrics.record_run(&labels, runs.len(), latency);
        Ok(runs
            .iter()
            .zip(ran)
            .map(|(r, ran)| {
                if ran {
                    self.metrics.record_latency(latency);
                    self.metrics.count(Event::Ran, Some(&labels));
                    self.metrics.record_commit_to_run(&labels, r.written_ms);
                    (r.index, Ok(Outcome::Ran))
                } else {
                    self.metrics.count(Event::Duplicate, Some(&labels));
                    (r.index, Ok(Outcome::Covered))
                }
            })
            .collect())
    }

    /// The body of a batch transaction: reads every cell and its acknowledgment (at once),
    /// runs the observer for the cells whose change is not covered yet, sets their
    /// acknowledgments. Returns per run whether the observer ran for it.
    async fn batch_body(
        &self,
        txn: &Transaction,
        runs: &[Runnable],
    ) -> Result<Vec<bool>, ObserverError> {
        let name = &self.registered.name;
        // One batched read of every covered cell and its acknowledgment (reading a cell
        // rolls a committed writer's lock forward first).
        let mut wanted = Vec::with_capacity(2 * runs.len());
        for r in runs.iter().filter(|r| r.covered.is_some()) {
            wanted.push(r.cell.clone());
            wanted.push(Registry::ack_cell(&r.cell, name));
        }
        let mut read = txn.get_many_versioned(&wanted).await?.into_iter();
        let mut acks = Vec::with_capacity(runs.len());
        for r in runs {
            let Some(covered) = r.covered else {
                acks.push(None);
                continue;
            };
            let (_, latest) = read.next().unwrap_or_default();
            let (ack, _) = read.next().unwrap_or_default();
            let m = covered.max(latest.unwrap_or(0));
            acks.push(Some((
                Registry::ack_cell(&r.cell, name),
                m,
                m <= parse_ack(ack),
            )));
        }
        let ran: Vec<bool> = acks
            .iter()
            .map(|a| !matches!(a, Some((_, _, true))))
            .collect();
        let (cells, commits): (Vec<Cell>, Vec<Option<u64>>) = runs
            .iter()
            .zip(&ran)
            .filter(|(_, ran)| **ran)
            .map(|(r, _)| (r.cell.clone(), r.notification.commit_ts()))
            .unzip();
        if !cells.is_empty() {
            call_batch(
                self.registered.observer.clone(),
                txn.clone(),
                &cells,
                &commits,
            )
            .await?;
        }
        for (ack, ran) in acks.into_iter().zip(&ran) {
            if let (Some((ack_cell, m, _)), true) = (ack, ran) {
                txn.set(ack_cell, m.to_be_bytes().to_vec());
            }
        }
        Ok(ran)
    }

    /// Runs the observer for one cell (`Client::run`: retried on conflicts) and deletes its
    /// key.
    async fn run_single(&self, run: &Runnable) -> Result<Outcome, TxnError> {
        let key = &self.items[run.index].key;
        let labels = self.labels(run);
        match run_observer(
            self.client,
            self.registered,
            &run.cell,
            run.covered,
            run.notification.commit_ts(),
            self.metrics,
            &labels,
        )
        .await
        {
            Ok(ran) => {
                self.client.remove_notify_keys(vec![key.clone()]).await?;
                if ran {
                    self.metrics.count(Event::Ran, Some(&labels));
                    self.metrics.record_commit_to_run(&labels, run.written_ms);
                    Ok(Outcome::Ran)
                } else {
                    self.metrics.count(Event::Duplicate, Some(&labels));
                    Ok(Outcome::Covered)
                }
            }
            Err(ObserverError::Txn(e)) if e.is_retryable() => {
                self.metrics.count(Event::Conflict, Some(&labels));
                Ok(Outcome::Pending)
            }
            Err(ObserverError::Txn(e)) if is_outage(&e) => Ok(Outcome::Transient {
                error: e.to_string(),
            }),
            Err(e) => {
                self.metrics.count(Event::Failed, Some(&labels));
                // The decided record for every kind of observer: a weak observer's raw
                // strong record would need the writer's primary, which GC may remove
                // before the letter is replayed.
                Ok(Outcome::Failed {
                    error: e.render(),
                    resolved: Some(run.notification.clone()),
                })
            }
        }
    }
}

/// Whether `e` is an outage rather than a conflict or a failure: a store or oracle that is
/// unavailable or slow, a commit whose outcome is unknown. It passes if the same work is
/// tried again later (the acknowledgment makes a strong run that did commit a duplicate).
fn is_outage(e: &TxnError) -> bool {
    // An attempt past its lifetime is not an outage: a run that always takes that long
    // must fail (and be split, and reach its dead letter) instead of being retried forever.
    e.is_transient() && !e.is_retryable() && !matches!(e, TxnError::SnapshotTooOld { .. })
}

/// Runs the observer for one cell in `client.run`, catching panics as failures. The
/// observer's own error comes back as it wrote it; transaction errors inside it are retried
/// by `run`.
async fn run_observer(
    client: &Client,
    registered: &Registered,
    cell: &Cell,
    covered_ts: Option<u64>,
    commit_ts: Option<u64>,
    metrics: &Metrics,
    labels: &ObserverLabels,
) -> Result<bool, ObserverError> {
    let started = Instant::now();
    let attempts = std::sync::atomic::AtomicU64::new(0);
    let ran = client
        .run(|txn| {
            let cell = cell.clone();
            let observer = registered.observer.clone();
            let name = registered.name.clone();
            let attempts = &attempts;
            async move {
                if attempts.fetch_add(1, std::sync::atomic::Ordering::Relaxed) > 0 {
                    metrics.count(Event::Conflict, Some(labels));
                }
                let Some(covered_ts) = covered_ts else {
                    // Weak: no acknowledgment check.
                    return call(observer, txn, cell, commit_ts).await.map(|()| true);
                };
                // Reading the cell rolls a committed writer's lock forward first.
                let (_, latest) = txn.get_versioned(&cell).await?;
                let ack_cell = Registry::ack_cell(&cell, &name);
                let ack = parse_ack(txn.get(&ack_cell).await?);
                let m = covered_ts.max(latest.unwrap_or(0));
                if m <= ack {
                    return Ok(false);
                }
                call(observer, txn.clone(), cell, commit_ts).await?;
                txn.set(ack_cell, m.to_be_bytes().to_vec());
                Ok(true)
            }
        })
        .await?;
    if ran {
        metrics.record_latency(started.elapsed());
        metrics.record_run(labels, 1, started.elapsed());
    }
    Ok(ran)
}

/// Calls the observer for one cell (its change committed at `commit_ts`), turning its panic
/// into an [`ObserverError::Failed`] (which `run` does not retry).
async fn call(
    observer: std::sync::Arc<dyn crate::registry::Observer>,
    txn: Transaction,
    cell: Cell,
    commit_ts: Option<u64>,
) -> Result<(), ObserverError> {
    caught(
        AssertUnwindSafe(observer.observe_change(txn, cell, commit_ts))
            .catch_unwind()
            .await,
    )
}

/// Calls the observer for a batch of cells (their changes committed at `commit_ts`),
/// turning its panic into a failure.
async fn call_batch(
    observer: std::sync::Arc<dyn crate::registry::Observer>,
    txn: Transaction,
    cells: &[Cell],
    commit_ts: &[Option<u64>],
) -> Result<(), ObserverError> {
    caught(
        AssertUnwindSafe(observer.observe_changes(txn, cells, commit_ts))
            .catch_unwind()
            .await,
    )
}

/// An observer's result, its panic made an [`ObserverError::Failed`].
fn caught(
    result: Result<Result<(), ObserverError>, Box<dyn std::any::Any + Send>>,
) -> Result<(), ObserverError> {
    match result {
        Ok(result) => result,
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "observer panicked".to_string());
            Err(ObserverError::failed(format!("panic: {message}")))
        }
    }
}
