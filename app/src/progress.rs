//! Progress shown to a person while a loader or a pipeline runs (`photon load`, `run`, `demo`): counted bars when
//! stderr is a terminal, otherwise one line every few seconds (events so far, rate, ETA when
//! the total is known), so a log or a pipe shows the run moving. Rates and counts are
//! printed as [`crate::human`] formats them.

use crate::human;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Period of the progress lines when stderr is not a terminal.
pub const LINE_PERIOD: Duration = Duration::from_secs(5);

/// One thing being counted: `loaded 120,000/196,000 lines`.
pub struct Counter {
    label: String,
    unit: String,
    total: Option<u64>,
    read: Box<dyn Fn() -> u64 + Send + Sync>,
}

impl Counter {
    /// A counter shown as `<label> <n>[/<total>] <unit>`, its value read with `read`.
    pub fn new(
        label: impl Into<String>,
        unit: impl Into<String>,
        total: Option<u64>,
        read: impl Fn() -> u64 + Send + Sync + 'static,
    ) -> Counter {
        Counter {
            label: label.into(),
            unit: unit.into(),
            total,
            read: Box::new(read),
        }
    }
}

/// How progress is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Display {
    /// Counted bars (with a known total) or counting spinners, redrawn in place on stderr.
    Bars,
    /// A line on stderr every `every`.
    Lines {
        /// The period of the lines.
        every: Duration,
    },
    /// Nothing.
    Hidden,
}

impl Display {
    /// Bars if stderr is a terminal, otherwise a line every `every`.
    pub fn for_stderr(every: Duration) -> Display {
        if std::io::stderr().is_terminal() {
            Display::Bars
        } else {
            Display::Lines { every }
        }
    }
}

/// What one counter shows at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// What is counted (`loaded`).
    pub label: String,
    /// Its unit (`lines`).
    pub unit: String,
    /// The count now.
    pub position: u64,
    /// The count it will reach, if known.
    pub total: Option<u64>,
    /// The count when the display started (work done before it does not count in the rate).
    pub start: u64,
}

/// One progress line: `[12 s] loaded 120,000/196,000 lines (8,006/s, ETA 9 s); joined ...`.
/// The rate is the average since the display started; the ETA is what remains at that rate.
pub fn line(samples: &[Sample], elapsed: Duration) -> String {
    let parts: Vec<String> = samples
        .iter()
        .map(|s| {
            let done = s.position.saturating_sub(s.start);
            let mut text = format!("{} {}", s.label, human::count(s.position));
            if let Some(total) = s.total {
                text.push_str(&format!("/{}", human::count(total)));
            }
            text.push_str(&format!(" {} ({}", s.unit, human::rate_of(done, elapsed)));
            let secs = elapsed.as_secs_f64();
            if let Some(total) = s.total {
                if done > 0 && secs > 0.0 && s.position < total {
                    let left = (total - s.position) as f64 / (done as f64 / secs);
                    text.push_str(&format!(
                        ", ETA {}",
                        human::duration(Duration::from_secs_f64(left))
                    ));
                }
            }
            text.push(')');
            text
        })
        .collect();
    format!("[{}] {}", human::duration(elapsed), parts.join("; "))
}

struct Shared {
    counters: Vec<Counter>,
    starts: Vec<u64>,
    started: Instant,
}

impl Shared {
    fn samples(&self) -> Vec<Sample> {
        self.counters
            .iter()
            .zip(&self.starts)
            .map(|(c, start)| Sample {
                label: c.label.clone(),
                unit: c.unit.clone(),
                position: (c.read)(),
                total: c.total,
                start: *start,
            })
            .collect()
    }
}

/// A running progress display; [`Progress::finish`] stops it.
pub struct Progress {
    shared: Arc<Shared>,
    bars: Vec<ProgressBar>,
    task: Option<tokio::task::JoinHandle<()>>,
}

/// A whole-number rate for indicatif's templates (its own `{per_sec}` prints decimals).
fn rate_key(state: &ProgressState, w: &mut dyn std::fmt::Write) {
    let _ = write!(w, "{}", human::rate(state.per_sec()));
}

fn bar_for(multi: &MultiProgress, counter: &Counter) -> ProgressBar {
    let (bar, template) = match counter.total {
        Some(total) => (
            ProgressBar::new(total),
            "{prefix:>8} [{bar:30}] {human_pos}/{human_len} {msg} ({rate}, ETA {eta})",
        ),
        None => (
            ProgressBar::new_spinner(),
            "{spinner} {prefix:>8} {human_pos} {msg} ({rate})",
        ),
    };
    let style = ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .with_key("rate", rate_key)
        .progress_chars("=> ");
    multi.add(
        bar.with_style(style)
            .with_prefix(counter.label.clone())
            .with_message(counter.unit.clone()),
    )
}

impl Progress {
    /// Starts showing `counters` as `display` says (needs a Tokio runtime).
    pub fn start(display: Display, counters: Vec<Counter>) -> Progress {
        let starts = counters.iter().map(|c| (c.read)()).collect();
        let shared = Arc::new(Shared {
            counters,
            starts,
            started: Instant::now(),
        });
        let (bars, task) = match display {
            Display::Hidden => (Vec::new(), None),
            Display::Lines { every } => {
                let shared = shared.clone();
                let task = tokio::spawn(async move {
                    loop {
                        tokio::time::sleep(every).await;
                        eprintln!("{}", line(&shared.samples(), shared.started.elapsed()));
                    }
                });
                (Vec::new(), Some(task))
            }
            Display::Bars => {
                let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
                let bars: Vec<ProgressBar> =
                    shared.counters.iter().map(|c| bar_for(&multi, c)).collect();
                let (s, b) = (shared.clone(), bars.clone());
                let task = tokio::spawn(async move {
                    loop {
                        for (bar, sample) in b.iter().zip(s.samples()) {
                            bar.set_position(sample.position);
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                });
                (bars, Some(task))
            }
        };
        Progress { shared, bars, task }
    }

    /// What the counters show now.
    pub fn samples(&self) -> Vec<Sample> {
        self.shared.samples()
    }

    /// Stops the display; bars are cleared (the caller's summary follows on a clean line).
    pub fn finish(mut self) {
        self.stop();
        for bar in &self.bars {
            bar.finish_and_clear();
        }
    }

    fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(position: u64, total: Option<u64>, start: u64) -> Sample {
        Sample {
            label: "loaded".into(),
            unit: "lines".into(),
            position,
            total,
            start,
        }
    }

    #[test]
    fn a_line_shows_count_total_whole_rate_and_eta() {
        let s = line(
            &[sample(120_000, Some(196_000), 0)],
            Duration::from_secs(15),
        );
        assert_eq!(s, "[15 s] loaded 120,000/196,000 lines (8,000/s, ETA 10 s)");
    }

    #[test]
    fn work_done_before_the_start_is_not_in_the_rate() {
        let s = line(
            &[sample(150_000, Some(160_000), 100_000), sample(7, None, 0)],
            Duration::from_secs(10),
        );
        assert_eq!(
            s,
            "[10 s] loaded 150,000/160,000 lines (5,000/s, ETA 2 s); loaded 7 lines (1/s)"
        );
    }

    #[test]
    fn no_eta_before_anything_moved_or_once_done() {
        assert_eq!(
            line(&[sample(0, Some(10), 0)], Duration::ZERO),
            "[0 s] loaded 0/10 lines (0/s)"
        );
        assert_eq!(
            line(&[sample(10, Some(10), 0)], Duration::from_secs(2)),
            "[2 s] loaded 10/10 lines (5/s)"
        );
    }
}
