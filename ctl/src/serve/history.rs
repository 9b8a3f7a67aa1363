//! The charts' figures over time: a sampler reads `status` every interval and keeps the
//! last samples, each with the throughput derived from the workers' published progress.
//!
//! What the store holds decides what can be charted. Workers publish, with each heartbeat,
//! how many notifications they have handled since they started; the difference between two
//! samples is the throughput. The notify space gives the backlog and the age of its oldest
//! notification per observed column. The latency from commit to observer run is *not* in
//! the store (workers keep it in process: `observers::Worker::metrics()`), so the charts show
//! the oldest waiting notification's age instead: it bounds the wait of everything still
//! queued, and the page says so.

use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, VecDeque};
use std::time::{SystemTime, UNIX_EPOCH};

/// One sample of the charts' figures.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// Wall-clock time of the sample, in Unix milliseconds.
    pub t_ms: u64,
    /// Notifications handled per second by all workers since the previous sample (`None` for
    /// the first sample, or when no worker publishes its progress).
    pub handled_per_s: Option<f64>,
    /// Notifications waiting, all columns together.
    pub backlog: u64,
    /// Per observed column (`table/column`): (waiting, oldest age in milliseconds).
    pub columns: BTreeMap<String, (u64, u64)>,
    /// Per timed column (`table/column`, `observers::time`): how far its published low
    /// watermark lags the oracle, in milliseconds (`None`: no watermark yet, or the end of
    /// input).
    pub watermark_lag_ms: BTreeMap<String, Option<i64>>,
    /// Live workers.
    pub live_workers: u64,
    /// Dead letters.
    pub dead_letters: u64,
}

impl Sample {
    /// The sample as JSON, as `/api/history` serves it.
    pub fn json(&self) -> Value {
        let columns: Map<String, Value> = self
            .columns
            .iter()
            .map(|(k, (count, age))| (k.clone(), json!({"count": count, "oldest_age_ms": age})))
            .collect();
        json!({
            "t_ms": self.t_ms,
            "handled_per_s": self.handled_per_s,
            "backlog": self.backlog,
            "columns": columns,
            "watermark_lag_ms": self.watermark_lag_ms,
            "live_workers": self.live_workers,
            "dead_letters": self.dead_letters,
        })
    }
}

/// The last samples, and what the next throughput is derived from.
#[derive(Debug)]
pub struct History {
    capacity: usize,
    samples: VecDeque<Sample>,
    /// Per worker id, its published handled count at the previous sample.
    previous_handled: BTreeMap<String, u64>,
    /// Whether any worker published its handled count at the previous sample.
    previous_had_progress: bool,
    previous_t_ms: Option<u64>,
}

impl History {
    /// An empty history keeping at most `capacity` samples (at least 2).
    pub fn new(capacity: usize) -> History {
        History {
            capacity: capacity.max(2),
            samples: VecDeque::new(),
            previous_handled: BTreeMap::new(),
            previous_had_progress: false,
            previous_t_ms: None,
        }
    }

    /// Records a sample from a `status --json` document read at `t_ms`.
    pub fn record(&mut self, t_ms: u64, status: &Value) -> &Sample {
        let mut handled = BTreeMap::new();
        for w in status["workers"].as_array().into_iter().flatten() {
            if let (Some(id), Some(n)) = (w["id"].as_str(), w["handled"].as_u64()) {
                handled.insert(id.to_string(), n);
            }
        }
        // A worker's count only grows while it runs; one that restarted under the same id
        // starts again from zero, so a count below the previous one is all new work.
        let delta: u64 = handled
            .iter()
            .map(|(id, n)| match self.previous_handled.get(id) {
                Some(prev) if prev <= n => n - prev,
                Some(_) => *n,
                None => 0,
            })
            .sum();
        let handled_per_s = match self.previous_t_ms {
            Some(prev) if t_ms > prev && !handled.is_empty() && self.previous_had_progress => {
                Some(delta as f64 * 1000.0 / (t_ms - prev) as f64)
            }
            _ => None,
        };
        // A worker that appeared since the previous sample counts from its first sample on.
        self.previous_had_progress = !handled.is_empty();
        self.previous_handled = handled;
        self.previous_t_ms = Some(t_ms);

        let columns = status["backlog"]["columns"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                (
                    format!(
                        "{}/{}",
                        c["table"].as_str().unwrap_or("?"),
                        c["column"].as_str().unwrap_or("?")
                    ),
                    (
                        c["count"].as_u64().unwrap_or(0),
                        c["oldest_age_ms"].as_u64().unwrap_or(0),
                    ),
                )
            })
            .collect();
        let watermark_lag_ms = status["event_time"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                (
                    c["column"].as_str().unwrap_or("?").to_string(),
                    c["lag_ms"].as_i64(),
                )
            })
            .collect();
        let live_workers = status["workers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|w| w["live"].as_bool() == Some(true))
            .count() as u64;
        if self.samples.len() == self.capacity {
            self.samples.pop_front();
        }
        self.samples.push_back(Sample {
            t_ms,
            handled_per_s,
            backlog: status["backlog"]["total"].as_u64().unwrap_or(0),
            columns,
            watermark_lag_ms,
            live_workers,
            dead_letters: status["dead_letters"].as_u64().unwrap_or(0),
        });
        self.samples.back().expect("just pushed")
    }

    /// The samples kept, oldest first.
    pub fn samples(&self) -> impl Iterator<Item = &Sample> {
        self.samples.iter()
    }
}

/// The current wall-clock time in Unix milliseconds.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(handled: &[(&str, u64)], backlog: u64) -> Value {
        json!({
            "workers": handled.iter().map(|(id, n)| json!({"id": id, "live": true, "handled": n})).collect::<Vec<_>>(),
            "backlog": {"total": backlog, "columns": [{"table": "docs", "column": "body", "count": backlog, "oldest_age_ms": 1500}]},
            "dead_letters": 1,
        })
    }

    #[test]
    fn throughput_is_the_growth_of_published_progress_per_second() {
        let mut h = History::new(10);
        assert_eq!(
            h.record(1_000, &status(&[("a", 10)], 5)).handled_per_s,
            None
        );
        let s = h.record(3_000, &status(&[("a", 30), ("b", 7)], 2)).clone();
        // `b` is new: it counts from its next sample on.
        assert_eq!(s.handled_per_s, Some(10.0));
        assert_eq!(s.columns["docs/body"], (2, 1500));
        assert_eq!(s.live_workers, 2);
        // `a` restarted (its count fell): all of its count is new.
        let s = h.record(4_000, &status(&[("a", 4), ("b", 9)], 0)).clone();
        assert_eq!(s.handled_per_s, Some(6.0));
    }

    #[test]
    fn watermark_lag_per_timed_column() {
        let mut h = History::new(10);
        let mut st = status(&[], 0);
        st["event_time"] = serde_json::json!([
            {"column": "clicks/event", "lag_ms": 1200},
            {"column": "ended/event", "lag_ms": null},
        ]);
        let s = h.record(1_000, &st).clone();
        assert_eq!(s.watermark_lag_ms["clicks/event"], Some(1200));
        assert_eq!(s.watermark_lag_ms["ended/event"], None);
        assert_eq!(s.json()["watermark_lag_ms"]["clicks/event"], 1200);
    }

    #[test]
    fn keeps_at_most_its_capacity() {
        let mut h = History::new(2);
        for t in 1..=5 {
            h.record(t * 1000, &status(&[], 0));
        }
        let kept: Vec<u64> = h.samples().map(|s| s.t_ms).collect();
        assert_eq!(kept, vec![4000, 5000]);
        assert_eq!(h.samples().last().unwrap().handled_per_s, None);
    }
}
