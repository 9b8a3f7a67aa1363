//! Membership: the worker registry (`M workers/<id>` heartbeats), the hash split of the
//! notify space among live workers, and which owners have stalled.
//!
//! Invariants it keeps:
//! - A worker owns nothing until it is settled: a heartbeat period (at most [`SETTLE_MAX`])
//!   after its first heartbeat, when the other workers have seen it, so that its share does
//!   not overlap theirs as it joins.
//! - A cell has one owner among the live workers the last heartbeat saw: the one at index
//!   `stable_hash(cell) % live` of the sorted worker keys (hash, index and count are read
//!   under one lock, so an owner test never mixes two heartbeats' views).
//! - A worker is dead to another only when its beat (oracle ms, drawn at the start of its
//!   heartbeat) is [`DEAD_AFTER_BEATS`] periods old on the reader's clock (the oracle's time
//!   drawn after the reader read the record, not when its heartbeat began) and its record
//!   stayed the same over [`DEAD_AFTER_READS`] of the reader's own heartbeats, or when the
//!   reader first meets it with a beat already that old (a worker that died before the
//!   reader started). Counted from the beat, every reader takes a dead worker for dead at
//!   about the same time (within a heartbeat period and its reads), whenever it started.
//!   Comparing the beat alone, without the reads, took a worker whose heartbeat was held up by
//!   a busy process (its beat is drawn before its put) for dead: both then owned its share
//!   and ran it twice ([`Liveness`]). A reader owns nothing while it holds a record past the
//!   horizon that it has never seen change and has not read unchanged often enough to
//!   judge (a late starter meeting a ghost the others already dropped).
//! - A worker owns nothing once [`FENCE_AFTER_BEATS`] periods passed since the start of its
//!   last heartbeat that completed (self-fencing): another worker takes its share only when
//!   the beat of the last record it read is older than that (`FENCE_AFTER_BEATS <
//!   DEAD_AFTER_BEATS`; the beat was drawn after that heartbeat started, and oracle ms do not
//!   run faster than the owner's clock but for a takeover by a leader whose clock is ahead,
//!   against which the reads count stands), so by then the owner has stopped starting runs
//!   on it. Only runs already in flight, or a heartbeat
//!   completing between the reader's last read and its next one, can still overlap (wasted
//!   work, never a second effect: acknowledgments and guards decide that).
//! - An owner counts as stalled (sweeps may take its share) only when its published progress
//!   (notifications handled) has not moved while its own beats advanced by `orphan_age`; a
//!   busy owner keeps its share. `orphan_age` is at least `min_orphan_age`, longer than
//!   an idle owner takes to find new work and publish the progress.

use super::{lock, Inner};
use crate::error::WorkerError;
use percolator::kv::ScanOrder;
use percolator::Cell;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
// Tokio's clock: the monotonic clock in production, paused time in tests and the simulation.
use tokio::time::Instant;

/// Meta-name prefix of the worker registry: one record `workers/<id>` per worker.
pub(crate) const WORKERS_META: &[u8] = b"workers/";
/// Longest wait of a new worker before it takes its share (see [`Split::owns_from`]).
const SETTLE_MAX: Duration = Duration::from_secs(1);

/// The worker's view of the split, as of its last heartbeat.
struct Split {
    /// (my index, live workers) of the hash split.
    share: (u64, u64),
    /// Per index of the hash split: whether that worker has made no progress (handled no
    /// notification) for `orphan_age`, so sweeps may take its share.
    stalled: Vec<bool>,
    /// Per worker key: the last progress count seen and the worker's own beat (oracle ms)
    /// of the first record that showed it. A stall is measured in the owner's beats, not in
    /// this worker's clock: an owner (or a reader) whose tasks were held up by a busy
    /// machine published no beats meanwhile, so the delay does not count against it.
    progress_seen: HashMap<Vec<u8>, (u64, u64)>,
    /// Which workers this worker takes for live.
    liveness: Liveness,
    /// When the last heartbeat that completed had started, and how long after that the
    /// worker stops owning anything (self-fencing).
    fenced_after: Option<(Instant, Duration)>,
    /// From when the worker takes its share: a heartbeat period (at most `SETTLE_MAX`)
    /// after its first heartbeat, when the others have seen it, so that its share does not
    /// overlap theirs as it joins. `None` before the first heartbeat.
    owns_from: Option<Instant>,
    /// The last heartbeat met a record it could not judge: past the horizon, never seen to
    /// change, read unchanged fewer than [`DEAD_AFTER_READS`] times ([`Liveness::undecided`]).
    /// Readers that have read it longer may already take it for dead and split without it,
    /// so this worker owns nothing until it decides.
    undecided: bool,
}

impl Split {
    fn settled(&self) -> bool {
        self.settled_at(Instant::now())
    }

    fn settled_at(&self, now: Instant) -> bool {
        self.owns_from.is_some_and(|from| now >= from)
    }

    /// Whether the worker's last completed heartbeat started too long ago for it to own
    /// anything: another worker may be taking its share.
    fn fenced_at(&self, now: Instant) -> bool {
        // Planted bug `WorkerKeepsShareWhenHeldUp` (`percolator::planted`): no self-fencing.
        #[cfg(feature = "planted")]
        if percolator::planted::active(percolator::planted::Bug::WorkerKeepsShareWhenHeldUp) {
            return false;
        }
        self.fenced_after
            .is_some_and(|(started, after)| now.saturating_duration_since(started) >= after)
    }
}

/// Membership state of one worker.
pub(super) struct Membership {
    split: Mutex<Split>,
    /// Notifications this worker finished handling (whatever the outcome): its progress,
    /// published with its heartbeat.
    handled: AtomicU64,
}

/// Decodes a worker record: its beat (oracle ms) and its progress (notifications handled;
/// `None` in the 8-byte records of older workers). `None` if it is not a worker record.
pub(crate) fn decode_record(v: &[u8]) -> Option<(u64, Option<u64>)> {
    let word = |at: usize| {
        v.get(at..at + 8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(u64::from_be_bytes)
    };
    match v.len() {
        8 => Some((word(0)?, None)),
        16 => Some((word(0)?, word(8))),
        _ => None,
    }
}

/// The shortest `orphan_age` a worker uses (a shorter one is raised to it, with a
/// warning): twice the time an idle owner may take to show progress on new work (a scan
/// after its longest idle period, then its heartbeat publishing the progress and the
/// sweeper's heartbeat reading it). Below it, an owner waking up to a backlog would be taken
/// for a stalled one.
pub(super) fn min_orphan_age(max_idle_interval: Duration, heartbeat: Duration) -> Duration {
    2 * (max_idle_interval + 2 * heartbeat)
}

/// Whether `cell` falls in `share` (`(index, live)` of the hash split; `None`: owns nothing).
fn in_share(share: Option<(u64, u64)>, cell: &Cell) -> bool {
    share.is_some_and(|(index, live)| live <= 1 || stable_hash(cell) % live == index)
}

fn stable_hash(cell: &Cell) -> u64 {
    #[allow(deprecated)]
    let mut h = std::hash::SipHasher::new();
    cell.hash(&mut h);
    h.finish()
}

impl Membership {
    pub(super) fn new() -> Self {
        Membership {
            split: Mutex::new(Split {
                share: (0, 1),
                stalled: Vec::new(),
                progress_seen: HashMap::new(),
                liveness: Liveness::default(),
                fenced_after: None,
                owns_from: None,
                undecided: false,
            }),
            handled: AtomicU64::new(0),
        }
    }

    /// Counts one notification handled (whatever the outcome): the worker's progress.
    pub(super) fn note_handled(&self) {
        self.handled.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether the worker has taken its share of the split.
    pub(super) fn settled(&self) -> bool {
        lock(&self.split).settled()
    }

    /// Whether `cell` is in this worker's share (never before it is settled, nor while it is
    /// fenced: its last completed heartbeat started [`FENCE_AFTER_BEATS`] periods ago).
    pub(super) fn owns(&self, cell: &Cell) -> bool {
        in_share(self.share_now(), cell)
    }

    /// [`Membership::owns`] for each of `cells`, all under one view of the split and one
    /// reading of the clock: a heartbeat completing, or the fence passing, between two
    /// cells cannot make them disagree on the view.
    pub(super) fn owns_each<'a>(&self, cells: impl IntoIterator<Item = &'a Cell>) -> Vec<bool> {
        let share = self.share_now();
        cells
            .into_iter()
            .map(|cell| in_share(share, cell))
            .collect()
    }

    /// The worker's share of the split now, `(index, live)`: `None` before it settled,
    /// while it is fenced or while it holds an undecided record.
    fn share_now(&self) -> Option<(u64, u64)> {
        let split = lock(&self.split);
        let now = Instant::now();
        let owning = split.settled_at(now) && !split.fenced_at(now) && !split.undecided;
        owning.then_some(split.share)
    }

    /// Whether the owner of `cell` in the hash split has made no progress for `orphan_age`.
    pub(super) fn owner_stalled(&self, cell: &Cell) -> bool {
        let split = lock(&self.split);
        let (_, live) = split.share;
        let owner = (stable_hash(cell) % live.max(1)) as usize;
        split.stalled.get(owner).copied().unwrap_or(true)
    }
}

impl Inner {
    /// This worker's record under meta prefix `prefix` (`workers/`, `hint-addrs/`).
    pub(super) fn own_meta_key(&self, prefix: &[u8]) -> Vec<u8> {
        let mut name = prefix.to_vec();
        name.extend_from_slice(self.config.id.as_bytes());
        self.client.codec().meta(name)
    }

    /// This worker's record in the worker registry.
    pub(super) fn worker_key(&self) -> Vec<u8> {
        self.own_meta_key(WORKERS_META)
    }
}

/// Registers the worker with heartbeats and recomputes the hash split among live workers.
pub(super) async fn heartbeat_loop(inner: Arc<Inner>) {
    let mut shutdown = inner.shutdown.clone();
    loop {
        if let Err(e) = heartbeat_once(&inner).await {
            tracing::warn!(error = %e, "worker heartbeat failed");
        }
        // Biased: polled in this order, so a run is repeatable under one seed (simulation).
        tokio::select! {
            biased;
            _ = tokio::time::sleep(inner.config.heartbeat) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// The oracle's time now, in ms.
async fn oracle_ms(inner: &Inner) -> Result<u64, WorkerError> {
    let now = inner.client.oracle().get_timestamp().await;
    Ok(now.map_err(percolator::TxnError::from)?.physical_ms())
}

async fn heartbeat_once(inner: &Inner) -> Result<(), WorkerError> {
    let started = Instant::now();
    let beat_ms = oracle_ms(inner).await?;
    let key = inner.worker_key();
    // The beat (oracle ms) and the progress (notifications handled so far).
    let mut record = beat_ms.to_be_bytes().to_vec();
    let handled = inner.membership.handled.load(Ordering::Relaxed);
    record.extend_from_slice(&handled.to_be_bytes());
    inner.client.store().put(key, record).await?;
    let pairs = percolator::kv::scan_all(
        inner.client.store().as_ref(),
        inner.client.codec().meta_prefix_range(WORKERS_META),
        ScanOrder::Forward,
    )
    .await?;
    let dead_after = u64::from(DEAD_AFTER_BEATS) * inner.config.heartbeat.as_millis() as u64;
    let me = inner.worker_key();
    // The records are judged against the oracle's time after they were read, not at the
    // start of this heartbeat: a put or scan held for a second made a new reader take a
    // worker dead to the others for a live one (a ghost read first with a stale clock), and
    // own a share computed with it for `DEAD_AFTER_READS` more reads (found by the
    // simulation: two owners of one cell for 3.2 s).
    let now_ms = oracle_ms(inner).await?;
    let mut split = lock(&inner.membership.split);
    let records: Vec<(Vec<u8>, u64, Option<u64>)> = pairs
        .into_iter()
        .filter_map(|(k, v)| {
            let (beat, progress) = decode_record(&v)?;
            Some((k, beat, progress))
        })
        .collect();
    let beats = records.iter().map(|(k, beat, _)| (k.as_slice(), *beat));
    let alive = split.liveness.observe(beats, now_ms, dead_after);
    let undecided = split.liveness.undecided().any(|k| k != me.as_slice());
    split.undecided = undecided;
    split.fenced_after = Some((started, inner.config.heartbeat * FENCE_AFTER_BEATS));
    // (key, beat, progress) of the live workers (this one always); a record without
    // progress (an older worker) counts as always progressing.
    let mut live: Vec<(Vec<u8>, u64, Option<u64>)> = records
        .into_iter()
        .filter(|(k, _, _)| *k == me || alive.contains(k))
        .collect();
    live.sort();
    let index = live.iter().position(|(k, _, _)| *k == me).unwrap_or(0) as u64;
    let orphan_ms = inner.config.orphan_age.as_millis() as u64;
    let seen = &mut split.progress_seen;
    seen.retain(|k, _| live.iter().any(|(l, _, _)| l == k));
    let stalled: Vec<bool> = live
        .iter()
        .map(|(key, beat, progress)| {
            let Some(progress) = *progress else {
                return false;
            };
            let entry = seen.entry(key.clone()).or_insert((progress, *beat));
            if entry.0 != progress {
                *entry = (progress, *beat);
            }
            *key != me && beat.saturating_sub(entry.1) >= orphan_ms
        })
        .collect();
    if split.share != (index, live.len().max(1) as u64) {
        tracing::info!(
            worker = %inner.config.id,
            index,
            live = live.len(),
            "hash split changed"
        );
    }
    split.share = (index, live.len().max(1) as u64);
    split.stalled = stalled;
    split
        .owns_from
        .get_or_insert_with(|| Instant::now() + inner.config.heartbeat.min(SETTLE_MAX));
    Ok(())
}

/// Reads of a worker's record, unchanged, after which the reader may take it for dead
/// (with [`DEAD_AFTER_BEATS`] periods passed on the reader's clock since it first read it).
pub(super) const DEAD_AFTER_READS: u32 = 3;
/// Heartbeat periods a worker's record must stay unchanged before others take its share.
pub(super) const DEAD_AFTER_BEATS: u32 = 6;
/// Heartbeat periods after the start of its last completed heartbeat at which a worker stops
/// owning anything; fewer than [`DEAD_AFTER_BEATS`], so it stops before others take over.
pub(super) const FENCE_AFTER_BEATS: u32 = 4;
const _: () = assert!(FENCE_AFTER_BEATS < DEAD_AFTER_BEATS);

/// What one worker saw of the others' heartbeat records, to tell the live ones: a worker is
/// dead when its beat is older than the horizon on the reader's clock *and* its record stayed
/// the same over [`DEAD_AFTER_READS`] of the reader's reads. A record that changes between
/// reads is live whatever its beat says (its heartbeat may have waited behind a busy store);
/// one first met already older than the horizon is dead at once (a worker that died before
/// the reader started).
///
/// The horizon is counted from the beat itself, not from when this reader first read it, so
/// that every reader takes a dead worker for dead at about the same time: counted from the
/// first read, a worker that started after the crash (or whose heartbeats failed) took it
/// for dead up to a horizon later than the others, and for that long two live workers owned
/// the same cells (issue 40, found by the simulation).
///
/// A record this reader has never seen change, past the horizon but read unchanged fewer
/// than [`DEAD_AFTER_READS`] times, is live but *undecided*: a reader that started late (a
/// restarted process, its first heartbeats held) cannot tell a dead worker that the others,
/// having read it for longer, already split without from a live one whose puts are slow. While
/// it holds one, the reader owns nothing (`Split::undecided`): it would otherwise split with
/// a worker the others dropped, and own cells they own, for as long as its own reads take
/// (found by the simulation: seed 130 at 70074a1, two owners for 3.1 s while a new worker's
/// heartbeats were held).
#[derive(Default)]
pub(super) struct Liveness {
    /// Per worker key: the beat last read, how many reads since found it unchanged, and
    /// whether this reader has seen the record change.
    seen: HashMap<Vec<u8>, (u64, u32, bool)>,
    /// The keys the last read left undecided.
    undecided: Vec<Vec<u8>>,
}

impl Liveness {
    /// Notes one read of the registry (`records`: key and beat), at `now_ms` on this
    /// worker's clock; returns the keys it takes for live (dead: a beat older than
    /// `horizon_ms`, unchanged over [`DEAD_AFTER_READS`] reads). Forgets keys no longer read.
    pub(super) fn observe<'a>(
        &mut self,
        records: impl IntoIterator<Item = (&'a [u8], u64)>,
        now_ms: u64,
        horizon_ms: u64,
    ) -> std::collections::HashSet<Vec<u8>> {
        let mut alive = std::collections::HashSet::new();
        let mut seen = HashMap::with_capacity(self.seen.len());
        self.undecided.clear();
        for (key, beat) in records {
            let fresh = beat.saturating_add(horizon_ms) >= now_ms;
            let (reads, changed) = match self.seen.get(key) {
                Some(&(last, reads, changed)) if last == beat => (reads.saturating_add(1), changed),
                // A new beat: proof of life only if it is young (a new beat already past
                // the horizon, read after this reader's own reads were held, is as hard to
                // judge as a first read: the others may have dropped the worker since).
                Some(&(_, _, changed)) => (0, changed || fresh),
                // The first read of this record (a ghost if already old: counted as
                // unchanged long enough).
                None if fresh => (0, false),
                None => (DEAD_AFTER_READS, false),
            };
            if fresh || reads < DEAD_AFTER_READS {
                alive.insert(key.to_vec());
                if !fresh && !changed {
                    self.undecided.push(key.to_vec());
                }
            }
            seen.insert(key.to_vec(), (beat, reads, changed));
        }
        self.seen = seen;
        alive
    }

    /// The keys the last [`Liveness::observe`] took for live without being able to judge
    /// them: past the horizon, never seen to change, read unchanged fewer than
    /// [`DEAD_AFTER_READS`] times.
    pub(super) fn undecided(&self) -> impl Iterator<Item = &[u8]> {
        self.undecided.iter().map(Vec::as_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::{Liveness, DEAD_AFTER_READS};

    const HORIZON: u64 = 3_000;

    #[test]
    fn a_record_that_changes_between_reads_is_live_however_old_its_beat() {
        let mut l = Liveness::default();
        // The other worker's beats fall behind the reader's clock by up to 5 s (its puts wait
        // behind a busy store) but each read finds a new one.
        for i in 0..20u64 {
            let now = 10_000 + i * 1_000;
            let lag = (i * 1_000).min(5_000);
            let alive = l.observe([(b"b".as_slice(), now - lag + i)], now, HORIZON);
            assert!(alive.contains(b"b".as_slice()), "read {i}");
        }
    }

    #[test]
    fn a_record_unchanged_over_reads_and_the_horizon_is_dead() {
        let mut l = Liveness::default();
        let beat = 10_000;
        let mut dead_at = None;
        for i in 0..10u64 {
            let now = beat + i * 1_000;
            if !l
                .observe([(b"b".as_slice(), beat)], now, HORIZON)
                .contains(b"b".as_slice())
            {
                dead_at = Some(i);
                break;
            }
        }
        // Dead at the first read past the horizon that follows DEAD_AFTER_READS unchanged
        // ones, not before.
        assert_eq!(
            dead_at,
            Some((u64::from(DEAD_AFTER_READS)).max(HORIZON / 1_000 + 1))
        );
    }

    /// When `reader` (reading every 500 ms from `from`) first takes a worker whose last
    /// beat was at 10 s for dead.
    fn dead_at(from: u64) -> u64 {
        let mut l = Liveness::default();
        (0..40u64)
            .map(|i| from + i * 500)
            .find(|&now| {
                !l.observe([(b"d".as_slice(), 10_000)], now, HORIZON)
                    .contains(b"d".as_slice())
            })
            .expect("taken for dead")
    }

    #[test]
    fn readers_that_started_at_different_times_agree_on_a_dead_worker() {
        // One reader was running when the worker died; another started 2.4 s later (a process
        // restarted after the crash). Both take it for dead within DEAD_AFTER_READS read
        // periods of each other (the later one must see the record unchanged too), and
        // with the same horizon: counted from their first reads, the later one owned cells
        // the first had reassigned for 2.4 s more.
        let early = dead_at(10_100);
        let late = dead_at(12_500);
        assert!(early > 10_000 + HORIZON, "not before the horizon: {early}");
        assert!(
            late - early <= u64::from(DEAD_AFTER_READS) * 500,
            "early {early}, late {late}"
        );
        // A reader that started well before the horizon decides within one read period.
        assert!(dead_at(11_000).abs_diff(early) <= 500);
    }

    #[test]
    fn unchanged_but_few_reads_stays_live_when_the_reader_was_held_up() {
        let mut l = Liveness::default();
        // The reader itself was held up: two reads 10 s apart find the same old beat.
        assert!(l
            .observe([(b"b".as_slice(), 1_000)], 2_000, HORIZON)
            .contains(b"b".as_slice()));
        assert!(l
            .observe([(b"b".as_slice(), 1_000)], 12_000, HORIZON)
            .contains(b"b".as_slice()));
    }

    #[test]
    fn a_late_reader_is_undecided_on_a_ghost_the_others_already_dropped() {
        // The worker's last beat was at 10 s. A reader running all along takes it for dead
        // at the first read past the horizon; a reader that first read it at 12.5 s and
        // then had its heartbeats held reads it again only at 14.3 s: the record is live to
        // it (one unchanged read) but undecided, until DEAD_AFTER_READS unchanged reads.
        let early = dead_at(10_100);
        assert!(early <= 13_100, "{early}");
        let mut late = Liveness::default();
        let ghost = b"ghost".as_slice();
        let live = b"b".as_slice();
        let read = |l: &mut Liveness, now: u64| {
            let alive = l.observe([(ghost, 10_000), (live, now - 100)], now, HORIZON);
            let undecided: Vec<Vec<u8>> = l.undecided().map(<[u8]>::to_vec).collect();
            (alive.contains(ghost), undecided)
        };
        assert_eq!(
            read(&mut late, 12_500),
            (true, vec![]),
            "fresh at first read"
        );
        assert_eq!(read(&mut late, 14_300), (true, vec![ghost.to_vec()]));
        assert_eq!(read(&mut late, 14_800), (true, vec![ghost.to_vec()]));
        assert_eq!(
            read(&mut late, 15_300),
            (false, vec![]),
            "dead at the third"
        );
        // A held reader that meets a ghost's last beat only after it is past the horizon
        // (the beat changed since its first read, but it is old): still undecided, as the
        // others may have dropped the ghost already (found by review).
        let mut l = Liveness::default();
        assert!(l.observe([(ghost, 9_500)], 9_900, HORIZON).contains(ghost));
        assert!(l
            .observe([(ghost, 10_000)], 14_300, HORIZON)
            .contains(ghost));
        assert_eq!(l.undecided().count(), 1);
        // A record seen to change to a young beat is judged by its reads alone, never
        // undecided: a live worker whose later puts are slow does not stop this reader
        // from owning its share.
        let mut l = Liveness::default();
        l.observe([(live, 1_000)], 1_200, HORIZON);
        l.observe([(live, 1_500)], 1_700, HORIZON);
        assert!(l.observe([(live, 1_500)], 5_000, HORIZON).contains(live));
        assert_eq!(l.undecided().count(), 0);
    }

    #[test]
    fn a_worker_whose_heartbeat_is_held_up_stops_owning_before_others_take_over() {
        use super::{Membership, FENCE_AFTER_BEATS};
        use std::time::Duration;
        use tokio::time::Instant;
        let m = Membership::new();
        let cell = percolator::Cell::new("t", "r", "c");
        let beat = Duration::from_millis(100);
        {
            let mut split = super::lock(&m.split);
            split.owns_from = Some(Instant::now());
            split.fenced_after = Some((Instant::now(), beat * FENCE_AFTER_BEATS));
        }
        assert!(m.owns(&cell), "a fresh heartbeat owns its share");
        // Its last completed heartbeat started longer ago than the fence: it owns nothing,
        // whatever the split says, until a heartbeat completes again.
        super::lock(&m.split).fenced_after = Some((
            Instant::now() - beat * FENCE_AFTER_BEATS - Duration::from_millis(1),
            beat * FENCE_AFTER_BEATS,
        ));
        assert!(!m.owns(&cell));
        super::lock(&m.split).fenced_after = Some((Instant::now(), beat * FENCE_AFTER_BEATS));
        assert!(m.owns(&cell));
    }

    #[test]
    fn a_record_first_met_older_than_the_horizon_is_dead_at_once() {
        let mut l = Liveness::default();
        let alive = l.observe(
            [(b"ghost".as_slice(), 1_000), (b"b".as_slice(), 99_000)],
            100_000,
            HORIZON,
        );
        assert!(!alive.contains(b"ghost".as_slice()));
        assert!(alive.contains(b"b".as_slice()));
        // And a ghost that comes back (a new beat) is live again.
        let alive = l.observe([(b"ghost".as_slice(), 100_500)], 101_000, HORIZON);
        assert!(alive.contains(b"ghost".as_slice()));
    }
}
