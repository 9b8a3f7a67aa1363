//! Leadership over the oracle record and the in-memory window served under it.

use crate::record::{LeaderInfo, OracleRecord};
use crate::{OracleError, WindowOptions};
use percolator::{RawKv, Timestamp};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The range handed out so far and the persisted limit.
struct Alloc {
    /// Last timestamp handed out (0: none yet).
    last: u64,
    /// Persisted window end of our epoch: we never hand out anything above it.
    window_end: u64,
}

/// What we last wrote (the expected value of our next CAS).
struct Written {
    bytes: Vec<u8>,
    rec: OracleRecord,
}

/// A held leadership: epoch `epoch` was raised by our CAS, and we serve inside windows that we
/// persisted under that epoch.
pub(crate) struct Lease {
    kv: Arc<dyn RawKv>,
    key: Vec<u8>,
    opts: WindowOptions,
    id: u64,
    epoch: u64,
    window_ms: AtomicU64,
    alloc: Mutex<Alloc>,
    written: tokio::sync::Mutex<Written>,
    deposed: AtomicBool,
    /// Physical time of the first timestamp we may hand out, and when we took over.
    floor_ms: u64,
    since: std::time::Instant,
}

fn window_end_after(physical_ms: u64, window_ms: u64) -> u64 {
    Timestamp::compose(physical_ms.saturating_add(window_ms), 0).0
}

impl Lease {
    /// Takes over the record: CAS from exactly `observed` (the bytes the caller decided to
    /// take over from; `None`: absent) to a record with a raised epoch, us as leader, and a
    /// window starting above the old one. `Ok(None)`: the record changed meanwhile.
    ///
    /// That first window is not served from: the first allocation (or heartbeat) writes the
    /// record again and syncs it ([`Lease::extend`]), so every window served from is on disk.
    /// The takeover itself has no await point after its CAS, so a caller cancelled (shut down)
    /// after it has already installed the lease and releases it.
    pub(crate) async fn take_over(
        kv: Arc<dyn RawKv>,
        key: Vec<u8>,
        opts: WindowOptions,
        id: u64,
        addr: String,
        observed: Option<Vec<u8>>,
    ) -> Result<Option<Lease>, OracleError> {
        let old = match &observed {
            Some(bytes) => Some(OracleRecord::decode(bytes)?),
            None => None,
        };
        let (old_epoch, old_end, old_seq) = old
            .as_ref()
            .map_or((0, 0, 0), |r| (r.epoch, r.window_end, r.seq));
        let window_ms = opts.window.as_millis() as u64;
        let now_ts = Timestamp::compose(opts.clock.now_ms(), 0).0;
        // Everything we hand out is above `last`, hence above every earlier window.
        let last = old_end.max(now_ts.saturating_sub(1));
        let rec = OracleRecord {
            epoch: old_epoch + 1,
            window_end: window_end_after(Timestamp(last).physical_ms(), window_ms),
            seq: old_seq + 1,
            leader: Some(LeaderInfo { id, addr }),
        };
        let bytes = rec.encode();
        let out = kv
            .compare_and_swap(key.clone(), observed, bytes.clone())
            .await?;
        // A retried CAS may report failure for a swap that happened: our bytes are unique.
        if !out.swapped && out.previous.as_deref() != Some(bytes.as_slice()) {
            return Ok(None);
        }
        Ok(Some(Lease {
            kv,
            key,
            window_ms: AtomicU64::new(window_ms),
            opts,
            id,
            epoch: rec.epoch,
            // Nothing to serve until a synced extension (see above).
            alloc: Mutex::new(Alloc {
                last,
                window_end: last,
            }),
            written: tokio::sync::Mutex::new(Written { bytes, rec }),
            deposed: AtomicBool::new(false),
            floor_ms: Timestamp(last).physical_ms(),
            since: std::time::Instant::now(),
        }))
    }

    /// Oracle time in milliseconds: the wall clock, except after a takeover that had to start
    /// ahead of it (above the previous leader's window). Then oracle time runs at half speed
    /// from that start until the wall clock catches up, instead of standing still: lock TTLs
    /// are measured on oracle time, so a stalled oracle would keep locks of crashed clients
    /// alive for as long as it is ahead (seconds per restart, adding up over quick restarts).
    fn now_ms(&self) -> u64 {
        let catching_up = self
            .floor_ms
            .saturating_add(self.since.elapsed().as_millis() as u64 / 2);
        self.opts.clock.now_ms().max(catching_up)
    }

    /// Our epoch.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Whether we learnt that another instance took over (or we released).
    pub(crate) fn is_deposed(&self) -> bool {
        self.deposed.load(Ordering::Acquire)
    }

    fn depose(&self) {
        self.deposed.store(true, Ordering::Release);
    }

    /// Reserves `n` consecutive timestamps, all above everything handed out before and inside
    /// a persisted window; returns the first, and whether less than half a window is left
    /// after them (time to extend it ahead, so callers do not wait for the durable write).
    pub(crate) async fn allocate(&self, n: u64) -> Result<(u64, bool), OracleError> {
        if n == 0 {
            return Err(OracleError::InvalidCount(0));
        }
        loop {
            let need = {
                let mut a = self.alloc.lock().unwrap_or_else(|p| p.into_inner());
                if self.is_deposed() {
                    return Err(OracleError::NotLeader);
                }
                let now_ts = Timestamp::compose(self.now_ms(), 0).0;
                let first = (a.last + 1).max(now_ts);
                let last = first + (n - 1);
                if last <= a.window_end {
                    a.last = last;
                    let left_ms = Timestamp(a.window_end)
                        .physical_ms()
                        .saturating_sub(Timestamp(last).physical_ms());
                    let low = left_ms < self.window_ms.load(Ordering::Relaxed) / 2;
                    return Ok((first, low));
                }
                last
            };
            // Timestamps outran the wall clock (more than 2^18 per millisecond): the window is
            // too small for the load, so it grows.
            if Timestamp(need).physical_ms() > self.now_ms() {
                let max = self.opts.max_window.as_millis() as u64;
                let w = self.window_ms.load(Ordering::Relaxed);
                self.window_ms
                    .store((w * 2).min(max).max(w), Ordering::Relaxed);
            }
            self.extend(Some(need)).await?;
        }
    }

    /// Persists a new window end (and a fresh seq, which doubles as the heartbeat).
    /// `need`: a timestamp the window must cover; `None`: a heartbeat.
    pub(crate) async fn extend(&self, need: Option<u64>) -> Result<(), OracleError> {
        let mut written = self.written.lock().await;
        if self.is_deposed() {
            return Err(OracleError::NotLeader);
        }
        let (last, end) = {
            let a = self.alloc.lock().unwrap_or_else(|p| p.into_inner());
            (a.last, a.window_end)
        };
        if need.is_some_and(|need| need <= end) {
            return Ok(()); // another caller extended it meanwhile
        }
        let base_ms = self
            .now_ms()
            .max(Timestamp(last).physical_ms())
            .max(Timestamp(need.unwrap_or(0)).physical_ms());
        let new_end = window_end_after(base_ms, self.window_ms.load(Ordering::Relaxed)).max(end);
        let mut rec = written.rec.clone();
        rec.seq += 1;
        rec.window_end = new_end;
        let bytes = rec.encode();
        let swapped = match self
            .kv
            .compare_and_swap(self.key.clone(), Some(written.bytes.clone()), bytes.clone())
            .await
        {
            Ok(out) => out.swapped || out.previous.as_deref() == Some(bytes.as_slice()),
            Err(e) => {
                // The write may have happened: our bytes are unique, so look.
                match self.kv.get(&self.key).await {
                    Ok(Some(current)) if current == bytes => true,
                    Ok(Some(current)) if current == written.bytes => return Err(e.into()),
                    Ok(_) => false,
                    Err(_) => return Err(e.into()),
                }
            }
        };
        if !swapped {
            self.depose();
            return Err(OracleError::NotLeader);
        }
        *written = Written { bytes, rec };
        // The new window end on disk (not only in the OS's cache) before any timestamp of it
        // is handed out: after a power loss the next leader starts above what is on disk. A
        // failed sync leaves the window unused (the next extension syncs again).
        self.kv.sync().await?;
        let mut a = self.alloc.lock().unwrap_or_else(|p| p.into_inner());
        a.window_end = a.window_end.max(new_end);
        Ok(())
    }

    /// The per-batch epoch check: re-reads the record and reports whether we are still the
    /// leader of our epoch. Call after receiving requests and before replying.
    pub(crate) async fn check_epoch(&self) -> Result<bool, OracleError> {
        let current = self.kv.get(&self.key).await?;
        let ok = match current {
            Some(bytes) => {
                let rec = OracleRecord::decode(&bytes)?;
                rec.epoch == self.epoch && rec.leader.is_some_and(|l| l.id == self.id)
            }
            None => false,
        };
        if !ok {
            self.depose();
        }
        Ok(ok)
    }

    /// Stops serving and marks the record as having no leader, so a standby takes over at
    /// once. The window end stays: the next leader starts above it.
    pub(crate) async fn release(&self) -> Result<(), OracleError> {
        let mut written = self.written.lock().await;
        if self.is_deposed() {
            return Ok(());
        }
        // Stop allocating first: nothing handed out after this point.
        {
            let _a = self.alloc.lock().unwrap_or_else(|p| p.into_inner());
            self.depose();
        }
        let mut rec = written.rec.clone();
        rec.seq += 1;
        rec.leader = None;
        let bytes = rec.encode();
        let out = self
            .kv
            .compare_and_swap(self.key.clone(), Some(written.bytes.clone()), bytes.clone())
            .await?;
        if out.swapped || out.previous.as_deref() == Some(bytes.as_slice()) {
            *written = Written { bytes, rec };
        }
        Ok(())
    }
}
