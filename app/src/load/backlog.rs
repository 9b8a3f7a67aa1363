//! Backpressure of the loader: it waits while the notification backlog (notify keys not yet
//! handled by the observers) is above a bound, so that latency measures the system,
//! not a queue growing without bound in front of it (and memory stays bounded).
//!
//! The backlog is counted in the store, so it works whether the workers run in this process
//! or in others: a scan of the notify space from the notify floor (the floor keeps the keys
//! the scan walks over to about the live ones), up to twice the bound. A count walks that
//! many keys, so it is made rarely; between counts the loader follows the backlog by counters
//! (`percolator::design::notify`, "The backlog counters"):
//! - the *estimate* is the last count, plus the notify keys the loader's client has put since
//!   and minus those it has removed ([`percolator::Client::notify_counts`], exact, in memory:
//!   workers sharing the loader's client, as in `app::run` and `photon demo`), plus and minus
//!   the same of every other client, which add theirs to a record in the store within about
//!   50 ms ([`percolator::Client::shared_notify_counts`], read at most every
//!   [`SHARED_EVERY`]: workers and loaders in other processes). What a client that does not
//!   publish moves is missed until the next count, and so are, rarely, removals of keys
//!   already gone (a hint naming a key that was moved above the notify floor);
//! - the loader passes without counting while the estimate is at most the bound and the
//!   count younger than [`REFRESH_EVERY`] (the refresh catches what the estimate misses);
//! - once the estimate is above the bound, the loader waits until at most half the bound is
//!   left (hysteresis: every wait is followed by at least half a bound of notifications);
//! - while it waits, it looks at the estimate every [`ESTIMATE_EVERY`] and goes on as soon
//!   as it is at most half the bound. It counts the store after a pause that doubles from
//!   [`FIRST_RECHECK`] to [`MAX_RECHECK`], deferred while the estimate keeps reaching new
//!   lows (workers are draining it) but never beyond [`MAX_RECHECK`] after the last count,
//!   and made only [`MAX_RECHECK`] after it once other clients have published removals
//!   since (their drains are in the estimate; in a split deployment a count every 100-300
//!   ms of waiting was a scan of up to twice the bound each time);
//! - after [`LONG_WAIT`] it goes on at the bound itself (estimate or count), so
//!   notifications that never drain (an unobserved column, keys backing off) stall it only
//!   above the bound;
//! - a count at or below twice the bound is exact, and the estimate follows it; above that
//!   the estimate is unknown until a count comes back lower.
//!
//! Measured (`photon demo --clicks 200000`, 2026-11-26): counting in the store while the
//! loader waited (150 counts of up to 10,000 keys, most of the walk delete markers) took 8 %
//! of the process's CPU; following the estimate leaves about a count every two seconds.

use percolator::kv::{RangePager, ScanOrder, MAX_SCAN_LIMIT};
use percolator::txn::{NotifyCounts, SharedNotifyCounts};
use percolator::{Client, TxnError};
use std::time::Duration;
// tokio's clock (the same as std's unless a test pauses it).
use tokio::time::Instant;

/// How long a count stands before the loader counts again anyway.
pub const REFRESH_EVERY: Duration = Duration::from_secs(2);

/// The first wait before the loader counts again while it waits: twice [`SHARED_EVERY`], so
/// that a drain by workers elsewhere, published within about 50 ms and read within
/// [`SHARED_EVERY`], shows as a new low (which defers the count) before it is due.
pub const FIRST_RECHECK: Duration = Duration::from_millis(100);

/// The longest wait between two counts while the loader waits.
pub const MAX_RECHECK: Duration = Duration::from_secs(2);

/// After waiting this long, the loader goes on at the bound rather than half of it.
pub const LONG_WAIT: Duration = Duration::from_millis(750);

/// How often a waiting loader looks at its estimate.
pub const ESTIMATE_EVERY: Duration = Duration::from_millis(5);

/// How often the loader reads the other clients' counters from the store (one get).
pub const SHARED_EVERY: Duration = Duration::from_millis(50);

/// How long the loader waits before it warns that no worker may be running.
const STALLED_AFTER: Duration = Duration::from_secs(10);

/// The last count of the store, when it was made, and the counters then.
struct Estimate {
    at: Option<Instant>,
    /// The count; `None` if it stopped at its limit (more than twice the bound waiting).
    count: Option<usize>,
    /// This client's counters at the count (puts read before the scan, removals after).
    own: NotifyCounts,
    /// The other clients' published counters at the count (same order); `None` if they
    /// could not be read then.
    others: Option<NotifyCounts>,
    /// The other clients' counters as last read, and when.
    others_now: NotifyCounts,
    others_read: Option<Instant>,
}

impl Estimate {
    /// An estimate standing for `count` from now on.
    fn at_count(count: Option<usize>, own: NotifyCounts, others: Option<NotifyCounts>) -> Self {
        Estimate {
            at: Some(Instant::now()),
            count,
            own,
            others,
            others_now: others.unwrap_or_default(),
            others_read: Some(Instant::now()),
        }
    }

    /// Whether other clients have published removals since the count.
    fn others_removed_since_count(&self) -> bool {
        self.others
            .is_some_and(|at_count| self.others_now.removed > at_count.removed)
    }

    /// The backlog as the count and the puts and removals since moved it; `None` while the
    /// count is not known (it stopped at its limit).
    fn now(&self, client: &Client) -> Option<usize> {
        let (mut put, mut removed) = self.own.since(client.notify_counts());
        if let Some(others) = self.others {
            let (others_put, others_removed) = others.since(self.others_now);
            put = put.saturating_add(others_put);
            removed = removed.saturating_add(others_removed);
        }
        let put = usize::try_from(put).unwrap_or(usize::MAX);
        let removed = usize::try_from(removed).unwrap_or(usize::MAX);
        Some(self.count?.saturating_add(put).saturating_sub(removed))
    }
}

/// The gate a loader passes before each batch.
pub struct Backlog {
    client: Client,
    bound: usize,
    estimate: tokio::sync::Mutex<Estimate>,
    counts: std::sync::atomic::AtomicU64,
}

impl Backlog {
    /// A gate holding the loader while more than `bound` notifications wait. `client` is
    /// the one the loader commits with (its notify counters follow the backlog).
    pub fn new(client: Client, bound: usize) -> Self {
        Backlog {
            client,
            bound,
            estimate: tokio::sync::Mutex::new(Estimate {
                at: None,
                count: None,
                own: NotifyCounts::default(),
                others: None,
                others_now: NotifyCounts::default(),
                others_read: None,
            }),
            counts: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The level the loader waits for once the backlog went above the bound.
    fn resume_at(&self) -> usize {
        self.bound / 2
    }

    /// How many times the backlog was counted in the store (each a scan of up to twice the
    /// bound).
    pub fn counts(&self) -> u64 {
        self.counts.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The notify keys in the store, counted up to `limit` (in pages of at most the store's
    /// scan limit).
    pub async fn count(&self, limit: usize) -> Result<usize, TxnError> {
        self.counts
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let floor = self.client.notify_floor().await?;
        let range = self.client.codec().notify_from(floor);
        let page = limit.clamp(1, MAX_SCAN_LIMIT);
        let mut pager = RangePager::new(
            self.client.store().as_ref(),
            range,
            ScanOrder::Forward,
            page,
        );
        let mut count = 0;
        while count < limit {
            let Some(keys) = pager.next_page().await? else {
                break;
            };
            count += keys.len();
        }
        Ok(count)
    }

    /// How far a count walks: twice the bound (a loader that waits at the bound leaves
    /// the backlog a little above it, where the count must still be exact).
    fn count_limit(&self) -> usize {
        self.bound.saturating_mul(2)
    }

    /// Counts the store into `estimate` (`None` above [`Backlog::count_limit`]): the count,
    /// its time, and the counters: puts read before the scan and removals after it, so a
    /// key put or removed while the scan runs is counted twice, never missed (the estimate
    /// errs high, which costs a count, not a backlog above the bound).
    async fn recount(&self, estimate: &mut Estimate) -> Result<Option<usize>, TxnError> {
        let put = self.client.notify_counts().put;
        let others_before = self.read_others().await;
        let limit = self.count_limit();
        let count = self.count(limit.saturating_add(1)).await?;
        let removed = self.client.notify_counts().removed;
        let others_after = self.read_others().await;
        let others = match (others_before, others_after) {
            (Some(before), Some(after)) => Some(NotifyCounts {
                put: before.put,
                removed: after.removed,
            }),
            _ => None,
        };
        *estimate = Estimate::at_count(
            (count <= limit).then_some(count),
            NotifyCounts { put, removed },
            others,
        );
        if let Some(after) = others_after {
            estimate.others_now = after;
        }
        Ok(estimate.count)
    }

    /// The other clients' published counters, `None` if the store could not say.
    async fn read_others(&self) -> Option<NotifyCounts> {
        match self.client.shared_notify_counts().await {
            Ok(shared) => Some(SharedNotifyCounts::others(&shared)),
            Err(error) => {
                tracing::debug!(%error, "reading the shared notify counts failed");
                None
            }
        }
    }

    /// Reads the other clients' counters into `estimate` if the last read is older than
    /// [`SHARED_EVERY`].
    async fn follow_others(&self, estimate: &mut Estimate) {
        if estimate.others.is_none()
            || estimate
                .others_read
                .is_some_and(|read| read.elapsed() < SHARED_EVERY)
        {
            return;
        }
        estimate.others_read = Some(Instant::now());
        if let Some(others) = self.read_others().await {
            estimate.others_now = others;
        }
    }

    /// Waits until the loader may commit another batch (see the module's doc), adding one to
    /// `waits` when it has to wait. A failed count lets the loader through (backpressure is
    /// a pace, not a guard).
    pub async fn wait_below(&self, waits: &std::sync::atomic::AtomicU64) {
        let mut estimate = self.estimate.lock().await;
        let fresh = estimate.at.is_some_and(|at| at.elapsed() < REFRESH_EVERY);
        if fresh {
            self.follow_others(&mut estimate).await;
        }
        if fresh && estimate.now(&self.client).is_some_and(|n| n <= self.bound) {
            return;
        }
        if !fresh {
            // A periodic refresh: on below the bound, as the estimate would have.
            match self.recount(&mut estimate).await {
                Ok(Some(count)) if count <= self.bound => return,
                Ok(_) => {}
                Err(e) => return self.let_through(&mut estimate, e),
            }
        }
        // Above the bound: wait (other files of this loader queue behind the lock) until at
        // most `resume_at` are left.
        waits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::debug!(
            bound = self.bound,
            "notification backlog above the bound; loader waits for the observers"
        );
        let since = Instant::now();
        let mut warned = false;
        let mut pause = FIRST_RECHECK;
        let mut counted_at = Instant::now();
        let mut next_count = counted_at + pause;
        let mut lowest = estimate.now(&self.client);
        loop {
            // Half the bound while the observers drain; the bound itself once the wait is
            // long (a backlog that stopped falling above half the bound).
            let resume_at = if since.elapsed() >= LONG_WAIT {
                self.bound
            } else {
                self.resume_at()
            };
            self.follow_others(&mut estimate).await;
            let now = estimate.now(&self.client);
            if now.is_some_and(|n| n <= resume_at) {
                // Workers took it down (the count stands as it was).
                tracing::debug!(
                    waited_ms = since.elapsed().as_millis() as u64,
                    estimate = now,
                    counts = self.counts(),
                    "the loader goes on: the backlog's estimate fell"
                );
                return;
            }
            if now.is_some_and(|n| lowest.is_none_or(|low| n < low)) {
                // A new low: workers are draining it, so the count waits, but never longer
                // than MAX_RECHECK after the last.
                lowest = now;
                next_count = (Instant::now() + pause).min(counted_at + MAX_RECHECK);
            }
            if estimate.others_removed_since_count() {
                // Workers elsewhere publish their drains: the estimate follows them, and the
                // count (a scan of up to twice the bound) is only the periodic correction.
                next_count = next_count.max(counted_at + MAX_RECHECK);
            }
            if Instant::now() >= next_count {
                match self.recount(&mut estimate).await {
                    Ok(Some(count)) if count <= resume_at => {
                        tracing::debug!(
                            waited_ms = since.elapsed().as_millis() as u64,
                            count,
                            estimate_before = now,
                            counts = self.counts(),
                            "the loader goes on: a count of the backlog fell"
                        );
                        return;
                    }
                    Ok(count) => tracing::debug!(
                        count,
                        estimate_before = now,
                        "the loader counted the backlog and waits on"
                    ),
                    Err(e) => return self.let_through(&mut estimate, e),
                }
                lowest = estimate.now(&self.client);
                pause = (pause * 2).min(MAX_RECHECK);
                counted_at = Instant::now();
                next_count = counted_at + pause;
            }
            if !warned && since.elapsed() >= STALLED_AFTER {
                warned = true;
                tracing::warn!(
                    bound = self.bound,
                    "the loader has waited {}s for the observers to take the notification backlog \
                     below --max-backlog: is a worker running? (--max-backlog 0 loads without \
                     waiting)",
                    STALLED_AFTER.as_secs()
                );
            }
            tokio::time::sleep(ESTIMATE_EVERY).await;
        }
    }

    /// A failed count: warn and let the loader on until the next refresh.
    fn let_through(&self, estimate: &mut Estimate, error: TxnError) {
        tracing::warn!(error = %error, "counting the notification backlog failed");
        *estimate = Estimate::at_count(Some(0), self.client.notify_counts(), None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use percolator::kv::MemoryKv;
    use percolator::ts::LocalClock;
    use percolator::Cell;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    const BOUND: usize = 10;

    /// A client on `kv` that writes an observed column (and publishes its notify counts).
    fn client_on(kv: &Arc<MemoryKv>) -> Client {
        let client = Client::new(kv.clone(), Arc::new(LocalClock::new()));
        client.observe_column("t", "c");
        client
    }

    /// A client on `kv` that writes an observed column and never publishes its counts.
    fn silent_client_on(kv: &Arc<MemoryKv>) -> Client {
        let config = percolator::ClientConfig {
            publish_notify_counts: None,
            ..percolator::ClientConfig::default()
        };
        let client = Client::with_config(kv.clone(), Arc::new(LocalClock::new()), config);
        client.observe_column("t", "c");
        client
    }

    /// A loader waiting at `backlog` in a task of its own; the task ends when it may go on,
    /// with the time it went on.
    fn spawn_waiter(
        backlog: &Arc<Backlog>,
        waits: &Arc<AtomicU64>,
    ) -> tokio::task::JoinHandle<Instant> {
        let (backlog, waits) = (backlog.clone(), waits.clone());
        tokio::spawn(async move {
            backlog.wait_below(&waits).await;
            Instant::now()
        })
    }

    /// Puts `n` new notifications through `client`; returns their keys.
    async fn notify(client: &Client, n: usize) -> Vec<Vec<u8>> {
        static ROWS: AtomicU64 = AtomicU64::new(0);
        let entries: Vec<_> = (0..n)
            .map(|_| {
                let row = ROWS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                (Cell::new("t", format!("r{row}"), "c"), 7, b"x".to_vec())
            })
            .collect();
        let bucket = client.put_notifications(&entries).await.expect("put");
        entries
            .iter()
            .map(|(cell, ts, _)| client.codec().notify(cell, *ts, bucket))
            .collect()
    }

    /// A loader above the bound waits; once workers sharing its client remove keys down to
    /// half the bound it goes on at once, from memory, without counting the store again.
    #[tokio::test(start_paused = true)]
    async fn a_loader_resumes_when_its_own_workers_drain_without_a_count() {
        let kv = Arc::new(MemoryKv::new());
        let client = client_on(&kv);
        let backlog = Arc::new(Backlog::new(client.clone(), BOUND));
        let waits = Arc::new(AtomicU64::new(0));
        backlog.wait_below(&waits).await;
        assert_eq!(backlog.counts(), 1, "the first call counts");
        let keys = notify(&client, BOUND + 1).await;
        let waiter = spawn_waiter(&backlog, &waits);
        // Nothing drains: counts at 100 and 300 ms (the pauses double); the next would be at
        // 700 (before LONG_WAIT, after which the bound itself lets the loader on).
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(!waiter.is_finished(), "above the bound the loader waits");
        assert_eq!(waits.load(std::sync::atomic::Ordering::Relaxed), 1);
        let counted = backlog.counts();
        assert_eq!(counted, 3, "the first count, then 100 and 300 ms");
        // Down to one above half the bound: still waiting.
        let (first, rest) = keys.split_at(BOUND - BOUND / 2);
        client
            .remove_notify_keys(first.to_vec())
            .await
            .expect("remove");
        tokio::time::sleep(ESTIMATE_EVERY * 4).await;
        assert!(!waiter.is_finished(), "six left, above half the bound");
        client
            .remove_notify_keys(rest[..1].to_vec())
            .await
            .expect("remove");
        tokio::time::sleep(ESTIMATE_EVERY * 4).await;
        assert!(waiter.is_finished(), "five left: the loader goes on");
        assert_eq!(
            backlog.counts(),
            counted,
            "no count of the store was needed"
        );
        // It passes at once while the estimate is at most the bound and the count fresh.
        notify(&client, 2).await;
        backlog.wait_below(&waits).await;
        assert_eq!(backlog.counts(), counted);
        // A count REFRESH_EVERY old is refreshed.
        tokio::time::sleep(REFRESH_EVERY).await;
        backlog.wait_below(&waits).await;
        assert_eq!(backlog.counts(), counted + 1, "a refresh");
        assert_eq!(waits.load(std::sync::atomic::Ordering::Relaxed), 1);
    }

    /// Keys that never drain hold the backlog between half the bound and the bound while the
    /// workers of this process keep putting and removing others (an observer that notifies
    /// again): the estimate dips all the time, yet after [`LONG_WAIT`] the loader goes on at
    /// the bound.
    #[tokio::test(start_paused = true)]
    async fn churn_does_not_hold_a_loader_that_is_at_the_bound() {
        let kv = Arc::new(MemoryKv::new());
        let client = client_on(&kv);
        let backlog = Arc::new(Backlog::new(client.clone(), BOUND));
        let waits = Arc::new(AtomicU64::new(0));
        backlog.wait_below(&waits).await;
        let keys = notify(&client, BOUND + 1).await;
        let start = Instant::now();
        let waiter = spawn_waiter(&backlog, &waits);
        tokio::time::sleep(Duration::from_millis(20)).await;
        // Three drain; eight stay (above half the bound, at most the bound).
        client
            .remove_notify_keys(keys[..3].to_vec())
            .await
            .expect("remove");
        let churn = tokio::spawn({
            let client = client.clone();
            async move {
                loop {
                    let key = notify(&client, 1).await;
                    tokio::time::sleep(ESTIMATE_EVERY / 2).await;
                    client.remove_notify_keys(key).await.expect("remove");
                    tokio::time::sleep(ESTIMATE_EVERY / 2).await;
                }
            }
        });
        let resumed = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the loader goes on")
            .expect("waiter");
        churn.abort();
        assert!(resumed - start >= LONG_WAIT, "not before the long wait");
        assert!(
            resumed - start <= LONG_WAIT + ESTIMATE_EVERY * 2,
            "at the long wait, from the estimate"
        );
    }

    /// A bound above the store's scan limit is counted in pages: the loader passes below it
    /// and waits above it (a single scan with the bound as its limit is refused).
    #[tokio::test(start_paused = true)]
    async fn a_bound_above_the_scan_limit_is_counted_in_pages() {
        let kv = Arc::new(MemoryKv::new());
        let client = client_on(&kv);
        let bound = MAX_SCAN_LIMIT + 5;
        notify(&client, bound).await;
        let backlog = Backlog::new(client.clone(), bound);
        let waits = AtomicU64::new(0);
        backlog.wait_below(&waits).await;
        assert_eq!(waits.load(std::sync::atomic::Ordering::Relaxed), 0);
        let more = notify(&client, 1).await;
        let over = Backlog::new(client.clone(), bound);
        let waiter = over.wait_below(&waits);
        tokio::pin!(waiter);
        let waited = tokio::time::timeout(Duration::from_secs(5), &mut waiter).await;
        assert!(waited.is_err(), "one above the bound: the loader waits");
        assert_eq!(waits.load(std::sync::atomic::Ordering::Relaxed), 1);
        client.remove_notify_keys(more).await.expect("remove");
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("at the bound again (after long waits, the bound lets it on)");
    }

    /// Workers in another process (another client) that do not publish their counts are
    /// seen only by counting the store: the loader goes on at the first count after they
    /// drained, and a fresh estimate that the other client's puts made wrong is corrected by
    /// the refresh.
    #[tokio::test(start_paused = true)]
    async fn a_loader_learns_of_silent_processes_by_counting_the_store() {
        let kv = Arc::new(MemoryKv::new());
        let client = client_on(&kv);
        let elsewhere = silent_client_on(&kv);
        let backlog = Backlog::new(client.clone(), BOUND);
        let waits = AtomicU64::new(0);
        backlog.wait_below(&waits).await;
        assert_eq!(backlog.counts(), 1, "the first call counts");
        // Another process puts more than the bound: this loader's estimate misses it until
        // the count goes stale.
        let keys = notify(&elsewhere, BOUND + 1).await;
        backlog.wait_below(&waits).await;
        assert_eq!(waits.load(std::sync::atomic::Ordering::Relaxed), 0);
        tokio::time::sleep(REFRESH_EVERY).await;
        let waiter = async {
            backlog.wait_below(&waits).await;
            Instant::now()
        };
        let drain = async {
            tokio::time::sleep(Duration::from_millis(150)).await;
            elsewhere.remove_notify_keys(keys).await.expect("remove");
            Instant::now()
        };
        let (resumed, drained) = tokio::join!(waiter, drain);
        assert_eq!(
            waits.load(std::sync::atomic::Ordering::Relaxed),
            1,
            "it waited"
        );
        assert!(resumed >= drained, "not before the other workers drained");
        // Counts: the refresh at 0, then 100 and 300 ms: the one at 300 ms saw the drain
        // at 150 ms.
        assert!(resumed - drained <= Duration::from_millis(160));
        assert_eq!(backlog.counts(), 4);
    }

    /// A loader waiting because workers in another process (`elsewhere`) put more than the
    /// bound and published it: past its first recheck, so counted twice.
    struct WaitingOnElsewhere {
        backlog: Arc<Backlog>,
        waits: Arc<AtomicU64>,
        elsewhere: Client,
        /// The keys `elsewhere` put.
        keys: Vec<Vec<u8>>,
        /// When the wait began.
        start: Instant,
        waiter: tokio::task::JoinHandle<Instant>,
    }

    impl WaitingOnElsewhere {
        async fn start() -> Self {
            let kv = Arc::new(MemoryKv::new());
            let client = client_on(&kv);
            let elsewhere = client_on(&kv);
            let backlog = Arc::new(Backlog::new(client.clone(), BOUND));
            let waits = Arc::new(AtomicU64::new(0));
            backlog.wait_below(&waits).await;
            assert_eq!(backlog.counts(), 1, "the first call counts");
            // Once published, the other process's puts hold the loader although its count
            // is fresh.
            let keys = notify(&elsewhere, BOUND + 1).await;
            elsewhere.publish_notify_counts().await.expect("publish");
            tokio::time::sleep(SHARED_EVERY).await;
            let start = Instant::now();
            let waiter = spawn_waiter(&backlog, &waits);
            tokio::time::sleep(FIRST_RECHECK + Duration::from_millis(10)).await;
            assert!(!waiter.is_finished(), "above the bound the loader waits");
            assert_eq!(backlog.counts(), 2, "the first recheck, at FIRST_RECHECK");
            WaitingOnElsewhere {
                backlog,
                waits,
                elsewhere,
                keys,
                start,
                waiter,
            }
        }

        /// `elsewhere` removes `keys` and publishes it; returns when the loader went on.
        async fn drain(self, keys: Vec<Vec<u8>>) -> Instant {
            self.elsewhere
                .remove_notify_keys(keys)
                .await
                .expect("remove");
            self.elsewhere
                .publish_notify_counts()
                .await
                .expect("publish");
            tokio::time::timeout(Duration::from_secs(5), self.waiter)
                .await
                .expect("the loader goes on")
                .expect("waiter")
        }
    }

    /// Workers in another process that publish their counts are followed without counting
    /// the store: their puts hold the loader before a count sees them, and the loader goes
    /// on after their drain is published, before the next count.
    #[tokio::test(start_paused = true)]
    async fn a_loader_follows_other_processes_by_their_published_counts() {
        let waiting = WaitingOnElsewhere::start().await;
        let (backlog, waits, start) = (
            waiting.backlog.clone(),
            waiting.waits.clone(),
            waiting.start,
        );
        // The other process drains all; the next count would be at three times
        // FIRST_RECHECK.
        let keys = waiting.keys.clone();
        let resumed = waiting.drain(keys).await;
        assert!(
            resumed - start < FIRST_RECHECK * 3,
            "before the next count, from the published counts"
        );
        assert_eq!(backlog.counts(), 2, "no count saw the drain");
        assert_eq!(waits.load(std::sync::atomic::Ordering::Relaxed), 1);
    }

    /// Once workers elsewhere have published a drain, a waiting loader stops counting at
    /// the doubling pace (their drains are in its estimate): a drain that leaves the backlog
    /// at the bound lets it on at [`LONG_WAIT`] without another count.
    #[tokio::test(start_paused = true)]
    async fn published_drains_elsewhere_defer_the_counts_of_a_waiting_loader() {
        let waiting = WaitingOnElsewhere::start().await;
        let (backlog, start) = (waiting.backlog.clone(), waiting.start);
        // One drains: ten left, at the bound, above half of it.
        let one = waiting.keys[..1].to_vec();
        let resumed = waiting.drain(one).await;
        assert!(
            resumed - start >= LONG_WAIT,
            "at the bound: after the long wait"
        );
        assert_eq!(
            backlog.counts(),
            2,
            "no count between the first recheck and the long wait"
        );
    }
}
