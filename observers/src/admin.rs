//! An operator's view of an observer application in a store, from any process: the worker
//! registry, the notification backlog, dead letters, locks, cells and their versions, and
//! whether the work is drained. Every function returns data and prints nothing
//! (`percolator-ctl` renders it); none of them needs the observers' registry.
//!
//! Ages are measured on oracle time (the client's timestamp source), as heartbeats, lock
//! TTLs and notification timestamps are.
//!
//! Reads here are raw: they decode heads, versions and notify keys as they are in the store
//! and never resolve, wait on or fence a lock (an inspection must not change what it
//! inspects). [`scan`] therefore shows a cell's lock beside its committed versions instead of
//! resolving it, and versions below the GC safe point may be gone.
//!
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

use crate::deadletter::DeadLetter;
use crate::error::WorkerError;
use crate::worker::membership::{decode_record, WORKERS_META};
use percolator::codec::{Key, Space};
use percolator::kv::{scan_all, KeyRange, RangePager, ScanOrder};
use percolator::record::{Head, Lock, Notification, Op, Version};
use percolator::{Cell, Client, Timestamp, TxnError};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// How long a worker counts as live after its last heartbeat, unless told otherwise: three
/// heartbeats of the default worker configuration, as workers judge each other.
pub const DEFAULT_LIVENESS: Duration = Duration::from_millis(1500);

/// The current oracle time, in physical milliseconds.
async fn oracle_ms(client: &Client) -> Result<u64, WorkerError> {
    let now = client
        .oracle()
        .get_timestamp()
        .await
        .map_err(TxnError::from)?;
    Ok(now.physical_ms())
}

fn age(now_ms: u64, ts: u64) -> Duration {
    Duration::from_millis(now_ms.saturating_sub(Timestamp(ts).physical_ms()))
}

/// A record of the worker registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerInfo {
    /// The worker's id (`WorkerConfig::id`).
    pub id: String,
    /// Time since its last heartbeat.
    pub heartbeat_age: Duration,
    /// Notifications it has handled since it started (`None`: an older worker that does not
    /// publish it).
    pub handled: Option<u64>,
    /// Whether it heartbeat within the liveness horizon (a killed worker's record stays
    /// until someone removes it; it no longer counts in the split).
    pub live: bool,
    /// Its index in the hash split among the live workers (`None` if not live): it owns the
    /// cells whose stable hash modulo the live count is this index.
    pub share_index: Option<usize>,
    /// Live workers the split is among (its share is `1 / live_workers` of the cells).
    pub live_workers: usize,
}

/// Raw records of the worker registry: (id, beat in oracle ms, progress), in key order.
async fn worker_records(client: &Client) -> Result<Vec<(String, u64, Option<u64>)>, WorkerError> {
    let pairs = scan_all(
        client.store().as_ref(),
        client.codec().meta_prefix_range(WORKERS_META),
        ScanOrder::Forward,
    )
    .await?;
    Ok(pairs
        .into_iter()
        .filter_map(|(key, value)| {
            let Ok(Key::Meta(name)) = client.codec().decode(&key) else {
                return None;
            };
            let id = name.strip_prefix(WORKERS_META)?;
            let (beat, handled) = decode_record(&value)?;
            Some((String::from_utf8_lossy(id).into_owned(), beat, handled))
        })
        .collect())
}

/// Every record of the worker registry, live ones first in split order (as workers sort
/// them), then those whose heartbeat is older than `liveness`.
pub async fn workers(client: &Client, liveness: Duration) -> Result<Vec<WorkerInfo>, WorkerError> {
    let records = worker_records(client).await?;
    let now = oracle_ms(client).await?;
    let horizon = liveness.as_millis() as u64;
    let is_live = |beat: u64| beat.saturating_add(horizon) >= now;
    let live_workers = records.iter().filter(|(_, beat, _)| is_live(*beat)).count();
    let mut index = 0;
    let mut out: Vec<WorkerInfo> = records
        .into_iter()
        .map(|(id, beat, handled)| {
            let live = is_live(beat);
            let share_index = live.then(|| {
                index += 1;
                index - 1
            });
            WorkerInfo {
                id,
                heartbeat_age: Duration::from_millis(now.saturating_sub(beat)),
                handled,
                live,
                share_index,
                live_workers,
            }
        })
        .collect();
    out.sort_by_key(|w| (!w.live, w.share_index));
    Ok(out)
}

/// The backlog of one observed column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ColumnBacklog {
    /// The table.
    pub table: Vec<u8>,
    /// The column.
    pub column: Vec<u8>,
    /// Notifications waiting.
    pub count: u64,
    /// Age of the oldest (from the timestamp in its key: the writer's start_ts, or the
    /// timestamp of a weak or replayed notification).
    pub oldest_age: Duration,
}

/// The notification backlog of a namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Backlog {
    /// The notify floor the scan started from (a bucket: a wall-clock second).
    pub floor: u64,
    /// Per (table, column), in key order.
    pub columns: Vec<ColumnBacklog>,
    /// Keys in the notify space that do not decode as notify keys of this namespace.
    pub undecodable: u64,
}

impl Backlog {
    /// Notifications waiting, all columns together.
    pub fn total(&self) -> u64 {
        self.columns.iter().map(|c| c.count).sum::<u64>() + self.undecodable
    }
}

/// The notification backlog per column: one pass over the notify space from the notify
/// floor, so its cost is the live notifications plus the delete markers of the buckets since
/// the oldest one (ARCHITECTURE.md, "The notify space").
pub async fn backlog(client: &Client) -> Result<Backlog, WorkerError> {
    let floor = client.notify_floor().await?;
    let now = oracle_ms(client).await?;
    let mut columns: BTreeMap<(Vec<u8>, Vec<u8>), (u64, u64)> = BTreeMap::new();
    let mut undecodable = 0;
    let range = client.codec().notify_from(floor);
    let mut pager = RangePager::new(client.store().as_ref(), range, ScanOrder::Forward, 1024);
    while let Some(page) = pager.next_page().await? {
        for (key, _) in page {
            let Ok(Key::Notify { cell, ts, .. }) = client.codec().decode(&key) else {
                undecodable += 1;
                continue;
            };
            let entry = columns.entry((cell.table, cell.column)).or_insert((0, ts));
            entry.0 += 1;
            entry.1 = entry.1.min(ts);
        }
    }
    Ok(Backlog {
        floor,
        columns: columns
            .into_iter()
            .map(|((table, column), (count, oldest))| ColumnBacklog {
                table,
                column,
                count,
                oldest_age: age(now, oldest),
            })
            .collect(),
        undecodable,
    })
}

/// One notification waiting in the notify space.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingNotification {
    /// Its key.
    pub key: Vec<u8>,
    /// Its bucket (the wall-clock second it was put in).
    pub bucket: u64,
    /// The notified cell.
    pub cell: Cell,
    /// The timestamp in its key (the writer's start_ts for a strong notification).
    pub ts: u64,
    /// Its record (`None`: it does not decode; workers dead-letter such keys).
    pub notification: Option<Notification>,
    /// Age of `ts`.
    pub age: Duration,
}

/// The first `limit` notifications of the backlog, oldest bucket first (the order scanners
/// take them in).
pub async fn notifications(
    client: &Client,
    limit: usize,
) -> Result<Vec<PendingNotification>, WorkerError> {
    let floor = client.notify_floor().await?;
    let now = oracle_ms(client).await?;
    let range = client.codec().notify_from(floor);
    let mut out = Vec::new();
    let page_size = limit.clamp(1, 1024);
    let mut pager = RangePager::new(
        client.store().as_ref(),
        range,
        ScanOrder::Forward,
        page_size,
    );
    'pages: while let Some(page) = pager.next_page().await? {
        for (key, value) in page {
            if out.len() >= limit {
                break 'pages;
            }
            let Ok(Key::Notify { bucket, cell, ts }) = client.codec().decode(&key) else {
                continue;
            };
            out.push(PendingNotification {
                key,
                bucket,
                cell,
                ts,
                notification: Notification::decode(&value).ok(),
                age: age(now, ts),
            });
        }
    }
    Ok(out)
}

/// A dead letter with what its key says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetterInfo {
    /// A short stable id: 16 hex digits of a hash of the notify key ([`dead_letter_id`]).
    pub id: String,
    /// The notified cell (`None` if the key does not decode).
    pub cell: Option<Cell>,
    /// The timestamp in the notify key.
    pub ts: Option<u64>,
    /// Age of that timestamp.
    pub age: Option<Duration>,
    /// The notification record (`None` if it does not decode: such keys are dead-lettered
    /// at once).
    pub notification: Option<Notification>,
    /// The letter itself ([`DeadLetter::replay`], [`DeadLetter::discard`]).
    pub letter: DeadLetter,
}

/// The id of a dead letter: FNV-1a (64 bits) of its notify key, in hex. Stable across
/// processes and versions, short enough to type.
pub fn dead_letter_id(letter: &DeadLetter) -> String {
    let hash = letter
        .notify_key
        .iter()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
    format!("{hash:016x}")
}

/// Every dead letter of the namespace, in key order (by the bucket and cell of its key).
pub async fn dead_letters(client: &Client) -> Result<Vec<DeadLetterInfo>, WorkerError> {
    let now = oracle_ms(client).await?;
    Ok(DeadLetter::list(client)
        .await?
        .into_iter()
        .map(|letter| {
            let (cell, ts) = match client.codec().decode(&letter.notify_key) {
                Ok(Key::Notify { cell, ts, .. }) => (Some(cell), Some(ts)),
                _ => (None, None),
            };
            DeadLetterInfo {
                id: dead_letter_id(&letter),
                cell,
                ts,
                age: ts.map(|ts| age(now, ts)),
                notification: Notification::decode(&letter.notification).ok(),
                letter,
            }
        })
        .collect())
}

/// The dead letters whose id starts with `id` (a full id, or a prefix as `git` takes one).
pub async fn find_dead_letters(
    client: &Client,
    id: &str,
) -> Result<Vec<DeadLetterInfo>, WorkerError> {
    let id = id.to_ascii_lowercase();
    Ok(dead_letters(client)
        .await?
        .into_iter()
        .filter(|d| !id.is_empty() && d.id.starts_with(&id))
        .collect())
}

/// A lock found on a cell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockInfo {
    /// The locked cell.
    pub cell: Cell,
    /// The lock (its transaction's start_ts, primary, pending write and TTL).
    pub lock: Lock,
    /// Time since the transaction's start_ts.
    pub age: Duration,
    /// Whether oracle time has passed `physical(start_ts) + ttl`: the writer stopped
    /// heartbeating (crashed or stalled), and the next reader or `resolve_all_locks` rolls
    /// it forward or back.
    pub expired: bool,
}

impl LockInfo {
    fn new(cell: Cell, lock: Lock, now: u64) -> LockInfo {
        let start = Timestamp(lock.start_ts).physical_ms();
        LockInfo {
            expired: now > start.saturating_add(lock.ttl_ms),
            age: Duration::from_millis(now.saturating_sub(start)),
            cell,
            lock,
        }
    }
}

fn decode_head(key: &[u8], raw: &[u8]) -> Result<Head, WorkerError> {
    Head::decode(raw).map_err(|why| WorkerError::Txn(TxnError::corrupt(key, why)))
}

/// Every lock in the namespace (one pass over the head space: O(cells)).
pub async fn locks(client: &Client) -> Result<Vec<LockInfo>, WorkerError> {
    let now = oracle_ms(client).await?;
    let range = client.codec().space_range(Space::Head);
    let mut pager = RangePager::new(client.store().as_ref(), range, ScanOrder::Forward, 1024);
    let mut out = Vec::new();
    while let Some(page) = pager.next_page().await? {
        for (key, raw) in page {
            let Ok(Key::Head(cell)) = client.codec().decode(&key) else {
                continue;
            };
            if let Some(lock) = decode_head(&key, &raw)?.lock {
                out.push(LockInfo::new(cell, lock, now));
            }
        }
    }
    Ok(out)
}

/// A committed value as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoredValue {
    /// The value.
    Bytes(Vec<u8>),
    /// The version is a delete.
    Deleted,
    /// Stored out of line and no longer there (collected by GC), `len` bytes.
    Missing {
        /// Its length as the version records it.
        len: u64,
    },
}

/// One committed version of a cell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CellVersion {
    /// When its transaction committed.
    pub commit_ts: u64,
    /// When its transaction started.
    pub start_ts: u64,
    /// What it wrote.
    pub value: StoredValue,
}

/// A cell as [`scan`] found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CellView {
    /// The cell.
    pub cell: Cell,
    /// Its lock, if a transaction holds one (not resolved by the scan).
    pub lock: Option<LockInfo>,
    /// The version visible at the scan's timestamp, or with `history` every version
    /// still stored, newest first.
    pub versions: Vec<CellVersion>,
}

/// Which rows of a table [`scan`] reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowRange {
    /// First row (inclusive).
    pub start: Vec<u8>,
    /// End row (exclusive); `None`: to the end of the table.
    pub end: Option<Vec<u8>>,
}

impl RowRange {
    /// Every row of the table.
    pub fn all() -> RowRange {
        RowRange {
            start: Vec::new(),
            end: None,
        }
    }

    /// The rows starting with `prefix`.
    pub fn prefix(prefix: &[u8]) -> RowRange {
        RowRange {
            start: prefix.to_vec(),
            end: percolator::kv::prefix_successor(prefix),
        }
    }
}

/// Cells of `table` with rows in `rows`, in (row, column) order, at most `limit` of them:
/// each with its lock and, at `at` (default: the latest commit), its visible version, or
/// with `history` all its stored versions. Cells with nothing visible at `at` and no lock
/// are left out (deleted or not yet written), unless `history` shows them.
pub async fn scan(
    client: &Client,
    table: &[u8],
    rows: &RowRange,
    at: Option<Timestamp>,
    history: bool,
    limit: usize,
) -> Result<Vec<CellView>, WorkerError> {
    let now = oracle_ms(client).await?;
    let at = at.map_or(u64::MAX, |t| t.0);
    let range = client
        .codec()
        .rows_range(Space::Head, table, &rows.start, rows.end.as_deref());
    let mut pager = RangePager::new(client.store().as_ref(), range, ScanOrder::Forward, 256);
    let mut out = Vec::new();
    'pages: while let Some(page) = pager.next_page().await? {
        for (key, raw) in page {
            if out.len() >= limit {
                break 'pages;
            }
            let Ok(Key::Head(cell)) = client.codec().decode(&key) else {
                continue;
            };
            let head = decode_head(&key, &raw)?;
            let versions = if history {
                versions_of(client, &cell, &head).await?
            } else {
                visible_at(client, &cell, &head, at).await?
            };
            let lock = head.lock.map(|l| LockInfo::new(cell.clone(), l, now));
            let shown = lock.is_some()
                || if history {
                    !versions.is_empty()
                } else {
                    versions
                        .first()
                        .is_some_and(|v| v.value != StoredValue::Deleted)
                };
            if shown {
                out.push(CellView {
                    cell,
                    lock,
                    versions,
                });
            }
        }
    }
    Ok(out)
}

async fn value_of(client: &Client, cell: &Cell, v: &Version) -> Result<CellVersion, WorkerError> {
    let value = match &v.op {
        Op::Put(bytes) => StoredValue::Bytes(bytes.clone()),
        Op::Delete => StoredValue::Deleted,
        Op::PutExternal(len) => match client
            .store()
            .get(&client.codec().data(cell, v.start_ts))
            .await?
        {
            Some(bytes) => StoredValue::Bytes(bytes),
            None => StoredValue::Missing { len: *len },
        },
    };
    Ok(CellVersion {
        commit_ts: v.commit_ts,
        start_ts: v.start_ts,
        value,
    })
}

/// The version of `cell` visible at `at` (the head's, else the newest `V` entry at or
/// below `at` that is not below the head's floor).
async fn visible_at(
    client: &Client,
    cell: &Cell,
    head: &Head,
    at: u64,
) -> Result<Vec<CellVersion>, WorkerError> {
    if let Some(v) = head.visible_at(at) {
        return Ok(vec![value_of(client, cell, v).await?]);
    }
    let range = client.codec().versions_at_or_below(cell, at);
    let found = client.store().scan(range, 1, ScanOrder::Forward).await?;
    for (key, bytes) in found {
        let v = Version::decode(&bytes).map_err(|why| TxnError::corrupt(&key, why))?;
        if v.commit_ts >= head.floor {
            return Ok(vec![value_of(client, cell, &v).await?]);
        }
    }
    Ok(Vec::new())
}

/// Every stored version of `cell`, newest first: the head's, then `V`'s (copies of the
/// head's and entries below the head's floor left out).
async fn versions_of(
    client: &Client,
    cell: &Cell,
    head: &Head,
) -> Result<Vec<CellVersion>, WorkerError> {
    let mut all: BTreeMap<u64, Version> = BTreeMap::new();
    for v in head.latest.iter().chain(head.recent.iter()) {
        all.insert(v.commit_ts, v.clone());
    }
    let range = client.codec().cell_range(Space::Version, cell);
    for (key, bytes) in scan_all(client.store().as_ref(), range, ScanOrder::Forward).await? {
        let v = Version::decode(&bytes).map_err(|why| TxnError::corrupt(&key, why))?;
        if v.commit_ts >= head.floor {
            all.entry(v.commit_ts).or_insert(v);
        }
    }
    let mut out = Vec::with_capacity(all.len());
    for v in all.values().rev() {
        out.push(value_of(client, cell, v).await?);
    }
    Ok(out)
}

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
        }
    }
}

/// Whether the work is drained: no notification left in the notify space and no observer
/// run in flight in any worker of any process (see the module docs for how runs in flight
/// are seen from another process). Takes about two heartbeats of the workers when nothing
/// is waiting. Workers whose last heartbeat is older than `liveness` count as dead.
pub async fn is_drained(
    client: &Client,
    liveness: Duration,
) -> Result<Result<(), NotDrained>, WorkerError> {
    let before: HashMap<String, (u64, Option<u64>)> = worker_records(client)
        .await?
        .into_iter()
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
