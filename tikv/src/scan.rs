//! Scans over TiKV, walking regions with PD's region bounds (`GetRegion`, `GetPrevRegion`)
//! so that a page costs O(1) RPCs whatever the number of regions in its range.
//!
//! Forward scans read the part of the range in the region holding its start (one
//! `batch_scan` of that part; the region from a cache of PD's answers) and go on to the next
//! region only while the page is not full.
//! Reverse scans walk regions down from the end of the range, with a checked `scan_reverse`
//! fast path per region and forward paging as the fallback (see the crate documentation,
//! "Scans").

use crate::retry::{Deadline, RetryCause};
use crate::{pd, TikvKv};
use percolator::kv::{KeyRange, KvError, KvPair, KvResult, MAX_SCAN_LIMIT};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tikv_client::{BoundRange, Key};

/// A key above any realistic key: reverse scans never send TiKV an empty ("unbounded")
/// upper bound, which TiKV refuses with `KeyNotInRegion` in any region but the first
/// (tikv/client-rust#512). Keys at or above it are read forward instead (normally none).
const TOP: [u8; 16] = [0xFF; 16];

impl TikvKv {
    /// Up to `limit` pairs of a non-empty `range`, ascending (see [`TikvKv::walk_forward`]).
    pub(crate) async fn scan_forward(
        &self,
        range: &KeyRange,
        limit: usize,
        deadline: Deadline,
    ) -> KvResult<Vec<KvPair>> {
        self.walk_forward(range, limit, false, deadline).await
    }

    /// Up to `limit` keys of a non-empty `range`, ascending (see [`TikvKv::walk_forward`]).
    pub(crate) async fn scan_keys_forward(
        &self,
        range: &KeyRange,
        limit: usize,
        deadline: Deadline,
    ) -> KvResult<Vec<Vec<u8>>> {
        Ok(self
            .walk_forward(range, limit, true, deadline)
            .await?
            .into_iter()
            .map(|(k, _)| k)
            .collect())
    }

    /// Up to `limit` pairs (values empty when `key_only`) of `range`, ascending, region by
    /// region: the part of the range in the region holding its start (PD's bounds), then,
    /// only while fewer than `limit` pairs were found, the part in the next region, and so
    /// on. A page inside one region costs one `RawBatchScan` (and a PD lookup when the
    /// region is not in the cache, `PdRegions::region_cached`), whatever the number of
    /// regions in the range. Stale bounds (the cache's, or PD's answer racing a split or
    /// merge) cost RPCs, never keys: each part is read by [`TikvKv::read_part`], which is
    /// exact on any layout, and the next part starts where the previous one ended (K3).
    async fn walk_forward(
        &self,
        range: &KeyRange,
        limit: usize,
        key_only: bool,
        deadline: Deadline,
    ) -> KvResult<Vec<KvPair>> {
        let mut out: Vec<KvPair> = Vec::new();
        let mut start = range.start.clone();
        let mut regions_touched = 0u32;
        loop {
            let region = self
                .call("scan", deadline, || self.pd.region_cached(&start))
                .await?;
            regions_touched += 1;
            let holds_start =
                region.start <= start && (region.end.is_empty() || start < region.end);
            let part = KeyRange {
                start: start.clone(),
                // A region that does not hold `start` (PD's answer raced a change): no clip.
                end: if holds_start {
                    clip_end(&range.end, &region.end)
                } else {
                    range.end.clone()
                },
            };
            if !part.is_empty() {
                let want = limit - out.len();
                match self.read_part(&part, want, key_only, deadline).await {
                    Ok(pairs) => out.extend(pairs),
                    Err(e) => {
                        self.pd.forget(&part.start);
                        return Err(e);
                    }
                }
            }
            if out.len() >= limit {
                break;
            }
            match part.end {
                Some(end) if Some(&end) != range.end.as_ref() => start = end,
                // The range is read to its end.
                _ => break,
            }
        }
        tracing::trace!(regions_touched, found = out.len(), "forward scan");
        Ok(out)
    }

    /// Up to `each_limit` pairs of each of `ranges` (disjoint, small: a cell's records),
    /// ascending, in the order of `ranges`, through one `batch_scan` of all of them: the
    /// client sends one `RawBatchScan` per region holding some of them, each range part with
    /// the whole limit, so each range's answers are sorted, clipped and truncated here (a
    /// range across a region boundary gets up to twice the limit, never fewer than its first
    /// `each_limit` keys).
    pub(crate) async fn scan_ranges(
        &self,
        ranges: &[KeyRange],
        each_limit: usize,
        deadline: Deadline,
    ) -> KvResult<Vec<Vec<KvPair>>> {
        let mut out: Vec<Vec<KvPair>> = vec![Vec::new(); ranges.len()];
        // Non-empty ranges by start, to find the one holding each answer.
        let mut by_start: Vec<usize> = (0..ranges.len())
            .filter(|i| !ranges[*i].is_empty())
            .collect();
        if by_start.is_empty() {
            return Ok(out);
        }
        by_start.sort_by(|a, b| ranges[*a].start.cmp(&ranges[*b].start));
        // The ranges in the last region, if several: one request of the adapter's own
        // (`crate::direct`), since tikv-client would send one per range.
        let (mut pairs, direct) = self
            .scan_last_region(ranges, &by_start, each_limit, &deadline)
            .await;
        let mut answered = vec![false; ranges.len()];
        for &i in &direct {
            answered[i] = true;
        }
        let bounds: Vec<BoundRange> = by_start
            .iter()
            .filter(|i| !answered[**i])
            .map(|i| bound(&ranges[*i]))
            .collect();
        if !bounds.is_empty() {
            let through_client = self
                .call("scan_many", deadline, || {
                    self.plain.batch_scan(bounds.clone(), each_limit as u32)
                })
                .await?;
            pairs.extend(through_client.into_iter().map(|pair| {
                let (key, value): (Key, Vec<u8>) = pair.into();
                (Vec::from(key), value)
            }));
        }
        for (key, value) in pairs {
            let at = by_start.partition_point(|i| ranges[*i].start <= key);
            if let Some(&i) = at.checked_sub(1).and_then(|at| by_start.get(at)) {
                if ranges[i].contains(&key) {
                    out[i].push((key, value));
                }
            }
        }
        for pairs in &mut out {
            pairs.sort_by(|a, b| a.0.cmp(&b.0));
            pairs.dedup_by(|a, b| a.0 == b.0);
            pairs.truncate(each_limit);
        }
        Ok(out)
    }

    /// The pairs of the ranges (indexes into `ranges`, `by_start` ascending by start) that lie
    /// in the last region, read by one `RawBatchScan` of the adapter's own
    /// ([`TikvKv::to_leader`]) when there are two or more of them; and which ranges those were
    /// (none when the request was not sent or was refused: they are then read like the
    /// others).
    async fn scan_last_region(
        &self,
        ranges: &[KeyRange],
        by_start: &[usize],
        each_limit: usize,
        deadline: &Deadline,
    ) -> (Vec<KvPair>, Vec<usize>) {
        let Some(&last) = by_start.last() else {
            return (Vec::new(), Vec::new());
        };
        if by_start.len() < 2 {
            return (Vec::new(), Vec::new());
        }
        let send = |region: pd::RegionBounds| async move {
            if !region.end.is_empty() {
                return Ok(None);
            }
            let tail: Vec<usize> = by_start
                .iter()
                .copied()
                .filter(|i| ranges[*i].start >= region.start)
                .collect();
            if tail.len() < 2 {
                return Ok(None);
            }
            let parts: Vec<&KeyRange> = tail.iter().map(|i| &ranges[*i]).collect();
            let pairs =
                crate::direct::raw_batch_scan(&self.pd, &region, &parts, each_limit as u32).await?;
            Ok(Some((pairs, tail)))
        };
        self.to_leader(&ranges[last].start, deadline, &self.direct_scans, send)
            .await
            .unwrap_or_default()
    }

    /// Up to `limit` pairs (values empty when `key_only`) of a non-empty `range`, ascending,
    /// through one `batch_scan`: the client sends one `RawBatchScan` per region of the range
    /// in its cache (one when `range` lies in one region), each with the whole limit, so the
    /// answers are sorted, clipped to the range and truncated here.
    async fn read_part(
        &self,
        range: &KeyRange,
        limit: usize,
        key_only: bool,
        deadline: Deadline,
    ) -> KvResult<Vec<KvPair>> {
        let mut pairs: Vec<KvPair> = if key_only {
            self.call("scan", deadline, || {
                self.plain.batch_scan_keys(vec![bound(range)], limit as u32)
            })
            .await?
            .into_iter()
            .map(|k| (Vec::from(k), Vec::new()))
            .collect()
        } else {
            self.call("scan", deadline, || {
                self.plain.batch_scan(vec![bound(range)], limit as u32)
            })
            .await?
            .into_iter()
            .map(|p| {
                let (k, v): (Key, Vec<u8>) = p.into();
                (Vec::from(k), v)
            })
            .collect()
        };
        pairs.retain(|(k, _)| range.contains(k));
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        pairs.dedup_by(|a, b| a.0 == b.0);
        pairs.truncate(limit);
        Ok(pairs)
    }

    /// The last `limit` pairs of a non-empty `range`, descending.
    ///
    /// With [`TikvConfig::reverse_scan_fast_path`] (the default), regions are walked from the
    /// end of the range with PD's region boundaries (`GetRegion`, then `GetPrevRegion`), and
    /// each region's part of what is left of the range is read by
    /// [`TikvKv::scan_reverse_in_region`] until `limit` pairs are found: O(limit + regions
    /// touched). What is left is `[range.start, upper)`, `upper` moving down to the start of
    /// each part read, so that a region returned by PD after a merge or split (which may
    /// reach above `upper`) is never read twice. A part whose answer cannot be trusted (the
    /// client's region cache disagrees with PD mid-split) is read by forward paging, which
    /// costs that part only and is counted in [`TikvKv::reverse_scan_fallbacks`]. Without
    /// the fast path, the whole range is paged forward.
    ///
    /// [`TikvConfig::reverse_scan_fast_path`]: crate::TikvConfig::reverse_scan_fast_path
    pub(crate) async fn scan_reverse(
        &self,
        range: &KeyRange,
        limit: usize,
        deadline: Deadline,
    ) -> KvResult<Vec<KvPair>> {
        if !self.config.reverse_scan_fast_path {
            return self.scan_reverse_by_paging(range, limit, deadline).await;
        }
        let mut out: Vec<KvPair> = Vec::new();
        // Exclusive upper bound of what is left to read (`None`: the end of the key space).
        let mut upper = range.end.clone();
        let mut region = match &upper {
            Some(end) => self.region_below(end, deadline).await?,
            None => Some(self.last_region(deadline).await?),
        };
        let mut regions_touched = 0u32;
        while let Some(r) = region {
            regions_touched += 1;
            if upper
                .as_ref()
                .is_some_and(|u| r.start.as_slice() >= u.as_slice())
            {
                // PD named a region that is not below what is left (its answers raced a
                // layout change twice): read the rest forward.
                tracing::debug!(?r, ?upper, "reverse scan: region above the rest; paging it");
                let rest = KeyRange {
                    start: range.start.clone(),
                    end: upper.clone(),
                };
                if !rest.is_empty() {
                    let want = limit - out.len();
                    out.extend(self.scan_reverse_by_paging(&rest, want, deadline).await?);
                }
                break;
            }
            let part = KeyRange {
                start: range.start.clone().max(r.start.clone()),
                end: clip_end(&upper, &r.end),
            };
            for piece in below_top(&part) {
                if out.len() >= limit || piece.is_empty() {
                    continue;
                }
                let want = limit - out.len();
                let pairs = match self.scan_reverse_in_region(&piece, want, deadline).await? {
                    Some(pairs) => pairs,
                    None => {
                        self.reverse_fallbacks.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(
                            ?piece,
                            want,
                            "reverse scan of a region falls back to forward paging"
                        );
                        self.scan_reverse_by_paging(&piece, want, deadline).await?
                    }
                };
                out.extend(pairs);
            }
            if out.len() >= limit || part.start <= range.start {
                break;
            }
            upper = Some(part.start.clone());
            let start = r.start.clone();
            region = self
                .call("scan", deadline, || self.pd.prev_region(&start))
                .await?;
            // The layout changed between two lookups (a merge moved the holder of `start`
            // down; `None` when that holder is now the first region, though keys below
            // `start` remain in it): ask again for the region below.
            if region.as_ref().is_none_or(|prev| prev.end != start) {
                region = self.region_below(&start, deadline).await?;
            }
        }
        tracing::trace!(regions_touched, found = out.len(), "reverse scan");
        out.truncate(limit);
        Ok(out)
    }

    /// The region holding the keys just below `key` (`None`: `key` is empty, so no key is
    /// below it).
    ///
    /// PD answers `GetRegion` and `GetPrevRegion` one at a time, and a merge or split can
    /// fall between them. The region before the holder then no longer ends at `key` (a merge
    /// made the holder start lower), or there is none (the merged holder is now the first
    /// region); reading that region alone would skip the keys between its end and `key`.
    /// So the region before is trusted only when it ends exactly at `key`, and the pair of
    /// questions is asked again otherwise: at once the first time (a merge is over), then
    /// after the adapter's backoff (PD may not know the region below yet), until the call's
    /// deadline. Each repeat counts as a region retry ([`TikvKv::retry_counts`]).
    async fn region_below(
        &self,
        key: &[u8],
        deadline: Deadline,
    ) -> KvResult<Option<pd::RegionBounds>> {
        if key.is_empty() {
            return Ok(None);
        }
        let mut backoff: Option<Duration> = None;
        loop {
            let holder = self.call("scan", deadline, || self.pd.region(key)).await?;
            if holder.start.as_slice() < key {
                return Ok(Some(holder));
            }
            let prev = self
                .call("scan", deadline, || self.pd.prev_region(key))
                .await?;
            match prev {
                Some(prev) if prev.end == key => return Ok(Some(prev)),
                raced => tracing::debug!(
                    ?holder,
                    ?raced,
                    "reverse scan: PD's layout changed between two answers; asking again"
                ),
            }
            self.retries.count(RetryCause::Region);
            if let Some(step) = backoff {
                // Equal jitter, as the adapter's other retries.
                let delay = step.mul_f64(0.5 + rand::random::<f64>() * 0.5);
                tokio::time::sleep(delay.min(deadline.remaining())).await;
            }
            let base = self.config.retry_base_delay.max(Duration::from_micros(100));
            backoff = Some(backoff.map_or(base, |step| {
                (step * 2).min(self.config.retry_max_delay.max(step))
            }));
        }
    }

    /// The last region of the key space: the one holding a key above any realistic key,
    /// walking forward should a split key be even higher.
    async fn last_region(&self, deadline: Deadline) -> KvResult<pd::RegionBounds> {
        let mut region = self.call("scan", deadline, || self.pd.region(&TOP)).await?;
        while !region.end.is_empty() {
            let next = region.end.clone();
            region = self
                .call("scan", deadline, || self.pd.region(&next))
                .await?;
        }
        Ok(region)
    }

    /// The last `limit` pairs of `range`, which lies inside one region, descending; `None`
    /// when the client's answer cannot be trusted.
    ///
    /// A key-only forward probe of `limit` keys comes first: if the range holds fewer, those
    /// are the answer (values by one `batch_get`). Otherwise the range holds at least `limit`
    /// keys, so `RawClient::scan_reverse` fills its limit from one region and stops before
    /// it can loop around the last region; its answer is accepted only if it is exactly
    /// `limit` keys, strictly descending, inside the range, with no key of the range above
    /// the first one (which rules out an answer from another region). A range without an
    /// upper bound (keys from [`TOP`] on) is never sent to `scan_reverse`: `None`.
    async fn scan_reverse_in_region(
        &self,
        range: &KeyRange,
        limit: usize,
        deadline: Deadline,
    ) -> KvResult<Option<Vec<KvPair>>> {
        let probe = self.read_part(range, limit, true, deadline).await?;
        if probe.len() < limit {
            // Every key of the range: one deleted between the probe and the read is gone.
            let keys: Vec<Vec<u8>> = probe.into_iter().rev().map(|(k, _)| k).collect();
            let values = self.get_many(&keys, deadline).await?;
            return Ok(Some(present(keys, values)));
        }
        if range.end.is_none() {
            // No upper bound inside the region can be sent (see `TOP`).
            return Ok(None);
        }
        self.try_client_scan_reverse(range, limit, deadline).await
    }

    /// `RawClient::scan_reverse` on a range of one region known to hold at least `limit` keys;
    /// `None` when its answer cannot be trusted.
    async fn try_client_scan_reverse(
        &self,
        range: &KeyRange,
        limit: usize,
        deadline: Deadline,
    ) -> KvResult<Option<Vec<KvPair>>> {
        // `scan_reverse` retries no gRPC error itself (and gives up on region errors after
        // its fixed store backoff): lost replies are retried here like any other read.
        let pairs = self
            .call("scan", deadline, || async {
                let call = self.plain.scan_reverse(bound(range), limit as u32);
                // Should a concurrent delete leave fewer than `limit` keys, the client loops
                // around the last region; stop it and fall back.
                match tokio::time::timeout(self.config.rpc_timeout * 2, call).await {
                    Err(_) => Ok(None),
                    // The region split after PD's answer: the range's upper bound is outside
                    // the region the client routes to, and repeating cannot help.
                    Ok(Err(tikv_client::Error::RegionError(e)))
                        if e.key_not_in_region.is_some() =>
                    {
                        Ok(None)
                    }
                    Ok(result) => result.map(Some),
                }
            })
            .await?;
        let Some(pairs) = pairs else {
            return Ok(None);
        };
        let pairs: Vec<KvPair> = pairs
            .into_iter()
            .map(|p| {
                let (k, v): (Key, Vec<u8>) = p.into();
                (Vec::from(k), v)
            })
            .collect();
        let plausible = pairs.len() == limit
            && pairs.iter().all(|(k, _)| range.contains(k))
            && pairs.windows(2).all(|w| w[0].0 > w[1].0);
        if !plausible {
            return Ok(None);
        }
        let mut above_start = pairs[0].0.clone();
        above_start.push(0);
        let above = KeyRange {
            start: above_start,
            end: range.end.clone(),
        };
        if !above.is_empty() && !self.read_part(&above, 1, true, deadline).await?.is_empty() {
            return Ok(None);
        }
        Ok(Some(pairs))
    }

    /// The last `limit` pairs of a non-empty `range`, descending, by forward key-only pages
    /// (keeping the last `limit` keys) and one `batch_get` for their values. Correct on any
    /// region layout; O(range size).
    async fn scan_reverse_by_paging(
        &self,
        range: &KeyRange,
        limit: usize,
        deadline: Deadline,
    ) -> KvResult<Vec<KvPair>> {
        // A key deleted between the key scan and the value read would shorten a full page
        // (and a short page means "range exhausted" to pagers): read the range again, until
        // the call's deadline.
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let mut last: VecDeque<Vec<u8>> = VecDeque::with_capacity(limit);
            let mut rest = range.clone();
            loop {
                let page = self
                    .scan_keys_forward(&rest, MAX_SCAN_LIMIT, deadline)
                    .await?;
                let full = page.len() == MAX_SCAN_LIMIT;
                if let Some(k) = page.last() {
                    let mut next = k.clone();
                    next.push(0);
                    rest.start = next;
                }
                for k in page {
                    if last.len() == limit {
                        last.pop_front();
                    }
                    last.push_back(k);
                }
                if !full || rest.is_empty() {
                    break;
                }
            }
            let keys: Vec<Vec<u8>> = last.into_iter().rev().collect();
            let values = self.get_many(&keys, deadline).await?;
            // Fewer keys than the limit: these were all the range held, and one deleted
            // since is simply gone. A full window missing a key may hide one below it.
            if keys.len() < limit || values.iter().all(Option::is_some) {
                return Ok(present(keys, values));
            }
            if deadline.remaining().is_zero() {
                return Err(KvError::Unavailable {
                    op: "scan",
                    message: format!(
                        "a reverse scan's keys were deleted before their values were read, \
                         {attempts} times: no complete answer before the deadline"
                    ),
                });
            }
        }
    }

    /// How many reverse scans fell back from the fast path to forward paging (a health
    /// figure: it stays 0 on a healthy cluster without concurrent deletes in scanned ranges).
    pub fn reverse_scan_fallbacks(&self) -> u64 {
        self.reverse_fallbacks.load(Ordering::Relaxed)
    }

    /// `scan_many`s whose ranges in the last region went as one `RawBatchScan` of the
    /// adapter's own (`crate::direct`), and those whose request the store refused (read
    /// through tikv-client instead: a stale cached region, a moved leader).
    pub fn direct_batch_scans(&self) -> (u64, u64) {
        self.direct_scans.snapshot()
    }

    /// CASes the adapter sent to their region's leader itself (`crate::direct`), and those
    /// it sent through tikv-client after the store refused them, their reply was lost or
    /// their region could not be had.
    pub fn direct_compare_and_swaps(&self) -> (u64, u64) {
        self.direct_cas.snapshot()
    }

    /// Puts and batch puts (of one mode) the adapter sent to their region's leader as one
    /// request of its own, and those it wrote through tikv-client after a refusal.
    pub fn direct_puts(&self) -> (u64, u64) {
        self.direct_puts.snapshot()
    }

    /// Gets and batch gets the adapter sent to their region's leader as one request of its
    /// own, and those it read through tikv-client after a refusal.
    pub fn direct_reads(&self) -> (u64, u64) {
        self.direct_reads.snapshot()
    }
}

/// The pairs of `keys` whose value was found (`values` in the same order).
fn present(keys: Vec<Vec<u8>>, values: Vec<Option<Vec<u8>>>) -> Vec<KvPair> {
    keys.into_iter()
        .zip(values)
        .filter_map(|(k, v)| v.map(|v| (k, v)))
        .collect()
}

/// The lower of a range's exclusive end (`None`: unbounded) and a region's end (empty:
/// unbounded).
fn clip_end(end: &Option<Vec<u8>>, region_end: &[u8]) -> Option<Vec<u8>> {
    match (end, region_end.is_empty()) {
        (Some(end), false) => Some(end.clone().min(region_end.to_vec())),
        (Some(end), true) => Some(end.clone()),
        (None, false) => Some(region_end.to_vec()),
        (None, true) => None,
    }
}

/// `part` in the order a reverse scan reads it: without an upper bound, its keys from
/// [`TOP`] on first, then those below; else `part` itself.
fn below_top(part: &KeyRange) -> Vec<KeyRange> {
    if part.end.is_some() || part.start.as_slice() >= TOP.as_slice() {
        return vec![part.clone()];
    }
    vec![
        KeyRange::from(TOP.to_vec()),
        KeyRange::new(part.start.clone(), TOP.to_vec()),
    ]
}

pub(crate) fn bound(range: &KeyRange) -> BoundRange {
    BoundRange::from((range.start.clone(), range.end.clone()))
}
