//! # The join
//!
//! ## Loader ([`crate::load`])
//!
//! Photon's loader is the application layer's line-file loader (`app::load::lines`) with
//! Photon's mapping (`photon::load::PhotonLogs`): the rules below are the library's, the
//! wake check is Photon's.
//!
//! Each batch of lines commits with the file's offset cell (read in the same transaction; a
//! mismatch means another loader moved it: re-read from there), so a SIGKILLed loader neither
//! skips nor repeats input. The offset cell is keyed by what the log is, not its path
//! (`app::load::lines`, module `identity`): `id:<FNV-1a of its first 4 KiB>`, or for a shorter log `young:<FNV-1a of
//! its first line>:<path>` (moved to its new key in the batch that follows a rename, or that
//! takes the log past 4 KiB); its `files` follows a log renamed to a name the loader does not
//! read (`clicks.jsonl.1`) to its end. The cell holds `offset,line,fingerprint,kind,path`:
//! FNV-1a of the last 4 KiB loaded before the offset, checked before each batch; a file shorter
//! than its offset or with other bytes there was rewritten or truncated in place (or is a
//! different log beginning with the same 4 KiB) and is quarantined (`LoadError::Changed`,
//! `Truncated`, `SharedHead`: reported, counted, skipped while the other files load) instead
//! of being read from the middle of a line (offsets without a
//! fingerprint, from earlier versions, are only checked against the size). Lines are read as
//! bytes: malformed lines, invalid UTF-8 included, go to the rejects file (`file:line: error:
//! text`, the whole line escaped as the log's echo is: control characters, terminal escapes
//! included, and bytes that are not UTF-8 as `\u{1b}`, `\xff`) before the batch commits (reported twice at worst, never
//! lost); the log echoes the first 200 bytes, escaped. The loader declares the observed columns
//! it writes (`photon::schema::declare_columns`), since a declaration lives in the client
//! (`percolator::design::notify`).
//!
//! **Stored as given.** A line is checked by `event::line::EventLine`: it must parse as a
//! `Query` or `Click` would (its kind's ids strings, `event_time` an unsigned integer, each
//! once; any other fields JSON values the events' map takes), and be nested at most 126
//! levels deep, so that its stored form, one level down, is within serde_json's limit (a
//! line 127 deep parsed as an event, and then no join could read it back). Only the ids and
//! the time are kept; the line's text is stored as it is, `{"event":<line>,"loaded_at":N}`
//! (`schema::stored_text`), a carriage return between tokens made a space. The join reads a
//! stored event once for its ids (`schema::StoredEvent`, which also reads the serialized
//! `Stored` of earlier versions) and writes the joined output from the two texts
//! (`Joined::text`), so the output's click and query keep the log's field order and
//! formatting; an adapter is given the events parsed, and its answer is serialized.
//!
//! `load_dir` loads all files at once but in step by event time (a frontier): a file whose next
//! batch starts more than 1 s of event time after another file's pending batch waits (the file
//! with the earliest batch always proceeds, and finished files drop out, so it cannot stall).
//! Without it the click files, with fewer lines than the query files, run ahead and nearly
//! every click parks and has to be woken.
//!
//! **Backpressure** (`--max-backlog`, 10,000 by default, 0 for none; `load::Backlog`): before
//! each batch the loader waits while more notifications than the bound wait for the join, so
//! latency measures the system rather than a queue growing without bound ahead of it. The
//! backlog is counted in the store (a scan of the notify space from the notify floor with a
//! limit), so it works whether the workers run in the loader's process or elsewhere. Counts are
//! rare, since each walks delete markers: between counts the loader follows an estimate in
//! memory (the last count plus the notify keys its client put since, minus those its workers
//! removed; counted again at least every second); once the estimate is above the bound it
//! waits until half the bound is left, going on as soon as the estimate says so (its workers
//! drained it) or a count does (workers elsewhere), or, after 750 ms, at the bound itself (so
//! notifications that never drain, e.g. of an unobserved column, stall the loader only above
//! the bound). With no join running, a loader
//! stops at the bound (give or take one batch per file):
//! `photon/tests/photon.rs::loader_waits_while_the_backlog_is_above_its_bound`.
//!
//! ## Click observer (`join::ClickJoin`, guarded, on `clicks/event`)
//!
//! It implements `observe_changes` (`observe_batch` told each notification's commit_ts), so a
//! batch of clicks is one transaction with two rounds of
//! reads: every click and the IdRegistry boundary, then the IdRegistry entries and outcomes of
//! the clicks at or above the boundary and every click's query in one `get_many`; then each
//! click in turn, as follows. Two clicks of a batch that park on one query both stay on its list: `park_click`
//! reads the list after the earlier click's write (a transaction reads its own writes). Per
//! click:
//!
//! - below the IdRegistry boundary → outcome `too_old` and an IdRegistry entry
//!   `too_old/<start_ts>` filed under the boundary (a click with a terminal outcome keeps it:
//!   below);
//! - a final outcome (`too_old`, `filtered`, `expired`) or an IdRegistry entry present →
//!   nothing (counted `deduplicated` when the run is for the notification of another write
//!   of the click than the join ran for, or, where either is unknown, when the click version
//!   read is newer than the joining transaction: a duplicate delivery; else `wasted`, the
//!   same change run twice);
//! - query present → write the IdRegistry token (`pipeline/worker/pid/n<notified>/start_ts`,
//!   `notified` the low 32 bits, in hex, of the commit_ts of the click write whose
//!   notification the run is for, empty for a wake-up's or a sweep's) and the joined event
//!   together (and delete the outcome `waiting` of a parked click);
//! - query absent, past the horizon (in event time: `crate::expiry`) → outcome `expired:<horizon secs>` and an IdRegistry entry
//!   `expired/<pipeline>/<start_ts>`;
//! - else park: add the click to `pending/<query_id>`, file it in the parked index
//!   ([`super::growth`]), notify the query's wake cell `queries/<query_id>/wake`, and delete
//!   the (absent) IdRegistry entry, a write that leaves it absent but conflicts with a join.
//!
//! It is a guarded observer (`observers::Registry::guarded`: no acknowledgment cell). The
//! guard is the pair (IdRegistry entry, outcome): every run with an effect writes one of them
//! in the transaction of its effects, and a run that finds the entry or a final outcome writes
//! nothing, so a repeat of a run (a notify key whose delete failed, two workers meeting one
//! key) has no effect. A park repeated leaves the same state (the list already holds the
//! click). Two concurrent runs that could both have an effect write a common cell and conflict:
//! two joins or two expiries the entry; a join and an expiry the entry (expiry writes it too); a
//! join of a parked click and an expiry the outcome; a park and a join from a snapshot that
//! has the query the entry (the park deletes it, absent as it read it; before, both
//! committed, leaving a joined click `waiting`: found by the deterministic simulation,
//! `join::tests::a_park_and_a_join_of_one_click_do_not_both_commit`); a park and an expiry,
//! or a park and a settling run, the outcome; a join and a run that read a boundary raised
//! meanwhile and settles the click `too_old` the entry (settling writes it too, filed
//! under the boundary it read; before, both committed, leaving a joined click `too_old`:
//! found by the deterministic simulation,
//! `join::tests::a_join_and_a_settling_run_from_a_raised_boundary_do_not_both_commit`).
//!
//! ### Events read from memory
//!
//! The join reads clicks and queries with `Transaction::get_many_recent`: a click or query
//! this process loaded (its loader's commit, remembered by the client: `clicks/event` and
//! `queries/event` are remembered by every process that runs a pipeline,
//! `schema::remember_loaded_events`) is answered from
//! memory, without a store call, if it committed at or below the run's snapshot; every other
//! event, and the IdRegistry entries, outcomes, boundary and pending lists, are read from the
//! store as before (`percolator::design::recent`). Such an answer is a delivery of the event
//! committed in the snapshot, not necessarily the newest one: a delivery loaded later by
//! another process may be newer. A click is answered from memory only by a delivery at or
//! above the run's notification (the commit_ts its notify key or hint carries:
//! `Transaction::get_many_recent_from`), else read from the store, so a run for a click
//! write's notification reads that delivery or a newer one, as before (a wake-up's, sweep's
//! or renotify's notification is newer than every delivery, so those runs read the store). Otherwise (a run whose notification is unknown, and every
//! query) the join reads a delivery that may not be the newest, and is exactly once all the
//! same:
//!
//! - every delivery of a click or query id carries that event, and the join decides on the
//!   IdRegistry entry and the outcome, which are read exactly in the run's snapshot and
//!   written under the conflicts above, so exactly once holds whichever delivery it reads;
//! - what depends on the delivery read is the same as when the run's snapshot holds only
//!   that delivery: the click's boundary check and the day its entry is filed under, its
//!   age against the horizon, and the joined event's `arrived_at` (the later of the click's
//!   and the query's `loaded_at`). Deliveries of one click with event times on two sides of
//!   the boundary, or of the horizon, may therefore be settled by the one a run reads, as
//!   they may be by whichever delivery's run comes first;
//! - photon never deletes a click or a query, so a remembered event is never one that is gone
//!   from the store;
//! - the wake-up argument below is unchanged: a query present in the store at a snapshot is
//!   present in memory or read from the store, and an absent one is never remembered (it was
//!   never loaded by this process, or not below the snapshot).
//!
//! `photon demo --json` reports `events_read_from_memory` and `events_read_from_store`.
//!
//! ## Wake observer and wake checks
//!
//! The wake observer (weak, on `queries/wake`, a column that holds nothing and is only ever
//! notified): if the query is absent (a park's notification before the query arrived),
//! nothing; else it reads `pending/<query_id>` and, if clicks wait, notifies each and deletes
//! the list in the same transaction. Loading a query notifies nobody by itself (`queries/event`
//! is not observed): a loader batch that loads queries also writes one wake check,
//! `wakechecks/<file>@<offset>/queries` holding the batch's query ids, an observed cell. Its weak
//! observer (`join::CheckWakes`) runs after the batch commits, reads the pending lists
//! of those queries in one `get_many`, notifies the wake cells of those that clicks wait for and
//! deletes the check: one run per batch of up to 2,000 lines, instead of a wake run per query.
//! Query notifications from older loaders are handled by the same wake observer, registered on
//! `queries/event` too.
//!
//! **Why no wake-up is lost.** A wake run starts only after the commit that notified it is
//! decided (the key is handled once its writer's status is `Committed`, or from the committer's
//! hint), so its snapshot is above that commit. Let a park commit at `c_p` from a snapshot that
//! did not see the query, and the query's batch commit at `q`. The park's notify key is written
//! with its prewrite, so the park's wake run `W_p` happens (crash or not) with snapshot `s_p' >
//! c_p`. The batch's wake check is written with the batch, its notify key with the batch's
//! prewrite, so the check runs (crash or not) at a snapshot `r > q`. If `q < s_p'`, `W_p` sees
//! the query and the park: it wakes the click. Otherwise `s_p' < q < r`, so `c_p < r`: the check
//! sees the park and notifies the wake cell, whose run (snapshot above the check's commit, so
//! above `q` and `c_p`) wakes the click. A batch retried after a reply lost at its commit finds
//! its offset moved and stops, but its check was committed with it. The check must ride on a
//! notify key, not on the loader or a commit hook after the commit returns: those are lost on a
//! crash or a lost commit reply and invisible to `--until-drained` and
//! `wait_until_quiescent`.
//!
//! Both waking paths (and the sweep) take the click off the list in the transaction that
//! notifies it and write the list cell, so concurrent wakers conflict instead of waking a click
//! twice. The durable sweep (`sweep_pending`, every `--sweep-ms`, 5 s by default; it reads the
//! parked index, [`super::growth`]) remains for clicks past the horizon and for wake-ups the
//! observers lost (a dead-lettered wake run).
//! `photon/tests/photon.rs::parked_clicks_are_woken_without_the_sweep` loads clicks racing their
//! queries over a store with random call delays and no sweep; without the park's notify it
//! fails (clicks stay parked), and another test there fails when the check notifies nothing.
//!
//! ## Redundant pipelines
//!
//! Each pipeline is a worker with its own observer names, all in one worker registry, so the
//! hash split spreads clicks over the pipelines' workers; the IdRegistry and the ack columns make
//! the output exactly once whichever worker runs a click, and a pipeline that dies leaves its
//! share to the others (orphan sweep, then the split: `observers::design::worker`).
//!
//! ## IdRegistry GC ([`crate::registry`], `photon gc`)
//!
//! Raises the boundary day (never lowers it; by more than one day only with `--force`) in a
//! transaction, counting the retention back from the oracle's day (not the host's clock), or
//! from the query logs' event-time watermark's day when that is behind (a backfill keeps the
//! registry of its days, so its clicks join rather than turn `too_old`; a boundary that
//! follows the watermark may move several days at once, since the watermark's day is behind
//! the oracle's and the step limit guards against a clock ahead), waits
//! until the oracle is past the boundary's commit_ts plus `max_lifetime` so no transaction that
//! read the old boundary can still commit (lifetimes are bounded in oracle time, which may lead
//! the wall clock and run at half speed after a takeover), then deletes the days below it; the
//! click observer checks the boundary first. A click below the boundary keeps its first terminal
//! outcome (joined, filtered, expired); only one with none (or still waiting) is marked
//! `too_old`.
//!
//! ### One entry per click id, GC by day
//!
//! A repeated `click_id` is the same click, whatever event times its deliveries carry
//! (redundant loggers with skewed clocks, a producer that re-stamps on retry). The entry is
//! therefore keyed by the click id alone, `idregistry/id/<click_id>/token`: every run that
//! joins or expires a click reads and writes that one cell, so a later delivery finds it
//! (deduplicated) and two concurrent runs on deliveries of different days conflict on it (a
//! Percolator transaction sees write-write conflicts only: keying by day, two runs for
//! deliveries on two days wrote two cells and both committed, the bug of issue 39).
//!
//! GC still works by day through an index written in the same transaction:
//! `idregistry/day/<d:08>/<click_id>/entry`, `d` the event day of the delivery the run read
//! (`registry::write_entry`). A pass that moves the boundary to `B` (after the J5 wait below)
//! reads the index rows of days below `B - MAX_SKEW_DAYS` (1), deletes each one's entry, then
//! the index rows (a crash between leaves index rows that the next pass finds again). Index
//! cells are write-once (`schema::declare_columns`): a record put in the commit's first round,
//! not a head locked and committed (two compare-and-swaps, two RPCs on TiKV, per click). This
//! is sound because each is written by the one committed run that writes the click's entry,
//! which is still a head and is where those runs conflict. GC reads only the keys, so a
//! record of a run that rolled back is read as an index row too. That is what a head locked
//! by such a run gave before, and the margin argument below covers it. The pass reads both
//! spaces, so index cells written as heads, by earlier builds, are purged as before.
//!
//! *Why the margin.* A delivery is admitted (looked up, maybe joined) only if its own event day
//! `e >= B`. Let the entry have been written for a delivery of day `d`, and a later delivery of
//! the same click carry day `e`. If the entry is gone, its day was below `B - 1`, so `d + 1 <
//! B <= e`: the two deliveries are more than a day apart. So a click whose deliveries' event
//! times lie within a day of each other (midnight skew of a few ms, a retry re-stamped within
//! the day) is joined once whatever GC does; while its entry is within the retention any skew
//! is. Deliveries further apart than that, arriving after GC dropped the first one's day, are
//! the registry's retention limit (as an event older than the retention is, below).
//! `photon/tests/exactly_once.rs` is the repro (c1 1 ms before midnight, then 1 ms
//! after it in another file: one join, verify OK); `photon/tests/maintenance.rs` checks the
//! margin.
//!
//! *Against J5.* The entries deleted are those of days below `B - 1 <= B`, deleted only after
//! no transaction that read an older boundary can commit; a transaction that read `B` admits
//! only deliveries of days `>= B`, and for those the argument above says whether the entry it
//! needs is still there. Raw deletes never meet a lock of an entry being deleted: a run that
//! could write the entry of a click reads it first, and it is present until deleted. A run
//! settling a click `too_old` writes its entry without reading it (below the boundary the
//! registry is not read), only when its snapshot holds neither a joined output nor a final
//! outcome of the click, so no entry of the click was committed before it began; one
//! committed after, by a run that read an older boundary, makes the settling run conflict
//! (and that run committed before the J5 wait of the raise that lets GC delete its entry
//! ended, so before GC deletes it); the settling run files its entry under the boundary it
//! read, which GC passes only after a later raise and its J5 wait.
//!
//! *Entries are primaries.* An entry may be the primary of the batch that wrote it (the
//! primary is the batch's first head in key order), and the batch's joined outputs and index
//! cells are write-once records, `Pending` until a version GC pass rewrites them as
//! committed. A raw delete of the entry before that makes every reader without the fate in
//! its memory fence the missing primary and take those records for rolled back: a joined
//! output lost, a parked click's index cell gone. The J5 wait does not cover it: it bounds
//! when a run can *commit*, not when its records stop needing the primary, which is `gc_lag`
//! (600 s) and a GC pass later; a boundary that moves a day at a time passes entries days old,
//! but one that jumps (a backfill's watermark, `photon gc --force`) passes entries written a
//! moment ago. So the purge deletes an entry only when its head has no lock and its last
//! commit is at or below the point a version GC pass has resolved below
//! (`percolator::design::gc`, "Resolved below"): every run that wrote it started below that
//! point, so its records are rewritten and need no primary. The others are counted as
//! deferred and wait for a later pass, and so do the index cells of the pass (the next pass
//! finds them again). `photon gc` alone deletes only what version GC has resolved; the
//! periodic pass runs version GC first. Test: `photon/tests/maintenance.rs`
//! `a_purge_keeps_the_entries_of_unresolved_joins`.
//!
//! *Whose entry.* An index cell names a click, not a version of its entry. The cell of a run
//! that never committed (it died after its first round, or lost a conflict) stays until GC
//! deletes it, and the click may meanwhile be decided by another run that files the entry
//! under a later day (a settling run files it under the boundary it read). Deleting the entry
//! through the dead run's cell lost that entry, and with it the joined outputs of the batch
//! whose primary it was (found by the simulator once; not planted: `docs/testing.md`).
//! So the purge deletes an entry only if its latest version was written by the index cell's
//! own transaction (the record's start_ts; for an index head of the older layout, the
//! transaction of its latest version: entry and index cell are written together); otherwise
//! it deletes the index cell alone and counts it `rewritten`; an entry row with no head
//! counts so too (the simulator's interleaving: the check found no head, a settling run
//! committed one, and the delete met it). The check is a fence (`percolator::design::gc`,
//! "Resolved below"): a CAS from the head checked to the same head refusing every lock, so
//! no run writes the entry between the check and the raw delete, and a purge that finds
//! another's fence leaves the row to it (two purges at once, one stalled after its check while
//! the other deleted the entry and a late delivery joined the click again, lost that join's
//! entry to the stalled delete; found by a review). Runs have no cause to write the entry
//! then anyway: `s`, resolved below the point, wrote a joined output or a final outcome of the
//! click in the same transaction, every run that writes an entry either reads it first (a join
//! or a park: present, so it writes nothing) or, settling below the boundary, writes it only
//! when its snapshot holds neither, and every snapshot that can still commit holds `s`'s.
//! Tests: `a_purge_keeps_an_entry_its_index_cell_did_not_write`,
//! `a_purge_keeps_an_entry_committed_after_its_check`.
//!
//! *Earlier layout.* Stores written before this layout hold `idregistry/<d:08>/<click_id>/token`:
//! the join reads that cell too (the delivery's own day, in the same batched read), and GC
//! deletes those rows below `B` as before (the new rows start with letters, which sort after
//! the digits of the old ones, so the old range delete cannot reach them). Stop builds of the
//! earlier layout across the upgrade: one of each would each write its own cell.
//!
//! ## Verify and the drain
//!
//! Verify ([`crate::verify`]): every input click (from the log files, read line by line as
//! the loader reads them: `app::load::lines::LogLines`, and parsed to accept exactly the
//! lines it accepts) has exactly one joined event or a reason (too old, expired with the horizon, query missing, filtered; an expired
//! click whose query was loaded later is expired, not lost); latency percentiles are from the
//! later of the click's and query's arrival to the joined commit; exit status non-zero on any
//! duplicate or loss. `verify_until` (behind `verify --wait`) reads the logs once and the output
//! on every try; output is read page by page in bounded memory.
//!
//! `photon work --until-drained` ([`crate::drained`]) adds the loader to the observers' drain
//! check (`observers::design::operators`): every log file's committed offset at its last
//! complete line (`photon::load::status`, on `app::load::lines::Lines::dir_status`), then `is_drained`, then a sweep of parked clicks that
//! wakes none. `photon/tests/until_drained.rs`: a worker started before the load waits for the
//! files; workers started after it exit only once the backlog is handled; `photon verify` passes
//! right after they exit; both fail if the drain check is skipped.
//!
//! ## Cost per click
//!
//! A share of a loader transaction and of its wake check (one batched read), a share of a
//! click-observer batch transaction (batched reads, batched 2PC, one `batch_delete` of the notify
//! keys), plus a wake run per parked click. Measured figures: `docs/benchmarks.md`; where the
//! time goes: `docs/perf/photon.md`.
