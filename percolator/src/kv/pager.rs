//! Paging through ranges larger than one scan call may return.

use super::{KeyRange, KvPair, KvResult, RawKv, ScanOrder};

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
