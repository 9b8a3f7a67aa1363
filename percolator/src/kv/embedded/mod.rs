//! The embedded persistent backend, on the fjall LSM engine.
//!
//! Layout of a data directory: `LOCK` (held with an exclusive `flock` while a store is open,
//! so a second process gets [`KvError::DirectoryInUse`]) and `fjall/` (the engine's files).
//!
//! Every write goes to fjall's journal and is flushed to the operating system before the call
//! returns, so an acknowledged write survives `kill -9` of the process; with
//! [`Durability::Fsync`] it is also `fdatasync`ed and survives power loss.
//!
//! Compare-and-swap is made atomic by striped mutexes: every write of a key (put, delete,
//! batch put, CAS) holds the stripe its key hashes to, so a CAS's read-compare-write cannot
//! interleave with another write of the same key from any task of the process. A batch of
//! CASes takes the stripes of all its keys (ascending, each once, as batch puts do), reads
//! every key, writes every key that swaps in one fjall write batch (one journal write) and
//! releases them.
//!
//! **Key split.** The caller may keep some keys in a fjall partition of their own
//! ([`EmbeddedOptions::split`], a [`KeySplit`]); every other key is in `kv`. The store knows
//! nothing of the key layout: the transaction layer supplies its rule
//! (`percolator::codec::notify_split`: notify keys in `notify`, since a notification is put,
//! then deleted once handled, so that space is mostly delete markers which scans and
//! compaction of the rest no longer walk). Each key has one home (a pure function of its
//! bytes), so a point operation touches one partition; a batch may span both (one fjall batch,
//! one journal write, atomic as before); a scan reads the one partition its range can hold
//! keys of ([`KeySplit::sides`]), or both, merged in key order. See `split.rs` for how stores
//! written before a split are moved, and why a split store is never opened without its rule.
//!
//! **Group commit** (under [`Durability::Fsync`]): writers that finish their journal write
//! while another writer's `fdatasync` runs share the next one instead of each paying for
//! their own (see [`EmbeddedKv`]'s `sync`): a ticket is taken after the journal write, and an
//! fsync started after a ticket was taken covers that ticket's write.

use super::memory::range_bounds;
use super::{
    check_distinct_cas_keys, check_put_and_cas_keys, check_scan_limit, CasOutcome, CasRequest,
    KeyRange, KvError, KvPair, KvResult, RawKv, ScanOrder,
};
use ahash::RandomState;
use async_trait::async_trait;
use fjall::{Config, Keyspace, PartitionCreateOptions, PartitionHandle, PersistMode};
use split::{open_split, Split, MAIN_PARTITION};
use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

mod host_memory;
mod options;
mod split;

pub use host_memory::{
    default_write_buffer_bytes, process_memory_bytes, FALLBACK_WRITE_BUFFER_BYTES,
    MAX_DEFAULT_WRITE_BUFFER_BYTES, MIN_DEFAULT_WRITE_BUFFER_BYTES,
};
pub use options::{
    Durability, DurabilityError, EmbeddedOptions, CACHE_MB_ENV, WRITE_BUFFER_MB_ENV,
};

pub use split::KeySplit;

/// The smallest journal limit (fjall's default); a write buffer above it raises it.
const JOURNAL_BYTES_AT_LEAST: u64 = 512 * 1024 * 1024;

/// Number of striped write locks; a power of two.
const STRIPES: usize = 1024;

/// The group-commit state of an [`EmbeddedKv`] (see `EmbeddedKv::sync`).
#[derive(Default)]
struct GroupCommit {
    /// Tickets handed out: one per write that wants a sync, taken after its journal write.
    tickets: AtomicU64,
    /// Every ticket up to this one is on disk.
    synced: AtomicU64,
    /// Held by the one writer running an fsync.
    syncing: tokio::sync::Mutex<()>,
    /// Fsyncs run.
    fsyncs: AtomicU64,
    /// The first failed sync, if one failed: every later write and sync fails with it. On
    /// Linux a failed writeback is reported once, to one descriptor, and its pages are then
    /// clean; a later sync through a new descriptor succeeds without them. So after a failure
    /// nothing more may be acknowledged (fjall likewise refuses writes once a `persist` of its
    /// own failed).
    failed: std::sync::OnceLock<String>,
}

/// A persistent [`RawKv`] in a local data directory.
pub struct EmbeddedKv {
    path: PathBuf,
    keyspace: Keyspace,
    /// Every key the split does not hold.
    data: PartitionHandle,
    /// The caller's split and its partition, if any.
    split: Option<Split>,
    durability: Durability,
    stripes: Box<[Mutex<()>]>,
    hasher: RandomState,
    /// Group commit (under [`Durability::Fsync`]).
    group: GroupCommit,
    /// Held (flock'ed) for as long as the store is open.
    _lock: File,
}

impl std::fmt::Debug for EmbeddedKv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedKv")
            .field("path", &self.path)
            .field("durability", &self.durability)
            .finish_non_exhaustive()
    }
}

/// Fails `op` if an earlier sync of the store failed ([`GroupCommit`]'s `failed`).
fn refuse_after_failed_sync(group: &GroupCommit, op: &'static str) -> KvResult<()> {
    match group.failed.get() {
        None => Ok(()),
        Some(first) => Err(KvError::Engine {
            op,
            message: format!(
                "an earlier sync of the store failed ({first}); nothing is acknowledged after \
                 it: reopen the store"
            ),
        }),
    }
}

/// fjall's directory of journal files, under the store's `fjall/` directory (fjall 2's
/// layout; a test checks it, so an engine whose layout differs fails loudly instead of
/// syncing nothing: [`sync_journals`] also fails if it is missing).
const JOURNALS_DIR: &str = "journals";

/// Makes every write acknowledged before the call survive power loss, without holding
/// fjall's journal lock while the disk works.
///
/// `Keyspace::persist(SyncData)` fsyncs the journal with fjall's journal writer mutex held,
/// and every write of the process takes that mutex: each `sync` (the oracle's, every half
/// window, about every 1.5 s) stalled every writer for the whole fsync, which under
/// `Durability::Process` writes back every journal page dirtied since the last one (about
/// 130 MB at a 2,000,000-event job's rate: `docs/perf/photon.md`). Instead:
///
/// 1. `persist(Buffer)`: the journal's buffer reaches the OS (fjall already does this in
///    every write unless told otherwise; it takes the mutex only for that);
/// 2. every file of the journals directory is opened and `fdatasync`ed, and so is the
///    directory, with no lock of fjall's held: writers go on meanwhile.
///
/// Why that covers every write acknowledged before the call: such a write is in the OS's
/// copy of some journal file (step 1, or its own commit) that existed before step 2 lists
/// the directory (a journal file is created before it is written), and `fdatasync` of any
/// descriptor of a file writes back all of that file's data. A journal that is gone by
/// the listing was deleted by fjall only once every partition's segments that hold its
/// writes were written and fsynced (fjall's journal manager compares the journal's seqno
/// with the highest seqno persisted in segments), so its writes are on disk already. One
/// deleted between the listing and its open is skipped for the same reason. Every journal
/// file is synced, not only the newest (fjall syncs a journal fully before it opens the
/// next, so the newest would do within one process's life): sealed journals a crashed
/// process left in the OS's cache are covered too.
///
/// Unix only: elsewhere a read-only handle cannot be synced, and fjall's own
/// `persist(SyncData)` is used.
#[cfg(unix)]
fn sync_journals(keyspace: &Keyspace, store_dir: &Path) -> KvResult<()> {
    keyspace
        .persist(PersistMode::Buffer)
        .map_err(engine("sync"))?;
    let journals = store_dir.join("fjall").join(JOURNALS_DIR);
    let entries = std::fs::read_dir(&journals).map_err(io(&journals))?;
    for entry in entries {
        let path = entry.map_err(io(&journals))?.path();
        match File::open(&path) {
            Ok(file) => file.sync_data().map_err(io(&path))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(&path)(e)),
        }
    }
    File::open(&journals)
        .and_then(|dir| dir.sync_all())
        .map_err(io(&journals))
}

/// [`sync_journals`] where a read-only handle cannot be synced: fjall's own
/// `persist(SyncData)`, which holds the journal mutex through the fsync.
#[cfg(not(unix))]
fn sync_journals(keyspace: &Keyspace, _store_dir: &Path) -> KvResult<()> {
    keyspace
        .persist(PersistMode::SyncData)
        .map_err(engine("sync"))
}

fn engine(op: &'static str) -> impl FnOnce(fjall::Error) -> KvError {
    move |e| KvError::Engine {
        op,
        message: e.to_string(),
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> KvError + '_ {
    move |source| KvError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl EmbeddedKv {
    /// Opens (creating if needed) the store in directory `path` with default options.
    pub fn open(path: impl AsRef<Path>) -> KvResult<Self> {
        Self::open_with(path, EmbeddedOptions::default())
    }

    /// Opens (creating if needed) the store in directory `path`.
    ///
    /// Fails with [`KvError::DirectoryInUse`] if another process (or another open handle)
    /// holds the directory.
    pub fn open_with(path: impl AsRef<Path>, options: EmbeddedOptions) -> KvResult<Self> {
        let path = path.as_ref().to_path_buf();
        std::fs::create_dir_all(&path).map_err(io(&path))?;
        let lock_path = path.join("LOCK");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io(&lock_path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(KvError::DirectoryInUse {
                    path,
                    lock: lock_path,
                })
            }
            Err(TryLockError::Error(e)) => return Err(io(&lock_path)(e)),
        }
        let write_buffer_bytes = options.write_buffer_bytes.max(1024 * 1024);
        // The journal holds what the memtables hold, and a bit more (partition names, batch
        // markers). fjall flushes the partitions of its oldest journals once they pass half
        // its limit, stalls writers past 90 % and halts them past the limit, checked when a
        // writer's memtable fills; so the limit stays at least twice a partition's memtable
        // (half the buffer), which a full memtable's journal stays below: fjall's 512 MiB,
        // or the write buffer if larger.
        let journal_bytes = write_buffer_bytes.max(JOURNAL_BYTES_AT_LEAST);
        let keyspace = Config::new(path.join("fjall"))
            .cache_size(options.cache_bytes)
            .max_write_buffer_size(write_buffer_bytes)
            .max_journaling_size(journal_bytes)
            .open()
            .map_err(engine("open"))?;
        // A partition's memtable may take half the write buffer (fjall's default is 16 MiB
        // whatever the buffer): fewer flushes, fewer level-0 segments for point reads to
        // check and less compaction. fjall's monitor flushes the largest memtable once the
        // memtables pass half the buffer anyway, so a larger limit would change nothing but
        // let one partition fill the buffer and stall writers. `photon demo --clicks 200000`
        // ran on 5 to 13 % less CPU with it (issue 14). fjall keeps a partition's options
        // from its creation: a store keeps the memtable size it was created with (16 MiB
        // before issue 14, 32 MiB until the 256 MiB default of issue 42, 128 MiB until the
        // write buffer was sized by the host's memory).
        let memtable = u32::try_from(write_buffer_bytes / 2).unwrap_or(u32::MAX);
        let partition = || PartitionCreateOptions::default().max_memtable_size(memtable);
        let data = keyspace
            .open_partition(MAIN_PARTITION, partition())
            .map_err(engine("open"))?;
        let split = open_split(&path, &keyspace, &data, options.split.as_ref(), partition())?;
        tracing::debug!(path = %path.display(), ?options, "opened embedded store");
        Ok(EmbeddedKv {
            path,
            keyspace,
            data,
            split,
            durability: options.durability,
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            hasher: RandomState::new(),
            group: GroupCommit::default(),
            _lock: lock,
        })
    }

    /// The partition of every key the split does not hold (tests look inside it).
    #[cfg(test)]
    pub(crate) fn main_partition(&self) -> &PartitionHandle {
        &self.data
    }

    /// Closes a store whose directory the caller removes next, in a process about to exit:
    /// the store's threads stop as on a drop, but the partitions' active memtables are left
    /// to the exit instead of being freed entry by entry (for `photon demo` in a temporary
    /// directory, 3.7 % of the process's CPU samples: `docs/perf/photon.md`). What they hold is
    /// lost with the directory anyway; memtables already sealed for a flush are freed as
    /// usual.
    pub fn close_for_removal(self) {
        use fjall::AbstractTree;
        let partitions =
            std::iter::once(&self.data).chain(self.split.as_ref().map(|s| &s.partition));
        for partition in partitions {
            // The rotated memtable also stays on the tree's list of sealed memtables, whose
            // drop below only lowers its count; nothing queues it for a flush (fjall's
            // flushes are queued by the partition's own rotation, not the tree's).
            if let Some((_, memtable)) = partition.tree.rotate_memtable() {
                std::mem::forget(memtable);
            }
        }
        drop(self);
    }

    /// The data directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn stripe_of(&self, key: &[u8]) -> usize {
        (self.hasher.hash_one(key) as usize) & (STRIPES - 1)
    }

    fn lock_stripe(&self, index: usize) -> MutexGuard<'_, ()> {
        // The guarded value is `()`: a poisoned stripe protects no state, keep using it.
        self.stripes[index]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// How many syncs of its journals the store has completed (under
    /// [`Durability::Fsync`], and for [`RawKv::sync`] calls), each an `fdatasync` of every
    /// journal file. With concurrent writers it stays below the number of writes (group
    /// commit).
    pub fn fsyncs(&self) -> u64 {
        self.group.fsyncs.load(Ordering::Relaxed)
    }

    /// Under [`Durability::Fsync`], waits until the caller's write (already in the journal)
    /// is on disk ([`EmbeddedKv::fsync`]); does nothing otherwise.
    async fn ack_sync(&self, op: &'static str) -> KvResult<()> {
        if self.durability != Durability::Fsync {
            return Ok(());
        }
        self.fsync(op).await
    }

    /// Waits until every write already in the journal is on disk, sharing one `fdatasync`
    /// with every writer that got this far meanwhile.
    ///
    /// Why a shared fsync covers a writer: the writer takes its ticket after its journal
    /// write returned; the fsyncer reads the ticket counter before it starts, so every
    /// ticket up to what it read belongs to a write already in the journal, which the
    /// journals' sync (`sync_journals`) covers. `synced` only grows, to tickets an fsync
    /// covered; a failed sync is kept and fails every later write and sync. At
    /// most one fsync runs at a time (the `syncing` mutex); writers queued behind it find
    /// their ticket covered when their turn comes and return without a sync of their own.
    async fn fsync(&self, op: &'static str) -> KvResult<()> {
        let group = &self.group;
        refuse_after_failed_sync(group, op)?;
        let ticket = group.tickets.fetch_add(1, Ordering::SeqCst) + 1;
        if group.synced.load(Ordering::SeqCst) >= ticket {
            return Ok(());
        }
        let _turn = group.syncing.lock().await;
        if group.synced.load(Ordering::SeqCst) >= ticket {
            return Ok(());
        }
        refuse_after_failed_sync(group, op)?;
        let covered = group.tickets.load(Ordering::SeqCst);
        let keyspace = self.keyspace.clone();
        let store_dir = self.path.clone();
        let synced = tokio::task::spawn_blocking(move || sync_journals(&keyspace, &store_dir))
            .await
            .map_err(|e| KvError::Engine {
                op,
                message: format!("fsync task failed: {e}"),
            })
            .and_then(|result| result);
        if let Err(e) = synced {
            let _ = group.failed.set(e.to_string());
            return Err(e);
        }
        group.fsyncs.fetch_add(1, Ordering::Relaxed);
        group.synced.fetch_max(covered, Ordering::SeqCst);
        Ok(())
    }

    /// The partition that holds `key`.
    fn home(&self, key: &[u8]) -> &PartitionHandle {
        match &self.split {
            Some(split) if split.rule.holds(key) => &split.partition,
            _ => &self.data,
        }
    }

    /// Up to `limit` pairs of `range` in `partition`, in `order`.
    fn scan_partition(
        partition: &PartitionHandle,
        range: &KeyRange,
        limit: usize,
        order: ScanOrder,
    ) -> KvResult<Vec<KvPair>> {
        let iter = partition.range::<&[u8], _>(range_bounds(range));
        let convert = |item: fjall::Result<(fjall::Slice, fjall::Slice)>| {
            item.map(|(k, v)| (k.to_vec(), v.to_vec()))
                .map_err(engine("scan"))
        };
        match order {
            ScanOrder::Forward => iter.take(limit).map(convert).collect(),
            ScanOrder::Reverse => iter.rev().take(limit).map(convert).collect(),
        }
    }

    /// Writes `pairs` and every request of `requests` that swaps in one fjall batch, under
    /// the stripes of all their keys (ascending, each once: no deadlock between batches),
    /// each request decided on its key as read under its stripe. Returns the requests'
    /// outcomes and whether anything was written. The caller has checked the keys
    /// ([`check_put_and_cas_keys`]): no request's key is put or swapped twice.
    fn write_batch(
        &self,
        op: &'static str,
        pairs: Vec<KvPair>,
        requests: Vec<CasRequest>,
    ) -> KvResult<(Vec<CasOutcome>, bool)> {
        if pairs.is_empty() && requests.is_empty() {
            return Ok((Vec::new(), false));
        }
        let mut stripes: Vec<usize> = pairs
            .iter()
            .map(|(k, _)| self.stripe_of(k))
            .chain(requests.iter().map(|r| self.stripe_of(&r.key)))
            .collect();
        stripes.sort_unstable();
        stripes.dedup();
        let _guards: Vec<_> = stripes.iter().map(|&i| self.lock_stripe(i)).collect();
        let mut outcomes = Vec::with_capacity(requests.len());
        let mut batch = self.keyspace.batch();
        let mut wrote = !pairs.is_empty();
        for (k, v) in pairs {
            batch.insert(self.home(&k), k, v);
        }
        for r in requests {
            let home = self.home(&r.key);
            let outcome = decide(home.get(&r.key).map_err(engine("get"))?, r.expected);
            if outcome.swapped {
                batch.insert(home, r.key, r.new);
                wrote = true;
            }
            outcomes.push(outcome);
        }
        if wrote {
            batch.commit().map_err(engine(op))?;
        }
        Ok((outcomes, wrote))
    }

    fn get_sync(&self, key: &[u8]) -> KvResult<Option<Vec<u8>>> {
        Ok(self
            .home(key)
            .get(key)
            .map_err(engine("get"))?
            .map(|v| v.to_vec()))
    }
}

/// A CAS's outcome from its key's `current` value and the caller's `expected` one, without
/// copying the stored bytes when they match (the previous value is then `expected` itself).
fn decide(current: Option<fjall::Slice>, expected: Option<Vec<u8>>) -> CasOutcome {
    if current.as_deref() == expected.as_deref() {
        CasOutcome {
            previous: expected,
            swapped: true,
        }
    } else {
        CasOutcome {
            previous: current.map(|v| v.to_vec()),
            swapped: false,
        }
    }
}

#[async_trait]
impl RawKv for EmbeddedKv {
    async fn get(&self, key: &[u8]) -> KvResult<Option<Vec<u8>>> {
        crate::kv::yield_point().await;
        self.get_sync(key)
    }

    async fn batch_get(&self, keys: &[Vec<u8>]) -> KvResult<Vec<Option<Vec<u8>>>> {
        crate::kv::yield_point().await;
        keys.iter().map(|k| self.get_sync(k)).collect()
    }

    async fn put(&self, key: Vec<u8>, value: Vec<u8>) -> KvResult<()> {
        crate::kv::yield_point().await;
        refuse_after_failed_sync(&self.group, "put")?;
        {
            let _guard = self.lock_stripe(self.stripe_of(&key));
            self.home(&key).insert(key, value).map_err(engine("put"))?;
        }
        self.ack_sync("put").await
    }

    async fn batch_put(&self, pairs: Vec<KvPair>) -> KvResult<()> {
        crate::kv::yield_point().await;
        refuse_after_failed_sync(&self.group, "batch_put")?;
        if self.write_batch("batch_put", pairs, Vec::new())?.1 {
            self.ack_sync("batch_put").await?;
        }
        Ok(())
    }

    async fn delete(&self, key: Vec<u8>) -> KvResult<()> {
        crate::kv::yield_point().await;
        refuse_after_failed_sync(&self.group, "delete")?;
        {
            let _guard = self.lock_stripe(self.stripe_of(&key));
            self.home(&key).remove(key).map_err(engine("delete"))?;
        }
        self.ack_sync("delete").await
    }

    async fn batch_delete(&self, keys: Vec<Vec<u8>>) -> KvResult<()> {
        crate::kv::yield_point().await;
        refuse_after_failed_sync(&self.group, "batch_delete")?;
        if keys.is_empty() {
            return Ok(());
        }
        let mut stripes: Vec<usize> = keys.iter().map(|k| self.stripe_of(k)).collect();
        stripes.sort_unstable();
        stripes.dedup();
        {
            let _guards: Vec<_> = stripes.iter().map(|&i| self.lock_stripe(i)).collect();
            let mut batch = self.keyspace.batch();
            for k in keys {
                batch.remove(self.home(&k), k);
            }
            batch.commit().map_err(engine("batch_delete"))?;
        }
        self.ack_sync("batch_delete").await
    }

    async fn scan(&self, range: KeyRange, limit: usize, order: ScanOrder) -> KvResult<Vec<KvPair>> {
        crate::kv::yield_point().await;
        check_scan_limit(limit)?;
        if range.is_empty() {
            return Ok(Vec::new());
        }
        let Some(split) = &self.split else {
            return Self::scan_partition(&self.data, &range, limit, order);
        };
        match split.rule.sides(&range) {
            (true, false) => Self::scan_partition(&split.partition, &range, limit, order),
            (false, _) => Self::scan_partition(&self.data, &range, limit, order),
            (true, true) => {
                // Keys of the two partitions are disjoint: the first `limit` of the range
                // are among the first `limit` of each, merged in order.
                let mut pairs = Self::scan_partition(&self.data, &range, limit, order)?;
                pairs.extend(Self::scan_partition(
                    &split.partition,
                    &range,
                    limit,
                    order,
                )?);
                match order {
                    ScanOrder::Forward => pairs.sort_unstable_by(|a, b| a.0.cmp(&b.0)),
                    ScanOrder::Reverse => pairs.sort_unstable_by(|a, b| b.0.cmp(&a.0)),
                }
                pairs.truncate(limit);
                Ok(pairs)
            }
        }
    }

    async fn compare_and_swap(
        &self,
        key: Vec<u8>,
        expected: Option<Vec<u8>>,
        new: Vec<u8>,
    ) -> KvResult<CasOutcome> {
        crate::kv::yield_point().await;
        refuse_after_failed_sync(&self.group, "compare_and_swap")?;
        let outcome = {
            let _guard = self.lock_stripe(self.stripe_of(&key));
            let home = self.home(&key);
            let current = home.get(&key).map_err(engine("get"))?;
            let outcome = decide(current, expected);
            if outcome.swapped {
                home.insert(key, new).map_err(engine("compare_and_swap"))?;
            }
            outcome
        };
        if outcome.swapped {
            self.ack_sync("compare_and_swap").await?;
        }
        Ok(outcome)
    }

    async fn batch_compare_and_swap(&self, requests: Vec<CasRequest>) -> KvResult<Vec<CasOutcome>> {
        crate::kv::yield_point().await;
        refuse_after_failed_sync(&self.group, "batch_compare_and_swap")?;
        check_distinct_cas_keys(&requests)?;
        let (outcomes, wrote) = self.write_batch("batch_compare_and_swap", Vec::new(), requests)?;
        if wrote {
            self.ack_sync("batch_compare_and_swap").await?;
        }
        Ok(outcomes)
    }

    /// The pairs and every request that swaps in one fjall batch (one journal write).
    async fn batch_put_and_compare_and_swap(
        &self,
        pairs: Vec<KvPair>,
        requests: Vec<CasRequest>,
    ) -> KvResult<Vec<CasOutcome>> {
        crate::kv::yield_point().await;
        let op = "batch_put_and_compare_and_swap";
        refuse_after_failed_sync(&self.group, op)?;
        check_put_and_cas_keys(&pairs, &requests)?;
        let (outcomes, wrote) = self.write_batch(op, pairs, requests)?;
        if wrote {
            self.ack_sync(op).await?;
        }
        Ok(outcomes)
    }

    /// An `fdatasync` (shared with concurrent writers), whatever the store's durability.
    async fn sync(&self) -> KvResult<()> {
        self.fsync("sync").await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A store in a temporary directory holding one write, and where its journals are.
    async fn store_with_one_write() -> (tempfile::TempDir, EmbeddedKv, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let kv = EmbeddedKv::open(dir.path()).unwrap();
        kv.put(b"k".to_vec(), b"v".to_vec()).await.unwrap();
        let journals = dir.path().join("fjall").join(JOURNALS_DIR);
        (dir, kv, journals)
    }

    /// Moves the journals directory out of `sync`'s sight; returns where it went.
    fn move_journals_away(journals: &Path) -> PathBuf {
        let elsewhere = journals.with_file_name("elsewhere");
        std::fs::rename(journals, &elsewhere).unwrap();
        elsewhere
    }

    /// `sync` finds fjall's journals where it looks for them, and syncs them.
    #[tokio::test]
    async fn sync_finds_the_journals_where_fjall_keeps_them() {
        let (_dir, kv, journals) = store_with_one_write().await;
        let files = std::fs::read_dir(&journals)
            .unwrap_or_else(|e| panic!("fjall keeps no journals in {}: {e}", journals.display()))
            .count();
        assert!(files >= 1, "no journal file in {}", journals.display());
        kv.sync().await.unwrap();
        assert_eq!(kv.fsyncs(), 1);
    }

    /// A store whose journals are not where `sync` looks (an engine with another layout)
    /// fails the sync instead of syncing nothing.
    #[tokio::test]
    async fn sync_fails_when_the_journals_are_not_where_it_looks() {
        let (_dir, kv, journals) = store_with_one_write().await;
        move_journals_away(&journals);
        match kv.sync().await {
            Err(KvError::Io { path, .. }) => assert_eq!(path, journals),
            other => panic!(
                "expected an I/O error naming {}, got {other:?}",
                journals.display()
            ),
        }
        assert_eq!(kv.fsyncs(), 0);
    }

    /// After a failed sync nothing more is acknowledged, even once a sync could succeed
    /// again: a later `fdatasync` through a new descriptor would not report the pages the
    /// failed one lost.
    #[tokio::test]
    async fn a_failed_sync_fails_every_later_write_and_sync() {
        let (_dir, kv, journals) = store_with_one_write().await;
        let elsewhere = move_journals_away(&journals);
        assert!(kv.sync().await.is_err());
        std::fs::rename(&elsewhere, &journals).unwrap();
        let refused = |r: KvResult<()>| matches!(r, Err(KvError::Engine { message, .. }) if message.contains("an earlier sync"));
        assert!(refused(kv.sync().await), "a sync after the failure");
        assert!(
            refused(kv.put(b"k2".to_vec(), b"v".to_vec()).await),
            "a put"
        );
        assert!(
            refused(kv.batch_delete(vec![b"k".to_vec()]).await),
            "a batch delete"
        );
        assert!(refused(
            kv.compare_and_swap(b"k".to_vec(), Some(b"v".to_vec()), b"w".to_vec())
                .await
                .map(|_| ())
        ));
        // Reads go on: what the store holds is still there.
        assert_eq!(kv.get(b"k").await.unwrap(), Some(b"v".to_vec()));
        assert_eq!(kv.get(b"k2").await.unwrap(), None);
    }

    /// Writers that reach the sync while another fsync is pending share one: ten puts that
    /// queue behind a held turn are covered by one fsync.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_writers_share_one_fsync() {
        let dir = tempfile::tempdir().unwrap();
        let kv = Arc::new(
            EmbeddedKv::open_with(
                dir.path(),
                EmbeddedOptions {
                    durability: Durability::Fsync,
                    ..EmbeddedOptions::default()
                },
            )
            .unwrap(),
        );
        kv.put(b"first".to_vec(), b"1".to_vec()).await.unwrap();
        assert_eq!(kv.fsyncs(), 1);
        let turn = kv.group.syncing.lock().await;
        let writers: Vec<_> = (0..10u8)
            .map(|i| {
                let kv = kv.clone();
                tokio::spawn(async move { kv.put(vec![b'k', i], vec![i]).await })
            })
            .collect();
        // Every writer has its ticket (its write is in the journal) and waits for a turn.
        while kv.group.tickets.load(Ordering::SeqCst) < 11 {
            tokio::task::yield_now().await;
        }
        drop(turn);
        for w in writers {
            w.await.unwrap().unwrap();
        }
        assert_eq!(kv.fsyncs(), 2, "ten queued writers share one fsync");
        for i in 0..10u8 {
            assert_eq!(kv.get(&[b'k', i]).await.unwrap(), Some(vec![i]));
        }
    }
}
