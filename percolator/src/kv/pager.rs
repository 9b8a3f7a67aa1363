//! Paging through ranges larger than one scan call may return.

use super::{KeyRange, KvError, KvPair, KvResult, RawKv, ScanOrder};
use std::future::Future;
use std::time::Duration;

/// The most pairs one [`RawKv::scan`] call may return (TiKV's raw scan limit).
pub const MAX_SCAN_LIMIT: usize = 10_240;

/// Walks a key range page by page, in either order, however many keys it holds.
pub struct RangePager<'a> {
    kv: &'a dyn RawKv,
    remaining: KeyRange,
    order: ScanOrder,
    page_size: usize,
    done: bool,
}

impl<'a> RangePager<'a> {
    /// A pager over `range` returning pages of at most `page_size` pairs
    /// (clamped to `1..=MAX_SCAN_LIMIT`).
    pub fn new(kv: &'a dyn RawKv, range: KeyRange, order: ScanOrder, page_size: usize) -> Self {
        let done = range.is_empty();
        RangePager {
            kv,
            remaining: range,
            order,
            page_size: page_size.clamp(1, MAX_SCAN_LIMIT),
            done,
        }
    }

    /// The next page, or `None` once the range is exhausted.
    pub async fn next_page(&mut self) -> KvResult<Option<Vec<KvPair>>> {
        if self.done {
            return Ok(None);
        }
        let page = self
            .kv
            .scan(self.remaining.clone(), self.page_size, self.order)
            .await?;
        if page.len() < self.page_size {
            self.done = true;
        }
        match page.last() {
            None => {
                self.done = true;
                return Ok(None);
            }
            Some((last, _)) => match self.order {
                ScanOrder::Forward => {
                    // The smallest key after `last`.
                    let mut next = last.clone();
                    next.push(0);
                    self.remaining.start = next;
                }
                ScanOrder::Reverse => self.remaining.end = Some(last.clone()),
            },
        }
        if self.remaining.is_empty() {
            self.done = true;
        }
        Ok(Some(page))
    }

    /// [`RangePager::next_page`], the scan retried with [`retry_unavailable`] (a failed
    /// scan leaves the pager where it was).
    pub async fn next_page_retrying(&mut self) -> KvResult<Option<Vec<KvPair>>> {
        let mut attempt = 0;
        loop {
            match self.next_page().await {
                Err(e) => match retry_after(&e, attempt) {
                    Some(pause) => {
                        tokio::time::sleep(pause).await;
                        attempt += 1;
                    }
                    None => return Err(e),
                },
                ok => return ok,
            }
        }
    }
}

/// Retries of a call [`retry_unavailable`] makes after the first.
pub const UNAVAILABLE_RETRIES: u32 = 8;

/// The pause before retry `attempt` (from 0) of a call that failed with `e`: doubling from
/// 20 ms (5.1 s over all [`UNAVAILABLE_RETRIES`], past a region's election or a short
/// outage) while `e` is [`KvError::Unavailable`]; `None` once retries are spent or for any
/// other error.
pub(crate) fn retry_after(e: &KvError, attempt: u32) -> Option<Duration> {
    (matches!(e, KvError::Unavailable { .. }) && attempt < UNAVAILABLE_RETRIES)
        .then(|| Duration::from_millis(20 << attempt))
}

/// Runs `call` again while it fails with [`KvError::Unavailable`] (a region error, a lost
/// reply), up to [`UNAVAILABLE_RETRIES`] times over about 5 s, for calls that are safe to
/// repeat: reads, deletes of keys nobody writes again, and CASes from bytes whose retry
/// after a lost reply reads as a lost race (GC's steps, `percolator::design::gc`,
/// "Transient failures"). GC passes make thousands of such calls, so without retries a
/// store that fails one call in a few hundred would fail almost every pass.
pub async fn retry_unavailable<T, F, Fut>(mut call: F) -> KvResult<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = KvResult<T>>,
{
    let mut attempt = 0;
    loop {
        match call().await {
            Err(e) => match retry_after(&e, attempt) {
                Some(pause) => {
                    tracing::debug!(error = %e, attempt, "store call retried");
                    tokio::time::sleep(pause).await;
                    attempt += 1;
                }
                None => return Err(e),
            },
            ok => return ok,
        }
    }
}

/// Every pair of `range` in `order`, paging with the largest page the contract allows.
pub async fn scan_all(kv: &dyn RawKv, range: KeyRange, order: ScanOrder) -> KvResult<Vec<KvPair>> {
    let mut pager = RangePager::new(kv, range, order, MAX_SCAN_LIMIT);
    let mut all = Vec::new();
    while let Some(page) = pager.next_page().await? {
        all.extend(page);
    }
    Ok(all)
}
