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

#[derive(Debug)]
struct FileMark {
    /// Latest event time loaded from it by this process.
    latest: Option<u64>,
    /// At the end of bounded input.
    done: bool,
    /// When it last loaded a batch (or was found).
    active: Instant,
}

#[derive(Debug, Default)]
struct State {
    files: HashMap<String, FileMark>,
    /// What was last published: (watermark, idle).
    published: Option<(u64, bool)>,
    /// When it was.
    at: Option<Instant>,
}

/// One loader's watermark: its files' progress, published for its timed columns.
#[derive(Debug)]
pub struct Injector {
    name: String,
    columns: Vec<Column>,
    /// The end of bounded input is the end of all input (`u64::MAX`), or later loads extend
    /// it (see [`Injector::new`]).
    final_at_end: bool,
    state: Mutex<State>,
}

impl Injector {
    /// The injector `name` (the loader table: one per loader of a namespace) of `columns`.
    /// `final_at_end`: the end of bounded input is the end of all input, and the watermark
    /// becomes `u64::MAX` (every event-time timer fires); otherwise later loads extend the
    /// input (Photon's logs) and the watermark stays at the latest event time loaded minus
    /// the out-of-orderness.
    pub fn new(name: &str, columns: Vec<Column>, final_at_end: bool) -> Self {
        Injector {
            name: name.to_string(),
            columns,
            final_at_end,
            state: Mutex::new(State::default()),
        }
    }

    /// Its name, as stored with its watermarks.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Files found by a load: each holds the watermark until it loads or ends.
    pub fn found(&self, files: impl IntoIterator<Item = String>) {
        let now = Instant::now();
        let mut state = self.state();
        for f in files {
            let mark = state.files.entry(f).or_insert(FileMark {
                latest: None,
                done: false,
                active: now,
            });
            mark.done = false;
        }
    }

    /// File `file` committed a batch whose latest event time is `latest`.
    pub fn loaded(&self, file: &str, latest: u64) {
        let mut state = self.state();
        let mark = state.files.entry(file.to_string()).or_insert(FileMark {
            latest: None,
            done: false,
            active: Instant::now(),
        });
        mark.latest = Some(mark.latest.map_or(latest, |l| l.max(latest)));
        mark.active = Instant::now();
    }

    /// File `file` is at the end of bounded input (or was quarantined or unreadable).
    pub fn done(&self, file: &str) {
        if let Some(mark) = self.state().files.get_mut(file) {
            mark.done = true;
        }
    }

    /// (watermark, idle) now.
    fn value(&self, options: &WatermarkOptions) -> (u64, bool) {
        let state = self.state();
        let ooo = options.out_of_orderness.as_millis() as u64;
        let now = Instant::now();
        let mut least: Option<u64> = None;
        let mut idle_wm: Option<u64> = None;
        let mut any_idle = false;
        let mut ended_wm: Option<u64> = None;
        for mark in state.files.values() {
            let wm = mark.latest.map_or(0, |l| l.saturating_sub(ooo));
            if mark.done {
                // Not final: an ended file's events still bound the watermark from above.
                ended_wm = Some(ended_wm.map_or(wm, |w| w.max(wm)));
                continue;
            }
            let idle = options
                .idle_timeout
                .is_some_and(|t| now.duration_since(mark.active) >= t);
            if idle {
                any_idle = true;
                idle_wm = Some(idle_wm.map_or(wm, |w| w.max(wm)));
            } else {
                least = Some(least.map_or(wm, |l| l.min(wm)));
            }
        }
        match (least, any_idle) {
            (Some(w), _) => (w, false),
            (None, true) => (idle_wm.unwrap_or(0), true),
            // Every file at its end.
            (None, false) if !state.files.is_empty() => match self.final_at_end {
                true => (u64::MAX, false),
                false => (ended_wm.unwrap_or(0), false),
            },
            (None, false) => (0, false),
        }
    }

    /// Publishes the watermark if it changed, at most every [`PUBLISH_EVERY`] unless
    /// `force`. Whether it wrote.
    pub async fn publish(
        &self,
        client: &Client,
        options: &WatermarkOptions,
        force: bool,
    ) -> Result<bool, TxnError> {
        if self.columns.is_empty() {
            return Ok(false);
        }
        let (wm, idle) = self.value(options);
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

    #[test]
    fn the_least_file_holds_the_watermark_and_ended_input_releases_it() {
        let inj = Injector::new("loader", vec![Column::new("t", "c")], true);
        inj.found(["a".to_string(), "b".to_string()]);
        assert_eq!(
            inj.value(&options()),
            (0, false),
            "b has loaded nothing yet"
        );
        inj.loaded("a", 100);
        inj.loaded("b", 50);
        assert_eq!(inj.value(&options()), (40, false));
        inj.loaded("b", 30);
        assert_eq!(
            inj.value(&options()),
            (40, false),
            "a file's latest never moves back"
        );
        inj.done("b");
        assert_eq!(inj.value(&options()), (90, false));
        inj.done("a");
        assert_eq!(inj.value(&options()), (u64::MAX, false));
        // A file found again (following) holds it again.
        inj.found(["a".to_string()]);
        assert_eq!(inj.value(&options()), (90, false));
        // Not final: the end leaves the latest loaded minus the out-of-orderness.
        let not_final = Injector::new("loader", vec![Column::new("t", "c")], false);
        not_final.loaded("a", 100);
        not_final.done("a");
        assert_eq!(not_final.value(&options()), (90, false));
    }

    #[tokio::test(start_paused = true)]
    async fn idle_files_stop_holding_the_watermark() {
        let inj = Injector::new("loader", vec![Column::new("t", "c")], true);
        let options = WatermarkOptions {
            idle_timeout: Some(Duration::from_secs(1)),
            ..options()
        };
        inj.loaded("a", 100);
        tokio::time::advance(Duration::from_millis(600)).await;
        inj.loaded("b", 500);
        assert_eq!(inj.value(&options), (90, false));
        tokio::time::advance(Duration::from_millis(600)).await;
        assert_eq!(inj.value(&options), (490, false), "a is idle");
        tokio::time::advance(Duration::from_millis(600)).await;
        assert_eq!(
            inj.value(&options),
            (490, true),
            "both idle: the greatest, idle"
        );
    }
}
