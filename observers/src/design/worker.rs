//! # The worker
//!
//! [`crate::Worker::start`]; the code is `observers/src/worker/`, one module per concern, each
//! stating the invariants it keeps: `membership` (heartbeats, hash split, stalled owners),
//! `hints` (the hint path), `scan` (scanners, notify floor), `dispatch` (runs in flight,
//! per-cell exclusion, batches, hints queued per busy cell), `retry` (backoff, recently handled
//! keys, dead letters).
//!
//! ## Three paths to work
//!
//! - **Hints.** A hint task dispatches each hinted key of a cell the worker observes and owns at
//!   once, as the hint's `Committed { c }` (no status lookup: the committer knows its fate);
//!   this is the path of everything written in the worker's own process. The worker subscribes
//!   when it starts and takes no hint before it has settled (it owns nothing before): hints of
//!   commits made meanwhile wait in the channel, so a loader need not wait for its workers to
//!   settle (`observers/tests/hints.rs`).
//! - **Relayed hints.** A worker given a [`crate::HintListener`] also takes the notify keys
//!   that loaders in other processes relay to it ([`crate::relay`]): it reads each key it
//!   observes and owns from the store and dispatches what is there with the value read, as
//!   it dispatches hints (the datagram names keys; the store says what they hold and the
//!   primary decides the fate).
//!   While such keys keep coming, scanners leave young keys to this path as they do for
//!   the process's own hints.
//! - **Scanners.** `scanners` tasks each pass over the notify space from the notify floor,
//!   oldest bucket first (and raise the floor: `percolator::design::notify`): the path of other
//!   processes' writes and of lost hints. Scanners leave keys at or above the timestamp of the
//!   hint being dispatched (`hint_floor`: most likely still queued as hints) to the hint path,
//!   and keys younger than `hint_grace` while the worker's own client has put notify keys
//!   within `hint_grace`, or keys of this worker were relayed within it (a hint carries only
//!   its own client's keys, so in a process that loads nothing and gets no relayed keys no
//!   young key waits for one). While it leaves young keys, a pass also ends where the bucket
//!   of `now - hint_grace` begins on its host's clock (and raises the floor no higher),
//!   rather than walk the newest second of the notify space, whose handled keys are still
//!   puts and deletes in the store's memtable. A key can be skipped by a pass but not
//!   forever: once the hint queue is empty `hint_floor` is lifted, every key is older than
//!   `hint_grace` after that long, and its bucket is passed a second later (plus the skew of
//!   its writer's clock, or of the host that raised the floor it was put at). Only pacing
//!   rests on these rules: a key taken by both
//!   paths is one more run at most, as for any duplicate notification.
//! - **Latency.** A change committed in the worker's own process reaches it at once (hints),
//!   and so does one that a loader in another process relays to it. One committed by
//!   another process without a relay (or whose datagram was lost) is found by the next pass: an idle scanner's period
//!   backs off from `idle_interval` to `max_idle_interval`, but it also reads the store's
//!   shared count of notify keys put every `follow_shared_counts` (one point read) and passes
//!   as soon as other processes published more than when its last pass began (they publish
//!   `ClientConfig::publish_notify_counts` after their puts), at least one such period after
//!   its pass, so a loader publishing all the time costs an idle worker at most one pass per
//!   scanner per period. So a worker beside a loader in another
//!   process follows it within about those two periods, not the backed-off one.
//! - **Rationed passes.** After a pass that found nothing, or while hints carry the work, the
//!   scanner waits `idle_interval`, doubling up to `max_idle_interval`; scanners back off the
//!   same way when the hints did at least as much work as their last pass. Idle scanners take
//!   turns: one whose wait ran out skips its pass (and waits again) when another scanner of the
//!   worker made such an idle pass meanwhile, since a pass covers the whole space; a wake-up for
//!   lost hints always scans, as does every scanner a new shared count wakes (above: new work
//!   gets all of them), and passes that found work do not count, so a backlog found by
//!   scanning still gets every scanner (`observers.rs::idle_scanners_take_turns`).
//! - **Per-cell exclusion.** A hinted key whose cell is already in flight is queued for the run
//!   on that cell, which takes it next in the same slot; a scanner skips a cell in flight, and
//!   after a few in a row moves on (anti-clumping). Keys handled in the last seconds are
//!   remembered so a stale page does not re-run them.
//! - **Backpressure.** A semaphore bounds observer runs in flight (`max_in_flight`; both paths
//!   wait: no unbounded queue).
//!
//! ## Lanes: fewer batch transactions of an observer at once after conflicts
//!
//! A worker runs an observer's batches side by side (a burst fills several runs, and hints
//! and scans start more), and a batch that conflicts is split in halves down to single cells
//! (`process`, `run_split`), so that one hot cell does not starve the rest. When every batch
//! writes the same few cells (an aggregate over few keys, a window's timer), that policy
//! feeds on itself: all but one of the batches going conflict, each conflict makes more
//! transactions, and the backlog it leaves makes the next burst larger. So each registration
//! (table, column) has a lane (`observers/src/lane.rs`, shared by the workers that share a
//! registry): a limit on its batch transactions going at once, set by a write conflict to half
//! of those going (at least one) and raised by one after as many clean ones in a row, as TCP
//! paces a connection that meets loss. An attempt past the limit waits, in the order attempts reach
//! the lane. Single-cell runs are not paced: `Client::run` retries their conflicts itself.
//! The lane decides only when an attempt starts: nothing in a batch is skipped or reordered,
//! an attempt waits before its transaction begins (holding no lock of the store), and an
//! aborted run gives its place back. What it costs: a run waiting for its lane holds its
//! worker slot (`max_in_flight`) and its cells, so while one observer is held to a low
//! limit, its waiting runs can take the slots other observers of the worker would use
//! (limiting the runs the dispatcher starts, instead, would not; not built).
//! `observers/tests/lanes.rs`: a burst of 2,000 changes whose batches all write one total
//! takes about 40 conflicts in about 95 attempts, against 190-235 in 310-385 with the limit
//! never lowered. Measured on `app/examples/window_count.rs`: `docs/perf/photon.md`,
//! "Event-time windows".
//!
//! ## Membership, the hash split and orphan sweeps
//!
//! Workers register in `M workers/<id>` with heartbeats and split the notify space by a stable
//! hash of the cell among live workers. A new worker takes its share only a heartbeat period (at
//! most 1 s) after its first heartbeat, when the others have seen it, so shares do not overlap
//! as workers join ([`crate::Worker::wait_until_settled`]).
//!
//! Every `sweep_every`-th pass also takes keys of other shares older than `orphan_age` whose
//! owner has made no progress for `orphan_age`: each heartbeat record carries the worker's count
//! of handled notifications next to its beat, and every worker notes the owner's own beat at
//! which each live worker's count last moved (a stall is counted in the owner's beats, so a
//! machine too busy to run its tasks does not make it look stalled). `orphan_age` is at least
//! `2 x (max_idle_interval + 2 x heartbeat)`, longer than an idle owner takes to find a new
//! backlog and publish its progress (shorter values are raised, with a warning). An owner that
//! is busy with a backlog keeps its share (age alone would let redundant workers run nearly
//! everything twice under a backlog); a stuck one (a hung observer) loses it; a dead one drops
//! out of the split once its record stayed the same over three of the reader's own heartbeats
//! spanning six heartbeat periods (or at once, if the reader first meets it already that
//! old). Liveness is judged by the record *changing*, not by its beat against the reader's
//! clock: a heartbeat held up by a busy process (its beat is drawn before its put, and a
//! timer, the oracle or the store can each hold it for seconds) made the other worker take
//! its share while it still ran it, and both ran that share (10-37 % of photon's joins were
//! wasted at 100,000 clicks; under 1 % since). And a worker whose last completed heartbeat
//! started four periods ago owns nothing until one completes again (self-fencing), so when
//! another does take its share it has already stopped starting runs there (the argument:
//! `worker::membership`). Tests:
//! `a_busy_owner_keeps_its_share_under_backlog`, `a_stuck_owner_loses_its_share`, and the
//! unit tests of `worker::membership::Liveness`.
//!
//! ## Quiescence and shutdown
//!
//! [`crate::Worker::wait_until_quiescent`] returns once a scan finds no notify key of a
//! registered column, nothing is in flight in this worker and no run started during the scan
//! (runs in other processes' workers are not seen: for those, [`super::operators`]). A scan
//! that fails transiently (a conflict or an unknown outcome while resolving what it met, the
//! store unavailable past its adapter's retries) is made again, until failures have lasted
//! [`crate::QUIESCENCE_RETRY_FOR`] in a row: a drain waiting on it no longer fails on the
//! first (`observers/tests/quiescence.rs`).
//! [`crate::Worker::run_until`] shuts down gracefully when its future resolves (stop scanning,
//! wait for runs in flight, leave the registry); binaries pass the shutdown signal, installed
//! before they announce readiness.
//!
//! ## Failures, outages, dead letters
//!
//! An observer error or panic (caught) is retried with exponential backoff; after
//! `max_failures` the notification moves to `M deadletter/<notify key>`
//! ([`crate::DeadLetter::list`], `DeadLetter::replay` puts it back through
//! `Client::put_notification`, `DeadLetter::discard` deletes it). Corrupt notify keys are
//! dead-lettered at once.
//!
//! Only the observer's own failures count: an outage met on the way (store unavailable or slow,
//! oracle unavailable, a commit whose outcome is unknown: `TxnError::is_transient`, neither a
//! conflict nor an attempt past its lifetime) is `Outcome::Transient`, retried for as long as it
//! lasts with the failure count it had and a backoff that doubles with each outage error in a
//! row (metric `transient`), and a batch that meets one is retried whole, not split (every half
//! would meet it too). A letter keeps the decided record (`Committed { c }`) for every kind of
//! observer, so a replay after GC removed the writer's evidence still runs it. The retry ledger
//! is bounded: an entry 60 s past its retry time is dropped once the ledger holds more than
//! 10,000. Tests: `tests/tests/observer_outages.rs`.
//!
//! ## Metrics
//!
//! [`crate::Worker::metrics`]: found, hinted (dispatched from hints), processed, duplicates
//! (covered by the ack: wasted work), conflicts, failures, dead-lettered, rolled back,
//! transient, batches, splits, keys scanned, and an HDR histogram of observer run latency.
//! The same events, per namespace, observed column and observer, feed the Prometheus families
//! of [`crate::telemetry`] (a worker started with [`crate::Worker::start_with_metrics`]),
//! with histograms of batch sizes, run durations and the latency from the writer's commit to
//! the observer run's commit, and per-column backlog gauges set at the end of each full scan
//! pass (over the range the pass walked: while hints flow, not the newest second or so).
