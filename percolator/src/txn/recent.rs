//! Writes this client committed to write-once columns it remembers
//! ([`crate::Client::remember_recent_writes`]): answers of
//! [`crate::Transaction::get_many_recent`] without a store call
//! (`percolator::design::recent`).
//!
//! A bounded map from cell to the entry of one of this client's commits of it (the one with
//! the highest commit_ts among those remembered since the cell was last evicted), evicted
//! oldest insertion first once the remembered bytes pass the budget
//! (`ClientConfig::recent_writes_bytes`).

use crate::codec::Cell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

/// What a remembered commit of a cell wrote.
#[derive(Debug)]
struct Entry {
    hash: u64,
    /// The cell's table, row and column, then the value, in one allocation: a probe that
    /// meets the entry compares the cell in one place (three separate buffers were three
    /// cache misses per comparison), and an eviction frees one buffer.
    bytes: Box<[u8]>,
    /// Where the row and the column start in `bytes`, and where the value starts.
    row_at: usize,
    column_at: usize,
    value_at: usize,
    /// Whether the commit deleted the cell (`bytes` then holds no value).
    deleted: bool,
    commit_ts: u64,
    /// The insertion that put this entry (the eviction queue names entries by it).
    seq: u64,
}

impl Entry {
    fn new(hash: u64, cell: &Cell, value: Option<&[u8]>, commit_ts: u64, seq: u64) -> Entry {
        let value_bytes = value.unwrap_or_default();
        let mut bytes = Vec::with_capacity(
            cell.table.len() + cell.row.len() + cell.column.len() + value_bytes.len(),
        );
        bytes.extend_from_slice(&cell.table);
        let row_at = bytes.len();
        bytes.extend_from_slice(&cell.row);
        let column_at = bytes.len();
        bytes.extend_from_slice(&cell.column);
        let value_at = bytes.len();
        bytes.extend_from_slice(value_bytes);
        Entry {
            hash,
            bytes: bytes.into_boxed_slice(),
            row_at,
            column_at,
            value_at,
            deleted: value.is_none(),
            commit_ts,
            seq,
        }
    }

    /// Whether the entry is `cell`'s.
    fn is(&self, cell: &Cell) -> bool {
        self.bytes[..self.row_at] == cell.table[..]
            && self.bytes[self.row_at..self.column_at] == cell.row[..]
            && self.bytes[self.column_at..self.value_at] == cell.column[..]
    }

    /// Whether the entry is the same cell's as `other`.
    fn same_cell(&self, other: &Entry) -> bool {
        (self.row_at, self.column_at, self.value_at)
            == (other.row_at, other.column_at, other.value_at)
            && self.bytes[..self.value_at] == other.bytes[..other.value_at]
    }

    /// The value written; `None` for a delete.
    fn value(&self) -> Option<Vec<u8>> {
        (!self.deleted).then(|| self.bytes[self.value_at..].to_vec())
    }

    /// What the entry counts against the budget: its bytes and a fixed overhead.
    fn weight(&self) -> usize {
        ENTRY_OVERHEAD + self.bytes.len()
    }
}

/// The table's and the queue's share of an entry, besides its bytes: the entry (72 bytes)
/// and its control byte at the table's load, up to two queue elements (16 bytes each), and
/// the allocator's rounding of the buffer.
const ENTRY_OVERHEAD: usize = 128;

#[derive(Default)]
struct Inner {
    entries: hashbrown::HashTable<Entry>,
    /// (hash, seq) in insertion order; an element whose entry was replaced or evicted since
    /// is skipped (and dropped when the queue is compacted).
    queue: VecDeque<(u64, u64)>,
    bytes: usize,
    next_seq: u64,
}

impl Inner {
    fn find(&self, hash: u64, cell: &Cell) -> Option<&Entry> {
        self.entries.find(hash, |e| e.is(cell))
    }

    /// Removes the entry of `cell`, if any.
    fn remove(&mut self, hash: u64, cell: &Cell) {
        if let Ok(found) = self.entries.find_entry(hash, |e| e.is(cell)) {
            let (old, _) = found.remove();
            self.bytes -= old.weight();
        }
    }

    /// Evicts the oldest insertions until the entries fit in `budget`, and drops the queue's
    /// stale elements once they outnumber the entries (replacements of cells that stay
    /// would otherwise grow it without bound).
    fn fit(&mut self, budget: usize) {
        while self.bytes > budget {
            let Some((hash, seq)) = self.queue.pop_front() else {
                break;
            };
            if let Ok(found) = self.entries.find_entry(hash, |e| e.seq == seq) {
                let (old, _) = found.remove();
                self.bytes -= old.weight();
            }
        }
        if self.queue.len() > 2 * self.entries.len() + 64 {
            let entries = &self.entries;
            self.queue
                .retain(|&(hash, seq)| entries.find(hash, |e| e.seq == seq).is_some());
        }
    }
}

/// Reads of remembered columns by [`crate::Transaction::get_many_recent`]
/// ([`crate::Client::recent_write_reads`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecentWriteReads {
    /// Answered from this client's remembered commits.
    pub from_memory: u64,
    /// Read from the store (nothing remembered at or below the reader's snapshot).
    pub from_store: u64,
}

/// This client's remembered commits of write-once cells (see the module docs).
pub(crate) struct RecentWrites {
    budget: usize,
    hasher: ahash::RandomState,
    inner: RwLock<Inner>,
    from_memory: AtomicU64,
    from_store: AtomicU64,
}

impl RecentWrites {
    /// A map that remembers up to about `budget` bytes (`None` for 0: nothing remembered).
    pub(crate) fn new(budget: u64) -> Option<RecentWrites> {
        (budget > 0).then(|| RecentWrites {
            budget: usize::try_from(budget).unwrap_or(usize::MAX),
            hasher: ahash::RandomState::new(),
            inner: RwLock::new(Inner::default()),
            from_memory: AtomicU64::new(0),
            from_store: AtomicU64::new(0),
        })
    }

    fn hash(&self, cell: &Cell) -> u64 {
        self.hasher.hash_one(cell)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Remembers `writes`, committed together at `commit_ts`. A cell remembered at a higher
    /// commit_ts keeps that entry (two commits of one cell by this client may return in
    /// either order).
    pub(crate) fn remember(&self, writes: Vec<(Cell, Option<Vec<u8>>)>, commit_ts: u64) {
        if writes.is_empty() {
            return;
        }
        // The entries are built (and the writes' buffers freed) before the lock is taken.
        let entries: Vec<Entry> = writes
            .into_iter()
            .map(|(cell, value)| {
                Entry::new(self.hash(&cell), &cell, value.as_deref(), commit_ts, 0)
            })
            .collect();
        let mut guard = self.write();
        let inner = &mut *guard;
        for mut entry in entries {
            // One probe of the table per cell: an entry of the cell is replaced in place.
            let seq = inner.next_seq;
            entry.seq = seq;
            let (hash, weight) = (entry.hash, entry.weight());
            match inner
                .entries
                .entry(hash, |e| e.same_cell(&entry), |e| e.hash)
            {
                hashbrown::hash_table::Entry::Occupied(mut found) => {
                    let old = found.get_mut();
                    if old.commit_ts > commit_ts {
                        continue;
                    }
                    let old_weight = old.weight();
                    *old = entry;
                    inner.bytes -= old_weight;
                }
                hashbrown::hash_table::Entry::Vacant(vacant) => {
                    vacant.insert(entry);
                }
            }
            inner.bytes += weight;
            inner.next_seq += 1;
            inner.queue.push_back((hash, seq));
        }
        inner.fit(self.budget);
    }

    /// Forgets what is remembered of `cells`: a commit of them whose outcome this client does
    /// not know, or that failed, leaves no older entry to answer for them.
    pub(crate) fn forget<C: std::borrow::Borrow<Cell>>(&self, cells: impl Iterator<Item = C>) {
        let hashed: Vec<(u64, C)> = cells.map(|cell| (self.hash(cell.borrow()), cell)).collect();
        if hashed.is_empty() {
            return;
        }
        let mut inner = self.write();
        for (hash, cell) in hashed {
            inner.remove(hash, cell.borrow());
        }
    }

    /// For each of `cells` (a cell and the lowest commit_ts its reader accepts), the
    /// remembered write if it committed in that range and at or below `at`: the value
    /// (`None` for a delete) and its commit_ts.
    pub(crate) fn lookup(
        &self,
        cells: &[(&Cell, u64)],
        at: u64,
    ) -> Vec<Option<(Option<Vec<u8>>, u64)>> {
        let hashes: Vec<u64> = cells.iter().map(|(cell, _)| self.hash(cell)).collect();
        let found: Vec<Option<(Option<Vec<u8>>, u64)>> = {
            let inner = self.inner.read().unwrap_or_else(|p| p.into_inner());
            cells
                .iter()
                .zip(hashes)
                .map(|((cell, least), hash)| {
                    inner
                        .find(hash, cell)
                        .filter(|e| e.commit_ts <= at && e.commit_ts >= *least)
                        .map(|e| (e.value(), e.commit_ts))
                })
                .collect()
        };
        let hits = found.iter().filter(|f| f.is_some()).count() as u64;
        self.from_memory.fetch_add(hits, Ordering::Relaxed);
        self.from_store
            .fetch_add(cells.len() as u64 - hits, Ordering::Relaxed);
        found
    }

    /// The reads so far.
    pub(crate) fn reads(&self) -> RecentWriteReads {
        RecentWriteReads {
            from_memory: self.from_memory.load(Ordering::Relaxed),
            from_store: self.from_store.load(Ordering::Relaxed),
        }
    }

    /// Bytes remembered now (as the budget counts them) and the queue's length.
    #[cfg(test)]
    fn sizes(&self) -> (usize, usize) {
        let inner = self.write();
        (inner.bytes, inner.queue.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(row: &str) -> Cell {
        Cell::new("t", row, "c")
    }

    /// The weight of an entry of `cell(..)` with a two-byte row and a 100-byte value.
    const WEIGHT: usize = ENTRY_OVERHEAD + 4 + 100;

    /// An entry is its own cell's only, however the cell's bytes split into parts.
    #[test]
    fn an_entry_tells_cells_apart_by_their_parts() {
        let entry = Entry::new(0, &Cell::new("ab", "c", "d"), Some(b"v"), 1, 0);
        assert!(entry.is(&Cell::new("ab", "c", "d")));
        for other in [
            Cell::new("a", "bc", "d"),
            Cell::new("ab", "", "cd"),
            Cell::new("abc", "", "d"),
            Cell::new("ab", "c", "dv"),
            Cell::new("ab", "c", ""),
        ] {
            assert!(!entry.is(&other), "{other:?}");
            assert!(
                !entry.same_cell(&Entry::new(0, &other, Some(b"v"), 1, 0)),
                "{other:?}"
            );
        }
        assert!(entry.same_cell(&Entry::new(0, &Cell::new("ab", "c", "d"), None, 2, 1)));
        assert_eq!(entry.value(), Some(b"v".to_vec()));
        let deleted = Entry::new(0, &Cell::new("ab", "c", "d"), None, 2, 1);
        assert_eq!(deleted.value(), None);
        let empty = Entry::new(0, &Cell::new("ab", "c", "d"), Some(b""), 2, 1);
        assert_eq!(empty.value(), Some(Vec::new()));
    }

    #[test]
    fn answers_only_commits_at_or_below_the_snapshot() {
        let recent = RecentWrites::new(1 << 20).expect("a budget");
        recent.remember(vec![(cell("a"), Some(b"1".to_vec()))], 10);
        let (a, b) = (cell("a"), cell("b"));
        assert_eq!(recent.lookup(&[(&a, 0)], 9), vec![None]);
        assert_eq!(
            recent.lookup(&[(&a, 0)], 10),
            vec![Some((Some(b"1".to_vec()), 10))]
        );
        assert_eq!(recent.lookup(&[(&b, 0)], 10), vec![None]);
        assert_eq!(
            recent.reads(),
            RecentWriteReads {
                from_memory: 1,
                from_store: 2
            }
        );
    }

    #[test]
    fn a_newer_commit_replaces_an_older_one_never_the_reverse() {
        let recent = RecentWrites::new(1 << 20).expect("a budget");
        let a = cell("a");
        recent.remember(vec![(a.clone(), Some(b"new".to_vec()))], 20);
        recent.remember(vec![(a.clone(), Some(b"old".to_vec()))], 10);
        assert_eq!(
            recent.lookup(&[(&a, 0)], 30),
            vec![Some((Some(b"new".to_vec()), 20))]
        );
        recent.remember(vec![(a.clone(), None)], 25);
        assert_eq!(recent.lookup(&[(&a, 0)], 30), vec![Some((None, 25))]);
        // Below the delete, the older value it replaced is not answered: the store is read.
        assert_eq!(recent.lookup(&[(&a, 0)], 24), vec![None]);
        recent.forget([&a].into_iter());
        assert_eq!(recent.lookup(&[(&a, 0)], 30), vec![None]);
        assert_eq!(recent.sizes().0, 0);
    }

    #[test]
    fn the_oldest_insertions_go_first_once_past_the_budget() {
        let recent = RecentWrites::new(10 * WEIGHT as u64).expect("a budget");
        for n in 0..20 {
            recent.remember(vec![(cell(&format!("{n:02}")), Some(vec![0; 100]))], n + 1);
        }
        assert_eq!(recent.sizes().0, 10 * WEIGHT);
        let (old, kept, new) = (cell("09"), cell("10"), cell("19"));
        assert_eq!(recent.lookup(&[(&old, 0)], 100), vec![None]);
        assert!(recent.lookup(&[(&kept, 0)], 100)[0].is_some());
        assert!(recent.lookup(&[(&new, 0)], 100)[0].is_some());
    }

    #[test]
    fn a_replaced_entry_is_evicted_by_its_new_insertion_not_its_old_one() {
        // `x` is inserted first and replaced after `y`, so `y` is the oldest entry when `z`
        // comes: the queue's element of `x`'s first insertion must not evict the new `x`.
        let recent = RecentWrites::new(2 * WEIGHT as u64).expect("a budget");
        recent.remember(vec![(cell("xx"), Some(vec![0; 100]))], 1);
        recent.remember(vec![(cell("yy"), Some(vec![0; 100]))], 2);
        recent.remember(vec![(cell("xx"), Some(vec![1; 100]))], 3);
        recent.remember(vec![(cell("zz"), Some(vec![0; 100]))], 4);
        let (x, y) = (cell("xx"), cell("yy"));
        assert_eq!(
            recent.lookup(&[(&x, 0)], 10),
            vec![Some((Some(vec![1; 100]), 3))]
        );
        assert_eq!(recent.lookup(&[(&y, 0)], 10), vec![None]);
        assert_eq!(recent.sizes().0, 2 * WEIGHT);
    }

    #[test]
    fn rewriting_a_few_cells_under_the_budget_does_not_grow_the_queue() {
        let recent = RecentWrites::new(1 << 20).expect("a budget");
        for ts in 1..10_000 {
            recent.remember(
                vec![(cell(&format!("{:02}", ts % 3)), Some(vec![0; 10]))],
                ts,
            );
        }
        let (bytes, queue) = recent.sizes();
        assert_eq!(bytes, 3 * (ENTRY_OVERHEAD + 14));
        assert!(queue <= 2 * 3 + 64 + 1, "queue of {queue} for 3 entries");
    }
}
