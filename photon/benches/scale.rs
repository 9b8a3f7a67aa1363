//! Does the cost of a change grow with the history? Runs the same `photon demo` job at two
//! sizes ten times apart, each in its own process (so each has its own store and peak RSS),
//! and prints both rates and their ratio; the last line is JSON (`small_per_sec`,
//! `large_per_sec`, `ratio`, `peak_rss_mb` of the large run, and each run's exactly-once
//! figures). A ratio near 1 means throughput does not fall as the history grows.
//!
//! `cargo bench -p percolator-photon --bench scale` (100,000 and 1,000,000 clicks, about 10 minutes on 2
//! cores); `SCALE_SMALL_CLICKS` and `SCALE_FACTOR` change the sizes.

use std::process::Command;

fn env_or(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v}: expected a whole number")),
        Err(_) => default,
    }
}

/// Runs `photon demo --json --clicks N` and returns its JSON summary.
fn demo(clicks: u64) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_photon"))
        .args(["demo", "--json", "--clicks", &clicks.to_string()])
        .output()
        .expect("running photon demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "photon demo --clicks {clicks} failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("demo output {last:?}: {e}"))
}

fn main() {
    let small_clicks = env_or("SCALE_SMALL_CLICKS", 100_000);
    let factor = env_or("SCALE_FACTOR", 10).max(1);
    let large_clicks = small_clicks * factor;
    let mut runs = Vec::new();
    for clicks in [small_clicks, large_clicks] {
        let r = demo(clicks);
        println!(
            "clicks {clicks:>9}: {:>6} joined/s  p90 {:>6} ms  {:>7.1} s  peak RSS {} MB  \
             duplicates {}  lost {}  wasted {:.4}%",
            photon::human::whole(r["per_sec"].as_f64().unwrap_or(0.0)),
            r["p90_ms"],
            r["seconds"].as_f64().unwrap_or(0.0),
            r["peak_rss_mb"],
            r["duplicates"],
            r["lost"],
            r["wasted_ratio"].as_f64().unwrap_or(0.0) * 100.0
        );
        runs.push(r);
    }
    let rate = |r: &serde_json::Value| r["per_sec"].as_f64().unwrap_or(0.0);
    let ratio = rate(&runs[1]) / rate(&runs[0]).max(1.0);
    println!("large/small throughput ratio {ratio:.2} (1.00: no slowdown as the history grows ten times)");
    let json = serde_json::json!({
        "small_clicks": small_clicks,
        "large_clicks": large_clicks,
        "small_per_sec": rate(&runs[0]),
        "large_per_sec": rate(&runs[1]),
        "ratio": (ratio * 1000.0).round() / 1000.0,
        "peak_rss_mb": runs[1]["peak_rss_mb"],
        "small_peak_rss_mb": runs[0]["peak_rss_mb"],
        "duplicates": runs[0]["duplicates"].as_u64().unwrap_or(0) + runs[1]["duplicates"].as_u64().unwrap_or(0),
        "lost": runs[0]["lost"].as_u64().unwrap_or(0) + runs[1]["lost"].as_u64().unwrap_or(0),
        "large_wasted_ratio": runs[1]["wasted_ratio"],
        "large_seconds": runs[1]["seconds"],
    });
    println!("{json}");
}
