//! Raw store baselines: ops/s of get, put and compare-and-swap on each backend at
//! concurrency 1, 16 and 64. Later transactional figures are divided by these.
//!
//! Backends, measured one after the other in one run: `memory` (`MemoryKv`), `embedded`
//! (`EmbeddedKv`) and `tikv` (`TikvKv` through an in-process `minitikv` on 127.0.0.1, itself
//! on an `EmbeddedKv`, its own runtime standing in for a separate process). `tikv` vs
//! `embedded` is the cost of the network path (client, gRPC over loopback, server), not of a
//! real TiKV cluster; the line before the last gives that ratio per cell.
//!
//! Run: `cargo bench -p percolator-bench --bench kv` (`KV_BENCH_SECS` sets seconds per cell,
//! default 1; every backend gets the same time). The last line printed is one JSON object
//! `{"backend": {"op@concurrency": ops_per_sec, ...}, ...}`.

use percolator::kv::{MemoryKv, RawKv};
use percolator_tikv::{TikvConfig, TikvKv};
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

const KEYS: u64 = 10_000;
const VALUE_BYTES: usize = 100;
const CONCURRENCY: [usize; 3] = [1, 16, 64];

#[derive(Clone, Copy, Debug)]
enum Op {
    Get,
    Put,
    Cas,
}

const OPS: [Op; 3] = [Op::Get, Op::Put, Op::Cas];

/// `"get@16"`: the cell's name in the output.
fn label(op: Op, tasks: usize) -> String {
    format!("{}@{tasks}", format!("{op:?}").to_lowercase())
}

fn key(i: u64) -> Vec<u8> {
    format!("bench/{i:08}").into_bytes()
}

async fn load(kv: &dyn RawKv) {
    let value = vec![7u8; VALUE_BYTES];
    for chunk in (0..KEYS).collect::<Vec<_>>().chunks(1000) {
        let pairs = chunk.iter().map(|&i| (key(i), value.clone())).collect();
        kv.batch_put(pairs).await.expect("load");
    }
}

async fn measure(kv: Arc<dyn RawKv>, op: Op, tasks: usize, secs: f64) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (kv, stop, count) = (kv.clone(), stop.clone(), count.clone());
        handles.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::from_entropy();
            let mut known: BTreeMap<u64, Option<Vec<u8>>> = BTreeMap::new();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let i = rng.gen_range(0..KEYS);
                match op {
                    Op::Get => {
                        kv.get(&key(i)).await.expect("get");
                    }
                    Op::Put => {
                        let mut value = vec![0u8; VALUE_BYTES];
                        rng.fill(&mut value[..]);
                        kv.put(key(i), value).await.expect("put");
                    }
                    Op::Cas => {
                        let expected = known
                            .get(&i)
                            .cloned()
                            .unwrap_or_else(|| Some(vec![7u8; VALUE_BYTES]));
                        let mut value = vec![0u8; VALUE_BYTES];
                        rng.fill(&mut value[..]);
                        let out = kv
                            .compare_and_swap(key(i), expected, value.clone())
                            .await
                            .expect("cas");
                        known.insert(
                            i,
                            if out.swapped {
                                Some(value)
                            } else {
                                out.previous
                            },
                        );
                    }
                }
                n += 1;
                // The in-process backends never yield; let the other tasks (and the timer) run.
                if n.is_multiple_of(32) {
                    tokio::task::yield_now().await;
                }
            }
            count.fetch_add(n, Ordering::Relaxed);
        }));
    }
    let start = Instant::now();
    percolator_bench::stop_after(secs, &stop);
    for h in handles {
        h.await.expect("bench task");
    }
    count.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

/// mimalloc, not glibc's malloc, the binaries' allocator (see its Cargo.toml).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let secs = percolator_bench::secs_from_env("KV_BENCH_SECS");
    let dir = tempfile::tempdir().expect("temp dir");
    let (server_runtime, server) = percolator_bench::start_minitikv(&dir.path().join("minitikv"));
    println!(
        "backends: memory = MemoryKv; embedded = EmbeddedKv; \
         tikv = TikvKv -> minitikv on {} (embedded store, loopback gRPC)",
        server.addr()
    );
    let runtime = percolator_bench::client_runtime();
    let report = runtime.block_on(async {
        let tikv = TikvKv::connect(TikvConfig::new(vec![server.endpoint()]))
            .await
            .expect("connect to minitikv");
        let backends: Vec<(&str, Arc<dyn RawKv>)> = vec![
            ("memory", Arc::new(MemoryKv::new())),
            (
                "embedded",
                Arc::new(
                    percolator::txn::open_embedded(dir.path().join("embedded"), Default::default())
                        .expect("open embedded"),
                ),
            ),
            ("tikv", Arc::new(tikv)),
        ];
        let mut report: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
        for (name, kv) in backends {
            load(kv.as_ref()).await;
            let mut figures = BTreeMap::new();
            for op in OPS {
                for tasks in CONCURRENCY {
                    let ops = measure(kv.clone(), op, tasks, secs).await;
                    let label = label(op, tasks);
                    println!("{name:>9} {label:>8}: {ops:>12.0} ops/s");
                    figures.insert(label, ops.round());
                }
            }
            report.insert(name.to_string(), figures);
        }
        report
    });
    drop(runtime);
    server_runtime.block_on(server.shutdown());
    // Ops/s of tikv divided by ops/s of embedded (same store behind the server), per cell;
    // in parentheses how many times slower the network path is.
    let ratios: Vec<String> = OPS
        .iter()
        .flat_map(|&op| CONCURRENCY.map(|tasks| label(op, tasks)))
        .map(|label| {
            let ratio = report["tikv"][&label] / report["embedded"][&label];
            format!("{label}={ratio:.4} ({:.0}x)", 1.0 / ratio)
        })
        .collect();
    println!("ratio tikv/embedded (ops/s): {}", ratios.join(" "));
    println!("{}", serde_json::to_string(&report).expect("json"));
}
