//! A settled cell fenced for a raw delete (`Client::fence_settled`, `percolator::design::gc`,
//! "Resolved below"): the fence lands only on the head that was checked, has one owner,
//! refuses every later write and keeps the cell's reads.

mod common;

use common::test_config;
use percolator::kv::intercept::{Call, Hooks, Intercepted};
use percolator::kv::{KvResult, MemoryKv, RawKv};
use percolator::ts::{LocalClock, Timestamp};
use percolator::txn::{Client, Fence, TxnError};
use percolator::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Writes `value` to `cell` in a transaction of its own; returns its start_ts.
async fn write(client: &Client, cell: &Cell, value: &str) -> Timestamp {
    let txn = client.begin().await.unwrap();
    let start = txn.start_ts();
    txn.set(cell.clone(), value);
    txn.commit().await.unwrap();
    start
}

/// A timestamp above every commit so far.
async fn now(client: &Client) -> Timestamp {
    client.oracle().get_timestamp().await.unwrap()
}

async fn read(client: &Client, cell: &Cell) -> Option<Vec<u8>> {
    client.begin().await.unwrap().get(cell).await.unwrap()
}

#[tokio::test]
async fn a_fence_needs_a_settled_head_of_the_named_writer_and_has_one_owner() {
    let kv: Arc<dyn RawKv> = Arc::new(MemoryKv::new());
    let clock = Arc::new(LocalClock::new());
    let client = Client::with_config(kv.clone(), clock.clone(), test_config());
    let other = Client::with_config(kv, clock, test_config());
    let cell = Cell::new("t", "r", "c");
    let before = now(&client).await;
    assert_eq!(
        client.fence_settled(&cell, before, None).await.unwrap(),
        Fence::Absent
    );
    let writer = write(&client, &cell, "v1").await;
    let after = now(&client).await;
    assert_eq!(
        client.fence_settled(&cell, before, None).await.unwrap(),
        Fence::Unsettled,
        "committed above the point"
    );
    assert_eq!(
        client
            .fence_settled(&cell, after, Some(before))
            .await
            .unwrap(),
        Fence::Rewritten,
        "another writer named"
    );
    assert_eq!(
        client
            .fence_settled(&cell, after, Some(writer))
            .await
            .unwrap(),
        Fence::Fenced
    );
    assert_eq!(
        other
            .fence_settled(&cell, after, Some(writer))
            .await
            .unwrap(),
        Fence::FencedByAnother,
        "one owner"
    );
    assert_eq!(read(&other, &cell).await.as_deref(), Some(&b"v1"[..]));
    let txn = other.begin().await.unwrap();
    txn.set(cell.clone(), "v2");
    let refused = txn.commit().await.unwrap_err();
    assert!(
        matches!(refused, TxnError::Conflict { .. }),
        "a write of a fenced cell: {refused:?}"
    );
    assert_eq!(read(&client, &cell).await.as_deref(), Some(&b"v1"[..]));
}

/// What [`RecreateBeforeFence`] does before the first CAS of the head it watches.
struct RecreateState {
    head: Mutex<Vec<u8>>,
    /// A client on the store beneath, and the store.
    other: Mutex<Option<(Client, Arc<dyn RawKv>)>>,
    done: AtomicBool,
}

/// Before the fence's CAS: another purge deletes the head outright and a transaction writes
/// the cell again (the interleaving a raw delete after a check alone lost a head to).
struct RecreateBeforeFence(Arc<RecreateState>);

#[async_trait::async_trait]
impl Hooks for RecreateBeforeFence {
    async fn before(&self, call: Call<'_>) -> KvResult<()> {
        let Call::CompareAndSwap { key, .. } = call else {
            return Ok(());
        };
        if key != self.0.head.lock().unwrap().as_slice() || self.0.done.swap(true, Ordering::SeqCst)
        {
            return Ok(());
        }
        let (client, kv) = self.0.other.lock().unwrap().take().unwrap();
        kv.delete(key.to_vec()).await.unwrap();
        write(&client, &Cell::new("t", "r", "c"), "v3").await;
        Ok(())
    }
}

#[tokio::test]
async fn a_head_rewritten_after_the_check_is_not_fenced() {
    let kv: Arc<dyn RawKv> = Arc::new(MemoryKv::new());
    let clock = Arc::new(LocalClock::new());
    let state = Arc::new(RecreateState {
        head: Mutex::new(Vec::new()),
        other: Mutex::new(None),
        done: AtomicBool::new(false),
    });
    let hooked: Arc<dyn RawKv> = Arc::new(Intercepted::wrap(
        kv.clone(),
        RecreateBeforeFence(state.clone()),
    ));
    let purger = Client::with_config(hooked, clock.clone(), test_config());
    let other = Client::with_config(kv.clone(), clock, test_config());
    let cell = Cell::new("t", "r", "c");
    let writer = write(&other, &cell, "v1").await;
    let settled = now(&other).await;
    *state.head.lock().unwrap() = purger.codec().head(&cell);
    *state.other.lock().unwrap() = Some((other.clone(), kv));
    let fence = purger
        .fence_settled(&cell, settled, Some(writer))
        .await
        .unwrap();
    assert!(state.done.load(Ordering::SeqCst), "the hook ran");
    assert_eq!(
        fence,
        Fence::Unsettled,
        "the new head's commit is above the point"
    );
    assert_eq!(read(&other, &cell).await.as_deref(), Some(&b"v3"[..]));
    write(&other, &cell, "v4").await;
    assert_eq!(
        read(&other, &cell).await.as_deref(),
        Some(&b"v4"[..]),
        "not fenced"
    );
}

/// An oracle whose physical time the test moves: strictly increasing, one logical step a
/// call.
#[derive(Default)]
struct ManualOracle {
    last: std::sync::atomic::AtomicU64,
}

impl ManualOracle {
    fn starting_now() -> Self {
        let oracle = ManualOracle::default();
        let now = LocalClock::new().next();
        oracle.last.store(now.0, Ordering::SeqCst);
        oracle
    }

    /// Moves physical time on by `ms`.
    fn advance(&self, ms: u64) {
        let now = Timestamp(self.last.load(Ordering::SeqCst));
        let next = Timestamp::compose(now.physical_ms() + ms, 0);
        self.last.fetch_max(next.0, Ordering::SeqCst);
    }
}

#[async_trait::async_trait]
impl percolator::ts::TimestampSource for ManualOracle {
    async fn get_timestamp(&self) -> Result<Timestamp, percolator::ts::TimestampError> {
        Ok(Timestamp(self.last.fetch_add(1, Ordering::SeqCst) + 1))
    }
}

/// A transaction whose primary is fenced for a raw delete may still lock the cell once the
/// delete has run, so a status check answers `Pending` for it, not `RolledBack` (answered
/// and remembered, that made a reader skip the transaction's records, and a worker delete
/// its notification, though it then committed: found by a review); once its lifetime has
/// passed it cannot commit, and the answer is `RolledBack`. Time is the test's oracle's.
#[tokio::test]
async fn a_fence_decides_no_transaction_that_may_still_commit() {
    let config = percolator::ClientConfig {
        lock_ttl: std::time::Duration::from_millis(50),
        max_lifetime: std::time::Duration::from_millis(300),
        ..test_config()
    };
    let oracle = Arc::new(ManualOracle::starting_now());
    let kv: Arc<dyn RawKv> = Arc::new(MemoryKv::new());
    let client = Client::with_config(kv, oracle.clone(), config);
    let primary = Cell::new("t", "r", "c");
    let writer = write(&client, &primary, "v1").await;
    let settled = now(&client).await;
    // A transaction that will write the cell, begun before the fence.
    let young = client.begin().await.unwrap().start_ts();
    assert_eq!(
        client
            .fence_settled(&primary, settled, Some(writer))
            .await
            .unwrap(),
        Fence::Fenced
    );
    // Past its lock TTL, not its lifetime.
    oracle.advance(100);
    assert_eq!(
        client.txn_status(&primary, young).await.unwrap(),
        percolator::txn::TxnStatus::Pending
    );
    oracle.advance(300);
    assert_eq!(
        client.txn_status(&primary, young).await.unwrap(),
        percolator::txn::TxnStatus::RolledBack
    );
}

/// A rollback mark above the point asked about is of a transaction that may still be in
/// flight: deleted outright with the cell, it would no longer stop that transaction locking
/// the cell, so the cell is not settled.
#[tokio::test]
async fn a_rollback_mark_above_the_point_is_not_settled() {
    let config = percolator::ClientConfig {
        lock_ttl: std::time::Duration::from_millis(50),
        ..test_config()
    };
    let oracle = Arc::new(ManualOracle::starting_now());
    let client = Client::with_config(Arc::new(MemoryKv::new()), oracle.clone(), config);
    let cell = Cell::new("t", "r", "c");
    let writer = write(&client, &cell, "v1").await;
    let settled = now(&client).await;
    // A transaction whose primary is the cell, rolled back by a status check after its TTL.
    let later = client.begin().await.unwrap().start_ts();
    oracle.advance(100);
    assert_eq!(
        client.txn_status(&cell, later).await.unwrap(),
        percolator::txn::TxnStatus::RolledBack
    );
    assert_eq!(
        client
            .fence_settled(&cell, settled, Some(writer))
            .await
            .unwrap(),
        Fence::Unsettled
    );
    assert_eq!(
        client
            .fence_settled(&cell, now(&client).await, Some(writer))
            .await
            .unwrap(),
        Fence::Fenced,
        "settled once the point passes the mark"
    );
}
