//! Writes this client committed to write-once columns it remembers
//! ([`crate::Client::remember_recent_writes`]): answers of
//! [`crate::Transaction::get_many_recent`] without a store call
//! (`percolator::design::recent`).
//!
//! A bounded map from cell to the newest of this client's commits of it that is still
//! remembered, evicted oldest insertion first once the remembered bytes pass the budget
//! (`ClientConfig::recent_writes_bytes`). Entries are keyed by a hash of the cell and hold
//! the cell itself: two cells of one hash replace each other, and a lookup that finds the
//! other cell misses, which costs only a store read.

use crate::codec::Cell;
use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// What a remembered commit of a cell wrote.
#[derive(Debug)]
struct Entry {
    cell: Cell,
    /// The value written; `None` for a delete.
    value: Option<Vec<u8>>,
    commit_ts: u64,
    /// The insertion that put this entry (the eviction queue names entries by it).
    seq: u64,
}

impl Entry {
    /// What the entry counts against the budget: its bytes and a fixed overhead.
    fn weight(&self) -> usize {
        ENTRY_OVERHEAD
            + self.cell.table.len()
            + self.cell.row.len()
            + self.cell.column.len()
            + self.value.as_ref().map_or(0, Vec::len)
    }
}

/// The map's and the queue's share of an entry, besides its bytes.
const ENTRY_OVERHEAD: usize = 160;

#[derive(Default)]
struct Inner {
    entries: std::collections::HashMap<u64, Entry, BuildKeyHash>,
    /// (hash, seq) in insertion order; an element whose entry was replaced since is skipped.
    queue: VecDeque<(u64, u64)>,
    bytes: usize,
    next_seq: u64,
}

/// The map's keys are hashes already: it uses them as they are.
#[derive(Clone, Copy, Default)]
struct BuildKeyHash;

impl BuildHasher for BuildKeyHash {
    type Hasher = KeyHash;
    fn build_hasher(&self) -> KeyHash {
        KeyHash(0)
    }
}

/// The hasher of [`BuildKeyHash`]: a `u64` key is its own hash.
struct KeyHash(u64);

impl std::hash::Hasher for KeyHash {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// A remembered write: the value (`None` for a delete) and its commit_ts.
pub(crate) type Remembered = (Option<Vec<u8>>, u64);

/// This client's remembered commits of write-once cells (see the module docs).
pub(crate) struct RecentWrites {
    budget: usize,
    hasher: ahash::RandomState,
    inner: Mutex<Inner>,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl RecentWrites {
    /// A map that remembers up to about `budget` bytes (`None` for 0: nothing remembered).
    pub(crate) fn new(budget: u64) -> Option<RecentWrites> {
        (budget > 0).then(|| RecentWrites {
            budget: usize::try_from(budget).unwrap_or(usize::MAX),
            hasher: ahash::RandomState::new(),
            inner: Mutex::new(Inner::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        })
    }

    fn hash(&self, cell: &Cell) -> u64 {
        self.hasher.hash_one(cell)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Remembers `writes`, committed together at `commit_ts`. A cell already remembered at a
    /// higher commit_ts keeps that entry (two commits of one cell by this client may return
    /// in either order).
    pub(crate) fn remember(&self, writes: Vec<(Cell, Option<Vec<u8>>)>, commit_ts: u64) {
        if writes.is_empty() {
            return;
        }
        let hashed: Vec<(u64, Cell, Option<Vec<u8>>)> = writes
            .into_iter()
            .map(|(cell, value)| (self.hash(&cell), cell, value))
            .collect();
        let mut guard = self.lock();
        let inner = &mut *guard;
        for (hash, cell, value) in hashed {
            if inner
                .entries
                .get(&hash)
                .is_some_and(|e| e.cell == cell && e.commit_ts > commit_ts)
            {
                continue;
            }
            let seq = inner.next_seq;
            inner.next_seq += 1;
            let entry = Entry {
                cell,
                value,
                commit_ts,
                seq,
            };
            inner.bytes += entry.weight();
            if let Some(old) = inner.entries.insert(hash, entry) {
                inner.bytes -= old.weight();
            }
            inner.queue.push_back((hash, seq));
        }
        while inner.bytes > self.budget {
            let Some((hash, seq)) = inner.queue.pop_front() else {
                break;
            };
            if inner.entries.get(&hash).is_some_and(|e| e.seq == seq) {
                if let Some(old) = inner.entries.remove(&hash) {
                    inner.bytes -= old.weight();
                }
            }
        }
    }

    /// For each of `cells`, the remembered write committed at or below `at`, if any.
    pub(crate) fn lookup(&self, cells: &[&Cell], at: u64) -> Vec<Option<Remembered>> {
        let hashes: Vec<u64> = cells.iter().map(|cell| self.hash(cell)).collect();
        let found: Vec<Option<Remembered>> = {
            let inner = self.lock();
            cells
                .iter()
                .zip(hashes)
                .map(|(cell, hash)| {
                    inner
                        .entries
                        .get(&hash)
                        .filter(|e| e.cell == **cell && e.commit_ts <= at)
                        .map(|e| (e.value.clone(), e.commit_ts))
                })
                .collect()
        };
        let hits = found.iter().filter(|f| f.is_some()).count() as u64;
        self.hits.fetch_add(hits, Ordering::Relaxed);
        self.misses
            .fetch_add(cells.len() as u64 - hits, Ordering::Relaxed);
        found
    }

    /// (lookups answered, lookups that went to the store) since the client was made.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }

    /// Bytes remembered now (as the budget counts them).
    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.lock().bytes
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

    #[test]
    fn answers_only_commits_at_or_below_the_snapshot() {
        let recent = RecentWrites::new(1 << 20).expect("a budget");
        recent.remember(vec![(cell("a"), Some(b"1".to_vec()))], 10);
        let (a, b) = (cell("a"), cell("b"));
        assert_eq!(recent.lookup(&[&a], 9), vec![None]);
        assert_eq!(
            recent.lookup(&[&a], 10),
            vec![Some((Some(b"1".to_vec()), 10))]
        );
        assert_eq!(recent.lookup(&[&b], 10), vec![None]);
        assert_eq!(recent.counts(), (1, 2));
    }

    #[test]
    fn a_newer_commit_replaces_an_older_one_never_the_reverse() {
        let recent = RecentWrites::new(1 << 20).expect("a budget");
        let a = cell("a");
        recent.remember(vec![(a.clone(), Some(b"new".to_vec()))], 20);
        recent.remember(vec![(a.clone(), Some(b"old".to_vec()))], 10);
        assert_eq!(
            recent.lookup(&[&a], 30),
            vec![Some((Some(b"new".to_vec()), 20))]
        );
        recent.remember(vec![(a.clone(), None)], 25);
        assert_eq!(recent.lookup(&[&a], 30), vec![Some((None, 25))]);
        // Below the delete, the older value it replaced is not answered: the store is read.
        assert_eq!(recent.lookup(&[&a], 24), vec![None]);
    }

    #[test]
    fn the_oldest_insertions_go_first_once_past_the_budget() {
        let recent = RecentWrites::new(10 * WEIGHT as u64).expect("a budget");
        for n in 0..20 {
            recent.remember(vec![(cell(&format!("{n:02}")), Some(vec![0; 100]))], n + 1);
        }
        assert_eq!(recent.bytes(), 10 * WEIGHT);
        let (old, kept, new) = (cell("09"), cell("10"), cell("19"));
        assert_eq!(recent.lookup(&[&old], 100), vec![None]);
        assert!(recent.lookup(&[&kept], 100)[0].is_some());
        assert!(recent.lookup(&[&new], 100)[0].is_some());
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
            recent.lookup(&[&x], 10),
            vec![Some((Some(vec![1; 100]), 3))]
        );
        assert_eq!(recent.lookup(&[&y], 10), vec![None]);
        assert_eq!(recent.bytes(), 2 * WEIGHT);
    }
}
