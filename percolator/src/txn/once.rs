//! Write-once records (`percolator::design::once`): the prewrite's records, reads of a cell's
//! records at start_ts, deletion on abort, and GC's resolution and collection of records.

use super::locks::TxnStatus;
use super::notify::NotifyEntry;
use super::transaction::Transaction;
use super::{lock_wait, Shared, TxnError, TxnResult};
use crate::codec::{Cell, Key, Space};
use crate::kv::{retry_unavailable, CasRequest, KvPair, RangePager, ScanOrder};
use crate::record::{Notification, OnceRecord, Op, PendingRecords};
use crate::ts::Timestamp;

/// Records read per scan call of one cell (a cell normally has one record; more only after
/// aborted attempts).
const CELL_PAGE: usize = 16;

/// The visible write of a write-once cell: (commit_ts, what was written).
pub(super) type OnceVersion = (u64, Op);

/// What a read of one write-once cell's records found.
pub(super) struct OnceRead {
    /// The newest committed write visible at start_ts.
    pub(super) visible: Option<OnceVersion>,
    /// Whether a record of a writer that started after start_ts exists, or one that started
    /// at or below it committed above it. Only then can GC have deleted a record this
    /// snapshot would see (it deletes a record only below a newer committed one, which it
    /// keeps), so only then is the answer checked against the safe point, as an answer from
    /// beyond a head is (`percolator::design::gc`).
    pub(super) newer_commit: bool,
}

/// The records and notify keys a commit puts for its write-once cells.
#[derive(Default)]
pub(super) struct OnceWrites {
    /// `W` records (and their notify keys), for the primary's round's `batch_put`.
    pub(super) puts: Vec<KvPair>,
    /// The notify keys among `puts`, for the notify-floor settling.
    pub(super) notify_entries: Vec<NotifyEntry>,
}

impl Transaction {
    /// The records of `cells` (write-once, with their new values; `None`: delete) and their
    /// notify keys (for cells in `notified` or observed), decided by `primary`.
    pub(super) fn once_writes(
        &self,
        cells: &[(Cell, Option<Vec<u8>>)],
        primary: &Cell,
        notified: &std::collections::BTreeSet<Cell>,
        bucket: u64,
    ) -> OnceWrites {
        let shared = self.shared();
        let s = self.inner.start_ts.0;
        let ttl_ms = self.lock_ttl_ms();
        let mut out = OnceWrites::default();
        let notification = Notification::Strong {
            start_ts: s,
            primary: primary.clone(),
            ttl_ms,
        }
        .encode();
        let records = PendingRecords::new(primary, ttl_ms);
        out.puts.reserve(cells.len());
        let columns = shared.columns();
        for (cell, value) in cells {
            out.puts
                .push((shared.codec.once(cell, s), records.encode(value.as_deref())));
            if notified.contains(cell) || columns.is_observed(cell) {
                let key = shared.codec.notify(cell, s, bucket);
                out.puts.push((key, notification.clone()));
                out.notify_entries
                    .push((cell.clone(), s, notification.clone()));
            }
        }
        out
    }

    /// Deletes this transaction's records of `cells` after its primary was fenced (best
    /// effort: a record left behind is rolled back through its primary by whoever meets it,
    /// and deleted by GC).
    pub(super) async fn delete_once_records(&self, cells: &[(Cell, Option<Vec<u8>>)]) {
        if cells.is_empty() {
            return;
        }
        let s = self.inner.start_ts.0;
        let keys = cells
            .iter()
            .map(|(cell, _)| self.shared().codec.once(cell, s))
            .collect();
        if let Err(e) = self.shared().kv.batch_delete(keys).await {
            tracing::debug!(start_ts = s, error = %e, "deleting write-once records failed; GC removes them");
        }
    }

    /// The newest committed write of write-once `cell` visible at start_ts, resolving the
    /// records of writers that started at or below it (waiting on undecided ones, as a read
    /// waits on a lock).
    pub(super) async fn read_once(&self, cell: &Cell) -> TxnResult<OnceRead> {
        let records = self.once_records(std::slice::from_ref(cell)).await?;
        let records = records.into_iter().next().unwrap_or_default();
        self.visible_record(cell, records).await
    }

    /// Every record of each of `cells` (writers after start_ts included: their presence is
    /// what tells a read that GC may have changed its answer, `OnceRead::newer_commit`), in
    /// one `scan_many` call; a cell with more records than one page holds is paged on.
    pub(super) async fn once_records(&self, cells: &[Cell]) -> TxnResult<Vec<Vec<KvPair>>> {
        let shared = self.shared();
        let ranges: Vec<_> = cells
            .iter()
            .map(|cell| shared.codec.cell_range(Space::Once, cell))
            .collect();
        let mut pages = shared.kv.scan_many(ranges.clone(), CELL_PAGE).await?;
        for (range, records) in ranges.into_iter().zip(pages.iter_mut()) {
            if records.len() < CELL_PAGE {
                continue;
            }
            let mut rest = range;
            if let Some((last, _)) = records.last() {
                let mut after = last.clone();
                after.push(0);
                rest.start = after;
            }
            let mut pager = RangePager::new(shared.kv.as_ref(), rest, ScanOrder::Forward, 1024);
            while let Some(page) = pager.next_page().await? {
                records.extend(page);
            }
        }
        Ok(pages)
    }

    /// Of `records` (keys and values of one cell's `W` records), the newest committed write
    /// visible at start_ts.
    pub(super) async fn visible_record(
        &self,
        cell: &Cell,
        records: Vec<KvPair>,
    ) -> TxnResult<OnceRead> {
        let start_ts = self.inner.start_ts.0;
        let mut best: Option<OnceVersion> = None;
        let mut newer_commit = false;
        for (key, raw) in records {
            let Ok(Key::Once(_, s)) = self.shared().codec.decode(&key) else {
                return Err(TxnError::corrupt(
                    &key,
                    crate::record::RecordError::Truncated {
                        field: "write-once record key",
                    },
                ));
            };
            if s > start_ts {
                // A later writer: invisible here (its commit_ts is above s).
                newer_commit = true;
                continue;
            }
            let record = OnceRecord::decode(&raw).map_err(|e| TxnError::corrupt(&key, e))?;
            let Some(commit_ts) = self.record_fate(cell, &key, s, record.clone()).await? else {
                continue;
            };
            newer_commit |= commit_ts > start_ts;
            if commit_ts <= start_ts && best.as_ref().is_none_or(|(c, _)| commit_ts > *c) {
                best = Some((commit_ts, record.op().clone()));
            }
        }
        Ok(OnceRead {
            visible: best,
            newer_commit,
        })
    }

    /// The commit_ts of the writer `s` of the record at `key` (`None`: rolled back), waiting
    /// while it is undecided.
    async fn record_fate(
        &self,
        cell: &Cell,
        key: &[u8],
        s: u64,
        mut record: OnceRecord,
    ) -> TxnResult<Option<u64>> {
        let shared = self.shared();
        let mut attempt = 0;
        loop {
            let (primary, ttl_ms) = match &record {
                OnceRecord::Committed { commit_ts, .. } => return Ok(Some(*commit_ts)),
                OnceRecord::Pending {
                    primary, ttl_ms, ..
                } => (primary.clone(), *ttl_ms),
            };
            match shared.txn_status(&primary, Timestamp(s), ttl_ms).await? {
                TxnStatus::Committed(c) => return Ok(Some(c.0)),
                TxnStatus::RolledBack => {
                    // GC rewrites records below its safe point before it deletes the
                    // evidence of their commits: "rolled back" for such a record is exact
                    // only if the record still reads as pending-and-rolled-back after a safe
                    // point read above s (`percolator::design::once`).
                    let safe_point = super::gc::read_safe_point(shared).await?;
                    if safe_point.0 <= s {
                        return Ok(None);
                    }
                    match shared.kv.get(key).await? {
                        // Gone: rolled back and deleted, or committed and collected under a
                        // newer committed write of the cell at or below the safe point. Past
                        // our snapshot (safe point above start_ts) that newer write may be
                        // above it, and this record our answer: refuse. At or below it, the
                        // newer write is visible to us too and is the answer, so skipping
                        // this record is exact (`percolator::design::once`).
                        None if safe_point > self.inner.start_ts && !planted_gone() => {
                            tracing::debug!(%cell, start_ts = s, "a record gone below the safe point: snapshot too old");
                            return Err(self.too_old());
                        }
                        None => return Ok(None),
                        Some(raw) => {
                            match OnceRecord::decode(&raw).map_err(|e| TxnError::corrupt(key, e))? {
                                committed @ OnceRecord::Committed { .. } => record = committed,
                                OnceRecord::Pending { .. } => {
                                    tracing::warn!(%cell, start_ts = s, "a pending write-once record below the GC safe point");
                                    return Err(TxnError::CommitUnknown { start_ts: s });
                                }
                            }
                        }
                    }
                }
                TxnStatus::Pending => {
                    self.check_lifetime()?;
                    shared.writers.wait(s, lock_wait(attempt)).await;
                    attempt += 1;
                }
            }
        }
    }

    /// The write-once cells of `table` with rows in `[row_start, row_end)`, after `after`
    /// if given, with their visible write (deletes included, so a caller merging heads can
    /// drop them), in cell order; stops once `limit` cells hold a value
    /// ([`OnceRows::exhausted`] says whether it stopped early).
    pub(super) async fn once_rows(
        &self,
        table: &[u8],
        row_start: &[u8],
        row_end: Option<&[u8]>,
        after: Option<&Cell>,
        limit: usize,
    ) -> TxnResult<OnceRows> {
        let shared = self.shared();
        let mut range = shared
            .codec
            .rows_range(Space::Once, table, row_start, row_end);
        if let Some(after) = after {
            // The first key after every record of `after`: its prefix's successor (a cell's
            // prefix is never all 0xFF, it ends with the part terminator).
            if let Some(end) = shared.codec.cell_range(Space::Once, after).end {
                range.start = range.start.max(end);
            }
        }
        let kv = shared.kv.clone();
        let mut pager = RangePager::new(kv.as_ref(), range, ScanOrder::Forward, 1024);
        let mut out: Vec<(Cell, OnceVersion)> = Vec::new();
        let mut values = 0;
        let mut exhausted = true;
        let mut group: Option<(Cell, Vec<KvPair>)> = None;
        'pages: loop {
            let page = pager.next_page().await?;
            let done = page.is_none();
            for (key, raw) in page
                .into_iter()
                .flatten()
                .chain(done.then(|| (Vec::new(), Vec::new())))
            {
                let cell = if done {
                    None
                } else {
                    match shared.codec.decode(&key) {
                        Ok(Key::Once(cell, _)) => Some(cell),
                        _ => {
                            return Err(TxnError::corrupt(
                                &key,
                                crate::record::RecordError::Truncated {
                                    field: "write-once record key",
                                },
                            ))
                        }
                    }
                };
                let same = matches!((&group, &cell), (Some((g, _)), Some(c)) if g == c);
                if same {
                    if let Some((_, records)) = group.as_mut() {
                        records.push((key, raw));
                    }
                    continue;
                }
                if let Some((g, records)) = group.take() {
                    let read = self.visible_record(&g, records).await?;
                    if let Some(version) = read.visible {
                        values += usize::from(matches!(version.1, Op::Put(_)));
                        out.push((g, version));
                        if values >= limit {
                            exhausted = false;
                            break 'pages;
                        }
                    }
                }
                if let Some(cell) = cell {
                    group = Some((cell, vec![(key, raw)]));
                }
            }
            if done {
                break;
            }
        }
        Ok(OnceRows {
            rows: out,
            exhausted,
        })
    }
}

/// What [`Transaction::once_rows`] found.
pub(super) struct OnceRows {
    /// Cells with their visible write, in cell order.
    pub(super) rows: Vec<(Cell, OnceVersion)>,
    /// Whether every record of the range was read; if not, every cell up to the last of
    /// `rows` was (the read stopped once `limit` cells held a value).
    pub(super) exhausted: bool,
}

/// The cell and writer of a `W` key met by a GC pass. A key of a table id this client does
/// not know is refused, not skipped: GC must resolve every record below its safe point before
/// it trims the evidence of their commits (`percolator::design::once`).
fn once_key(shared: &Shared, key: &[u8]) -> TxnResult<(Cell, u64)> {
    match shared.codec.decode(key) {
        Ok(Key::Once(cell, s)) => Ok((cell, s)),
        Err(crate::codec::CodecError::UnknownTableId(id)) => {
            Err(crate::codec::TableIdsError::UnknownId { id }.into())
        }
        _ => Err(TxnError::corrupt(
            key,
            crate::record::RecordError::Truncated {
                field: "write-once record key",
            },
        )),
    }
}

/// Rewrites of pending records per batched CAS: a prewrite round's size, so that one call
/// stays well inside the store's request deadline on TiKV (its requests run 64 at a time).
const REWRITES_PER_CALL: usize = 256;

/// What [`resolve_and_collect`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct RecordsPass {
    /// Pending records of writers below the safe point rewritten as committed, or deleted
    /// as rolled back.
    pub(super) resolved: usize,
    /// Committed records no snapshot at or above the safe point sees, deleted.
    pub(super) deleted: usize,
}

/// One walk of `W` at safe point `sp`: rewrites every pending record of a writer that started
/// below `sp` as committed, or deletes it if its writer rolled back, so that no status check
/// needs versions GC is about to delete; and deletes, per cell, the committed records no
/// snapshot at or above `sp` can see: those older than the newest committed write of the cell
/// at or below `sp`, which is its newest committed record (that one stays, a delete too) or a
/// version in the cell's head (a transaction of write-once cells only writes its first
/// through the head: then every record below it goes).
///
/// A page's rewrites go in batched CASes of [`REWRITES_PER_CALL`] (one journal write each on
/// the embedded store, concurrent requests on TiKV) once every record of the page is decided;
/// each request is still a CAS from the pending bytes read, and a batch that fails goes again
/// request by request. A cell's hidden records are deleted once all its records are read
/// (its rewrites sent): a record decided committed counts at its commit_ts whether its
/// rewrite landed or another pass's did (or that pass collected it meanwhile). Records are
/// never primaries (a transaction writes its first cell through the head), so deleting a
/// hidden one before the rest of `W` is resolved trims no evidence anyone needs. Runs before
/// the head pass, which may shrink a head whose newest version is a delete to a tombstone:
/// the records hidden under that delete must be gone first, or they would be visible again.
/// A status check or a delete that fails ends the pass with the page's rewrites not sent:
/// the next pass decides them again.
pub(super) async fn resolve_and_collect(shared: &Shared, sp: Timestamp) -> TxnResult<RecordsPass> {
    let range = shared.codec.space_range(Space::Once);
    let mut pager = RangePager::new(shared.kv.as_ref(), range, ScanOrder::Forward, 1024);
    let mut pass = RecordsPass::default();
    let mut group: Option<(Cell, Vec<CommittedRecord>)> = None;
    // Cells whose records are all read, waiting for one batched read of their heads.
    let mut cells: Vec<(Cell, Vec<CommittedRecord>)> = Vec::new();
    loop {
        let page = pager.next_page_retrying().await?;
        let done = page.is_none();
        let mut rewrites = Vec::new();
        for (key, raw) in page.into_iter().flatten() {
            let (cell, s) = once_key(shared, &key)?;
            // The commit_ts of a committed record, decided now or before. A writer at or
            // above sp commits above it: its record neither needs resolving nor hides any
            // (nor is it decoded: a pass never read those).
            let record = if s >= sp.0 {
                None
            } else {
                Some(OnceRecord::decode(&raw).map_err(|e| TxnError::corrupt(&key, e))?)
            };
            let committed = match record {
                None => None,
                Some(OnceRecord::Committed { commit_ts, .. }) => Some(commit_ts),
                Some(OnceRecord::Pending {
                    primary,
                    ttl_ms,
                    op,
                }) => {
                    pass.resolved += 1;
                    match shared
                        .decided_status(&primary, Timestamp(s), ttl_ms)
                        .await?
                    {
                        TxnStatus::Committed(c) => {
                            // A CAS from the pending record read above, never a plain put:
                            // another pass may have rewritten this record and collected it
                            // meanwhile (hidden under a newer write of the cell, maybe a delete
                            // through the cell's head, which that pass then shrank to a
                            // tombstone), and a put would bring the deleted value back. Not
                            // swapped: the record was rewritten (the same bytes: two passes
                            // write equal `Committed` records, S3's exemption) or is gone, and
                            // either way it is decided.
                            let record = OnceRecord::Committed { commit_ts: c.0, op };
                            if planted_rewrite_by_put() {
                                shared.kv.put(key.clone(), record.encode()).await?;
                            } else {
                                rewrites.push(CasRequest::new(
                                    key.clone(),
                                    Some(raw),
                                    record.encode(),
                                ));
                            }
                            Some(c.0)
                        }
                        _ => {
                            // Only if the record is still the pending one read above: "rolled
                            // back" is wrong once another pass rewrote it as committed and
                            // trimmed the evidence of the commit (`percolator::design::once`).
                            if planted_unconditional_delete() {
                                shared.kv.delete(key.clone()).await?;
                            } else {
                                shared.delete_if_unchanged(&key, &raw).await?;
                            }
                            None
                        }
                    }
                }
            };
            if !matches!(&group, Some((g, _)) if *g == cell) {
                cells.extend(group.take().filter(|(_, records)| !records.is_empty()));
                group = Some((cell, Vec::new()));
            }
            // Only committed records at or below sp can hide others from every snapshot at or
            // above it; records of later writers are left alone.
            if let (Some((_, records)), Some(c)) = (group.as_mut(), committed) {
                if c <= sp.0 {
                    records.push((key, c));
                }
            }
        }
        send_rewrites(shared, rewrites).await?;
        if done {
            cells.extend(group.take().filter(|(_, records)| !records.is_empty()));
        }
        if cells.len() >= 1024 || (done && !cells.is_empty()) {
            let doomed = hidden_records(shared, std::mem::take(&mut cells), sp.0).await?;
            if !doomed.is_empty() {
                pass.deleted += doomed.len();
                retry_unavailable(|| shared.kv.batch_delete(doomed.clone())).await?;
            }
        }
        if done {
            return Ok(pass);
        }
    }
}

/// Sends a page's rewrites of pending records in batched CASes of [`REWRITES_PER_CALL`]; a
/// batch that fails goes again request by request.
async fn send_rewrites(shared: &Shared, rewrites: Vec<CasRequest>) -> TxnResult<()> {
    for chunk in rewrites.chunks(REWRITES_PER_CALL) {
        let Err(e) = shared.kv.batch_compare_and_swap(chunk.to_vec()).await else {
            continue;
        };
        tracing::debug!(error = %e, "batched record rewrites failed; sent one by one");
        // Any subset may have applied. Each request goes again on its own, retried after a
        // lost reply as before (a batch retried whole would fail as long as any one of its
        // requests does, on a store failing one request in a few hundred): one that applied
        // then finds the record rewritten, which is the outcome above.
        for r in chunk {
            retry_unavailable(|| {
                shared
                    .kv
                    .compare_and_swap(r.key.clone(), r.expected.clone(), r.new.clone())
            })
            .await?;
        }
    }
    Ok(())
}

/// A committed record at or below the safe point: (key, commit_ts).
type CommittedRecord = (Vec<u8>, u64);

/// Of each cell's committed records at or below the safe point `sp`, those no snapshot at or
/// above it sees: all but the newest, and the newest too when the cell's head holds a newer
/// version at or below `sp`. The newest record otherwise stays even when it is a delete (a
/// tombstone, as a head's): a cell with no record at all was never written, and a reader
/// that GC could have misled always sees the write that made GC delete the older ones.
async fn hidden_records(
    shared: &Shared,
    cells: Vec<(Cell, Vec<CommittedRecord>)>,
    sp: u64,
) -> TxnResult<Vec<Vec<u8>>> {
    let keys: Vec<Vec<u8>> = cells
        .iter()
        .map(|(cell, _)| shared.codec.head(cell))
        .collect();
    let heads = retry_unavailable(|| shared.kv.batch_get(&keys)).await?;
    let mut doomed = Vec::new();
    for (((cell, mut records), key), raw) in cells.into_iter().zip(keys).zip(heads) {
        records.sort_by_key(|(_, c)| std::cmp::Reverse(*c));
        let newest = records.first().map_or(0, |(_, c)| *c);
        #[cfg(feature = "planted")]
        let raw =
            raw.filter(|_| !crate::planted::active(crate::planted::Bug::GcCollectIgnoresHead));
        let head_newer = match raw {
            None => false,
            Some(raw) => {
                let snap = super::heads::HeadSnapshot::decode(&key, Some(raw))?;
                super::gc::retried(|| shared.visible_version(&cell, &snap.head, Timestamp(sp)))
                    .await?
                    .is_some_and(|v| v.commit_ts > newest)
            }
        };
        let keep = usize::from(!head_newer);
        doomed.extend(records.into_iter().skip(keep).map(|(key, _)| key));
    }
    Ok(doomed)
}

/// Planted bug `GcRewriteByPut` (`crate::planted`): a record decided committed rewritten by a
/// plain put.
fn planted_rewrite_by_put() -> bool {
    #[cfg(feature = "planted")]
    return crate::planted::active(crate::planted::Bug::GcRewriteByPut);
    #[cfg(not(feature = "planted"))]
    false
}

/// Planted bug `GcUnconditionalDelete` (`crate::planted`): a record decided rolled back
/// deleted whatever it holds now.
fn planted_unconditional_delete() -> bool {
    #[cfg(feature = "planted")]
    return crate::planted::active(crate::planted::Bug::GcUnconditionalDelete);
    #[cfg(not(feature = "planted"))]
    false
}

/// Planted bug `RecordGoneIsRolledBack` (`crate::planted`): a gone record read as rolled back.
fn planted_gone() -> bool {
    #[cfg(feature = "planted")]
    return crate::planted::active(crate::planted::Bug::RecordGoneIsRolledBack);
    #[cfg(not(feature = "planted"))]
    false
}
