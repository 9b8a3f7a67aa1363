//! Scans: both directions, limits, paging through large ranges, and the yield point every call is.

use super::key;
use crate::kv::{
    scan_all, KeyRange, KvError, KvPair, RangePager, RawKv, ScanOrder, MAX_SCAN_LIMIT,
};
use std::sync::Arc;

/// Bounded, empty, reverse and limited scans.
pub async fn scans(kv: &dyn RawKv, prefix: &[u8]) {
    let k = |i: u8| key(prefix, &[b'k', i]);
    // Neighbours just outside the prefix must never show up.
    let mut before = prefix.to_vec();
    before.pop();
    let pairs: Vec<_> = (0..20u8).map(|i| (k(i), vec![i])).collect();
    kv.batch_put(pairs).await.unwrap();
    let all = KeyRange::prefix(prefix);

    let fwd = kv.scan(all.clone(), 100, ScanOrder::Forward).await.unwrap();
    assert_eq!(fwd.len(), 20, "forward scan of the whole prefix");
    assert!(
        fwd.windows(2).all(|w| w[0].0 < w[1].0),
        "forward scan is ascending"
    );

    let rev = kv.scan(all.clone(), 100, ScanOrder::Reverse).await.unwrap();
    let mut expected = fwd.clone();
    expected.reverse();
    assert_eq!(rev, expected, "reverse scan is the forward scan reversed");

    let bounded = kv
        .scan(KeyRange::new(k(5), k(9)), 100, ScanOrder::Forward)
        .await
        .unwrap();
    let got: Vec<u8> = bounded.iter().map(|(_, v)| v[0]).collect();
    assert_eq!(got, vec![5, 6, 7, 8], "bounded scan is [start, end)");

    let bounded_rev = kv
        .scan(KeyRange::new(k(5), k(9)), 100, ScanOrder::Reverse)
        .await
        .unwrap();
    let got: Vec<u8> = bounded_rev.iter().map(|(_, v)| v[0]).collect();
    assert_eq!(
        got,
        vec![8, 7, 6, 5],
        "bounded reverse scan starts below end"
    );

    let limited = kv.scan(all.clone(), 3, ScanOrder::Forward).await.unwrap();
    let got: Vec<u8> = limited.iter().map(|(_, v)| v[0]).collect();
    assert_eq!(got, vec![0, 1, 2], "forward limit");
    let limited = kv.scan(all.clone(), 3, ScanOrder::Reverse).await.unwrap();
    let got: Vec<u8> = limited.iter().map(|(_, v)| v[0]).collect();
    assert_eq!(got, vec![19, 18, 17], "reverse limit");

    // Empty ranges: nothing in them, inverted, and start == end.
    let mut gap_start = k(19);
    gap_start.push(0);
    let empty = kv
        .scan(
            KeyRange::new(gap_start.clone(), key(prefix, b"l")),
            10,
            ScanOrder::Forward,
        )
        .await
        .unwrap();
    assert!(empty.is_empty(), "scan of a range holding no key");
    let empty = kv
        .scan(
            KeyRange::new(gap_start, key(prefix, b"l")),
            10,
            ScanOrder::Reverse,
        )
        .await
        .unwrap();
    assert!(empty.is_empty(), "reverse scan of a range holding no key");
    let inverted = kv
        .scan(KeyRange::new(k(9), k(5)), 10, ScanOrder::Forward)
        .await
        .unwrap();
    assert!(inverted.is_empty(), "scan of an inverted range");
    let point = kv
        .scan(KeyRange::new(k(7), k(7)), 10, ScanOrder::Forward)
        .await
        .unwrap();
    assert!(point.is_empty(), "scan of [k, k)");

    // An unbounded end still starts at start.
    let open = kv
        .scan(KeyRange::from(k(18)), 2, ScanOrder::Forward)
        .await
        .unwrap();
    let got: Vec<u8> = open.iter().map(|(_, v)| v[0]).collect();
    assert_eq!(got, vec![18, 19], "scan with an open end");
}

/// Scan limits outside `1..=MAX_SCAN_LIMIT` are refused with `InvalidArgument`.
pub async fn scan_limits_are_checked(kv: &dyn RawKv, prefix: &[u8]) {
    for limit in [0, MAX_SCAN_LIMIT + 1] {
        match kv
            .scan(KeyRange::prefix(prefix), limit, ScanOrder::Forward)
            .await
        {
            Err(KvError::InvalidArgument { .. }) => {}
            other => panic!("scan with limit {limit} must be refused, got {other:?}"),
        }
    }
}

/// A range of `count` keys (more than one scan returns) pages through completely, in both
/// orders and with several page sizes.
pub async fn paging(kv: &dyn RawKv, prefix: &[u8], count: u32) {
    let pairs: Vec<_> = (0..count)
        .map(|i| (key(prefix, &i.to_be_bytes()), i.to_be_bytes().to_vec()))
        .collect();
    for chunk in pairs.chunks(2000) {
        kv.batch_put(chunk.to_vec()).await.unwrap();
    }
    let range = KeyRange::prefix(prefix);
    let fwd = scan_all(kv, range.clone(), ScanOrder::Forward)
        .await
        .unwrap();
    assert_eq!(fwd.len(), count as usize, "forward paging finds every key");
    assert!(
        fwd.iter()
            .enumerate()
            .all(|(i, (_, v))| v.as_slice() == (i as u32).to_be_bytes()),
        "forward paging returns keys in order, none repeated"
    );
    let rev = scan_all(kv, range.clone(), ScanOrder::Reverse)
        .await
        .unwrap();
    assert_eq!(rev.len(), count as usize, "reverse paging finds every key");
    assert!(
        rev.iter()
            .enumerate()
            .all(|(i, (_, v))| v.as_slice() == (count - 1 - i as u32).to_be_bytes()),
        "reverse paging returns keys in reverse order, none repeated"
    );
    for page_size in [1usize, 7, MAX_SCAN_LIMIT] {
        let sub = KeyRange::new(
            key(prefix, &10u32.to_be_bytes()),
            key(prefix, &40u32.to_be_bytes()),
        );
        for order in [ScanOrder::Forward, ScanOrder::Reverse] {
            let mut pager = RangePager::new(kv, sub.clone(), order, page_size);
            let mut seen = Vec::new();
            while let Some(page) = pager.next_page().await.unwrap() {
                assert!(page.len() <= page_size, "page larger than asked");
                seen.extend(page.into_iter().map(|(_, v)| v));
            }
            let mut expected: Vec<Vec<u8>> =
                (10..40u32).map(|i| i.to_be_bytes().to_vec()).collect();
            if order == ScanOrder::Reverse {
                expected.reverse();
            }
            assert_eq!(seen, expected, "pager {order:?} with page size {page_size}");
        }
    }
}

/// A task looping over store calls lets other tasks of its thread run: the loop below stops
/// as soon as the caller gets control back. Meaningful on a current-thread runtime, where a
/// backend whose calls never yield would run all `LIMIT` calls before anyone else.
pub async fn calls_yield_to_other_tasks(kv: Arc<dyn RawKv>, prefix: &[u8]) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    const LIMIT: u64 = 10_000;
    let k = key(prefix, b"spin");
    kv.put(k.clone(), b"v".to_vec()).await.expect("put");
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicU64::new(0));
    let spinner = {
        let (kv, stop, calls) = (kv.clone(), stop.clone(), calls.clone());
        tokio::spawn(async move {
            for _ in 0..LIMIT {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                kv.get(&k).await.expect("get");
                calls.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    tokio::task::yield_now().await;
    stop.store(true, Ordering::SeqCst);
    spinner.await.expect("spinner task");
    let calls = calls.load(Ordering::SeqCst);
    assert!(
        calls < LIMIT,
        "calls_yield_to_other_tasks: {calls} store calls in a row never yielded to other tasks"
    );
}

/// `scan_many`: each range's first `each_limit` pairs in ascending order, answers in the order
/// the ranges were given (not key order), an empty range answered empty, limits checked.
pub async fn scan_many(kv: &dyn RawKv, prefix: &[u8]) {
    let pairs: Vec<KvPair> = (0u8..30)
        .map(|i| (key(prefix, &[i / 10, i % 10]), vec![i]))
        .collect();
    kv.batch_put(pairs).await.unwrap();
    let group = |g: u8| KeyRange::prefix(&key(prefix, &[g]));
    let empty = KeyRange::prefix(&key(prefix, &[9]));
    let answers = kv
        .scan_many(vec![group(2), empty, group(0), group(1)], 4)
        .await
        .unwrap();
    let values: Vec<Vec<u8>> = answers
        .iter()
        .map(|a| a.iter().map(|(_, v)| v[0]).collect())
        .collect();
    assert_eq!(
        values,
        vec![
            vec![20, 21, 22, 23],
            vec![],
            vec![0, 1, 2, 3],
            vec![10, 11, 12, 13]
        ],
        "scan_many answers each range in the order given"
    );
    assert!(kv.scan_many(Vec::new(), 4).await.unwrap().is_empty());
    for limit in [0, MAX_SCAN_LIMIT + 1] {
        match kv.scan_many(vec![group(0)], limit).await {
            Err(KvError::InvalidArgument { .. }) => {}
            other => panic!("scan_many with limit {limit} must be refused, got {other:?}"),
        }
    }
}
