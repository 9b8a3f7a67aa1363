//! The read path of a [`Transaction`]: point reads at start_ts (own writes first, then the
//! head, then `V`), scans and read-only scan pages, and the GC check that makes an answer
//! from beyond the head exact.

use super::heads::{HeadSnapshot, ValueFetch};
use super::locks::TxnStatus;
use super::transaction::Transaction;
use super::{TxnError, TxnResult};
use crate::codec::Cell;
use crate::kv::{KvError, RangePager, ScanOrder};
use std::collections::BTreeMap;
use std::time::Duration;

/// A value read (`None`: absent) and the commit_ts of the write that holds it (`None` for
/// the transaction's own buffered write or a cell never written; a delete answered from
/// memory by [`Transaction::get_many_recent`] carries its commit_ts).
type VersionedValue = (Option<Vec<u8>>, Option<u64>);

impl Transaction {
    /// After a read that looked beyond the head (in `V` or `D`): GC removes those versions
    /// only after publishing a safe point above every snapshot that could see them, so a
    /// safe point read *after* the read that is still at or below start_ts proves the read
    /// saw everything the snapshot needs. Otherwise refuse rather than answer wrongly
    /// (`percolator::design::gc`). Timestamps only: no local clock is involved.
    pub(super) async fn ensure_not_collected(&self) -> TxnResult<()> {
        let safe_point = super::gc::read_safe_point(self.shared()).await?;
        if safe_point > self.inner.start_ts {
            return Err(self.too_old());
        }
        Ok(())
    }

    /// Like [`Transaction::get`], also returning the commit_ts of the version read
    /// (`None` for the transaction's own buffered write or an absent cell).
    pub async fn get_versioned(&self, cell: &Cell) -> TxnResult<(Option<Vec<u8>>, Option<u64>)> {
        let (key, snap) = match self.local_read(cell)? {
            LocalRead::Written(value) => return Ok((value, None)),
            LocalRead::Head(key, Some(snap)) => (key, snap),
            LocalRead::Head(key, None) => {
                let snap = self.shared().read_head_at(&key).await?;
                (key, snap)
            }
        };
        let read = match self.read_in_head(key, snap) {
            InHead::Read(read) => read,
            InHead::NeedsStore(key, snap) => self.read_versioned(cell, key, snap).await?,
        };
        let read = self.with_once(cell, read).await?;
        if read.beyond_head {
            self.ensure_not_collected().await?;
        }
        self.check_lifetime()?;
        Ok((read.value, read.commit_ts))
    }

    /// `read` (what `cell`'s head holds at start_ts), or the cell's write-once record if the
    /// cell is write-once and the record is newer (`percolator::design::once`).
    async fn with_once(&self, cell: &Cell, read: VersionedRead) -> TxnResult<VersionedRead> {
        if !self.shared().is_write_once(cell) {
            return Ok(read);
        }
        let once = self.read_once(cell).await?;
        Ok(self.merge_once_read(cell, read, once))
    }

    /// The newer of what `cell`'s head and its records hold at start_ts. A value found is
    /// remembered: the transaction may not write the cell again.
    fn merge_once_read(
        &self,
        cell: &Cell,
        read: VersionedRead,
        once: super::once::OnceRead,
    ) -> VersionedRead {
        let beyond_head = read.beyond_head || once.newer_commit;
        let read = match once.visible {
            Some((c, op)) if read.commit_ts.is_none_or(|h| c > h) => VersionedRead {
                value: match op {
                    crate::record::Op::Put(v) => Some(v),
                    _ => None,
                },
                commit_ts: Some(c),
                beyond_head,
            },
            // No record gives the answer: GC may have collected one committed at or below
            // start_ts under a head version committed after it, which the head read (done
            // first) did not see. Checked against the safe point after this read, as an
            // answer from beyond the head is (`crate::design::once`, "Snapshots under GC").
            _ => VersionedRead {
                beyond_head: !planted_miss_unchecked() || read.beyond_head,
                ..read
            },
        };
        if read.value.is_some() {
            self.state().once_read.insert(cell.clone());
        }
        read
    }

    /// The values of `cells` in this transaction's snapshot (its own writes included), in
    /// the same order: [`Transaction::get`] of each, with the heads not known yet fetched
    /// in one `batch_get`. Locks met are resolved exactly as `get` resolves them, and the
    /// heads read are kept as the expectations of the prewrite. A cell may appear twice.
    pub async fn get_many(&self, cells: &[Cell]) -> TxnResult<Vec<Option<Vec<u8>>>> {
        Ok(self
            .get_many_versioned(cells)
            .await?
            .into_iter()
            .map(|(value, _)| value)
            .collect())
    }

    /// [`Transaction::get_many`], also returning the commit_ts of each version read, as
    /// [`Transaction::get_versioned`] does.
    pub async fn get_many_versioned(
        &self,
        cells: &[Cell],
    ) -> TxnResult<Vec<(Option<Vec<u8>>, Option<u64>)>> {
        let mut out: Vec<(Option<Vec<u8>>, Option<u64>)> = vec![(None, None); cells.len()];
        // Most heads answer in memory (no lock in the way, the version inline in the head):
        // only the others become futures, so a batch of plain reads is no `join_all` of
        // large futures (their moves were about 2 % of the demo's CPU). Each head goes
        // through `read_in_head` as soon as it is known, so no list of decoded heads (a few
        // hundred bytes each) is built: for a read of thousands of cells that list took fresh
        // pages from the kernel on every call.
        let mut heads = Vec::with_capacity(cells.len());
        let mut slow = Vec::new();
        let mut read_head =
            |i: usize, key: Vec<u8>, snap: HeadSnapshot| match self.read_in_head(key, snap) {
                InHead::Read(read) => heads.push((i, read)),
                InHead::NeedsStore(key, snap) => slow.push((i, key, snap)),
            };
        let mut fetch_at: Vec<usize> = Vec::new();
        let mut fetch_keys: Vec<Vec<u8>> = Vec::new();
        for (i, cell) in cells.iter().enumerate() {
            match self.local_read(cell)? {
                LocalRead::Written(value) => out[i] = (value, None),
                LocalRead::Head(key, Some(snap)) => read_head(i, key, snap),
                LocalRead::Head(key, None) => {
                    fetch_at.push(i);
                    fetch_keys.push(key);
                }
            }
        }
        if !fetch_keys.is_empty() {
            let raws = self.shared().kv.batch_get(&fetch_keys).await?;
            if raws.len() != fetch_keys.len() {
                return Err(TxnError::Storage(KvError::Engine {
                    op: "batch_get",
                    message: format!("{} values for {} keys", raws.len(), fetch_keys.len()),
                }));
            }
            if !self.inner.read_only {
                // Each head found is kept (`read_in_head`): one allocation, not a rehash
                // per doubling. Absent heads are kept by their key alone.
                let found = raws.iter().filter(|raw| raw.is_some()).count();
                self.state().heads.reserve_found(found);
            }
            for ((i, key), raw) in fetch_at.into_iter().zip(fetch_keys).zip(raws) {
                // A corrupt head ends the read; the heads read before it stay in the
                // transaction, as heads of this snapshot (what the slow reads below leave too).
                let snap = HeadSnapshot::decode(&key, raw)?;
                read_head(i, key, snap);
            }
        }
        if !slow.is_empty() {
            let reads = slow.into_iter().map(|(i, key, snap)| async move {
                (i, self.read_versioned(&cells[i], key, snap).await)
            });
            for (i, read) in futures::future::join_all(reads).await {
                heads.push((i, read?));
            }
        }
        // Which of `cells` are write-once, decided once for the whole call.
        let write_once: Vec<bool> = {
            let columns = self.shared().columns();
            cells
                .iter()
                .map(|cell| columns.is_write_once(cell))
                .collect()
        };
        // The records of the write-once cells among them, in one call.
        let once_cells: Vec<Cell> = heads
            .iter()
            .filter(|(i, _)| write_once[*i])
            .map(|(i, _)| cells[*i].clone())
            .collect();
        let mut onces = Vec::new();
        if !once_cells.is_empty() {
            let records = self.once_records(&once_cells).await?;
            let visible = once_cells
                .iter()
                .zip(records)
                .map(|(cell, records)| self.visible_record(cell, records));
            for once in futures::future::join_all(visible).await {
                onces.push(once?);
            }
        }
        let mut onces = onces.into_iter();
        let mut beyond_head = false;
        for (i, read) in heads {
            let read = if write_once[i] {
                match onces.next() {
                    Some(once) => self.merge_once_read(&cells[i], read, once),
                    None => read,
                }
            } else {
                read
            };
            beyond_head |= read.beyond_head;
            out[i] = (read.value, read.commit_ts);
        }
        // One check after the last read covers every read.
        if beyond_head {
            self.ensure_not_collected().await?;
        }
        self.check_lifetime()?;
        Ok(out)
    }

    /// [`Transaction::get_many_versioned`], except that a cell of a column this client
    /// remembers ([`crate::Client::remember_recent_writes`]) is answered from memory, with no
    /// store call, if the commit of it this client remembers committed at or below start_ts
    /// (a remembered delete answers `(None, Some(commit_ts))`). That is a write committed in
    /// this snapshot, **not necessarily the newest**: another client's write of the cell, or
    /// one of this client's whose commit has not returned yet or that is no longer
    /// remembered, may be newer (`percolator::design::recent`). It is for readers to whom
    /// every committed write of such a cell is as good as another, as the deliveries of one
    /// event are. The transaction's own writes come first, as always, and every other cell
    /// is read exactly.
    pub async fn get_many_recent(&self, cells: &[Cell]) -> TxnResult<Vec<VersionedValue>> {
        self.get_many_recent_from(cells, &[]).await
    }

    /// [`Transaction::get_many_recent`], answering cell `i` from memory only with a commit at
    /// or above `from[i]` (when given): a reader that knows of a write of the cell, such as
    /// the one whose notification it runs for, reads that write or a newer one, from memory
    /// or from the store.
    pub async fn get_many_recent_from(
        &self,
        cells: &[Cell],
        from: &[Option<u64>],
    ) -> TxnResult<Vec<VersionedValue>> {
        let shared = self.shared();
        let Some(recent) = shared.recent.as_ref() else {
            return self.get_many_versioned(cells).await;
        };
        let mut candidates: Vec<usize> = {
            let columns = shared.columns();
            (0..cells.len())
                .filter(|&i| columns.is_remembered(&cells[i]))
                .collect()
        };
        if candidates.is_empty() {
            return self.get_many_versioned(cells).await;
        }
        {
            let state = self.state();
            if state.finished {
                return Err(TxnError::Finished {
                    start_ts: self.inner.start_ts.0,
                });
            }
            // The transaction's own writes are answered by the exact read below.
            candidates.retain(|&i| !state.writes.contains_key(&cells[i]));
        }
        let asked: Vec<(&Cell, u64)> = candidates
            .iter()
            .map(|&i| (&cells[i], from.get(i).copied().flatten().unwrap_or(0)))
            .collect();
        let found = recent.lookup(&asked, self.inner.start_ts.0);
        let mut out: Vec<Option<VersionedValue>> = vec![None; cells.len()];
        let mut valued = Vec::new();
        for (&i, found) in candidates.iter().zip(found) {
            if let Some((value, commit_ts)) = found {
                if value.is_some() {
                    valued.push(cells[i].clone());
                }
                out[i] = Some((value, Some(commit_ts)));
            }
        }
        if out.iter().all(Option::is_none) {
            return self.get_many_versioned(cells).await;
        }
        // As any read of a value in a write-once cell: not to be written again.
        self.state().once_read.extend(valued);
        let rest: Vec<Cell> = (0..cells.len())
            .filter(|&i| out[i].is_none())
            .map(|i| cells[i].clone())
            .collect();
        let mut read = if rest.is_empty() {
            self.check_lifetime()?;
            Vec::new()
        } else {
            self.get_many_versioned(&rest).await?
        }
        .into_iter();
        Ok(out
            .into_iter()
            .map(|answer| answer.unwrap_or_else(|| read.next().unwrap_or((None, None))))
            .collect())
    }

    /// The value of `cell` in this transaction's snapshot (its own writes included).
    pub async fn get(&self, cell: &Cell) -> TxnResult<Option<Vec<u8>>> {
        Ok(self.get_versioned(cell).await?.0)
    }

    /// What the transaction itself knows about `cell` (one lock of its state): its buffered
    /// write, or the head key and the head it already read, if any. Reusing that head is
    /// exact under SI: a cached head holds no lock at or below our start_ts, and anything
    /// written to the cell since commits above our start_ts (its commit_ts is drawn after its
    /// prewrite, which came after our read).
    fn local_read(&self, cell: &Cell) -> TxnResult<LocalRead> {
        let key = self.shared().codec.head(cell);
        let state = self.state();
        if state.finished {
            return Err(TxnError::Finished {
                start_ts: self.inner.start_ts.0,
            });
        }
        if let Some(write) = state.writes.get(cell) {
            return Ok(LocalRead::Written(write.clone()));
        }
        let cached = state.heads.get(&key);
        Ok(LocalRead::Head(key, cached))
    }

    /// [`Self::read_versioned`] when it needs no store call: no lock at or below start_ts
    /// on the head, and the visible version (or no version: the cell was never written) in
    /// the head with its value inline. Otherwise the key and head back, for the full read.
    /// Exactly the answer and the remembered head `read_versioned` would give.
    fn read_in_head(&self, key: Vec<u8>, snap: HeadSnapshot) -> InHead {
        use crate::record::Op;
        let start_ts = self.inner.start_ts.0;
        if snap
            .head
            .lock
            .as_ref()
            .is_some_and(|l| l.start_ts <= start_ts)
        {
            return InHead::NeedsStore(key, snap);
        }
        let read = if snap.raw.is_none() {
            VersionedRead {
                value: None,
                commit_ts: None,
                beyond_head: false,
            }
        } else {
            match snap.head.visible_at(start_ts) {
                Some(version) => VersionedRead {
                    value: match &version.op {
                        Op::Delete => None,
                        Op::Put(value) => Some(value.clone()),
                        Op::PutExternal(_) => return InHead::NeedsStore(key, snap),
                    },
                    commit_ts: Some(version.commit_ts),
                    beyond_head: false,
                },
                // Older than the head's versions: in `V`.
                None => return InHead::NeedsStore(key, snap),
            }
        };
        self.keep_head(key, snap);
        InHead::Read(read)
    }

    /// Keeps a head this transaction read, as the expectation of a later prewrite of its cell
    /// and the answer to a later read of it (`local_read`; an absent head by its key alone,
    /// [`super::heads::ReadHeads`]). A read-only snapshot never prewrites, so it keeps
    /// nothing (a long scan would otherwise hold every head it read).
    fn keep_head(&self, key: Vec<u8>, snap: HeadSnapshot) {
        if !self.inner.read_only {
            self.state().heads.keep(key, snap);
        }
    }

    /// Reads `cell` (head key `key`) at start_ts starting from an already-read head: resolves
    /// locks that may hide a version visible to us (waiting on live ones), remembers the head
    /// for a later prewrite, then returns the visible value and its commit_ts.
    ///
    /// An answer found in the head needs no further check: one head read is atomic and the
    /// head holds a contiguous newest-first run of versions, which GC only shortens from the
    /// old end. An answer from `V` (or an absent one after looking there) is exact only if GC
    /// had not passed start_ts when `V` was read: the caller checks that with
    /// [`Self::ensure_not_collected`] when `beyond_head` is set, after its last read.
    async fn read_versioned(
        &self,
        cell: &Cell,
        key: Vec<u8>,
        mut snap: HeadSnapshot,
    ) -> TxnResult<VersionedRead> {
        let start_ts = self.inner.start_ts;
        let mut backoff = Duration::from_millis(1);
        while let Some(lock) = snap.head.lock.clone().filter(|l| l.start_ts <= start_ts.0) {
            self.check_lifetime()?;
            if self.shared().resolve_lock(cell, &lock).await? == TxnStatus::Pending {
                self.shared().writers.wait(lock.start_ts, backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(50));
            }
            snap = self.shared().read_head_at(&key).await?;
        }
        // No head at all: the cell was never prewritten, so nothing is in `V` either (heads
        // are created by the first prewrite and GC never deletes one).
        let never_written = snap.raw.is_none();
        let beyond_head = !never_written && snap.head.visible_at(start_ts.0).is_none();
        let version = if never_written {
            None
        } else {
            self.shared()
                .visible_version(cell, &snap.head, start_ts)
                .await?
        };
        self.keep_head(key, snap);
        let Some(version) = version else {
            return Ok(VersionedRead {
                value: None,
                commit_ts: None,
                beyond_head,
            });
        };
        let commit_ts = version.commit_ts;
        match self.shared().version_value(cell, version).await? {
            ValueFetch::Value(value) => Ok(VersionedRead {
                value,
                commit_ts: Some(commit_ts),
                beyond_head,
            }),
            // GC removed it (we outlived our snapshot) or the store lost it: only the
            // safe point tells which.
            ValueFetch::Missing { key } => {
                self.ensure_not_collected().await?;
                Err(TxnError::corrupt(
                    &key,
                    crate::record::RecordError::Truncated {
                        field: "out-of-line value (missing)",
                    },
                ))
            }
        }
    }

    /// Every cell of `table` whose row lies in `[row_start, row_end)` (`row_end: None`: to the
    /// end of the table) with its value in this snapshot, in (row, column) order. Own writes
    /// are included; cells deleted or absent in the snapshot are not.
    pub async fn scan(
        &self,
        table: &[u8],
        row_start: &[u8],
        row_end: Option<&[u8]>,
    ) -> TxnResult<Vec<(Cell, Vec<u8>)>> {
        use crate::codec::{Key, Space};
        self.check_open()?;
        let range = self
            .shared()
            .codec
            .rows_range(Space::Head, table, row_start, row_end);
        let mut result: BTreeMap<Cell, Vec<u8>> = BTreeMap::new();
        // The commit_ts of what each head showed (deletes too), to merge write-once records.
        let mut head_ts: BTreeMap<Cell, u64> = BTreeMap::new();
        let kv = self.shared().kv.clone();
        let mut pager = RangePager::new(kv.as_ref(), range, ScanOrder::Forward, 1024);
        while let Some(page) = pager.next_page().await? {
            for (key, raw) in page {
                let cell = match self.shared().codec.decode(&key) {
                    Ok(Key::Head(cell)) => cell,
                    other => {
                        return Err(TxnError::Storage(KvError::Engine {
                            op: "scan",
                            message: format!(
                                "key {} in the head range decodes as {other:?}",
                                key.escape_ascii()
                            ),
                        }))
                    }
                };
                let snap = HeadSnapshot::decode(&key, Some(raw))?;
                let read = self.read_versioned(&cell, key, snap).await?;
                if let Some(c) = read.commit_ts {
                    head_ts.insert(cell.clone(), c);
                }
                if let Some(value) = read.value {
                    result.insert(cell, value);
                }
            }
        }
        // Records are merged whether or not this client declared a column of the table
        // write-once: one more range scan, and scans see every cell however they were written.
        let once = self
            .once_rows(table, row_start, row_end, None, usize::MAX)
            .await?;
        merge_once(&mut result, &head_ts, once.rows);
        for (cell, write) in self.state().writes.iter() {
            let in_range = cell.table == table
                && cell.row.as_slice() >= row_start
                && row_end.is_none_or(|end| cell.row.as_slice() < end);
            if in_range {
                match write {
                    Some(value) => result.insert(cell.clone(), value.clone()),
                    None => result.remove(cell),
                };
            }
        }
        // One check after the last read covers every read of the scan, always: a record GC
        // collected under a head version committed after start_ts, which the head pass came
        // too early to see, leaves no trace (`crate::design::once`, "Snapshots under GC").
        self.ensure_not_collected().await?;
        self.check_lifetime()?;
        Ok(result.into_iter().collect())
    }

    /// One page of a scan of a read-only snapshot ([`super::Client::snapshot_at`]): at most
    /// `limit` cells of `table` with rows in `[row_start, row_end)` that hold a value, in
    /// (row, column) order, starting after cell `after` if given (the last cell of the
    /// previous page). A page holds fewer than `limit` cells only when the range is
    /// exhausted, whatever mix of heads and write-once records it meets. Memory stays bounded
    /// by the page however large the table; each page is checked against GC like
    /// [`Transaction::scan`]. A transaction that is not a read-only snapshot gets
    /// `InvalidArgument` (its own writes are not paged).
    pub async fn scan_page(
        &self,
        table: &[u8],
        row_start: &[u8],
        row_end: Option<&[u8]>,
        after: Option<&Cell>,
        limit: usize,
    ) -> TxnResult<Vec<(Cell, Vec<u8>)>> {
        self.check_open()?;
        if !self.inner.read_only {
            return Err(TxnError::InvalidArgument(
                "scan_page needs a read-only snapshot (Client::snapshot_at)".to_string(),
            ));
        }
        let limit = limit.max(1);
        let mut out: Vec<(Cell, Vec<u8>)> = Vec::with_capacity(limit.min(4096));
        let mut cursor = after.cloned();
        // Each round reads, from the cursor on, the first `want` cells with a value of each
        // side (heads, records). Up to the smaller of the two sides' last cells (a side that
        // was exhausted sets no bound) both sides are known in full, so the merge is exact
        // there; a cell a side held but the other side's newer write hides (a delete) is
        // dropped, and the next round goes on from that bound until the page is full.
        loop {
            let want = limit - out.len();
            let heads = self
                .head_rows(table, row_start, row_end, cursor.as_ref(), want)
                .await?;
            let once = self
                .once_rows(table, row_start, row_end, cursor.as_ref(), want)
                .await?;
            let head_last = (!heads.exhausted).then(|| heads.rows.last().map(|r| r.0.clone()));
            let once_last = (!once.exhausted).then(|| once.rows.last().map(|r| r.0.clone()));
            // `None`: both sides exhausted. A side that stopped early stopped on a cell.
            let bound: Option<Cell> = match (head_last.flatten(), once_last.flatten()) {
                (Some(h), Some(o)) => Some(h.min(o)),
                (h, o) => h.or(o),
            };
            let within = |cell: &Cell| bound.as_ref().is_none_or(|b| cell <= b);
            let mut merged: BTreeMap<Cell, Vec<u8>> = BTreeMap::new();
            let mut head_ts: BTreeMap<Cell, u64> = BTreeMap::new();
            for (cell, commit_ts, value) in heads.rows.into_iter().filter(|r| within(&r.0)) {
                if let Some(c) = commit_ts {
                    head_ts.insert(cell.clone(), c);
                }
                if let Some(value) = value {
                    merged.insert(cell, value);
                }
            }
            let once_rows = once.rows.into_iter().filter(|r| within(&r.0)).collect();
            merge_once(&mut merged, &head_ts, once_rows);
            out.extend(merged);
            if out.len() >= limit {
                out.truncate(limit);
                break;
            }
            #[cfg(feature = "planted")]
            if crate::planted::active(crate::planted::Bug::ScanPageShort) {
                break;
            }
            match bound {
                Some(bound) => cursor = Some(bound),
                None => break,
            }
        }
        // Always, as in `scan`.
        self.ensure_not_collected().await?;
        Ok(out)
    }

    /// The cells of `table` with rows in `[row_start, row_end)` that have a head, after
    /// `after` if given, with what each head shows at start_ts (commit_ts and value, deletes
    /// included), in cell order; stops once `limit` cells hold a value.
    async fn head_rows(
        &self,
        table: &[u8],
        row_start: &[u8],
        row_end: Option<&[u8]>,
        after: Option<&Cell>,
        limit: usize,
    ) -> TxnResult<HeadRows> {
        use crate::codec::{Key, Space};
        let mut range = self
            .shared()
            .codec
            .rows_range(Space::Head, table, row_start, row_end);
        if let Some(after) = after {
            let mut next = self.shared().codec.head(after);
            next.push(0);
            range.start = range.start.max(next);
        }
        let mut rows = HeadRows {
            rows: Vec::new(),
            exhausted: true,
        };
        let mut values = 0;
        let kv = self.shared().kv.clone();
        let mut pager = RangePager::new(
            kv.as_ref(),
            range,
            ScanOrder::Forward,
            limit.clamp(16, 1024),
        );
        'pages: while let Some(page) = pager.next_page().await? {
            for (key, raw) in page {
                let Ok(Key::Head(cell)) = self.shared().codec.decode(&key) else {
                    return Err(TxnError::Storage(KvError::Engine {
                        op: "scan_page",
                        message: format!(
                            "key {} in the head range is not a head",
                            key.escape_ascii()
                        ),
                    }));
                };
                let snap = HeadSnapshot::decode(&key, Some(raw))?;
                let read = self.read_versioned(&cell, key, snap).await?;
                let has_value = read.value.is_some();
                rows.rows.push((cell, read.commit_ts, read.value));
                if has_value {
                    values += 1;
                    if values >= limit {
                        rows.exhausted = false;
                        break 'pages;
                    }
                }
            }
        }
        Ok(rows)
    }
}

/// What [`Transaction::head_rows`] found.
struct HeadRows {
    /// (cell, commit_ts of what the head shows, value), in cell order.
    rows: Vec<(Cell, Option<u64>, Option<Vec<u8>>)>,
    /// Whether every head of the range was read; if not, every cell up to the last of
    /// `rows` was.
    exhausted: bool,
}

/// Merges write-once cells' visible writes into `result` (what the heads showed, with the
/// commit_ts of each head's answer in `head_ts`): the newer write of a cell wins.
fn merge_once(
    result: &mut BTreeMap<Cell, Vec<u8>>,
    head_ts: &BTreeMap<Cell, u64>,
    once: Vec<(Cell, super::once::OnceVersion)>,
) {
    for (cell, (c, op)) in once {
        if head_ts.get(&cell).is_some_and(|h| *h >= c) {
            continue;
        }
        match op {
            crate::record::Op::Put(value) => {
                result.insert(cell, value);
            }
            _ => {
                result.remove(&cell);
            }
        }
    }
}

/// What [`Transaction::read_versioned`] found.
struct VersionedRead {
    /// The visible value (`None`: absent or deleted).
    value: Option<Vec<u8>>,
    /// The commit_ts of the version read.
    commit_ts: Option<u64>,
    /// Whether the answer came from beyond the head (`V`), so GC could have changed it.
    beyond_head: bool,
}

/// What [`Transaction::read_in_head`] found.
// Consumed at once, as `LocalRead` below: boxing would add an allocation to every read.
#[allow(clippy::large_enum_variant)]
enum InHead {
    /// The answer, from the head alone.
    Read(VersionedRead),
    /// The read needs the store (a lock to resolve, a version in `V`, an out-of-line value):
    /// the head key and head back.
    NeedsStore(Vec<u8>, HeadSnapshot),
}

/// What a read finds in the transaction itself.
// Returned once per read and consumed at once: boxing the large variant would only add an
// allocation to the common case.
#[allow(clippy::large_enum_variant)]
enum LocalRead {
    /// The transaction's own buffered write (`None`: a delete).
    Written(Option<Vec<u8>>),
    /// The cell's head key, and the head the transaction already read, if any.
    Head(Vec<u8>, Option<HeadSnapshot>),
}

/// Planted bug `OnceMissSkipsSafePoint` (`crate::planted`): a read no record answers is not
/// checked against the safe point.
fn planted_miss_unchecked() -> bool {
    #[cfg(feature = "planted")]
    return crate::planted::active(crate::planted::Bug::OnceMissSkipsSafePoint);
    #[cfg(not(feature = "planted"))]
    false
}
