//! What the harness knows outside the simulated processes (it survives their crashes): the
//! loaders' input, which writes were acknowledged, which deletes were tried, the
//! violations found along the way, and the run's counters.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use tokio::time::Instant;

/// The harness's record of one run.
#[derive(Debug, Default)]
pub struct Model {
    /// Each loader's input: the event ids at each offset (with duplicates and ids other
    /// loaders deliver too).
    pub sources: Vec<Vec<u64>>,
    /// Bursts in this seed (a quarter of them): workers batch 2 keys and grow runs to 8 for
    /// a burst (`observers::BURST_RUNS`), and one loader batch in five takes 20-40 events,
    /// so bursts of hinted keys meet crashes, conflicts and outages.
    pub bursts: bool,
    /// The timed clicks' event times, by id ([`crate::timed`]).
    pub timed_times: BTreeMap<u64, u64>,
    /// Each timed loader's delivery order of click ids.
    pub timed_orders: Vec<Vec<u64>>,
    /// Events whose loading commit was acknowledged (they are in the store from then on,
    /// until a retention delete).
    pub loaded: BTreeMap<u64, Instant>,
    /// When a retention delete of an event was first tried.
    pub delete_tried: BTreeMap<u64, Instant>,
    /// Rows of weak notifications acknowledged.
    pub pings: BTreeSet<u64>,
    /// Stretches in which every process may see its round trips turn slower than any it
    /// measured just before (outages, oracle takeovers): from, until.
    pub disturbances: Vec<(Instant, Instant)>,
    /// Slow machines: process, from, until.
    pub slow_episodes: Vec<(usize, Instant, Instant)>,
    /// Commits of the lease writers, and those judged (inside a slow machine's stretch).
    pub lease_commits: u64,
    /// Of which ran wholly inside a slow machine's stretch, after its warm-up.
    pub lease_commits_slow: u64,
    /// Beacons (process, sequence) whose weak notification was acknowledged.
    pub beacons: BTreeSet<(usize, u64)>,
    /// The last beacon sequence each process used, over all its incarnations: a restarted
    /// process's beacons go on from there, so each is a row of its own (a lost one is not
    /// covered by a later incarnation's beacon of the same row).
    pub beacon_seqs: BTreeMap<usize, u64>,
    /// Violations found along the way.
    pub violations: Vec<String>,
    /// Transactions the workload committed.
    pub transactions: u64,
    /// GC passes started.
    pub gc_passes: u64,
    /// GC passes started while another was running.
    pub gc_overlaps: u64,
    /// GC passes running now.
    pub gc_running: u64,
    /// Whether the periodic GC is down (with the workers, in a worker outage).
    pub gc_paused: bool,
    /// Crashes.
    pub crashes: u64,
    /// Reads of stalled snapshots answered `SnapshotTooOld`.
    pub too_old: u64,
    /// The event a stalled reader is about to read, for retention to delete after its
    /// snapshot began.
    pub reader_target: Option<u64>,
    /// The revised write-once cells ([`crate::revisions`]).
    pub revisions: crate::revisions::RevisionModel,
    /// Photon's logs and what of them was acknowledged ([`crate::photon`]).
    pub photon: crate::photon::PhotonModel,
    /// Answers "drained" of the drain check, checked ([`crate::drain`]).
    pub drain_checks_drained: u64,
}

/// The model, shared by the run's tasks.
#[derive(Clone, Debug, Default)]
pub struct Shared(Arc<Mutex<Model>>);

impl Shared {
    /// Runs `f` on the model.
    pub fn with<T>(&self, f: impl FnOnce(&mut Model) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Records a violation.
    pub fn violation(&self, what: String) {
        tracing::warn!(%what, "violation");
        self.with(|m| m.violations.push(what));
    }
}

/// Whether `seed` is a burst seed ([`Model::bursts`]: a quarter of the seeds), drawn from the
/// seed alone so that the seed's other draws stay where they were.
pub fn burst_seed(seed: u64) -> bool {
    seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 62 == 0
}
