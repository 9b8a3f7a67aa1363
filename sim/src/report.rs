//! What a seed's run reports, and the totals of many.

use serde::Serialize;

/// Counters of one run (or, summed, of many).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Stats {
    /// Simulated seconds (chaos and liveness).
    pub sim_seconds: f64,
    /// Real seconds the run took.
    pub wall_seconds: f64,
    /// Faults injected (store faults, outages, takeovers, crashes).
    pub faults_injected: u64,
    /// Process crashes.
    pub crashes: u64,
    /// Oracle takeovers.
    pub takeovers: u64,
    /// GC passes.
    pub gc_passes: u64,
    /// GC passes that started while another was running.
    pub gc_overlaps: u64,
    /// Workload transactions committed.
    pub transactions: u64,
    /// Committed observer runs (strong, guarded with effect, weak).
    pub observer_runs: u64,
    /// Stalled reads answered `SnapshotTooOld`.
    pub stalled_reads_too_old: u64,
    /// Reads of revised write-once cells ([`crate::revisions`]) answered or refused.
    pub revision_reads: u64,
    /// Of which refused `SnapshotTooOld`.
    pub revision_reads_too_old: u64,
    /// Events in the trace.
    pub trace_events: u64,
    /// The longest stretch (ms) in which two live workers whose heartbeats both went on
    /// owned one probe cell (the split changing; a maximum, not a sum).
    pub split_overlap_ms_max: u64,
    /// Photon's clicks joined (once) by the end of the run.
    pub clicks_joined: u64,
    /// Photon's clicks expired (their query not in time) by the end of the run.
    pub clicks_expired: u64,
    /// Photon's clicks settled `too_old` (their day closed by the IdRegistry GC first).
    pub clicks_too_old: u64,
    /// Answers "drained" of the drain check asked while the liveness phase drained, each
    /// checked against the runs in flight ([`crate::drain`]).
    pub drain_checks_drained: u64,
}

impl Stats {
    /// Adds `other` to these.
    pub fn add(&mut self, other: &Stats) {
        self.sim_seconds += other.sim_seconds;
        self.wall_seconds += other.wall_seconds;
        self.faults_injected += other.faults_injected;
        self.crashes += other.crashes;
        self.takeovers += other.takeovers;
        self.gc_passes += other.gc_passes;
        self.gc_overlaps += other.gc_overlaps;
        self.transactions += other.transactions;
        self.observer_runs += other.observer_runs;
        self.stalled_reads_too_old += other.stalled_reads_too_old;
        self.revision_reads += other.revision_reads;
        self.revision_reads_too_old += other.revision_reads_too_old;
        self.trace_events += other.trace_events;
        self.split_overlap_ms_max = self.split_overlap_ms_max.max(other.split_overlap_ms_max);
        self.clicks_joined += other.clicks_joined;
        self.clicks_expired += other.clicks_expired;
        self.clicks_too_old += other.clicks_too_old;
        self.drain_checks_drained += other.drain_checks_drained;
    }
}

/// The outcome of one seed.
#[derive(Clone, Debug)]
pub struct SeedReport {
    /// The seed.
    pub seed: u64,
    /// Every check that failed (empty: the seed passed).
    pub violations: Vec<String>,
    /// Its counters.
    pub stats: Stats,
    /// The hash of its trace.
    pub trace_hash: u64,
    /// The trace as text, if it was kept.
    pub trace_lines: Vec<String>,
}

impl SeedReport {
    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}
