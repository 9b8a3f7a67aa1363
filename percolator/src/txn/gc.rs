//! Lock resolution passes and version garbage collection (`percolator::design::gc`).

use super::heads::HeadSnapshot;
use super::locks::TxnStatus;
use super::notify::KeyRecheck;
use super::{lock_wait, Shared, TxnError, TxnResult};
use crate::codec::{Cell, Key, Space};
use crate::kv::{retry_unavailable, KeyRange, RangePager, ScanOrder};
use crate::record::{Head, Op, Version};
use crate::ts::Timestamp;
use std::collections::HashSet;

/// Name of the meta record holding the last published GC safe point.
pub const SAFE_POINT_META: &[u8] = b"gc_safe_point";

/// Name of the meta record holding the highest safe point a GC pass has resolved below:
/// published once the pass's locks, strong notify keys and write-once records with
/// start_ts below it are all decided and rewritten, so none of them needs its primary any
/// more (`percolator::design::gc`, "Resolved below").
pub const RESOLVED_BELOW_META: &[u8] = b"gc_resolved_below";

/// What a GC pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GcStats {
    /// Locks older than the safe point that were rolled forward or back.
    pub locks_resolved: usize,
    /// `V` entries deleted.
    pub versions_deleted: usize,
    /// `D` (out-of-line value) keys deleted.
    pub data_deleted: usize,
    /// Heads shrunk to tombstones (latest was a delete below the safe point).
    pub heads_tombstoned: usize,
    /// Strong notify keys older than the safe point rewritten as committed or deleted.
    pub notifications_resolved: usize,
    /// Write-once records of writers older than the safe point rewritten as committed or
    /// deleted (rolled back).
    pub records_resolved: usize,
    /// Write-once records no snapshot at or above the safe point sees, deleted.
    pub records_deleted: usize,
}

/// Rewrites every strong notify key with start_ts below `below` as "committed at c", or
/// deletes it if its writer rolled back, so that no status check needs old versions.
pub(crate) async fn resolve_notifications_below(
    shared: &Shared,
    below: Timestamp,
) -> TxnResult<usize> {
    use crate::record::Notification;
    let mut resolved = 0;
    // Nothing is left below the notify floor.
    let range = shared
        .codec
        .notify_from(retried(|| shared.read_notify_floor()).await?.scan_from);
    let mut pager = RangePager::new(shared.kv.as_ref(), range, ScanOrder::Forward, 1024);
    while let Some(page) = pager.next_page_retrying().await? {
        for (key, raw) in page {
            let Ok(Notification::Strong {
                start_ts,
                primary,
                ttl_ms,
            }) = Notification::decode(&raw)
            else {
                continue;
            };
            let start_ts = Timestamp(start_ts);
            if start_ts >= below {
                continue;
            }
            match shared.decided_status(&primary, start_ts, ttl_ms).await? {
                TxnStatus::Committed(commit_ts) => {
                    let record = Notification::Committed {
                        commit_ts: commit_ts.0,
                    }
                    .encode();
                    // A plain put (notify keys are never CASed): if an observer consumed the
                    // key meanwhile, the resurrected key is harmless, as its acknowledgment
                    // already covers commit_ts and the observer will not run again.
                    shared.kv.put(key.clone(), record).await?;
                }
                _ => {
                    // Only if the key still holds the strong record read above: a "rolled
                    // back" answer is wrong once another pass rewrote the key as committed and
                    // trimmed the evidence of the commit (`percolator::design::gc`).
                    #[cfg(feature = "planted")]
                    if crate::planted::active(crate::planted::Bug::GcUnconditionalDelete) {
                        shared.kv.delete(key.clone()).await?;
                        shared.count_removed(1);
                        resolved += 1;
                        continue;
                    }
                    if shared.delete_if_unchanged(&key, &raw).await? == KeyRecheck::Deleted {
                        shared.count_removed(1);
                    }
                }
            }
            resolved += 1;
        }
    }
    Ok(resolved)
}

/// Runs `step` again while it fails with a transient store error
/// ([`crate::kv::KvError::Unavailable`]), as [`retry_unavailable`] does for one call: for
/// steps a pass may repeat (`percolator::design::gc`, "Transient failures").
pub(super) async fn retried<T, F, Fut>(mut step: F) -> TxnResult<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = TxnResult<T>>,
{
    let mut attempt = 0;
    loop {
        match step().await {
            Err(TxnError::Storage(e)) => match crate::kv::retry_after(&e, attempt) {
                Some(pause) => {
                    tracing::debug!(error = %e, attempt, "gc step retried");
                    tokio::time::sleep(pause).await;
                    attempt += 1;
                }
                None => return Err(TxnError::Storage(e)),
            },
            other => return other,
        }
    }
}

/// The decoded `key` met by a GC pass; a key of a table id this client does not know is
/// refused with [`crate::codec::TableIdsError::UnknownId`] (GC must see every key).
fn cell_of(shared: &Shared, key: &[u8]) -> TxnResult<Key> {
    shared.codec.decode(key).map_err(|e| match e {
        crate::codec::CodecError::UnknownTableId(id) => {
            crate::codec::TableIdsError::UnknownId { id }.into()
        }
        e => TxnError::Storage(crate::kv::KvError::Engine {
            op: "gc",
            message: format!("undecodable key {}: {e}", key.escape_ascii()),
        }),
    })
}

/// Resolves every lock with start_ts below `below`, waiting on live ones.
pub(crate) async fn resolve_locks_below(shared: &Shared, below: Timestamp) -> TxnResult<usize> {
    let mut resolved = 0;
    let range = shared.codec.space_range(Space::Head);
    let mut pager = RangePager::new(shared.kv.as_ref(), range, ScanOrder::Forward, 1024);
    while let Some(page) = pager.next_page_retrying().await? {
        for (key, raw) in page {
            let Key::Head(cell) = cell_of(shared, &key)? else {
                continue;
            };
            let mut snap = HeadSnapshot::decode(&key, Some(raw))?;
            let mut attempt = 0;
            while let Some(lock) = snap.head.lock.clone().filter(|l| l.start_ts < below.0) {
                if shared.resolve_lock(&cell, &lock).await? == TxnStatus::Pending {
                    shared.writers.wait(lock.start_ts, lock_wait(attempt)).await;
                    attempt += 1;
                } else {
                    resolved += 1;
                }
                snap = shared.read_head(&cell).await?;
            }
        }
    }
    Ok(resolved)
}

/// Publishes `safe_point` in the meta record `name`; it never moves backwards.
async fn publish_safe_point(shared: &Shared, name: &[u8], safe_point: Timestamp) -> TxnResult<()> {
    let key = shared.codec.meta(name);
    let mut current = shared.kv.get(&key).await?;
    loop {
        let published = decode_safe_point(&key, current.as_deref())?;
        if published >= safe_point {
            return Ok(());
        }
        let new = safe_point.0.to_be_bytes().to_vec();
        let out = shared
            .kv
            .compare_and_swap(key.clone(), current.clone(), new.clone())
            .await?;
        if out.swapped || out.previous.as_deref() == Some(new.as_slice()) {
            return Ok(());
        }
        current = out.previous;
    }
}

/// The last published GC safe point (zero if none).
pub(crate) async fn read_safe_point(shared: &Shared) -> TxnResult<Timestamp> {
    read_meta_point(shared, SAFE_POINT_META).await
}

/// The highest safe point a GC pass has resolved below (zero if none): see
/// [`RESOLVED_BELOW_META`].
pub(crate) async fn read_resolved_below(shared: &Shared) -> TxnResult<Timestamp> {
    read_meta_point(shared, RESOLVED_BELOW_META).await
}

async fn read_meta_point(shared: &Shared, name: &[u8]) -> TxnResult<Timestamp> {
    let key = shared.codec.meta(name);
    let bytes = shared.kv.get(&key).await?;
    decode_safe_point(&key, bytes.as_deref())
}

/// Decodes the safe point record at `key` (absent: zero).
fn decode_safe_point(key: &[u8], bytes: Option<&[u8]>) -> TxnResult<Timestamp> {
    match bytes {
        None => Ok(Timestamp::ZERO),
        Some(bytes) => <[u8; 8]>::try_from(bytes)
            .map(|b| Timestamp(u64::from_be_bytes(b)))
            .map_err(|_| {
                TxnError::corrupt(
                    key,
                    crate::record::RecordError::Truncated {
                        field: "safe point",
                    },
                )
            }),
    }
}

pub(crate) async fn collect(shared: &Shared, safe_point: Timestamp) -> TxnResult<GcStats> {
    let now = shared.oracle.get_timestamp().await?;
    let lag_ms = shared.config.gc_lag.as_millis() as u64;
    if safe_point.physical_ms() + lag_ms > now.physical_ms() {
        return Err(TxnError::InvalidArgument(format!(
            "safe point {safe_point} is less than the GC lag ({lag_ms} ms) behind the oracle ({now})"
        )));
    }
    let mut stats = GcStats::default();
    // 1. Publish; 2. resolve every older lock before deleting anything.
    retried(|| publish_safe_point(shared, SAFE_POINT_META, safe_point)).await?;
    stats.locks_resolved = resolve_locks_below(shared, safe_point).await?;
    stats.notifications_resolved = resolve_notifications_below(shared, safe_point).await?;
    // Records resolved, and those hidden collected, in one walk; before heads: a record
    // hidden under a head's delete goes before that head may shrink to a tombstone
    // (`percolator::design::once`).
    let records = super::once::resolve_and_collect(shared, safe_point).await?;
    (stats.records_resolved, stats.records_deleted) = (records.resolved, records.deleted);
    // Nothing below the safe point needs its primary now: say so, for clients that delete
    // primaries outright (`percolator::design::gc`, "Resolved below").
    retried(|| publish_safe_point(shared, RESOLVED_BELOW_META, safe_point)).await?;
    // Below, sp is compared with the timestamps inside records.
    let sp = safe_point.0;
    // 3–4. Per cell: drop versions hidden below the newest one at or below sp.
    let range = shared.codec.space_range(Space::Head);
    let mut pager = RangePager::new(shared.kv.as_ref(), range, ScanOrder::Forward, 1024);
    while let Some(page) = pager.next_page_retrying().await? {
        let mut cells = Vec::with_capacity(page.len());
        for (key, raw) in page {
            let Key::Head(cell) = cell_of(shared, &key)? else {
                continue;
            };
            cells.push((cell, HeadSnapshot::decode(&key, Some(raw))?));
        }
        // Which of the page's cells have any `V` entry, in one call (a scan per cell made a
        // pass one round trip per head kept on TiKV): a cell with none, most of them, has
        // nothing in `V` for `collect_cell` to delete. An entry spilled after this probe is
        // left to the next pass, as one spilled after a scan of the cell would be.
        let ranges: Vec<KeyRange> = cells
            .iter()
            .map(|(cell, _)| shared.codec.cell_range(Space::Version, cell))
            .collect();
        let probes = if ranges.is_empty() {
            Vec::new()
        } else {
            retry_unavailable(|| shared.kv.scan_many(ranges.clone(), 1)).await?
        };
        for ((cell, snap), probe) in cells.into_iter().zip(probes) {
            let in_v = !probe.is_empty();
            collect_cell(shared, &cell, snap, sp, in_v, &mut stats).await?;
        }
    }
    // Orphan out-of-line values (no lock, no version refers to them) below sp.
    collect_orphan_data(shared, sp, &mut stats).await?;
    tracing::info!(safe_point = sp, ?stats, "gc pass complete");
    Ok(stats)
}

async fn versions_in(shared: &Shared, range: KeyRange) -> TxnResult<Vec<(Vec<u8>, Version)>> {
    let mut out = Vec::new();
    let mut pager = RangePager::new(shared.kv.as_ref(), range, ScanOrder::Forward, 1024);
    while let Some(page) = pager.next_page_retrying().await? {
        for (key, bytes) in page {
            let v = Version::decode(&bytes).map_err(|why| TxnError::corrupt(&key, why))?;
            out.push((key, v));
        }
    }
    Ok(out)
}

async fn delete_versions(
    shared: &Shared,
    cell: &Cell,
    doomed: Vec<(Vec<u8>, Version)>,
    stats: &mut GcStats,
) -> TxnResult<()> {
    let mut keys = Vec::with_capacity(doomed.len());
    for (key, v) in doomed {
        if let Op::PutExternal(_) = v.op {
            keys.push(shared.codec.data(cell, v.start_ts));
            stats.data_deleted += 1;
        }
        keys.push(key);
        stats.versions_deleted += 1;
    }
    retry_unavailable(|| shared.kv.batch_delete(keys.clone())).await?;
    Ok(())
}

/// Drops `cell`'s versions hidden below its newest one at or below `sp` (or shrinks its head
/// to a tombstone). `in_v`: whether the cell had any `V` entry when its page was probed
/// (without one, its `V` is not scanned).
async fn collect_cell(
    shared: &Shared,
    cell: &Cell,
    snap: HeadSnapshot,
    sp: u64,
    in_v: bool,
    stats: &mut GcStats,
) -> TxnResult<()> {
    let head = &snap.head;
    // c*: the newest version at or below sp.
    let c_star = match &head.latest {
        Some(latest) if latest.commit_ts <= sp => Some(latest.commit_ts),
        _ => {
            let hidden = Head {
                latest: None,
                ..head.clone()
            };
            retried(|| shared.visible_version(cell, &hidden, Timestamp(sp)))
                .await?
                .map(|v| v.commit_ts)
        }
    };
    let Some(c_star) = c_star else {
        // Nothing visible at sp. V entries below the floor are garbage readers ignore, put
        // after an earlier GC (a stale write or spill that landed late): delete them.
        if head.floor > 0 && in_v {
            let below_floor = shared.codec.versions_at_or_below(cell, head.floor - 1);
            let garbage = versions_in(shared, below_floor).await?;
            if !garbage.is_empty() {
                delete_versions(shared, cell, garbage, stats).await?;
            }
        }
        return Ok(());
    };
    // A delete as the latest version below sp: shrink the head to a tombstone, drop all V.
    let tombstone = head.lock.is_none()
        && head
            .latest
            .as_ref()
            .is_some_and(|v| v.commit_ts <= sp && v.op == Op::Delete);
    if tombstone {
        let new = Head {
            seq: head.seq.saturating_add(1),
            latest: None,
            recent: Vec::new(),
            lock: None,
            rollback_ts: head.rollback_ts,
            floor: head.floor.max(sp),
        };
        // Retried after a lost reply: a CAS that applied then fails the retry (the head
        // moved on), as a lost race does.
        if retried(|| shared.cas_head(cell, &snap, new.clone()))
            .await?
            .is_ok()
        {
            stats.heads_tombstoned += 1;
            // Only versions at or below sp: once the head is a tombstone, new transactions
            // may commit the cell again (above sp, since sp is published and lags the
            // oracle), and the next prewrite puts their version in V: those must stay.
            if in_v {
                let below =
                    versions_in(shared, shared.codec.versions_at_or_below(cell, sp)).await?;
                delete_versions(shared, cell, below, stats).await?;
            }
        }
        return Ok(());
    }
    if c_star == 0 {
        return Ok(());
    }
    // Versions older than c* that the head still keeps in `recent`: drop them with one CAS
    // (a lost race leaves them to the next pass; no snapshot at or above sp can see them).
    if head.recent.iter().any(|v| v.commit_ts < c_star) {
        let mut trimmed = head.next();
        trimmed.recent.retain(|v| v.commit_ts >= c_star);
        if retried(|| shared.cas_head(cell, &snap, trimmed.clone()))
            .await?
            .is_ok()
        {
            stats.versions_deleted +=
                head.recent.len() - head.recent.iter().filter(|v| v.commit_ts >= c_star).count();
        }
    }
    // Every V entry strictly older than c*.
    if !in_v {
        return Ok(());
    }
    let older = versions_in(shared, shared.codec.versions_at_or_below(cell, c_star - 1)).await?;
    if !older.is_empty() {
        delete_versions(shared, cell, older, stats).await?;
    }
    Ok(())
}

async fn collect_orphan_data(shared: &Shared, sp: u64, stats: &mut GcStats) -> TxnResult<()> {
    let range = shared.codec.space_range(Space::Data);
    let mut pager = RangePager::new(shared.kv.as_ref(), range, ScanOrder::Forward, 1024);
    let mut doomed = Vec::new();
    while let Some(page) = pager.next_page_retrying().await? {
        for (key, _) in page {
            let Key::Data(cell, start_ts) = cell_of(shared, &key)? else {
                continue;
            };
            if start_ts >= sp {
                continue;
            }
            let head = shared.read_head(&cell).await?.head;
            let mut referenced: HashSet<u64> = HashSet::new();
            referenced.extend(head.lock.as_ref().map(|l| l.start_ts));
            referenced.extend(head.latest.as_ref().map(|v| v.start_ts));
            referenced.extend(head.recent.iter().map(|v| v.start_ts));
            if referenced.contains(&start_ts) {
                continue;
            }
            let versions =
                versions_in(shared, shared.codec.cell_range(Space::Version, &cell)).await?;
            if versions.iter().any(|(_, v)| v.start_ts == start_ts) {
                continue;
            }
            doomed.push(key);
        }
    }
    stats.data_deleted += doomed.len();
    retry_unavailable(|| shared.kv.batch_delete(doomed.clone())).await?;
    Ok(())
}
