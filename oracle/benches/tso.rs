//! Oracle throughput and latency: a real server on loopback (embedded store in a temporary
//! directory, its own runtime thread) and one `OracleClient` shared by 1, 64 and 256
//! requester tasks, each calling `get_timestamp` in a loop. The last line is JSON.
//!
//! `cargo bench -p percolator-oracle --bench tso`; `TSO_BENCH_SECS` sets the seconds per level (default 3),
//! `TSO_BENCH_WORKERS` the client runtime's worker threads (default 1: with the server's thread
//! that is one thread per core on the 2-core reference machine).

use oracle::{ClientConfig, OracleClient, ServerConfig, ServerHandle};
use percolator::kv::EmbeddedKv;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() -> anyhow::Result<()> {
    let secs: f64 = std::env::var("TSO_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let dir = tempfile::tempdir()?;
    let kv = Arc::new(EmbeddedKv::open(dir.path().join("store"))?);

    // The server on its own single-threaded runtime, as a separate process would be.
    let server_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let server_thread = std::thread::spawn(move || {
        server_rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let config = ServerConfig {
                exclusive: true,
                ..ServerConfig::default()
            };
            let server = ServerHandle::start(config, kv, listener).unwrap();
            let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
            addr_tx.send((server.local_addr(), stop_tx)).unwrap();
            let _ = stop_rx.await;
            server.shutdown().await;
        })
    });
    let (addr, stop_server) = addr_rx.recv()?;

    let workers: usize = std::env::var("TSO_BENCH_WORKERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()?;
    let mut json = Vec::new();
    rt.block_on(async {
        let client = OracleClient::new(vec![addr.to_string()], ClientConfig::default())?;
        // Warm up: connect, and let the server take over.
        for _ in 0..1000 {
            client.get_timestamp().await?;
        }
        for requesters in [1usize, 64, 256] {
            let stop = Arc::new(AtomicBool::new(false));
            let mut tasks = Vec::new();
            for _ in 0..requesters {
                let (client, stop) = (client.clone(), stop.clone());
                tasks.push(tokio::spawn(async move {
                    let mut lat_ns: Vec<u32> = Vec::with_capacity(1 << 16);
                    let mut prev = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let t = Instant::now();
                        let ts = client.get_timestamp().await.expect("timestamp");
                        lat_ns.push(t.elapsed().as_nanos().min(u32::MAX as u128) as u32);
                        assert!(ts.0 > prev);
                        prev = ts.0;
                    }
                    lat_ns
                }));
            }
            let stats_before = client.stats();
            let start = Instant::now();
            tokio::time::sleep(Duration::from_secs_f64(secs)).await;
            stop.store(true, Ordering::Relaxed);
            let mut all = Vec::new();
            for t in tasks {
                all.extend(t.await?);
            }
            let elapsed = start.elapsed().as_secs_f64();
            let stats = client.stats();
            let rtts = (stats.round_trips - stats_before.round_trips).max(1);
            let batch = (stats.timestamps - stats_before.timestamps) as f64 / rtts as f64;
            all.sort_unstable();
            let pct = |p: f64| all[((all.len() - 1) as f64 * p) as usize] as f64 / 1000.0;
            let tps = all.len() as f64 / elapsed;
            println!(
                "requesters {requesters:>3}: {tps:>12.0} timestamps/s  p50 {:>8.1} us  p99 {:>8.1} us  max {:>9.1} us  batch {batch:>6.1}  round trips/s {:>7.0}",
                pct(0.5),
                pct(0.99),
                pct(1.0),
                rtts as f64 / elapsed
            );
            json.push((format!("tps@{requesters}"), tps.round()));
            if requesters == 64 {
                json.push(("p50_us@64".to_string(), (pct(0.5) * 10.0).round() / 10.0));
                json.push(("p99_us@64".to_string(), (pct(0.99) * 10.0).round() / 10.0));
            }
            if requesters == 256 {
                json.push(("p99_us@256".to_string(), (pct(0.99) * 10.0).round() / 10.0));
            }
        }
        anyhow::Ok(())
    })?;
    let _ = stop_server.send(());
    let _ = server_thread.join();
    let fields: Vec<String> = json.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
    println!("{{{}}}", fields.join(","));
    Ok(())
}
