//! Throughput and latency per minute of a run, read back from the joined output, so drift over
//! a long run (`photon demo --duration`) is visible: a join whose cost grows with the history
//! shows later minutes slower than the first ones.

use hdrhistogram::Histogram;
use serde::Serialize;
use std::collections::BTreeMap;

/// One minute of a run: the joined clicks that arrived in it (the later of the click's and its
/// query's load), and how long they took to be joined.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Minute {
    /// Minutes since the run's origin.
    pub minute: u64,
    /// Joined clicks that arrived in this minute.
    pub joined: u64,
    /// Arrival-to-join latency, median, ms.
    pub p50_ms: u64,
    /// 90th percentile, ms.
    pub p90_ms: u64,
    /// 99th percentile, ms.
    pub p99_ms: u64,
}

/// A run minute by minute, with the p90 latency of its first and last minutes side by side.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Timeline {
    /// Every minute in which clicks arrived, in order.
    pub minutes: Vec<Minute>,
    /// p90 latency of the clicks of the first `window_minutes` minutes, ms.
    pub first_p90_ms: u64,
    /// p90 latency of the clicks of the last `window_minutes` minutes, ms.
    pub last_p90_ms: u64,
    /// Minutes in each of the two windows: 5, or half the run if shorter than 10 minutes.
    pub window_minutes: u64,
}

/// Joined events grouped by arrival minute counted from an origin, fed one at a time (by
/// [`crate::verify::verify_with`]'s single pass over the output). Memory: one histogram per
/// minute.
#[derive(Debug)]
pub struct Minutes {
    origin_ms: u64,
    per_minute: BTreeMap<u64, Histogram<u64>>,
}

impl Minutes {
    /// Minutes counted from `origin_ms` (ms since the epoch); events that arrived earlier count
    /// in minute 0.
    pub fn new(origin_ms: u64) -> Self {
        Minutes {
            origin_ms,
            per_minute: BTreeMap::new(),
        }
    }

    /// Counts one joined event in its arrival minute: it arrived at `arrived_at` and was
    /// joined at `joined_at` (ms since the epoch, [`crate::event::Joined`]'s fields).
    pub fn record(&mut self, arrived_at: u64, joined_at: u64) {
        let minute = arrived_at.saturating_sub(self.origin_ms) / 60_000;
        let h = self
            .per_minute
            .entry(minute)
            .or_insert_with(|| Histogram::new(3).expect("3 significant digits"));
        let _ = h.record(joined_at.saturating_sub(arrived_at).max(1));
    }

    /// The run minute by minute.
    pub fn timeline(&self) -> Timeline {
        summarize(&self.per_minute)
    }
}

fn summarize(per_minute: &BTreeMap<u64, Histogram<u64>>) -> Timeline {
    let minutes: Vec<Minute> = per_minute
        .iter()
        .map(|(&minute, h)| Minute {
            minute,
            joined: h.len(),
            p50_ms: h.value_at_quantile(0.5),
            p90_ms: h.value_at_quantile(0.9),
            p99_ms: h.value_at_quantile(0.99),
        })
        .collect();
    let n = per_minute.len();
    let window = if n >= 10 { 5 } else { n / 2 }.max(1);
    let p90 = |hs: &mut dyn Iterator<Item = &Histogram<u64>>| -> u64 {
        let mut merged: Option<Histogram<u64>> = None;
        for h in hs {
            match merged.as_mut() {
                None => merged = Some(h.clone()),
                Some(m) => {
                    let _ = m.add(h);
                }
            }
        }
        merged.map_or(0, |m| m.value_at_quantile(0.9))
    };
    Timeline {
        first_p90_ms: p90(&mut per_minute.values().take(window)),
        last_p90_ms: p90(&mut per_minute.values().skip(n.saturating_sub(window))),
        window_minutes: window as u64,
        minutes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minute(latencies: &[u64]) -> Histogram<u64> {
        let mut h = Histogram::new(3).expect("histogram");
        for &l in latencies {
            h.record(l).expect("in range");
        }
        h
    }

    #[test]
    fn first_and_last_windows_compare_the_ends_of_the_run() {
        let mut per_minute = BTreeMap::new();
        for m in 0..12u64 {
            // Latency grows with the minute: the last window's p90 is far above the first's.
            per_minute.insert(m, minute(&[10 * (m + 1); 10]));
        }
        let t = summarize(&per_minute);
        assert_eq!(t.window_minutes, 5);
        assert_eq!(t.minutes.len(), 12);
        assert_eq!(t.minutes[3].joined, 10);
        assert_eq!(t.first_p90_ms, 50);
        assert_eq!(t.last_p90_ms, 120);
    }

    #[test]
    fn a_short_run_splits_in_halves() {
        let mut per_minute = BTreeMap::new();
        per_minute.insert(0, minute(&[5, 5, 5]));
        per_minute.insert(1, minute(&[7, 7, 7]));
        per_minute.insert(2, minute(&[9, 9, 9]));
        let t = summarize(&per_minute);
        assert_eq!(t.window_minutes, 1);
        assert_eq!((t.first_p90_ms, t.last_p90_ms), (5, 9));
        assert!(summarize(&BTreeMap::new()).minutes.is_empty());
    }
}
