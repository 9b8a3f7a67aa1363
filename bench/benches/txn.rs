//! Transactional throughput against the raw store it runs on, measured side by side in one
//! run on the embedded backend and, for the read and write ratios, on TiKV (`TikvKv` through an
//! in-process minitikv on loopback, where every store call is a network round trip);
//! timestamps from the in-process `LocalClock`. Raw keys encode the same cells as the
//! transactional ones (another namespace), so both sides look up keys of the same shape.
//!
//! Run: `cargo bench -p percolator-bench --bench txn` (`TXN_BENCH_SECS` sets seconds per cell,
//! default 1). The last line is one JSON object with `read_ratio`, `write_ratio` (at 16 and
//! 64 tasks; `tikv_`-prefixed for TiKV) with the raw store calls per transaction of each
//! (`read_calls@N`, `write_calls@N`; a batched CAS counts as one call). The ratios' timed
//! transactions run on the store itself, as the raw calls do; their calls are counted in a
//! pass of their own through a counting wrapper (which costs a transaction of one cell
//! about 8 % of its CPU), on cells of its own. Then loader-shaped
//! transactions with their events through heads and as write-once records
//! (`load32_heads_per_sec`, `load32_once_per_sec`, `..._calls`), `txn10_per_sec`,
//! `abort_rate_hot` and the raw store calls per transaction kind (the last three on the
//! embedded store).

use async_trait::async_trait;
use percolator::kv::intercept::{Call, Hooks, Intercepted};
use percolator::kv::{KvResult, RawKv};
use percolator::ts::LocalClock;
use percolator::txn::{Client, ClientConfig};
use percolator::Cell;
use percolator_tikv::{TikvConfig, TikvKv};
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

const CELLS: u64 = 10_000;

/// Counts raw store calls as the client makes them (an interceptor hook on the store under
/// the client): a batched CAS is one call, its requests are not counted again.
#[derive(Default)]
struct Calls(AtomicU64);

#[async_trait]
impl Hooks for Calls {
    fn sees_swaps(&self) -> bool {
        false
    }

    async fn before(&self, call: Call<'_>) -> KvResult<()> {
        if !matches!(call, Call::CompareAndSwap { batched: true, .. }) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// The store under the client, counting its calls.
type Counting = Intercepted<Calls>;

fn cell(i: u64) -> Cell {
    Cell::new("bench", format!("r{i:06}"), "v")
}

/// The raw (non-transactional) key of cell `i`: the same cell encoding as a head key, in
/// another namespace, so raw and transactional operations look up keys of the same shape
/// and the raw side pays for encoding its key too.
fn raw_key(i: u64) -> Vec<u8> {
    thread_local! {
        static RAW: percolator::codec::KeyCodec = percolator::codec::KeyCodec::new("rbnch");
    }
    RAW.with(|codec| codec.head(&cell(i)))
}

/// Runs `op` in `tasks` tasks for `secs`; returns (successes/s, failures/s).
async fn run_for<F, Fut>(tasks: usize, secs: f64, op: F) -> (f64, f64)
where
    F: Fn(u64) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = bool> + Send,
{
    let (ok, failed, _) = run_counted(tasks, secs, op).await;
    (ok, failed)
}

/// [`run_for`], also returning how many operations ran.
async fn run_counted<F, Fut>(tasks: usize, secs: f64, op: F) -> (f64, f64, u64)
where
    F: Fn(u64) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = bool> + Send,
{
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for t in 0..tasks {
        let (stop, ok, failed, op) = (stop.clone(), ok.clone(), failed.clone(), op.clone());
        handles.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(t as u64);
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if op(rng.gen()).await {
                    ok.fetch_add(1, Ordering::Relaxed);
                } else {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
                n += 1;
                if n.is_multiple_of(16) {
                    tokio::task::yield_now().await;
                }
            }
        }));
    }
    let start = Instant::now();
    percolator_bench::stop_after(secs, &stop);
    for h in handles {
        h.await.expect("bench task");
    }
    let elapsed = start.elapsed().as_secs_f64();
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    (ok as f64 / elapsed, failed as f64 / elapsed, ok + failed)
}

/// The clients of one store: `client` on the store itself, for timed transactions, and
/// `counted` through the counting wrapper, for passes that count calls. Each has loaded the
/// cells it uses (`client` cells `0..CELLS`, `counted` `CELLS..2 * CELLS`: [`counted_cell`]),
/// so each remembers the heads it committed as it would in a steady run.
struct Clients {
    counting: Arc<Counting>,
    client: Client,
    counted: Client,
}

/// The cell a counted pass uses for `i`: `counted` loaded these.
fn counted_cell(i: u64) -> Cell {
    cell(CELLS + i % CELLS)
}

/// Loads `CELLS` committed cells and as many raw keys into `raw`, and `CELLS` more cells
/// through the counting wrapper; returns the clients.
async fn setup(raw: Arc<dyn RawKv>) -> Clients {
    let counting = Arc::new(Intercepted::wrap(raw.clone(), Calls::default()));
    // One clock for both clients of the store: their timestamps must be one sequence.
    let clock = Arc::new(LocalClock::new());
    let client = Client::with_config(
        raw.clone(),
        clock.clone(),
        ClientConfig::with_namespace("bench"),
    );
    let counted = Client::with_config(
        counting.clone(),
        clock,
        ClientConfig::with_namespace("bench"),
    );
    // Load: every cell has a committed value; the raw keys hold a value too.
    for chunk in (0..CELLS).collect::<Vec<_>>().chunks(500) {
        for (loader, cell) in [(&client, cell as CellOf), (&counted, counted_cell)] {
            let t = loader.begin().await.expect("begin");
            for &i in chunk {
                t.set(cell(i), vec![7u8; 100]);
            }
            t.commit().await.expect("load");
        }
        let pairs = chunk
            .iter()
            .map(|&i| (raw_key(i), vec![7u8; 100]))
            .collect();
        raw.batch_put(pairs).await.expect("load raw");
    }
    Clients {
        counting,
        client,
        counted,
    }
}

/// Events per loader-shaped transaction of [`loads`].
const LOAD_EVENTS: u64 = 32;

/// Loader-shaped transactions (32 new event cells and one offset cell each, 16 tasks) with the
/// events written through heads and as write-once records (`percolator::design::once`), run
/// alternately twice on two clients of one store: `load32_heads_per_sec`,
/// `load32_once_per_sec`, and the raw store calls per transaction of each
/// (`load32_heads_calls`, `load32_once_calls`; a batched CAS counts as one call).
async fn loads(label: &str, counting: Arc<Counting>, secs: f64) -> BTreeMap<String, f64> {
    let calls = || counting.hooks().0.load(Ordering::Relaxed);
    let clock = Arc::new(LocalClock::new());
    let heads = Client::with_config(
        counting.clone(),
        clock.clone(),
        ClientConfig::with_namespace("load"),
    );
    let once = Client::with_config(
        counting.clone(),
        clock,
        ClientConfig::with_namespace("load"),
    );
    once.write_once_column("events", "body");
    let next = Arc::new(AtomicU64::new(0));
    let mut report = BTreeMap::new();
    for round in 0..2 {
        for (kind, client) in [("heads", &heads), ("once", &once)] {
            let (c, next) = (client.clone(), next.clone());
            let before = calls();
            let (rate, _, txns) = run_counted(16, secs, move |r| {
                let (c, next) = (c.clone(), next.clone());
                async move {
                    let batch = next.fetch_add(1, Ordering::Relaxed);
                    let t = c.begin().await.expect("begin");
                    for j in 0..LOAD_EVENTS {
                        t.set(
                            Cell::new("events", format!("{batch:012}/{j:02}"), "body"),
                            vec![j as u8; 100],
                        );
                    }
                    t.set(
                        Cell::new("offsets", format!("{}", r % 4096), "offset"),
                        batch.to_be_bytes().to_vec(),
                    );
                    t.commit().await.is_ok()
                }
            })
            .await;
            let per_txn = (calls() - before) as f64 / txns.max(1) as f64;
            println!("{label:>8} round {round}: loader transactions ({LOAD_EVENTS} events + offset), events through {kind:>5}: {rate:>7.0}/s ({per_txn:.2} raw calls/txn)");
            if round == 1 {
                report.insert(format!("load32_{kind}_per_sec"), rate.round());
                report.insert(format!("load32_{kind}_calls"), per_txn);
            }
        }
    }
    report
}

/// The concurrencies of [`ratios`], each on a fresh store: a store that served the rows of
/// another first holds every version those wrote in its memtables, and its reads are slower
/// (raw gets fell from 781,278 to 311,457/s between the two concurrencies on one store).
const RATIO_TASKS: [usize; 2] = [16, 64];

/// Slices of a ratio's two sides, alternated (raw, transactional, raw, ...): the machine's
/// drift over the seconds of a run touches both alike (measured one after the other, the raw
/// puts a write ratio divides by moved by a third between runs on a shared host).
const RATIO_SLICES: usize = 4;

/// `raw` and `txn` each run for `secs` in all, in [`RATIO_SLICES`] alternated slices; returns
/// (raw successes/s, transactional successes/s, transactions run).
async fn alternated<F, Fut, G, Gut>(tasks: usize, secs: f64, raw: F, txn: G) -> (f64, f64, u64)
where
    F: Fn(u64) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = bool> + Send,
    G: Fn(u64) -> Gut + Clone + Send + Sync + 'static,
    Gut: Future<Output = bool> + Send,
{
    let slice = secs / RATIO_SLICES as f64;
    let (mut raw_rate, mut txn_rate, mut txns) = (0.0, 0.0, 0);
    for _ in 0..RATIO_SLICES {
        raw_rate += run_for(tasks, slice, raw.clone()).await.0 / RATIO_SLICES as f64;
        let (ok, _, n) = run_counted(tasks, slice, txn.clone()).await;
        txn_rate += ok / RATIO_SLICES as f64;
        txns += n;
    }
    (raw_rate, txn_rate, txns)
}

/// Names the cell of a random number: [`cell`] for timed runs, [`counted_cell`] for counted
/// passes.
type CellOf = fn(u64) -> Cell;

/// A single-cell read transaction of `cell(r)` on `c`.
async fn read_one(c: Client, cell: CellOf, r: u64) -> bool {
    let t = c.begin().await.expect("begin");
    t.get(&cell(r)).await.is_ok() && t.commit().await.is_ok()
}

/// A single-cell blind write transaction of `cell(r)` on `c`.
async fn write_one(c: Client, cell: CellOf, r: u64) -> bool {
    let t = c.begin().await.expect("begin");
    t.set(cell(r), vec![r as u8; 100]);
    t.commit().await.is_ok()
}

/// The raw calls per transaction of `op` on the counted client at `tasks` tasks, over one
/// slice of the ratios' time.
async fn calls_per_txn<Fut>(
    tasks: usize,
    secs: f64,
    clients: &Clients,
    op: fn(Client, CellOf, u64) -> Fut,
) -> f64
where
    Fut: Future<Output = bool> + Send + 'static,
{
    let calls = || clients.counting.hooks().0.load(Ordering::Relaxed);
    let c = clients.counted.clone();
    let before = calls();
    let (_, _, txns) = run_counted(tasks, secs / RATIO_SLICES as f64, move |r| {
        op(c.clone(), counted_cell, r)
    })
    .await;
    (calls() - before) as f64 / txns.max(1) as f64
}

/// Single-cell transactional reads and writes against raw gets and puts on the same store,
/// side by side at `tasks` tasks (each pair in alternated slices: [`alternated`]; both sides
/// call the store itself), with the raw calls each transaction made (a raw get or put is
/// one), counted in a pass of their own ([`calls_per_txn`]); keys `read_ratio@N`,
/// `write_ratio@N`, `read_calls@N`, `write_calls@N`.
async fn ratios(
    label: &str,
    tasks: usize,
    raw: Arc<dyn RawKv>,
    clients: &Clients,
    secs: f64,
) -> BTreeMap<String, f64> {
    let mut report = BTreeMap::new();
    let kv = raw.clone();
    let raw_get = move |r: u64| {
        let kv = kv.clone();
        async move { kv.get(&raw_key(r % CELLS)).await.is_ok() }
    };
    let c = clients.client.clone();
    let txn_get = move |r: u64| read_one(c.clone(), cell, r % CELLS);
    let (raw_get, txn_read, _) = alternated(tasks, secs, raw_get, txn_get).await;
    let read_calls = calls_per_txn(tasks, secs, clients, read_one).await;
    let kv = raw.clone();
    let raw_put = move |r: u64| {
        let kv = kv.clone();
        async move { kv.put(raw_key(r % CELLS), vec![r as u8; 100]).await.is_ok() }
    };
    let c = clients.client.clone();
    let txn_set = move |r: u64| write_one(c.clone(), cell, r % CELLS);
    let (raw_put, txn_write, _) = alternated(tasks, secs, raw_put, txn_set).await;
    let write_calls = calls_per_txn(tasks, secs, clients, write_one).await;
    println!(
        "{label:>8} tasks {tasks:>2}: raw get {raw_get:>9.0}/s  txn read {txn_read:>9.0}/s  ratio {:.3} ({read_calls:.2} raw calls/txn) | raw put {raw_put:>9.0}/s  txn write {txn_write:>9.0}/s  ratio {:.3} ({write_calls:.2} raw calls/txn)",
        txn_read / raw_get,
        txn_write / raw_put
    );
    report.insert(format!("read_calls@{tasks}"), read_calls);
    report.insert(format!("write_calls@{tasks}"), write_calls);
    report.insert(format!("read_ratio@{tasks}"), txn_read / raw_get);
    report.insert(format!("write_ratio@{tasks}"), txn_write / raw_put);
    report
}

/// mimalloc, not glibc's malloc, the binaries' allocator (see its Cargo.toml).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let secs = percolator_bench::secs_from_env("TXN_BENCH_SECS");
    let dir = tempfile::tempdir().expect("temp dir");
    // One minitikv (and below, one embedded store) per concurrency of the ratios
    // (`RATIO_TASKS`); the first serves the other benches too.
    let servers: Vec<_> = RATIO_TASKS
        .iter()
        .map(|tasks| {
            percolator_bench::start_minitikv(&dir.path().join(format!("minitikv-{tasks}")))
        })
        .collect();
    let endpoints: Vec<String> = servers
        .iter()
        .map(|(_, server)| server.endpoint())
        .collect();
    let runtime = percolator_bench::client_runtime();
    let dir_path = dir.path().to_path_buf();
    let report = runtime.block_on(async move {
        let mut report: BTreeMap<String, serde_json::Value> = BTreeMap::new();
        let mut first = None;
        for tasks in RATIO_TASKS {
            let raw: Arc<dyn RawKv> = Arc::new(
                percolator::txn::open_embedded(
                    dir_path.join(format!("embedded-{tasks}")),
                    Default::default(),
                )
                .expect("open"),
            );
            let clients = setup(raw.clone()).await;
            for (key, value) in ratios("embedded", tasks, raw.clone(), &clients, secs).await {
                report.insert(key, value.into());
            }
            first.get_or_insert(clients);
        }
        let Clients {
            counting,
            client,
            counted,
        } = first.expect("a concurrency");
        report.insert("read_ratio".into(), report["read_ratio@16"].clone());
        report.insert("write_ratio".into(), report["write_ratio@16"].clone());
        for (key, value) in loads("embedded", counting.clone(), secs).await {
            report.insert(key, value.into());
        }
        // The same pairs through TiKV (TikvKv -> minitikv on loopback, on an embedded store):
        // every store call is a network round trip, as in the Percolator paper's setting.
        let mut first_tikv = None;
        for (tasks, endpoint) in RATIO_TASKS.into_iter().zip(endpoints) {
            let tikv: Arc<dyn RawKv> = Arc::new(
                TikvKv::connect(TikvConfig::new(vec![endpoint]))
                    .await
                    .expect("connect to minitikv"),
            );
            let clients = setup(tikv.clone()).await;
            for (key, value) in ratios("tikv", tasks, tikv, &clients, secs).await {
                report.insert(format!("tikv_{key}"), value.into());
            }
            first_tikv.get_or_insert(clients.counting);
        }
        let tikv_counting = first_tikv.expect("a concurrency");
        for (key, value) in loads("tikv", tikv_counting.clone(), secs).await {
            report.insert(format!("tikv_{key}"), value.into());
        }
        let c = client.clone();
        let (txn10, _) = run_for(16, secs, move |r| {
            let c = c.clone();
            async move {
                let t = c.begin().await.expect("begin");
                for j in 0..10 {
                    t.set(cell((r + j * 997) % CELLS), vec![j as u8; 100]);
                }
                t.commit().await.is_ok()
            }
        })
        .await;
        println!("10-cell write transactions, 16 tasks: {txn10:.0}/s");
        report.insert("txn10_per_sec".into(), txn10.round().into());
        // Hot: 16 tasks read-modify-write one of 4 cells; a conflict counts as an abort.
        let c = client.clone();
        let (hot_ok, hot_failed) = run_for(16, secs, move |r| {
            let c = c.clone();
            async move {
                let t = c.begin().await.expect("begin");
                let target = cell(r % 4);
                let _ = t.get(&target).await;
                t.set(target, vec![r as u8; 8]);
                t.commit().await.is_ok()
            }
        })
        .await;
        let abort_rate = hot_failed / (hot_ok + hot_failed);
        println!("hot (16 tasks, 4 cells): {hot_ok:.0} commits/s, abort rate {abort_rate:.3}");
        report.insert("abort_rate_hot".into(), abort_rate.into());
        // Raw store calls per transaction kind (sequential, uncontended), on the counted
        // client's cells.
        let count = |f: u64| counting.hooks().0.load(Ordering::Relaxed) - f;
        let before = counting.hooks().0.load(Ordering::Relaxed);
        for i in 0..100 {
            let t = counted.begin().await.expect("begin");
            t.get(&counted_cell(i)).await.expect("get");
            t.commit().await.expect("commit");
        }
        let per_read = count(before) as f64 / 100.0;
        let before = counting.hooks().0.load(Ordering::Relaxed);
        for i in 0..100 {
            let t = counted.begin().await.expect("begin");
            t.set(counted_cell(i), vec![1u8; 100]);
            t.commit().await.expect("commit");
        }
        let per_write = count(before) as f64 / 100.0;
        let before = counting.hooks().0.load(Ordering::Relaxed);
        for i in 0..100 {
            let t = counted.begin().await.expect("begin");
            let v = t.get(&counted_cell(i)).await.expect("get");
            t.set(counted_cell(i), v.unwrap_or_default());
            t.commit().await.expect("commit");
        }
        let per_rmw = count(before) as f64 / 100.0;
        // Ten cells read with get_many and written back: batched reads, prewrite, secondaries.
        let before = counting.hooks().0.load(Ordering::Relaxed);
        for i in 0..100 {
            let t = counted.begin().await.expect("begin");
            let cells: Vec<Cell> = (0..10).map(|j| counted_cell(i * 10 + j)).collect();
            let values = t.get_many(&cells).await.expect("get_many");
            for (c, v) in cells.into_iter().zip(values) {
                t.set(c, v.unwrap_or_default());
            }
            t.commit().await.expect("commit");
        }
        let per_rmw10 = count(before) as f64 / 100.0;
        println!("raw calls per txn: read {per_read}, blind write {per_write}, read-modify-write {per_rmw}, 10-cell read-modify-write {per_rmw10}");
        report.insert("calls_per_rmw10_txn".into(), per_rmw10.into());
        report.insert("calls_per_read_txn".into(), per_read.into());
        report.insert("calls_per_write_txn".into(), per_write.into());
        report.insert("calls_per_rmw_txn".into(), per_rmw.into());
        report
    });
    println!("{}", serde_json::to_string(&report).expect("json"));
}
