//! Injector watermarks: a loader publishes, per timed column its mapping writes, the event
//! time below which it will load nothing more (`observers::time::publish_source`), so that
//! observers' timers can fire on event time (MillWheel's injector watermarks).
//!
//! The loader's watermark is the least, over its files still loading, of the latest event
//! time each has loaded minus the allowed out-of-orderness ([`WatermarkOptions`]; Flink's
//! bounded out-of-orderness). A file that has loaded nothing yet holds it at 0; a file at the
//! end of bounded input no longer holds it, and once every file is, the watermark is
//! `u64::MAX` (all input loaded). While following, a file with no new line for the idle
//! timeout stops holding it back (Flink's `withIdleness`); when every file is idle the
//! loader publishes itself idle and the columns' watermarks follow their other sources.
//!
//! Published in its own transaction after batches commit (at most every
//! [`PUBLISH_EVERY`], and when a load ends), not in each batch's: files load in parallel,
//! and one cell written by every batch would make them conflict. Nothing depends on the
//! two being atomic: a record below the published watermark is delivered to its observer
//! as late (`observers::design::time`), and the stored watermark never moves back.

use observers::time::Column;
use percolator::{Client, TxnError};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// How a loader derives its watermark.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatermarkOptions {
    /// How far behind the latest loaded event time records may still arrive in order: the
    /// watermark is that much below it.
    pub out_of_orderness: Duration,
    /// While following, a file with no new line for this long no longer holds the watermark
    /// back (`None`: files never go idle).
    pub idle_timeout: Option<Duration>,
}

impl Default for WatermarkOptions {
    /// 5 s of out-of-orderness, idle after 60 s.
    fn default() -> Self {
        WatermarkOptions {
            out_of_orderness: Duration::from_secs(5),
            idle_timeout: Some(Duration::from_secs(60)),
        }
    }
}

/// The longest a committed batch's progress waits before the loader publishes its watermark.
pub const PUBLISH_EVERY: Duration = Duration::from_millis(100);

/// Where a file stands in the current load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Found, loading (or about to).
    Loading,
    /// Read to its end: in bounded input, done; following, caught up for now.
    AtEnd,
    /// Quarantined or unreadable: it does not hold the watermark, and the input cannot be
    /// said to have ended (the watermark does not become final).
    Faulted,
}

#[derive(Debug)]
struct FileMark {
    /// Latest plausible event time loaded from it by this process.
    latest: Option<u64>,
    stage: Stage,
    /// A batch read and not committed yet (waiting on the frontier or the backlog): the
    /// file is busy, never idle.
    in_flight: bool,
    /// When it last read or committed a batch (or was found).
    active: Instant,
}

impl FileMark {
    fn new(now: Instant) -> Self {
        FileMark {
            latest: None,
            stage: Stage::Loading,
            in_flight: false,
            active: now,
        }
    }
}

#[derive(Debug, Default)]
struct State {
    /// The files that drive the watermark, by name.
    files: HashMap<String, FileMark>,
    /// What was last published: (watermark, idle).
    published: Option<(u64, bool)>,
    /// When it was.
    at: Option<Instant>,
}

/// How far ahead of the wall clock an event time may be and still move the watermark: a
/// record stamped further ahead (a clock far off, microseconds written as milliseconds) is
/// loaded, but does not push the watermark, which never moves back, past every later record.
pub const MAX_AHEAD: Duration = Duration::from_secs(86_400);

/// One loader's watermark: its files' progress, published for its timed columns.
#[derive(Debug)]
pub struct Injector {
    name: String,
    columns: Vec<Column>,
    /// The end of bounded input is the end of all input (`u64::MAX`), or later loads extend
    /// it (see [`Injector::new`]).
    final_at_end: bool,
    state: Mutex<State>,
    /// One publication at a time (the files of a load publish from their own tasks).
    publishing: tokio::sync::Mutex<()>,
}

impl Injector {
    /// The injector `name` (the loader table: one per loader of a namespace) of `columns`.
    /// `final_at_end`: the end of bounded input is the end of all input, and the watermark
    /// becomes `u64::MAX` (every event-time timer fires); otherwise later loads extend the
    /// input (Photon's logs) and the watermark stays at the latest event time loaded minus
    /// the out-of-orderness. Following, it never becomes final.
    pub fn new(name: &str, columns: Vec<Column>, final_at_end: bool) -> Self {
        Injector {
            name: name.to_string(),
            columns,
            final_at_end,
            state: Mutex::new(State::default()),
            publishing: tokio::sync::Mutex::new(()),
        }
    }

    /// Its name, as stored with its watermarks.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The files a load found that drive the watermark (the others are not tracked): each
    /// holds it until it loads or ends. Files no longer found are forgotten.
    pub fn found(&self, files: impl IntoIterator<Item = String>) {
        let now = Instant::now();
        let mut state = self.state();
        let files: std::collections::HashSet<String> = files.into_iter().collect();
        state.files.retain(|f, _| files.contains(f));
        for f in files {
            let mark = state.files.entry(f).or_insert_with(|| FileMark::new(now));
            mark.stage = Stage::Loading;
        }
    }

    /// File `file` read a batch, not committed yet: it is busy (never idle).
    pub fn reading(&self, file: &str) {
        if let Some(mark) = self.state().files.get_mut(file) {
            mark.in_flight = true;
            mark.active = Instant::now();
        }
    }

    /// File `file` committed a batch whose latest event time is `latest` (ignored beyond
    /// [`MAX_AHEAD`] of the wall clock).
    pub fn loaded(&self, file: &str, latest: u64) {
        let ceiling = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(u64::MAX, |d| (d + MAX_AHEAD).as_millis() as u64);
        let mut state = self.state();
        let Some(mark) = state.files.get_mut(file) else {
            return;
        };
        if latest <= ceiling {
            mark.latest = Some(mark.latest.map_or(latest, |l| l.max(latest)));
        } else {
            tracing::warn!(file, event_time = latest, "an event time more than a day ahead of the wall clock: loaded, but it does not move the watermark");
        }
        mark.in_flight = false;
        mark.active = Instant::now();
        mark.stage = Stage::Loading;
    }

    /// File `file` was read to its end (bounded input: done; following: caught up).
    pub fn at_end(&self, file: &str) {
        if let Some(mark) = self.state().files.get_mut(file) {
            mark.stage = Stage::AtEnd;
            mark.in_flight = false;
        }
    }

    /// File `file` was quarantined or could not be read.
    pub fn faulted(&self, file: &str) {
        if let Some(mark) = self.state().files.get_mut(file) {
            mark.stage = Stage::Faulted;
            mark.in_flight = false;
        }
    }

    /// (watermark, idle) now.
    fn value(&self, options: &WatermarkOptions, follow: bool) -> (u64, bool) {
        let state = self.state();
        let ooo = options.out_of_orderness.as_millis() as u64;
        let now = Instant::now();
        let (mut least, mut least_idle, mut ended): (Option<u64>, Option<u64>, Option<u64>) =
            (None, None, None);
        let mut faulted = false;
        let min = |a: Option<u64>, b: u64| Some(a.map_or(b, |a| a.min(b)));
        for mark in state.files.values() {
            let wm = mark.latest.map_or(0, |l| l.saturating_sub(ooo));
            match mark.stage {
                Stage::Faulted => {
                    faulted = true;
                    continue;
                }
                Stage::AtEnd if !follow => {
                    ended = Some(ended.map_or(wm, |e| e.max(wm)));
                    continue;
                }
                // Following and caught up without loading anything here (loaded before a
                // restart, or a rotated log with nothing left): nothing to hold.
                Stage::AtEnd if mark.latest.is_none() => continue,
                _ => {}
            }
            let idle = follow
                && !mark.in_flight
                && options
                    .idle_timeout
                    .is_some_and(|t| now.duration_since(mark.active) >= t);
            if idle {
                least_idle = min(least_idle, wm);
            } else {
                least = min(least, wm);
            }
        }
        match (least, least_idle) {
            (Some(w), _) => (w, false),
            // Every file idle: the watermark does not move on (the least of them).
            (None, Some(w)) => (w, true),
            (None, None) if !follow && self.final_at_end && !faulted && !state.files.is_empty() => {
                (u64::MAX, false)
            }
            (None, None) => (ended.unwrap_or(0), false),
        }
    }

    /// Stores the loader as a source of its columns (at 0 if it never published), so that
    /// the columns' watermarks wait for it from its first batch on.
    pub async fn register(&self, client: &Client) -> Result<(), TxnError> {
        if self.columns.is_empty() {
            return Ok(());
        }
        let wall = client.wall_ms();
        client
            .run(|txn| async move {
                for column in &self.columns {
                    let known = observers::time::sources(&txn, column)
                        .await?
                        .iter()
                        .any(|(name, _)| *name == self.name);
                    if !known {
                        observers::time::publish_source(&txn, column, &self.name, 0, false, wall)
                            .await?;
                    }
                }
                Ok::<_, TxnError>(())
            })
            .await
    }

    /// Publishes the watermark if it changed, at most every [`PUBLISH_EVERY`] unless
    /// `force`, one publication at a time (one in progress makes another that is not forced
    /// a no-op). Whether it wrote.
    pub async fn publish(
        &self,
        client: &Client,
        options: &WatermarkOptions,
        follow: bool,
        force: bool,
    ) -> Result<bool, TxnError> {
        if self.columns.is_empty() {
            return Ok(false);
        }
        let _one = match force {
            true => self.publishing.lock().await,
            false => match self.publishing.try_lock() {
                Ok(guard) => guard,
                Err(_) => return Ok(false),
            },
        };
        let (wm, idle) = self.value(options, follow);
        {
            let state = self.state();
            if state.published == Some((wm, idle)) {
                return Ok(false);
            }
            if !force && state.at.is_some_and(|at| at.elapsed() < PUBLISH_EVERY) {
                return Ok(false);
            }
        }
        let wall = client.wall_ms();
        client
            .run(|txn| async move {
                for column in &self.columns {
                    observers::time::publish_source(&txn, column, &self.name, wm, idle, wall)
                        .await?;
                }
                Ok::<_, TxnError>(())
            })
            .await?;
        // The columns' watermarks follow (a timer driver advances them too).
        for column in &self.columns {
            observers::time::advance(client, column).await?;
        }
        let mut state = self.state();
        state.published = Some((wm, idle));
        state.at = Some(Instant::now());
        tracing::debug!(injector = %self.name, watermark_ms = wm, idle, "published the loader's watermark");
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> WatermarkOptions {
        WatermarkOptions {
            out_of_orderness: Duration::from_millis(10),
            idle_timeout: None,
        }
    }

    fn injector(final_at_end: bool) -> Injector {
        Injector::new("loader", vec![Column::new("t", "c")], final_at_end)
    }

    fn names(files: &[&str]) -> Vec<String> {
        files.iter().map(|f| f.to_string()).collect()
    }

    #[test]
    fn the_least_file_holds_the_watermark_and_ended_input_releases_it() {
        let inj = injector(true);
        inj.found(names(&["a", "b"]));
        assert_eq!(
            inj.value(&options(), false),
            (0, false),
            "b has loaded nothing yet"
        );
        inj.loaded("a", 100);
        inj.loaded("b", 50);
        assert_eq!(inj.value(&options(), false), (40, false));
        inj.loaded("b", 30);
        assert_eq!(
            inj.value(&options(), false),
            (40, false),
            "a file's latest never moves back"
        );
        inj.at_end("b");
        assert_eq!(inj.value(&options(), false), (90, false));
        inj.at_end("a");
        assert_eq!(inj.value(&options(), false), (u64::MAX, false));
        // A file found again holds it again; files no longer found are forgotten.
        inj.found(names(&["a"]));
        assert_eq!(inj.value(&options(), false), (90, false));
        inj.loaded("gone", 1_000);
        assert_eq!(inj.value(&options(), false), (90, false), "not tracked");
    }

    #[test]
    fn following_never_ends_and_a_fault_never_ends_the_input() {
        let inj = injector(true);
        inj.found(names(&["a", "b"]));
        inj.loaded("a", 100);
        inj.at_end("a");
        inj.faulted("b");
        assert_eq!(
            inj.value(&options(), true),
            (90, false),
            "following: a caught up holds"
        );
        assert_eq!(
            inj.value(&options(), false),
            (90, false),
            "b faulted: not final"
        );
        // Caught up without loading anything here (a restart): nothing to hold.
        let inj = injector(true);
        inj.found(names(&["old", "new"]));
        inj.at_end("old");
        inj.loaded("new", 500);
        assert_eq!(inj.value(&options(), true), (490, false));
    }

    #[test]
    fn not_final_the_end_leaves_the_latest_minus_the_out_of_orderness() {
        let inj = injector(false);
        inj.found(names(&["q0", "q1"]));
        inj.loaded("q0", 100);
        inj.loaded("q1", 300);
        inj.at_end("q0");
        inj.at_end("q1");
        assert_eq!(inj.value(&options(), false), (290, false));
    }

    #[test]
    fn an_event_time_far_ahead_does_not_move_the_watermark() {
        let inj = injector(true);
        inj.found(names(&["a"]));
        inj.loaded("a", 1_000);
        inj.loaded("a", u64::MAX - 5);
        assert_eq!(inj.value(&options(), false), (990, false));
    }

    #[tokio::test(start_paused = true)]
    async fn idle_files_stop_holding_the_watermark_while_following() {
        let inj = injector(true);
        let options = WatermarkOptions {
            idle_timeout: Some(Duration::from_secs(1)),
            ..options()
        };
        inj.found(names(&["a", "b"]));
        inj.loaded("a", 100);
        tokio::time::advance(Duration::from_millis(600)).await;
        inj.loaded("b", 500);
        assert_eq!(inj.value(&options, true), (90, false));
        tokio::time::advance(Duration::from_millis(600)).await;
        assert_eq!(inj.value(&options, true), (490, false), "a is idle");
        assert_eq!(
            inj.value(&options, false),
            (90, false),
            "idleness is for following only"
        );
        // A batch read and waiting (backpressure) is not idle.
        inj.reading("a");
        tokio::time::advance(Duration::from_millis(2_000)).await;
        assert_eq!(inj.value(&options, true), (90, false));
        inj.loaded("a", 120);
        tokio::time::advance(Duration::from_millis(1_100)).await;
        assert_eq!(
            inj.value(&options, true),
            (110, true),
            "both idle: the least, idle"
        );
    }
}
