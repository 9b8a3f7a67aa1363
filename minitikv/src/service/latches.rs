//! TiKV's latches, as raw mode uses them: only atomic commands take them.
//!
//! In TiKV a raw CAS (`RawCompareAndSwap`) and the writes sent in atomic mode (`for_cas`:
//! `raw_batch_put_atomic`, `raw_batch_delete_atomic`, through the scheduler's
//! `RawAtomicStore`) take the latches of their keys, so they are serialised with each other;
//! a plain `RawPut`/`RawDelete` writes straight to the engine and takes none
//! (`future_raw_put` in src/server/service/kv.rs; tikv/tikv#10594). minitikv does the same:
//! a CAS reads, compares and writes under the latches of its key, atomic-mode writes take
//! them too, and plain writes do not, so a plain write can land between a CAS's read and
//! its write and be lost under it, as on TiKV.
//!
//! A latch is one of [`SLOTS`] async mutexes picked by a hash of the key (TiKV hashes keys
//! to slots the same way); a request takes its slots in ascending order, so two requests
//! never wait on each other crosswise.
//!
//! For tests, [`CasHold`] stops every CAS between its read and its write (latches held) until
//! released, and reports how many CASes are stopped there and how many requests wait for a
//! latch: the window in which a plain write slips under a CAS is then deterministic.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use tokio::sync::{watch, Mutex, MutexGuard};

/// Number of latch slots.
pub(crate) const SLOTS: usize = 256;

/// The latches of every key, and the test hold on CASes.
pub(crate) struct Latches {
    slots: Vec<Mutex<()>>,
    /// Whether CASes stop between their read and their write.
    held: watch::Sender<bool>,
    /// CASes stopped there now.
    paused: watch::Sender<u64>,
    /// Requests waiting for a latch now.
    waiting: watch::Sender<u64>,
}

/// The latches one request holds (released on drop).
pub(crate) struct Held<'a> {
    _guards: Vec<MutexGuard<'a, ()>>,
}

impl Latches {
    pub(crate) fn new() -> Self {
        Latches {
            slots: (0..SLOTS).map(|_| Mutex::new(())).collect(),
            held: watch::channel(false).0,
            paused: watch::channel(0).0,
            waiting: watch::channel(0).0,
        }
    }

    fn slot(key: &[u8]) -> usize {
        let mut h = DefaultHasher::new();
        key.hash(&mut h);
        (h.finish() % SLOTS as u64) as usize
    }

    /// Takes the latches of `keys` (waiting for requests holding any of them).
    pub(crate) async fn acquire<'k>(&self, keys: impl IntoIterator<Item = &'k [u8]>) -> Held<'_> {
        let mut slots: Vec<usize> = keys.into_iter().map(Self::slot).collect();
        slots.sort_unstable();
        slots.dedup();
        let mut guards = Vec::with_capacity(slots.len());
        for slot in slots {
            let mutex = &self.slots[slot];
            let guard = match mutex.try_lock() {
                Ok(guard) => guard,
                Err(_) => {
                    self.waiting.send_modify(|n| *n += 1);
                    let guard = mutex.lock().await;
                    self.waiting.send_modify(|n| *n -= 1);
                    guard
                }
            };
            guards.push(guard);
        }
        Held { _guards: guards }
    }

    /// Called by a CAS between its read and its write: waits while CASes are held.
    pub(crate) async fn cas_checkpoint(&self) {
        let mut held = self.held.subscribe();
        if !*held.borrow_and_update() {
            return;
        }
        self.paused.send_modify(|n| *n += 1);
        while *held.borrow_and_update() {
            if held.changed().await.is_err() {
                break;
            }
        }
        self.paused.send_modify(|n| *n -= 1);
    }

    /// Stops CASes between read and write until the returned hold is dropped.
    pub(crate) fn hold(&self) -> CasHold {
        self.held.send_replace(true);
        CasHold {
            held: self.held.clone(),
            paused: self.paused.subscribe(),
            waiting: self.waiting.subscribe(),
        }
    }
}

/// While it lives, every CAS stops between its read and its write, with its latch held
/// (see the module documentation). Dropping it lets them go on.
pub struct CasHold {
    held: watch::Sender<bool>,
    paused: watch::Receiver<u64>,
    waiting: watch::Receiver<u64>,
}

impl CasHold {
    /// Waits until at least `n` CASes are stopped between their read and their write.
    pub async fn stopped_cas(&mut self, n: u64) {
        let _ = self.paused.wait_for(|p| *p >= n).await;
    }

    /// Waits until at least `n` requests wait for a latch.
    pub async fn latch_waiters(&mut self, n: u64) {
        let _ = self.waiting.wait_for(|w| *w >= n).await;
    }
}

impl Drop for CasHold {
    fn drop(&mut self) {
        self.held.send_replace(false);
    }
}
