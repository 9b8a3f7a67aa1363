//! What `TikvKv` costs and answers on many regions, counted on minitikv: a scan page costs
//! O(1) RPCs and reads only its own keys whatever the number of regions in its range; a
//! reverse scan never sends TiKV a bound outside the region it is routed to; writes over
//! TiKV's size limits are refused at once, naming the key and the size.

use minitikv::{RpcCounts, RunningServer, ServerConfig};
use percolator::kv::conformance::within;
use percolator::kv::{KeyRange, KvError, RangePager, RawKv, ScanOrder};
use percolator_tikv::{TikvConfig, TikvKv};
use std::time::Duration;

/// Regions of the `r/` space (`ServerConfig::even_splits`): region `i` holds the keys
/// `r/` + a big-endian u16 in `64 * i .. 64 * (i + 1)`.
const REGIONS: usize = 1024;
/// Keys written in each region.
const KEYS_PER_REGION: u16 = 40;

fn config(server: &RunningServer) -> TikvConfig {
    let mut config = TikvConfig::new(vec![server.endpoint()]);
    config.op_timeout = Duration::from_secs(10);
    // Regions learned by a warm-up walk stay cached however slow the machine.
    config.region_cache_ttl = Duration::from_secs(3600);
    config
}

/// A minitikv started with `server`, and a client of it whose calls give up after 5 s.
async fn started(server: ServerConfig) -> (RunningServer, TikvKv) {
    let server = minitikv::start(server).await.unwrap();
    let mut cfg = config(&server);
    cfg.op_timeout = Duration::from_secs(5);
    let kv = TikvKv::connect(cfg).await.unwrap();
    (server, kv)
}

/// A minitikv with 1,024 regions over `r/`, each holding [`KEYS_PER_REGION`] keys.
async fn many_regions() -> (RunningServer, TikvKv, Vec<Vec<u8>>) {
    let server = minitikv::start(ServerConfig {
        split_keys: ServerConfig::even_splits(b"r/", REGIONS),
        ..ServerConfig::in_memory()
    })
    .await
    .expect("start minitikv");
    assert!(server.regions().len() >= 1000);
    let kv = TikvKv::connect(config(&server)).await.expect("connect");
    let mut keys = Vec::new();
    for region in 0..REGIONS as u16 {
        for j in 0..KEYS_PER_REGION {
            let mut key = b"r/".to_vec();
            key.extend_from_slice(&(region * 64 + j).to_be_bytes());
            keys.push(key);
        }
    }
    let pairs: Vec<_> = keys.iter().map(|k| (k.clone(), b"v".to_vec())).collect();
    for chunk in pairs.chunks(4096) {
        kv.batch_put(chunk.to_vec()).await.expect("load");
    }
    (server, kv, keys)
}

/// TiKV scan RPCs and PD region lookups in `counts`.
fn scan_rpcs(counts: &RpcCounts) -> (u64, u64) {
    let tikv = counts.calls("RawBatchScan") + counts.calls("RawScan");
    let pd =
        counts.calls("GetRegion") + counts.calls("GetPrevRegion") + counts.calls("ScanRegions");
    (tikv, pd)
}

/// One page of a range spanning all 1,024 regions costs one `RawBatchScan` per region the
/// page's keys lie in (one, when the page fits in a region), and reads exactly the page's
/// keys; with the regions cached by an earlier walk it asks PD nothing, and with the cache
/// off (`region_cache_ttl` zero) one PD lookup per region. (With `batch_scan` over the whole
/// range, the first page cost 1,024 `RawBatchScan` whatever its size, and read up to 1,024
/// times its size.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_page_costs_the_regions_it_reads_not_the_regions_of_its_range() {
    let (server, kv, keys) = many_regions().await;
    let mut uncached = config(&server);
    uncached.region_cache_ttl = Duration::ZERO;
    let uncached = TikvKv::connect(uncached).await.expect("connect");
    for (kv, cached) in [(&kv, true), (&uncached, false)] {
        pages_cost_their_regions(&server, kv, &keys, cached).await;
    }
}

async fn pages_cost_their_regions(
    server: &RunningServer,
    kv: &TikvKv,
    keys: &[Vec<u8>],
    cached: bool,
) {
    let range = KeyRange::prefix(b"r/");
    // Warm the client's region cache, so that only the page's own RPCs are counted.
    let warm = percolator::kv::scan_all(kv, range.clone(), ScanOrder::Forward)
        .await
        .unwrap();
    assert_eq!(warm.len(), keys.len());
    within("pages", async {
        for limit in [1usize, 32, 40, 1024] {
            let before = server.rpc_counts();
            let page = kv
                .scan(range.clone(), limit, ScanOrder::Forward)
                .await
                .unwrap();
            let counts = server.rpc_counts().since(&before);
            let got: Vec<Vec<u8>> = page.into_iter().map(|(k, _)| k).collect();
            assert_eq!(got, keys[..limit].to_vec(), "page of {limit}");
            let (tikv, pd) = scan_rpcs(&counts);
            let regions = limit.div_ceil(KEYS_PER_REGION as usize) as u64;
            eprintln!(
                "page of {limit} (cache {cached}): {tikv} scan RPCs, {pd} PD lookups, {} keys read",
                counts.scanned_keys
            );
            assert_eq!(tikv, regions, "scan RPCs for a page of {limit}: {counts:?}");
            let lookups = if cached { 0 } else { regions };
            assert_eq!(pd, lookups, "PD lookups for a page of {limit}: {counts:?}");
            assert_eq!(
                counts.scanned_keys, limit as u64,
                "keys read for a page of {limit}"
            );
        }
    })
    .await;
}

/// A `RangePager` walk of the whole space (1,280 pages of 32 keys over 1,024 regions), both
/// ways, costs O(1) RPCs per page. Forward: at most two `RawBatchScan` and two PD lookups
/// (a page reaching into the next region), and only the page's keys read. Reverse: at most
/// four scan RPCs (per region a key-only probe, and when it is full `scan_reverse` and a
/// one-key check above its answer) and two PD lookups, at most twice the page's keys read
/// (the probe's keys, then the pairs) and the one-key check.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_range_pager_walk_costs_o1_rpcs_per_page() {
    let (server, kv, keys) = many_regions().await;
    // Warm the client's region cache, so that only the pages' own RPCs are counted.
    percolator::kv::scan_all(&kv, KeyRange::prefix(b"r/"), ScanOrder::Forward)
        .await
        .unwrap();
    for order in [ScanOrder::Forward, ScanOrder::Reverse] {
        let mut pager = RangePager::new(&kv, KeyRange::prefix(b"r/"), order, 32);
        let (mut pages, mut seen, mut worst_tikv, mut worst_pd, mut worst_read) = (0, 0, 0, 0, 0);
        within("walk", async {
            loop {
                let before = server.rpc_counts();
                let Some(page) = pager.next_page().await.unwrap() else {
                    break;
                };
                let counts = server.rpc_counts().since(&before);
                let (tikv, pd) = scan_rpcs(&counts);
                worst_tikv = worst_tikv.max(tikv);
                worst_pd = worst_pd.max(pd);
                worst_read = worst_read.max(counts.scanned_keys);
                pages += 1;
                seen += page.len();
            }
        })
        .await;
        eprintln!(
            "{order:?} walk: {pages} pages, at most {worst_tikv} scan RPCs, {worst_pd} PD \
             lookups and {worst_read} keys read per page"
        );
        assert_eq!(seen, keys.len(), "{order:?}");
        let (rpc_bound, read_bound) = match order {
            ScanOrder::Forward => (2, 32),
            ScanOrder::Reverse => (4, 2 * 32 + 1),
        };
        assert!(
            worst_tikv <= rpc_bound,
            "{order:?}: {worst_tikv} scan RPCs in a page"
        );
        assert!(worst_pd <= 2, "{order:?}: {worst_pd} PD lookups in a page");
        assert!(
            worst_read <= read_bound,
            "{order:?}: {worst_read} keys read in a page"
        );
    }
    assert_eq!(kv.reverse_scan_fallbacks(), 0);
}

/// An unbounded reverse scan whose last region is not the first: TiKV refuses an empty
/// upper bound there (`KeyNotInRegion`, tikv/client-rust#512), which the adapter used to
/// retry until its deadline. It never sends one: the answer is exact, and no request was
/// refused for its keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unbounded_reverse_scans_send_no_bound_outside_their_region() {
    let (server, kv) = started(ServerConfig {
        split_keys: vec![b"m".to_vec()],
        ..ServerConfig::in_memory()
    })
    .await;
    let mut pairs: Vec<_> = (0..50u32)
        .map(|i| (format!("x{i:02}").into_bytes(), vec![i as u8]))
        .collect();
    pairs.push((b"a".to_vec(), b"first region".to_vec()));
    kv.batch_put(pairs.clone()).await.unwrap();
    pairs.sort();
    within("reverse scans", async {
        for (start, limit) in [(&b"n"[..], 10), (b"x", 50), (b"", 3), (b"", 51)] {
            let got = kv
                .scan(KeyRange::from(start.to_vec()), limit, ScanOrder::Reverse)
                .await
                .unwrap();
            let expected: Vec<_> = pairs
                .iter()
                .rev()
                .filter(|(k, _)| k.as_slice() >= start)
                .take(limit)
                .cloned()
                .collect();
            assert_eq!(got, expected, "reverse scan from {start:?}, limit {limit}");
        }
    })
    .await;
    assert_eq!(
        server.fault_counts().stale_route,
        0,
        "a request was refused"
    );
    assert_eq!(kv.retry_counts().total(), 0);
}

fn expect_too_large(result: Result<(), KvError>, op: &str, size: usize) {
    match result {
        Err(KvError::InvalidArgument { op: got, message }) => {
            assert_eq!(got, op);
            assert!(message.contains(&size.to_string()), "{message}");
            assert!(message.contains("big"), "the key is named: {message}");
        }
        other => panic!("expected InvalidArgument from {op}, got {other:?}"),
    }
}

/// A write over TiKV's 8 MiB raft entry limit, or of a key over its 8 KiB key limit, is
/// refused at once (the adapter used to retry `RaftEntryTooLarge` until its deadline), naming
/// the key and the size, with nothing sent; a batch of pairs adding up to more than the
/// limit is split by the client and written.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_over_tikvs_limits_are_refused_at_once() {
    let server = minitikv::start(ServerConfig::in_memory()).await.unwrap();
    let kv = TikvKv::connect(config(&server)).await.unwrap();
    let big = vec![7u8; 9 * 1024 * 1024];
    let before = server.rpc_counts();
    expect_too_large(
        kv.put(b"big".to_vec(), big.clone()).await,
        "put",
        big.len() + 3,
    );
    expect_too_large(
        kv.batch_put(vec![
            (b"ok".to_vec(), b"v".to_vec()),
            (b"big".to_vec(), big.clone()),
        ])
        .await,
        "batch_put",
        big.len() + 3,
    );
    let cas = kv
        .compare_and_swap(b"big".to_vec(), None, big.clone())
        .await;
    expect_too_large(cas.map(|_| ()), "compare_and_swap", big.len() + 3);
    let mut long = b"big".to_vec();
    long.resize(8 * 1024 + 1, b'k');
    expect_too_large(kv.put(long.clone(), b"v".to_vec()).await, "put", long.len());
    let sent = server.rpc_counts().since(&before);
    assert!(
        sent.calls.keys().all(|m| !m.starts_with("Raw")),
        "sent {sent:?}"
    );
    assert_eq!(
        kv.get(b"ok").await.unwrap(),
        None,
        "nothing of the batch written"
    );

    // 12 MiB in 1 MiB pairs: one request per pair.
    let pairs: Vec<_> = (0..12u8)
        .map(|i| (vec![b'p', i], vec![i; 1024 * 1024]))
        .collect();
    kv.batch_put(pairs.clone()).await.unwrap();
    assert_eq!(
        kv.get(&[b'p', 11]).await.unwrap(),
        Some(pairs[11].1.clone())
    );
}

/// Should TiKV's limit be lower than the adapter's (another `raft-entry-max-size`), its
/// `RaftEntryTooLarge` is reported at once, not retried, naming the key and the size.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn raft_entry_too_large_from_tikv_is_permanent() {
    let (server, kv) = started(ServerConfig {
        limits: minitikv::Limits {
            raft_entry_max_bytes: 1024 * 1024,
            ..minitikv::Limits::default()
        },
        ..ServerConfig::in_memory()
    })
    .await;
    let value = vec![1u8; 2 * 1024 * 1024];
    let before = server.rpc_counts();
    let put = within("put", kv.put(b"big".to_vec(), value.clone())).await;
    expect_too_large(put, "put", value.len() + 3);
    let batch = within(
        "batch_put",
        kv.batch_put(vec![(b"big".to_vec(), value.clone())]),
    )
    .await;
    expect_too_large(batch, "batch_put", value.len() + 3);
    let sent = server.rpc_counts().since(&before);
    assert_eq!(sent.calls("RawPut"), 1, "{sent:?}");
    assert_eq!(sent.calls("RawBatchPut"), 1, "{sent:?}");
    assert_eq!(kv.retry_counts().total(), 0, "{:?}", kv.retry_counts());
}
