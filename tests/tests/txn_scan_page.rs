//! `Transaction::scan_page`: paging a read-only snapshot gives exactly what one scan gives.

mod common;
use common::*;
use percolator::txn::TxnError;
use percolator::Cell;
use rand::Rng;

/// Every page of `table`'s rows `[start, end)` in `snap`, `limit` cells a page, until the
/// first page that is not full (the page contract: full unless the range is exhausted).
async fn page_through(
    snap: &percolator::Transaction,
    table: &[u8],
    start: &[u8],
    end: Option<&[u8]>,
    limit: usize,
) -> Vec<(Cell, Vec<u8>)> {
    let mut paged = Vec::new();
    let mut after: Option<Cell> = None;
    loop {
        let page = snap
            .scan_page(table, start, end, after.as_ref(), limit)
            .await
            .unwrap();
        assert!(page.len() <= limit);
        let full = page.len() == limit;
        after = page.last().map(|(cell, _)| cell.clone()).or(after);
        paged.extend(page);
        if !full {
            return paged;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_concatenate_to_the_scan() {
    let c = memory_client();
    let mut rng = rand::thread_rng();
    for chunk in 0..5 {
        let t = c.begin().await.unwrap();
        for row in 0..100 {
            for col in ["a", "b", "c"] {
                let cell = Cell::new("p", format!("r{:04}", chunk * 100 + row), col);
                if rng.gen_bool(0.2) {
                    t.delete(cell);
                } else {
                    t.set(cell, format!("{chunk}-{row}-{col}"));
                }
            }
        }
        // Another table around it, which no page may include.
        t.set(Cell::new("o", "r0001", "a"), "other");
        t.set(Cell::new("q", "r0001", "a"), "other");
        t.commit().await.unwrap();
    }
    let ts = c.oracle().get_timestamp().await.unwrap();
    let whole = c.snapshot_at(ts).await.unwrap();
    let expected = whole.scan(b"p", b"r0100", Some(b"r0400")).await.unwrap();
    assert!(expected.len() > 500);
    for limit in [1, 7, 300, 10_000] {
        let snap = c.snapshot_at(ts).await.unwrap();
        let paged = page_through(&snap, b"p", b"r0100", Some(b"r0400"), limit).await;
        assert_eq!(paged, expected, "limit {limit}");
    }
    // A transaction that may write cannot page.
    let t = c.begin().await.unwrap();
    assert!(matches!(
        t.scan_page(b"p", b"", None, None, 10).await,
        Err(TxnError::InvalidArgument(_))
    ));
}

/// Pages over write-once cells written through records and through heads (a transaction of
/// write-once cells only writes its first through its head), with puts and deletes mixed on
/// both paths: a page is full unless the range is exhausted, so paging until a short page
/// gives exactly the scan, for every page size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_over_heads_and_records_are_full_until_the_end() {
    use rand::SeedableRng;
    for seed in 0..12u64 {
        let c = memory_client();
        c.write_once_column("m", "w");
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let cell = |row: u64| Cell::new("m", format!("r{row:03}"), "w");
        for round in 0..30 {
            let t = c.begin().await.unwrap();
            let ordinary = rng.gen_bool(0.5);
            if ordinary {
                t.set(Cell::new("o", "offset", "v"), round.to_string());
            }
            for _ in 0..rng.gen_range(1..4) {
                let row = rng.gen_range(0..20);
                if rng.gen_bool(0.35) {
                    t.delete(cell(row));
                } else {
                    t.set(cell(row), format!("{round}-{row}"));
                }
            }
            t.commit().await.unwrap();
        }
        let ts = c.oracle().get_timestamp().await.unwrap();
        let expected = c
            .snapshot_at(ts)
            .await
            .unwrap()
            .scan(b"m", b"", None)
            .await
            .unwrap();
        for limit in [1, 2, 3, 5, 50] {
            let snap = c.snapshot_at(ts).await.unwrap();
            let paged = page_through(&snap, b"m", b"", None, limit).await;
            assert_eq!(paged, expected, "seed {seed}, limit {limit}");
        }
    }
}
