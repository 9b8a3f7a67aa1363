//! `photon gen`: seeded, reproducible synthetic query and click logs.

use crate::event::{Click, Query};
use rand::{Rng, SeedableRng};
use serde_json::{json, Map};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// What to generate.
#[derive(Clone, Debug)]
pub struct GenOptions {
    /// Number of queries.
    pub queries: u64,
    /// Probability that a query gets a click.
    pub ctr: f64,
    /// Mean delay of a click after its query, ms (exponential).
    pub mean_click_delay_ms: f64,
    /// Fraction of clicks written before their query in the log order.
    pub early_clicks: f64,
    /// Fraction of clicks repeated (same click_id delivered twice).
    pub duplicates: f64,
    /// Fraction of clicks whose query never arrives.
    pub orphans: f64,
    /// Fraction of malformed lines inserted.
    pub malformed: f64,
    /// Events per second of event time.
    pub rate: f64,
    /// Event time of the first query, ms since the epoch.
    pub start_ms: u64,
    /// Seed.
    pub seed: u64,
    /// Number of files per kind.
    pub files: usize,
}

impl Default for GenOptions {
    fn default() -> Self {
        GenOptions {
            queries: 100_000,
            ctr: 0.5,
            mean_click_delay_ms: 2_000.0,
            early_clicks: 0.05,
            duplicates: 0.02,
            orphans: 0.01,
            malformed: 0.0,
            rate: 10_000.0,
            start_ms: crate::schema::now_ms(),
            seed: 1,
            files: 2,
        }
    }
}

/// What was generated.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GenSummary {
    /// Query lines written.
    pub queries: u64,
    /// Distinct clicks written (duplicates not counted).
    pub clicks: u64,
    /// Extra duplicate click lines.
    pub duplicate_lines: u64,
    /// Clicks whose query was withheld.
    pub orphans: u64,
    /// Malformed lines.
    pub malformed: u64,
    /// Files written.
    pub files: Vec<PathBuf>,
}

/// Writes `queries-NNN.jsonl` and `clicks-NNN.jsonl` files into `dir`.
pub fn generate(dir: &Path, options: &GenOptions) -> std::io::Result<GenSummary> {
    std::fs::create_dir_all(dir)?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(options.seed);
    let files = options.files.max(1);
    let mut summary = GenSummary::default();
    let open =
        |name: String, summary: &mut GenSummary| -> std::io::Result<BufWriter<std::fs::File>> {
            let path = dir.join(name);
            summary.files.push(path.clone());
            Ok(BufWriter::new(std::fs::File::create(path)?))
        };
    let mut query_files = Vec::new();
    let mut click_files = Vec::new();
    for f in 0..files {
        query_files.push(open(format!("queries-{f:03}.jsonl"), &mut summary)?);
        click_files.push(open(format!("clicks-{f:03}.jsonl"), &mut summary)?);
    }
    // Events are produced in event-time order; a click is emitted when its time comes, or
    // early (before its query) for a fraction of them.
    let mut delayed: std::collections::BTreeMap<(u64, u64), String> = Default::default();
    let step_ms = 1000.0 / options.rate.max(0.001);
    let mut seq = 0u64;
    for q in 0..options.queries {
        let t = options.start_ms + (q as f64 * step_ms) as u64;
        // Flush clicks that are due.
        while let Some((&(due, _), _)) = delayed.iter().next() {
            if due > t {
                break;
            }
            let (_, line) = delayed.pop_first().expect("non-empty");
            let f = rng.gen_range(0..files);
            writeln!(click_files[f], "{line}")?;
        }
        let query = Query {
            // Server, process, event time and sequence number: unique per query at any rate (the
            // sequence alone decides; the rest makes ids look like Photon's).
            query_id: format!("qsrv{}:{}:{}:{q}", q % 7, 1000 + q % 13, t),
            event_time: t,
            fields: Map::from_iter([(
                "terms".to_string(),
                json!(format!("term-{}", rng.gen_range(0..5000))),
            )]),
        };
        let orphan = rng.gen_bool(options.orphans.clamp(0.0, 1.0));
        let clicked = rng.gen_bool(options.ctr.clamp(0.0, 1.0));
        // Copies of this query's click logged before it (both copies of a duplicate may be).
        let mut early_clicks: Vec<String> = Vec::new();
        if clicked {
            let delay = (-options.mean_click_delay_ms * (1.0 - rng.gen::<f64>()).ln()) as u64;
            let click = Click {
                // Unique per click (one per query at most): without the query's sequence
                // number, two clicks of queries 11,000 apart whose delays differed by the
                // right amount got the same id (about 2 in 10,000 clicks), and the second
                // overwrote the first.
                click_id: format!("csrv{}:{}:{}:{q}", q % 5, 2000 + q % 11, t + delay),
                query_id: query.query_id.clone(),
                event_time: t + delay,
                fields: Map::from_iter([("ad".to_string(), json!(rng.gen_range(0..1000)))]),
            };
            let line = serde_json::to_string(&click).map_err(std::io::Error::other)?;
            summary.clicks += 1;
            if orphan {
                summary.orphans += 1;
            }
            let copies = if rng.gen_bool(options.duplicates.clamp(0.0, 1.0)) {
                2
            } else {
                1
            };
            summary.duplicate_lines += copies - 1;
            for _ in 0..copies {
                if rng.gen_bool(options.early_clicks.clamp(0.0, 1.0)) {
                    early_clicks.push(line.clone());
                } else {
                    seq += 1;
                    delayed.insert((t + delay, seq), line.clone());
                }
            }
        }
        for line in early_clicks {
            let f = rng.gen_range(0..files);
            writeln!(click_files[f], "{line}")?;
        }
        if !orphan {
            let f = rng.gen_range(0..files);
            writeln!(
                query_files[f],
                "{}",
                serde_json::to_string(&query).map_err(std::io::Error::other)?
            )?;
            summary.queries += 1;
        }
        if rng.gen_bool(options.malformed.clamp(0.0, 1.0)) {
            let f = rng.gen_range(0..files);
            writeln!(click_files[f], "{{\"click_id\": broken line {q}")?;
            summary.malformed += 1;
        }
    }
    for (_, line) in delayed {
        let f = rng.gen_range(0..files);
        writeln!(click_files[f], "{line}")?;
    }
    for mut w in query_files.into_iter().chain(click_files) {
        w.flush()?;
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// Every query and every click has its own id, however dense the event times: ids that
    /// repeat make the loader overwrite one click (or query) with another.
    #[test]
    fn ids_are_unique_at_any_rate() {
        let dir = tempfile::tempdir().expect("temp dir");
        let options = GenOptions {
            queries: 20_000,
            // A thousand queries per millisecond of event time, clicks a few ms later.
            rate: 1_000_000.0,
            mean_click_delay_ms: 50.0,
            duplicates: 0.0,
            seed: 7,
            ..GenOptions::default()
        };
        let summary = generate(dir.path(), &options).expect("generate");
        let mut clicks = HashSet::new();
        let mut queries = HashSet::new();
        for path in &summary.files {
            for line in std::fs::read_to_string(path).expect("read").lines() {
                let v: serde_json::Value = serde_json::from_str(line).expect("json");
                if let Some(id) = v.get("click_id").and_then(|v| v.as_str()) {
                    assert!(clicks.insert(id.to_string()), "click id {id} repeats");
                } else if let Some(id) = v.get("query_id").and_then(|v| v.as_str()) {
                    assert!(queries.insert(id.to_string()), "query id {id} repeats");
                }
            }
        }
        assert_eq!(clicks.len() as u64, summary.clicks);
        assert_eq!(queries.len() as u64, summary.queries);
    }

    /// Every duplicate line the summary counts is in the files, also when both copies of a
    /// click are logged early (one of them was dropped).
    #[test]
    fn every_counted_line_is_written() {
        let dir = tempfile::tempdir().expect("temp dir");
        let options = GenOptions {
            queries: 4_000,
            ctr: 1.0,
            duplicates: 1.0,
            early_clicks: 0.5,
            orphans: 0.0,
            seed: 3,
            ..GenOptions::default()
        };
        let summary = generate(dir.path(), &options).expect("generate");
        let lines: u64 = summary
            .files
            .iter()
            .map(|p| std::fs::read_to_string(p).expect("read").lines().count() as u64)
            .sum();
        assert_eq!(
            lines,
            summary.queries + summary.clicks + summary.duplicate_lines
        );
    }
}
