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
            query_id: format!("qsrv{}:{}:{}", q % 7, 1000 + q % 13, t * 1000 + q % 1000),
            event_time: t,
            fields: Map::from_iter([(
                "terms".to_string(),
                json!(format!("term-{}", rng.gen_range(0..5000))),
            )]),
        };
        let orphan = rng.gen_bool(options.orphans.clamp(0.0, 1.0));
        let clicked = rng.gen_bool(options.ctr.clamp(0.0, 1.0));
        let mut early_click = None;
        if clicked {
            let delay = (-options.mean_click_delay_ms * (1.0 - rng.gen::<f64>()).ln()) as u64;
            let click = Click {
                click_id: format!(
                    "csrv{}:{}:{}",
                    q % 5,
                    2000 + q % 11,
                    (t + delay) * 1000 + q % 1000
                ),
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
                    early_click = Some(line.clone());
                } else {
                    seq += 1;
                    delayed.insert((t + delay, seq), line.clone());
                }
            }
        }
        if let Some(line) = early_click {
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
