//! The notification backlog as counters: how many notify keys this client has put and
//! removed (in memory, exact), and the same two sums over every client, kept in the meta
//! record `M notify_counts`, to which each client adds what it moved soon after it moved it
//! (`percolator::design::notify`, "The backlog counters"). Between two counts of the notify
//! space, a loader follows the backlog by their differences, its own from memory and other
//! processes' from the record (`app::load::backlog`). The counters pace loaders; nothing
//! that must hold depends on them.

use super::{Shared, TxnError, TxnResult};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Name of the meta record holding the notify keys put and removed by every client that
/// publishes its counts ([`NotifyCounts`]).
pub const NOTIFY_COUNTS_META: &[u8] = b"notify_counts";

/// The version byte of the counts record: version, put, removed (big-endian u64 each).
const COUNTS_RECORD_V1: u8 = 1;

/// How many notify keys were put and removed: two counters that only grow. Per client
/// ([`crate::Client::notify_counts`]), their difference between two reads is how much this
/// process's own commits and workers moved the notification backlog in between; summed over
/// the clients that publish them ([`crate::Client::shared_notify_counts`]), how much every
/// such process moved it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NotifyCounts {
    /// Notify keys put (by commits, weak notifications, replays; a key a writer moved above
    /// the floor counts once, one a floor rescan moved as a put and a removal).
    pub put: u64,
    /// Notify keys removed through [`crate::Client::remove_notify_keys`] (handled,
    /// dead-lettered, moved).
    pub removed: u64,
}

impl NotifyCounts {
    /// How many keys `self` (read earlier) and `now` say the backlog gained, and how many
    /// it lost.
    pub fn since(self, now: NotifyCounts) -> (u64, u64) {
        (
            now.put.saturating_sub(self.put),
            now.removed.saturating_sub(self.removed),
        )
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(17);
        out.push(COUNTS_RECORD_V1);
        out.extend_from_slice(&self.put.to_be_bytes());
        out.extend_from_slice(&self.removed.to_be_bytes());
        out
    }

    fn decode(key: &[u8], bytes: Option<&[u8]>) -> TxnResult<NotifyCounts> {
        let Some(bytes) = bytes else {
            return Ok(NotifyCounts::default());
        };
        let word = |range: std::ops::Range<usize>| {
            bytes
                .get(range)
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .map(u64::from_be_bytes)
        };
        match (bytes.len(), bytes.first(), word(1..9), word(9..17)) {
            (17, Some(&COUNTS_RECORD_V1), Some(put), Some(removed)) => {
                Ok(NotifyCounts { put, removed })
            }
            _ => Err(TxnError::corrupt(
                key,
                crate::record::RecordError::Truncated {
                    field: "notify counts",
                },
            )),
        }
    }
}

/// The store's counters ([`NOTIFY_COUNTS_META`]) and this client's share of them, read
/// together ([`crate::Client::shared_notify_counts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SharedNotifyCounts {
    /// The sums over every client that published its counts, as stored.
    pub all: NotifyCounts,
    /// What this client had added to them when they were read.
    pub own: NotifyCounts,
}

impl SharedNotifyCounts {
    /// What the other clients have published: the sums without this client's share.
    pub fn others(&self) -> NotifyCounts {
        NotifyCounts {
            put: self.all.put.wrapping_sub(self.own.put),
            removed: self.all.removed.wrapping_sub(self.own.removed),
        }
    }
}

/// Clears the client's `scheduled` flag when dropped.
struct Unschedule(std::sync::Weak<Shared>);

impl Drop for Unschedule {
    fn drop(&mut self) {
        if let Some(shared) = self.0.upgrade() {
            shared
                .notify_counts
                .scheduled
                .store(false, Ordering::Release);
        }
    }
}

/// The live counters behind [`NotifyCounts`], and what of them this client has added to the
/// store's.
#[derive(Debug, Default)]
pub(crate) struct NotifyCounters {
    put: AtomicU64,
    removed: AtomicU64,
    /// The counts already added to the store's record; held while adding and while reading
    /// the record, so that a read sees this client's share exactly.
    published: tokio::sync::Mutex<NotifyCounts>,
    /// Whether a publication is scheduled.
    scheduled: AtomicBool,
}

impl NotifyCounters {
    pub(crate) fn read(&self) -> NotifyCounts {
        NotifyCounts {
            put: self.put.load(Ordering::Relaxed),
            removed: self.removed.load(Ordering::Relaxed),
        }
    }
}

impl Shared {
    /// Counts `count` notify keys put in [`NotifyCounts::put`].
    pub(crate) fn count_put(&self, count: usize) {
        self.notify_counts
            .put
            .fetch_add(count as u64, Ordering::Relaxed);
        self.schedule_count_publication();
    }

    /// Counts `count` notify keys removed in [`NotifyCounts::removed`].
    pub(crate) fn count_removed(&self, count: usize) {
        self.notify_counts
            .removed
            .fetch_add(count as u64, Ordering::Relaxed);
        self.schedule_count_publication();
    }

    /// Publishes the counts [`crate::ClientConfig::publish_notify_counts`] after now, in a
    /// task of the current runtime, unless a publication is already scheduled (it will carry
    /// these counts too). A failed publication is logged and scheduled again: the counts it
    /// did not add are still owed. The task holds the client weakly while it sleeps, so a
    /// dropped client (and its store) is not kept alive by it.
    fn schedule_count_publication(&self) {
        let Some(after) = self.config.publish_notify_counts else {
            return;
        };
        if self.notify_counts.scheduled.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.notify_counts.scheduled.store(false, Ordering::Release);
            return;
        };
        let me = self.me.clone();
        runtime.spawn(async move {
            // Clears `scheduled` however the task ends, also when its runtime drops it
            // during the sleep.
            let unschedule = Unschedule(me.clone());
            tokio::time::sleep(after).await;
            let Some(shared) = me.upgrade() else {
                return;
            };
            // Changes from here on schedule the next publication.
            drop(unschedule);
            if let Err(error) = shared.publish_notify_counts().await {
                tracing::debug!(%error, "publishing the notify counts failed; trying again");
                shared.schedule_count_publication();
            }
        });
    }

    /// Reads the store's counters and this client's share of them (see
    /// [`SharedNotifyCounts`]).
    pub(crate) async fn shared_notify_counts(&self) -> TxnResult<SharedNotifyCounts> {
        let own = self.notify_counts.published.lock().await;
        let key = self.codec.meta(NOTIFY_COUNTS_META);
        let raw = self.kv.get(&key).await?;
        Ok(SharedNotifyCounts {
            all: NotifyCounts::decode(&key, raw.as_deref())?,
            own: *own,
        })
    }

    /// Adds what this client put and removed since its last publication to the store's
    /// counters (a CAS, repeated while other clients add theirs); returns whether there was
    /// anything to add.
    pub(crate) async fn publish_notify_counts(&self) -> TxnResult<bool> {
        let mut published = self.notify_counts.published.lock().await;
        let now = self.notify_counts.read();
        let (put, removed) = published.since(now);
        if put == 0 && removed == 0 {
            return Ok(false);
        }
        let key = self.codec.meta(NOTIFY_COUNTS_META);
        loop {
            let raw = self.kv.get(&key).await?;
            let stored = NotifyCounts::decode(&key, raw.as_deref())?;
            let sum = NotifyCounts {
                put: stored.put.wrapping_add(put),
                removed: stored.removed.wrapping_add(removed),
            }
            .encode();
            // A CAS repeated after a lost reply may report its own write as a conflict; the
            // sums are not unique to this client, so an equal sum written by another one would
            // be taken for this one's (its counts lost until a count of the notify space).
            let outcome = self
                .kv
                .compare_and_swap(key.clone(), raw.clone(), sum.clone())
                .await?
                .own_write_decided(raw, &sum);
            if outcome.swapped {
                *published = now;
                return Ok(true);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::{MemoryKv, RawKv};
    use crate::ts::LocalClock;
    use crate::{Cell, Client, ClientConfig};
    use std::sync::Arc;
    use std::time::Duration;

    fn client(kv: &Arc<MemoryKv>, publish: Option<Duration>) -> Client {
        let config = ClientConfig {
            publish_notify_counts: publish,
            ..ClientConfig::default()
        };
        Client::with_config(kv.clone(), Arc::new(LocalClock::new()), config)
    }

    /// Puts `n` notifications through `client`; returns their keys.
    async fn notify(client: &Client, row: &str, n: usize) -> Vec<Vec<u8>> {
        let entries: Vec<_> = (0..n)
            .map(|i| (Cell::new("t", format!("{row}{i}"), "c"), 7, b"x".to_vec()))
            .collect();
        let bucket = client.put_notifications(&entries).await.expect("put");
        entries
            .iter()
            .map(|(cell, ts, _)| client.codec().notify(cell, *ts, bucket))
            .collect()
    }

    /// Two clients add their counts to one record; each reads the other's share apart
    /// from its own.
    #[tokio::test]
    async fn clients_add_their_counts_and_read_the_others() {
        let kv = Arc::new(MemoryKv::new());
        let (a, b) = (client(&kv, None), client(&kv, None));
        notify(&a, "a", 3).await;
        let keys = notify(&b, "b", 2).await;
        assert!(a.publish_notify_counts().await.expect("publish"));
        assert!(b.publish_notify_counts().await.expect("publish"));
        assert!(
            !a.publish_notify_counts().await.expect("publish"),
            "nothing new"
        );
        let seen = a.shared_notify_counts().await.expect("read");
        assert_eq!(seen.all, NotifyCounts { put: 5, removed: 0 });
        assert_eq!(seen.own, NotifyCounts { put: 3, removed: 0 });
        assert_eq!(seen.others(), NotifyCounts { put: 2, removed: 0 });
        b.remove_notify_keys(keys).await.expect("remove");
        assert_eq!(
            a.shared_notify_counts().await.expect("read").others(),
            NotifyCounts { put: 2, removed: 0 },
            "not published yet"
        );
        b.publish_notify_counts().await.expect("publish");
        assert_eq!(
            a.shared_notify_counts().await.expect("read").others(),
            NotifyCounts { put: 2, removed: 2 }
        );
    }

    /// A client publishes on its own shortly after it moves counts; one configured not to
    /// never does.
    #[tokio::test(start_paused = true)]
    async fn counts_are_published_shortly_after_they_move() {
        let kv = Arc::new(MemoryKv::new());
        let publishing = client(&kv, Some(Duration::from_millis(50)));
        let silent = client(&kv, None);
        let reader = client(&kv, None);
        notify(&silent, "s", 4).await;
        let keys = notify(&publishing, "p", 3).await;
        publishing.remove_notify_keys(keys).await.expect("remove");
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert_eq!(
            reader.shared_notify_counts().await.expect("read").all,
            NotifyCounts { put: 3, removed: 3 }
        );
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(
            reader.shared_notify_counts().await.expect("read").all,
            NotifyCounts { put: 3, removed: 3 },
            "the silent client's keys are not in it"
        );
    }

    /// Fails the first `left` CASes of the counts record.
    struct FailCountsCas {
        left: std::sync::atomic::AtomicUsize,
    }

    #[async_trait::async_trait]
    impl crate::kv::intercept::Hooks for FailCountsCas {
        async fn before(&self, call: crate::kv::intercept::Call<'_>) -> crate::kv::KvResult<()> {
            let crate::kv::intercept::Call::CompareAndSwap { key, .. } = call else {
                return Ok(());
            };
            let counts = crate::KeyCodec::new("default").meta(NOTIFY_COUNTS_META);
            let fail = key == counts.as_slice()
                && self
                    .left
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                    .is_ok();
            match fail {
                true => Err(crate::kv::KvError::Unavailable {
                    op: "compare_and_swap",
                    message: "injected".to_string(),
                }),
                false => Ok(()),
            }
        }
    }

    /// A publication that fails is tried again on its own: an idle client's last counts
    /// still reach the store.
    #[tokio::test(start_paused = true)]
    async fn a_failed_publication_is_tried_again() {
        let kv = Arc::new(MemoryKv::new());
        let failing = Arc::new(crate::kv::intercept::Intercepted::wrap(
            kv.clone(),
            FailCountsCas {
                left: std::sync::atomic::AtomicUsize::new(3),
            },
        ));
        let config = ClientConfig {
            publish_notify_counts: Some(Duration::from_millis(50)),
            ..ClientConfig::default()
        };
        let publishing = Client::with_config(failing, Arc::new(LocalClock::new()), config);
        notify(&publishing, "p", 2).await;
        // Three failures, 50 ms apart, then the fourth try.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let reader = client(&kv, None);
        assert_eq!(
            reader.shared_notify_counts().await.expect("read").all,
            NotifyCounts { put: 2, removed: 0 }
        );
    }

    /// A dropped client's scheduled publication does not keep its store alive.
    #[tokio::test(start_paused = true)]
    async fn a_scheduled_publication_does_not_hold_a_dropped_client() {
        let kv = Arc::new(MemoryKv::new());
        let publishing = client(&kv, Some(Duration::from_millis(50)));
        notify(&publishing, "p", 1).await;
        let weak = Arc::downgrade(&kv);
        drop((publishing, kv));
        assert!(weak.upgrade().is_none(), "the task holds the client weakly");
    }

    /// A record that is not a counts record is reported as corrupt, not read as zeros.
    #[tokio::test]
    async fn a_corrupt_record_is_an_error() {
        let kv = Arc::new(MemoryKv::new());
        let a = client(&kv, None);
        kv.put(a.codec().meta(NOTIFY_COUNTS_META), vec![1, 2, 3])
            .await
            .expect("put");
        notify(&a, "a", 1).await;
        assert!(matches!(
            a.shared_notify_counts().await,
            Err(TxnError::Corrupt { .. })
        ));
        assert!(matches!(
            a.publish_notify_counts().await,
            Err(TxnError::Corrupt { .. })
        ));
    }
}
