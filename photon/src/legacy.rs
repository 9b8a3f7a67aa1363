//! Whether the IdRegistry may still hold entries of the earlier layout
//! ([`crate::schema::legacy_idregistry_cell`]: `<day:08>/<click_id>`, written by builds before
//! entries were keyed by click id alone), which the join must then read beside each click's
//! entry: one more point read per click (on TiKV one more key in a `RawBatchGet`), which
//! finds nothing in every store written since.
//!
//! **Why skipping is exact.** Only builds of the earlier layout write such entries, and they
//! must not run beside this one (they do not read the new entries, so a click could be joined
//! twice: stop them across the upgrade, `CHANGELOG.md`). So once a scan of their rows finds
//! none, none appears afterwards, and every later read of one would find nothing. Until a scan
//! has found the rows empty the join reads them. The rows are scanned again every
//! [`LegacyEntries::RECHECK`] whatever the last scan found: while some are left (GC deletes
//! them by day, `crate::registry::gc_registry`), and after, in case a build of the earlier
//! layout is started against the rule (one range scan a minute).

use crate::schema::IDREGISTRY;
use percolator::codec::Space;
use percolator::kv::ScanOrder;
use percolator::{Client, TxnError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// Whether the join reads IdRegistry entries of the earlier layout (see the module
/// documentation). Clones share one answer.
#[derive(Clone)]
pub struct LegacyEntries {
    inner: Arc<Inner>,
}

struct Inner {
    /// The client that scans the rows; `None`: never checked, always read.
    client: Option<Client>,
    /// Cleared while the last scan found the rows empty.
    may_exist: AtomicBool,
    /// When the rows may be scanned next (`None`: now).
    next_check: Mutex<Option<Instant>>,
    recheck: Duration,
}

impl std::fmt::Debug for LegacyEntries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LegacyEntries")
            .field("checked", &self.inner.client.is_some())
            .field("may_exist", &self.inner.may_exist.load(Ordering::Relaxed))
            .finish()
    }
}

impl Default for LegacyEntries {
    /// [`LegacyEntries::always_read`].
    fn default() -> Self {
        LegacyEntries::always_read()
    }
}

impl LegacyEntries {
    /// How often the rows are scanned again while entries of the earlier layout are left.
    pub const RECHECK: Duration = Duration::from_secs(60);

    /// Entries of the earlier layout are read for every click (nothing is checked).
    pub fn always_read() -> Self {
        LegacyEntries::new(None, Self::RECHECK)
    }

    /// Read while the last scan through `client` found some (the first read of
    /// [`Self::may_exist`] scans).
    pub fn checked(client: &Client) -> Self {
        LegacyEntries::new(Some(client.clone()), Self::RECHECK)
    }

    /// [`LegacyEntries::checked`], scanning again at most every `recheck` while some are left.
    pub fn checked_every(client: &Client, recheck: Duration) -> Self {
        LegacyEntries::new(Some(client.clone()), recheck)
    }

    fn new(client: Option<Client>, recheck: Duration) -> Self {
        LegacyEntries {
            inner: Arc::new(Inner {
                client,
                may_exist: AtomicBool::new(true),
                next_check: Mutex::new(None),
                recheck,
            }),
        }
    }

    /// Whether entries of the earlier layout may exist, so the join must read them: what the
    /// last scan of their rows found (`true` before the first), a scan being made here when
    /// due (every [`LegacyEntries::RECHECK`], by one caller at a time; the others answer the
    /// last answer meanwhile). A failed scan answers `true`.
    pub async fn may_exist(&self) -> bool {
        let Some(client) = &self.inner.client else {
            return true;
        };
        let last = self.inner.may_exist.load(Ordering::Acquire);
        let now = Instant::now();
        {
            let mut next = self
                .inner
                .next_check
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if next.is_some_and(|at| now < at) {
                return last;
            }
            *next = Some(now + self.inner.recheck);
        }
        match rows_hold_any(client).await {
            Ok(found) => {
                if found != last {
                    tracing::debug!(found, "IdRegistry entries of the earlier layout");
                }
                self.inner.may_exist.store(found, Ordering::Release);
                found
            }
            Err(error) => {
                tracing::debug!(%error, "scan for IdRegistry entries of the earlier layout failed");
                self.inner.may_exist.store(true, Ordering::Release);
                true
            }
        }
    }
}

/// Whether any head lies in the IdRegistry's rows of the earlier layout (rows that start
/// with a digit, `<day:08>/…`; every other row starts with a letter). Heads of any state count
/// (a lock, a delete, a GC tombstone): only an empty range proves that none is there.
async fn rows_hold_any(client: &Client) -> Result<bool, TxnError> {
    let range = client
        .codec()
        .rows_range(Space::Head, IDREGISTRY.as_bytes(), b"0", Some(b":"));
    let found = client.store().scan(range, 1, ScanOrder::Forward).await?;
    Ok(!found.is_empty())
}
