//! Reads answered from a client's remembered commits (`percolator::design::recent`): without
//! a store call, only at snapshots that contain the commit, never a value the client itself
//! replaced, guarded as any read of a write-once cell, and, in a randomized history with one
//! writing client, the exact read's answer every time (value and commit_ts).

mod common;

use common::test_config;
use percolator::kv::intercept::{Intercepted, OpCounts};
use percolator::kv::{MemoryKv, RawKv};
use percolator::ts::{LocalClock, Timestamp};
use percolator::txn::{Client, ClientConfig, RecentWriteReads, TxnError};
use percolator::Cell;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

const EVENTS: &str = "events";

fn event(id: u64) -> Cell {
    Cell::new(EVENTS, format!("e{id:04}"), "body")
}

fn offset() -> Cell {
    Cell::new("loader", "file", "offset")
}

/// A client on `kv` (sharing `clock`) that declares `events/body` write-once and remembers
/// its commits of it.
fn remembering(kv: Arc<dyn RawKv>, clock: Arc<LocalClock>, config: ClientConfig) -> Client {
    let client = Client::with_config(kv, clock, config);
    client.write_once_column(EVENTS, "body");
    client.remember_recent_writes(EVENTS, "body");
    client
}

/// A store that counts its calls, and a remembering client on it.
fn counted() -> (Arc<Intercepted<OpCounts>>, Client) {
    let kv = Arc::new(Intercepted::wrap(
        Arc::new(MemoryKv::new()),
        OpCounts::default(),
    ));
    let client = remembering(kv.clone(), Arc::new(LocalClock::new()), test_config());
    (kv, client)
}

/// Writes `values` of events (`None`: delete) with the offset moved to `to`, as a loader does.
async fn load(
    client: &Client,
    values: &[(u64, Option<String>)],
    to: u64,
) -> Result<Timestamp, TxnError> {
    let txn = client.begin().await?;
    txn.get(&offset()).await?;
    for (id, value) in values {
        match value {
            Some(v) => txn.set(event(*id), v.clone()),
            None => txn.delete(event(*id)),
        }
    }
    txn.set(offset(), to.to_string());
    txn.commit().await
}

/// Two clients of one store: `mine` loads "first" into event 1, then another client loads
/// "second" over it. Returns `mine` and the two commit timestamps.
async fn mine_then_anothers() -> (Client, Timestamp, Timestamp) {
    let kv: Arc<dyn RawKv> = Arc::new(MemoryKv::new());
    let clock = Arc::new(LocalClock::new());
    let mine = remembering(kv.clone(), clock.clone(), test_config());
    let other = remembering(kv, clock, test_config());
    let first = load(&mine, &[(1, Some("first".into()))], 1).await.unwrap();
    let second = load(&other, &[(1, Some("second".into()))], 2)
        .await
        .unwrap();
    (mine, first, second)
}

fn some(s: &str) -> Option<Vec<u8>> {
    Some(s.as_bytes().to_vec())
}

#[tokio::test]
async fn a_remembered_commit_is_read_without_a_store_call() {
    let (kv, client) = counted();
    let c = load(
        &client,
        &[(1, Some("one".into())), (2, Some("two".into()))],
        2,
    )
    .await
    .unwrap();
    let txn = client.begin().await.unwrap();
    let before = kv.hooks().total();
    let read = txn.get_many_recent(&[event(1), event(2)]).await.unwrap();
    assert_eq!(
        read,
        vec![(some("one"), Some(c.0)), (some("two"), Some(c.0))]
    );
    assert_eq!(kv.hooks().total(), before, "no store call");
    // An event not remembered, and an ordinary cell, are read from the store, exactly.
    let read = txn
        .get_many_recent(&[event(1), event(3), offset()])
        .await
        .unwrap();
    assert_eq!(
        read,
        vec![
            (some("one"), Some(c.0)),
            (None, None),
            (some("2"), Some(c.0))
        ]
    );
    assert!(kv.hooks().total() > before, "the others went to the store");
    assert_eq!(
        client.recent_write_reads(),
        RecentWriteReads {
            from_memory: 3,
            from_store: 1
        }
    );
}

#[tokio::test]
async fn a_snapshot_below_the_commit_reads_the_store() {
    let (kv, client) = counted();
    let early = client.begin().await.unwrap();
    load(&client, &[(1, Some("one".into()))], 1).await.unwrap();
    let before = kv.hooks().total();
    assert_eq!(
        early.get_many_recent(&[event(1)]).await.unwrap(),
        vec![(None, None)]
    );
    assert!(kv.hooks().total() > before);
}

#[tokio::test]
async fn the_transactions_own_write_comes_first() {
    let (_kv, client) = counted();
    load(&client, &[(1, Some("one".into()))], 1).await.unwrap();
    let txn = client.begin().await.unwrap();
    txn.set(event(1), "mine");
    assert_eq!(
        txn.get_many_recent(&[event(1)]).await.unwrap(),
        vec![(some("mine"), None)]
    );
}

#[tokio::test]
async fn a_remembered_value_read_may_not_be_written() {
    let (_kv, client) = counted();
    load(&client, &[(1, Some("one".into()))], 1).await.unwrap();
    let txn = client.begin().await.unwrap();
    assert_eq!(
        txn.get_many_recent(&[event(1)]).await.unwrap()[0].0,
        some("one")
    );
    txn.set(event(1), "again");
    txn.set(offset(), "2");
    match txn.commit().await {
        Err(TxnError::WrittenOnce { cell }) => assert_eq!(cell, event(1)),
        other => panic!("expected WrittenOnce, got {other:?}"),
    }
}

/// The contract's other side, pinned so that a change of it is deliberate: another client's
/// newer write is not in this client's answer (an exact read has it), and the answer is a
/// committed write of the snapshot.
#[tokio::test]
async fn another_clients_newer_write_is_answered_by_exact_reads_only() {
    let (mine, first, second) = mine_then_anothers().await;
    let txn = mine.begin().await.unwrap();
    assert_eq!(
        txn.get_many_recent(&[event(1)]).await.unwrap(),
        vec![(some("first"), Some(first.0))]
    );
    assert_eq!(
        txn.get_many_versioned(&[event(1)]).await.unwrap(),
        vec![(some("second"), Some(second.0))]
    );
}

/// One client writes (puts, redeliveries, deletes) and reads at snapshots old and new, with a
/// budget that evicts: every answer of `get_many_recent` is the exact read's, value and
/// commit_ts, at the same snapshot.
#[tokio::test]
async fn with_one_writer_every_answer_is_the_exact_one() {
    for seed in 0..8u64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let kv: Arc<dyn RawKv> = Arc::new(MemoryKv::new());
        let config = ClientConfig {
            // About 40 entries: half the cells' entries are evicted at any time.
            recent_writes_bytes: 40 * 200,
            ..test_config()
        };
        let client = remembering(kv, Arc::new(LocalClock::new()), config);
        let mut snapshots = Vec::new();
        let (mut answered, mut compared) = (0, 0);
        for round in 0..150u64 {
            let values: Vec<(u64, Option<String>)> = (0..rng.gen_range(1..6))
                .map(|_| {
                    let id = rng.gen_range(0..80);
                    let value = (!rng.gen_bool(0.1)).then(|| format!("v{round}-{id}"));
                    (id, value)
                })
                .collect::<std::collections::BTreeMap<_, _>>()
                .into_iter()
                .collect();
            load(&client, &values, round).await.unwrap();
            if rng.gen_bool(0.3) {
                snapshots.push(client.begin().await.unwrap());
            }
            // A reader now, or one of the older snapshots.
            let txn = if snapshots.is_empty() || rng.gen_bool(0.5) {
                client.begin().await.unwrap()
            } else {
                snapshots.swap_remove(rng.gen_range(0..snapshots.len()))
            };
            let cells: Vec<Cell> = (0..8).map(|_| event(rng.gen_range(0..80))).collect();
            let before = client.recent_write_reads().from_memory;
            let recent = txn.get_many_recent(&cells).await.unwrap();
            answered += client.recent_write_reads().from_memory - before;
            let exact = txn.get_many_versioned(&cells).await.unwrap();
            for ((cell, r), e) in cells.iter().zip(&recent).zip(&exact) {
                // A value never written reads `(None, None)` exactly; a delete remembered
                // answers its commit_ts, which the exact read does not report.
                let r = if r.0.is_none() {
                    (None, None)
                } else {
                    r.clone()
                };
                let e = if e.0.is_none() {
                    (None, None)
                } else {
                    e.clone()
                };
                assert_eq!(r, e, "seed {seed}, round {round}, {cell}");
                compared += 1;
            }
        }
        assert!(
            answered > compared / 10,
            "seed {seed}: {answered} of {compared} answered from memory"
        );
    }
}

/// A commit that fails (here a write conflict on the loader's offset) remembers nothing, and
/// forgets what was remembered of the cells it wrote: the next read goes to the store.
#[tokio::test]
async fn a_failed_commit_remembers_nothing_and_forgets_its_cells() {
    let (_kv, client) = counted();
    let first = load(&client, &[(1, Some("one".into()))], 1).await.unwrap();
    let loser = client.begin().await.unwrap();
    loser.get(&offset()).await.unwrap();
    load(&client, &[(2, Some("two".into()))], 2).await.unwrap();
    loser.set(event(1), "lost");
    loser.set(event(3), "lost");
    loser.set(offset(), "3");
    assert!(matches!(
        loser.commit().await,
        Err(TxnError::Conflict { .. })
    ));
    let txn = client.begin().await.unwrap();
    let before = client.recent_write_reads();
    assert_eq!(
        txn.get_many_recent(&[event(1), event(3)]).await.unwrap(),
        vec![(some("one"), Some(first.0)), (None, None)]
    );
    let after = client.recent_write_reads();
    assert_eq!(
        after.from_memory, before.from_memory,
        "both read from the store"
    );
    assert_eq!(after.from_store, before.from_store + 2);
}

/// A column given to `remember_recent_writes` but not declared write-once is not remembered.
#[tokio::test]
async fn a_column_not_declared_write_once_is_not_remembered() {
    let (_kv, client) = counted();
    client.remember_recent_writes("plain", "c");
    let cell = Cell::new("plain", "r", "c");
    let txn = client.begin().await.unwrap();
    txn.set(cell.clone(), "v");
    let c = txn.commit().await.unwrap();
    let txn = client.begin().await.unwrap();
    assert_eq!(
        txn.get_many_recent(std::slice::from_ref(&cell))
            .await
            .unwrap(),
        vec![(some("v"), Some(c.0))]
    );
    assert_eq!(client.recent_write_reads(), RecentWriteReads::default());
}

/// A reader that asks for a write at or above a commit_ts (the one its notification names)
/// gets it from memory only if the remembered commit is that one or newer; an older one
/// sends it to the store, which has the newer write.
#[tokio::test]
async fn a_remembered_commit_below_the_readers_bound_reads_the_store() {
    let (mine, first, second) = mine_then_anothers().await;
    let txn = mine.begin().await.unwrap();
    assert_eq!(
        txn.get_many_recent_from(&[event(1)], &[Some(first.0)])
            .await
            .unwrap(),
        vec![(some("first"), Some(first.0))],
        "the remembered commit is the one asked for"
    );
    assert_eq!(
        txn.get_many_recent_from(&[event(1)], &[Some(second.0)])
            .await
            .unwrap(),
        vec![(some("second"), Some(second.0))],
        "the remembered commit is older than the one asked for"
    );
}
