//! Commit-to-observer latency and sustained notification throughput on the embedded store,
//! with 1 and 2 workers in one process.
//!
//! Run: `cargo bench -p percolator-observers --bench notify` (`NOTIFY_BENCH_SECS`, default 3, and
//! `NOTIFY_BENCH_RATE` offered changes/s, default 5000). For 1 and 2 workers, two phases:
//! - latency: writers commit single-cell changes of an observed column at the offered rate;
//!   the observer records the time from just before the writer's commit to the end of its own
//!   run (its commit follows immediately);
//! - saturation: writers commit as fast as they can; processed/s is the sustained rate
//!   (every change processed, counted until the workers are quiescent again).
//!
//! The last line is `{"p50_ms":..., "p99_ms":..., "per_sec":..., "duplicate_ratio":...}` for
//! 2 workers: latency at the offered rate, `per_sec` at saturation, duplicates over both.

use hdrhistogram::Histogram;
use observers::{observer_fn, Registry, Worker, WorkerConfig};
use percolator::ts::LocalClock;
use percolator::{Cell, Client, ClientConfig};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct Run {
    p50_ms: f64,
    p99_ms: f64,
    per_sec: f64,
    duplicate_ratio: f64,
}

/// One phase with `workers` workers; `rate: None` offers changes as fast as writers commit.
async fn run(workers: usize, secs: f64, rate: Option<f64>) -> Run {
    let dir = tempfile::tempdir().expect("temp dir");
    let store =
        Arc::new(percolator::txn::open_embedded(dir.path(), Default::default()).expect("open"));
    let client = Client::with_config(
        store,
        Arc::new(LocalClock::new()),
        ClientConfig::with_namespace("bench"),
    );
    let epoch = Instant::now();
    let latencies = Arc::new(Mutex::new(Histogram::<u64>::new(3).expect("histogram")));
    let mut registry = Registry::new();
    let h = latencies.clone();
    registry
        .strong(
            "events",
            "v",
            "latency",
            observer_fn(move |txn, cell: Cell| {
                let h = h.clone();
                async move {
                    let value = txn.get(&cell).await?.unwrap_or_default();
                    let written_us = <[u8; 8]>::try_from(value.as_slice())
                        .map(u64::from_be_bytes)
                        .unwrap_or(0);
                    txn.set(Cell::new("events", &cell.row, "seen"), "1");
                    let now_us = epoch.elapsed().as_micros() as u64;
                    let _ = h
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .record(now_us.saturating_sub(written_us).max(1));
                    Ok(())
                }
            }),
        )
        .expect("register");
    let registry = Arc::new(registry);
    let started: Vec<Worker> = (0..workers)
        .map(|i| {
            let config = WorkerConfig {
                id: format!("bench-{i}"),
                idle_interval: Duration::from_millis(50),
                ..WorkerConfig::default()
            };
            Worker::start(client.clone(), registry.clone(), config)
        })
        .collect();
    // Let every worker see the others in the registry (the hash split) before measuring.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    // Writers: 32 tasks sharing the offered rate, each change a fresh row.
    let writers = 32usize;
    let per_writer = rate.map(|rate| Duration::from_secs_f64(writers as f64 / rate));
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let mut ticker = per_writer.map(tokio::time::interval);
            if let Some(t) = ticker.as_mut() {
                t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            }
            let mut n = 0u64;
            while Instant::now() < deadline {
                match ticker.as_mut() {
                    Some(t) => {
                        t.tick().await;
                    }
                    None => tokio::task::yield_now().await,
                }
                let txn = client.begin().await.expect("begin");
                let commit_us = epoch.elapsed().as_micros() as u64;
                txn.set(
                    Cell::new("events", format!("w{w}-{n:08}"), "v"),
                    commit_us.to_be_bytes().to_vec(),
                );
                if txn.commit().await.is_ok() {
                    n += 1;
                }
            }
            n
        }));
    }
    let mut written = 0;
    for t in tasks {
        written += t.await.expect("writer");
    }
    for w in &started {
        w.wait_until_quiescent().await.expect("quiesce");
    }
    let elapsed = start.elapsed().as_secs_f64();
    let (mut processed, mut duplicates) = (0, 0);
    for w in &started {
        let m = w.metrics().snapshot();
        processed += m.processed;
        duplicates += m.duplicates;
        w.shutdown().await;
    }
    assert_eq!(processed, written, "every change processed exactly once");
    let h = latencies.lock().unwrap_or_else(|p| p.into_inner());
    let run = Run {
        p50_ms: h.value_at_quantile(0.5) as f64 / 1000.0,
        p99_ms: h.value_at_quantile(0.99) as f64 / 1000.0,
        per_sec: processed as f64 / elapsed,
        duplicate_ratio: duplicates as f64 / processed.max(1) as f64,
    };
    let offered = rate.map_or("saturation".to_string(), |r| format!("offered {r:.0}/s"));
    println!(
        "{workers} worker(s), {offered}: {written} changes, {:.0} processed/s, latency p50 {:.1} ms p99 {:.1} ms, duplicates {:.4}",
        run.per_sec, run.p50_ms, run.p99_ms, run.duplicate_ratio
    );
    run
}

fn main() {
    let secs: f64 = std::env::var("NOTIFY_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let rate: f64 = std::env::var("NOTIFY_BENCH_RATE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5000.0);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        run(1, secs, Some(rate)).await;
        run(1, secs, None).await;
        let two = run(2, secs, Some(rate)).await;
        let two_max = run(2, secs, None).await;
        let duplicate_ratio = (two.duplicate_ratio + two_max.duplicate_ratio) / 2.0;
        println!(
            "{{\"p50_ms\":{:.3},\"p99_ms\":{:.3},\"per_sec\":{:.0},\"duplicate_ratio\":{:.4},\"offered_per_sec\":{rate:.0},\"saturation_p99_ms\":{:.3}}}",
            two.p50_ms, two.p99_ms, two_max.per_sec, duplicate_ratio, two_max.p99_ms
        );
    });
}
