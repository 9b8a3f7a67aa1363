//! Batched prewrite, batched secondaries and `Transaction::get_many`: a conflict inside a
//! batch, crashes between and in the middle of batches (atomicity and snapshot isolation
//! checked afterwards), and the store calls a batched transaction costs.

mod common;
use async_trait::async_trait;
use common::*;
use percolator::kv::intercept::{Call, Hooks, Intercepted, Op};
use percolator::kv::{CasOutcome, KvError, KvResult, MemoryKv, RawKv};
use percolator::txn::{Client, ClientConfig, CrashPoint, TxnError, TxnStatus};
use percolator::Cell;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn acct(i: usize) -> Cell {
    Cell::new("wide", format!("a{i:03}"), "balance")
}

/// A blocker's live lock on one cell of a five-cell batch, the other four free: the batch
/// conflicts, and none of its locks is left behind (the blocker's stays).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflict_inside_a_batch_leaves_no_lock_behind() {
    let c = client_on(
        Arc::new(MemoryKv::new()),
        ClientConfig {
            // The blocker's lock stays live for the whole test.
            lock_ttl: Duration::from_secs(60),
            max_lifetime: Duration::from_secs(120),
            gc_lag: Duration::from_secs(121),
            ..test_config()
        },
    );
    let rows = ["a", "b", "c", "d", "e"];
    setup(&c, &rows.map(|r| (r, 1))).await;
    let blocker = c.begin().await.unwrap();
    blocker.set(cell("c"), "blocked");
    blocker.set_crash_hook(Arc::new(|p| p == CrashPoint::AllPrewritten));
    assert!(matches!(
        blocker.commit().await,
        Err(TxnError::InjectedCrash(_))
    ));
    assert_eq!(count_locks(&c).await, 1);

    let t = c.begin().await.unwrap();
    for row in rows {
        t.set(cell(row), "2");
    }
    match t.commit().await {
        Err(TxnError::Conflict { cell: conflicted }) => assert_eq!(conflicted, cell("c")),
        other => panic!("expected a conflict on c, got {other:?}"),
    }
    assert_eq!(count_locks(&c).await, 1, "the batch left a lock behind");
    let r = c.begin().await.unwrap();
    let cells: Vec<Cell> = ["a", "b", "d", "e"].map(cell).to_vec();
    assert_eq!(
        r.get_many(&cells).await.unwrap(),
        vec![Some(b"1".to_vec()); 4],
        "a write of the conflicting batch became visible"
    );

    // A newer commit on one cell of a batch whose heads were read before it: the batch CAS
    // fails there, the per-cell check finds the conflict, nothing is left locked.
    let t = c.begin().await.unwrap();
    let read = t.get_many(&["a", "b", "d", "e"].map(cell)).await.unwrap();
    assert_eq!(read, vec![Some(b"1".to_vec()); 4]);
    let other = c.begin().await.unwrap();
    other.set(cell("d"), "other");
    other.commit().await.unwrap();
    for row in ["a", "b", "d", "e"] {
        t.set(cell(row), "3");
    }
    assert!(matches!(t.commit().await, Err(TxnError::Conflict { .. })));
    assert_eq!(count_locks(&c).await, 1);
    let r = c.begin().await.unwrap();
    assert_eq!(
        r.get_many(&["a", "b", "d", "e"].map(cell)).await.unwrap(),
        ["1", "1", "other", "1"].map(|v| Some(v.as_bytes().to_vec())),
    );
}

/// A crash between two batches of one prewrite (a write set of six chunks, stopped after the
/// first four chunks' locks) rolls every cell back; a crash right after the commit point rolls
/// every cell forward, also the ones of the secondaries' batch that never ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashes_between_batches_keep_large_commits_atomic() {
    let c = memory_client();
    let cells: Vec<Cell> = (0..1500).map(acct).collect();
    for (point, committed) in [
        (
            CrashPoint::Prewrote {
                primary: false,
                // The primary alone, then four chunks of 256: a chunk boundary.
                locked: 1025,
            },
            false,
        ),
        (CrashPoint::Committed, true),
        (CrashPoint::SecondaryCommitted { committed: 1 }, true),
    ] {
        let before = c.begin().await.unwrap().get_many(&cells).await.unwrap();
        let t = c.begin().await.unwrap();
        for (i, cell) in cells.iter().enumerate() {
            t.set(cell.clone(), format!("{point:?}-{i}"));
        }
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        t.set_crash_hook(Arc::new(move |p| {
            log.lock().unwrap().push(p);
            p == point
        }));
        match t.commit().await {
            Err(TxnError::InjectedCrash(p)) => assert_eq!(p, point),
            other => panic!("expected a crash at {point:?}, got {other:?}"),
        }
        if let CrashPoint::Prewrote { .. } = point {
            // The first chunks' locks were confirmed, the later chunks never started.
            let locks = count_locks(&c).await;
            assert_eq!(locks, 1025, "locks after a crash between chunks");
        }
        c.resolve_all_locks().await.unwrap();
        assert_eq!(count_locks(&c).await, 0);
        let after = c.begin().await.unwrap().get_many(&cells).await.unwrap();
        if committed {
            for (i, v) in after.iter().enumerate() {
                assert_eq!(v.as_deref(), Some(format!("{point:?}-{i}").as_bytes()));
            }
        } else {
            assert_eq!(after, before, "a rolled-back commit left a write");
        }
    }
}

/// Kills a transaction in the middle of one of its write calls (batched or single CAS): a
/// random subset of a batch reaches the store (a single CAS applies or not), every reply of
/// that call is lost, and from then on nothing of that transaction reaches the store (its
/// later calls fail), as when its process dies mid-batch.
#[derive(Default)]
struct MidBatchDeath {
    /// The write call to die in (`None`: never).
    die_at: Mutex<Option<u64>>,
    writes: AtomicU64,
    /// The dying call is in progress: its replies are lost.
    dying: AtomicBool,
    /// Nothing reaches the store any more.
    dead: AtomicBool,
    coins: Mutex<Option<rand::rngs::StdRng>>,
}

impl MidBatchDeath {
    fn arm(&self, die_at: Option<u64>, seed: u64) {
        self.writes.store(0, Ordering::SeqCst);
        self.dying.store(false, Ordering::SeqCst);
        self.dead.store(false, Ordering::SeqCst);
        *self.coins.lock().unwrap() = Some(rand::rngs::StdRng::seed_from_u64(seed));
        *self.die_at.lock().unwrap() = die_at;
    }

    fn coin(&self) -> bool {
        let mut coins = self.coins.lock().unwrap();
        coins.as_mut().is_some_and(|rng| rng.gen_bool(0.5))
    }

    fn gone(op: &'static str) -> KvError {
        KvError::Unavailable {
            op,
            message: "injected: the process died".into(),
        }
    }
}

#[async_trait]
impl Hooks for MidBatchDeath {
    async fn before(&self, call: Call<'_>) -> KvResult<()> {
        if self.dead.load(Ordering::SeqCst) {
            return Err(Self::gone(call.op().name()));
        }
        match call {
            Call::BatchCompareAndSwap { .. } | Call::CompareAndSwap { batched: false, .. } => {
                let n = self.writes.fetch_add(1, Ordering::SeqCst);
                if *self.die_at.lock().unwrap() == Some(n) {
                    self.dying.store(true, Ordering::SeqCst);
                    if matches!(call, Call::CompareAndSwap { .. }) && self.coin() {
                        // A single CAS that dies before reaching the store.
                        self.dead.store(true, Ordering::SeqCst);
                        return Err(Self::gone("compare_and_swap"));
                    }
                }
            }
            // A request of the dying batch reaches the store or not.
            Call::CompareAndSwap { batched: true, .. }
                if self.dying.load(Ordering::SeqCst) && self.coin() =>
            {
                return Err(Self::gone("compare_and_swap"));
            }
            _ => {}
        }
        Ok(())
    }

    async fn after(&self, op: Op) -> KvResult<()> {
        if self.dying.load(Ordering::SeqCst) {
            self.dead.store(true, Ordering::SeqCst);
        }
        if self.dead.load(Ordering::SeqCst) {
            return Err(Self::gone(op.name()));
        }
        Ok(())
    }

    async fn swapped(&self, _key: &[u8], _new: &[u8], outcome: CasOutcome) -> KvResult<CasOutcome> {
        if self.dead.load(Ordering::SeqCst) {
            return Err(Self::gone("compare_and_swap"));
        }
        Ok(outcome)
    }
}

const ACCOUNTS: usize = 24;
const INITIAL: i64 = 1000;

async fn total(c: &Client) -> i64 {
    let t = c.begin().await.unwrap();
    let cells: Vec<Cell> = (0..ACCOUNTS).map(acct).collect();
    let values = t.get_many(&cells).await.unwrap();
    t.commit().await.unwrap();
    values.into_iter().map(|v| num(v).expect("balance")).sum()
}

/// Wide transfers (one account pays 2-6 others, read with `get_many`, written in one
/// batched prewrite) by 6 tasks, each transaction possibly dying in the middle of any of
/// its batched or single CASes, while an auditor reads every account with `get_many`: every
/// audit sees the constant total (snapshot isolation with half-applied batches around), and
/// after lock resolution no lock is left and the total still holds (atomicity).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_dying_mid_batch_stay_atomic() {
    let inner: Arc<dyn RawKv> = Arc::new(MemoryKv::new());
    let c = client_on(inner.clone(), test_config());
    let init = c.begin().await.unwrap();
    for i in 0..ACCOUNTS {
        init.set(acct(i), INITIAL.to_string());
    }
    init.commit().await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (committed, died) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut tasks = Vec::new();
    for task in 0..6u64 {
        let (inner, committed, died) = (inner.clone(), committed.clone(), died.clone());
        // One oracle for every client (each task's client has a store of its own to die in).
        let oracle = c.oracle().clone();
        tasks.push(tokio::spawn(async move {
            let store = Arc::new(Intercepted::wrap(inner, MidBatchDeath::default()));
            let c = Client::with_config(store.clone(), oracle, test_config());
            let mut rng = rand::rngs::StdRng::seed_from_u64(task);
            for n in 0..40u64 {
                let die_at = rng.gen_bool(0.3).then(|| rng.gen_range(0..3));
                store.hooks().arm(die_at, task * 1000 + n);
                let payer = rng.gen_range(0..ACCOUNTS);
                let mut payees: Vec<usize> = (0..rng.gen_range(2..7))
                    .map(|_| rng.gen_range(0..ACCOUNTS))
                    .filter(|&p| p != payer)
                    .collect();
                payees.sort_unstable();
                payees.dedup();
                let result = async {
                    let t = c.begin().await?;
                    let mut cells = vec![acct(payer)];
                    cells.extend(payees.iter().map(|&p| acct(p)));
                    let values = t.get_many(&cells).await?;
                    let amount = rng.gen_range(1..10);
                    let balances: Vec<i64> = values
                        .into_iter()
                        .map(|v| num(v).expect("balance"))
                        .collect();
                    t.set(
                        cells[0].clone(),
                        (balances[0] - amount * payees.len() as i64).to_string(),
                    );
                    for (cell, balance) in cells[1..].iter().zip(&balances[1..]) {
                        t.set(cell.clone(), (balance + amount).to_string());
                    }
                    t.commit().await
                }
                .await;
                let dead = store.hooks().dead.load(Ordering::SeqCst);
                match result {
                    Ok(_) => {
                        committed.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) if dead => {
                        died.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) if e.is_retryable() => {}
                    Err(e) => panic!("transfer failed without a death: {e}"),
                }
            }
        }));
    }
    let auditor = {
        let (c, stop) = (c.clone(), stop.clone());
        tokio::spawn(async move {
            let mut audits = 0u64;
            while !stop.load(Ordering::Relaxed) {
                assert_eq!(
                    total(&c).await,
                    ACCOUNTS as i64 * INITIAL,
                    "audit saw a broken total"
                );
                audits += 1;
            }
            audits
        })
    };
    for t in tasks {
        t.await.unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let audits = auditor.await.unwrap();
    c.resolve_all_locks().await.unwrap();
    assert_eq!(count_locks(&c).await, 0, "locks left after resolution");
    assert_eq!(total(&c).await, ACCOUNTS as i64 * INITIAL);
    let (committed, died) = (
        committed.load(Ordering::Relaxed),
        died.load(Ordering::Relaxed),
    );
    eprintln!("committed {committed}, died {died}, audits {audits}");
    assert!(committed > 40, "too few transfers committed: {committed}");
    assert!(died > 10, "too few deaths: {died}");
    assert!(audits > 0);
}

/// Counts store calls as the caller makes them (a batched CAS is one call).
#[derive(Default)]
struct Calls {
    by_op: Mutex<Vec<Op>>,
}

#[async_trait]
impl Hooks for Calls {
    async fn before(&self, call: Call<'_>) -> KvResult<()> {
        if !matches!(call, Call::CompareAndSwap { batched: true, .. }) {
            self.by_op.lock().unwrap().push(call.op());
        }
        Ok(())
    }
}

/// `get_many` reads own writes first, absent cells as `None`, a cell named twice twice, and
/// agrees with `get`; a 10-cell read-modify-write costs one `batch_get`, one batched CAS for
/// the prewrite, the commit point and one batched CAS for the secondaries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_many_reads_like_get_and_batches_cost_few_calls() {
    let store = Arc::new(Intercepted::wrap(
        Arc::new(MemoryKv::new()) as Arc<dyn RawKv>,
        Calls::default(),
    ));
    let c = client_on(store.clone(), test_config());
    let cells: Vec<Cell> = (0..10).map(acct).collect();
    let init = c.begin().await.unwrap();
    for (i, cell) in cells.iter().enumerate() {
        init.set(cell.clone(), i.to_string());
    }
    init.commit().await.unwrap();

    let t = c.begin().await.unwrap();
    t.set(cells[3].clone(), "own");
    t.delete(cells[4].clone());
    let mut asked = cells.clone();
    asked.push(acct(99));
    asked.push(cells[0].clone());
    let many = t.get_many(&asked).await.unwrap();
    for (cell, value) in asked.iter().zip(&many) {
        assert_eq!(
            &t.get(cell).await.unwrap(),
            value,
            "get_many and get of {cell}"
        );
    }
    assert_eq!(many[3].as_deref(), Some(&b"own"[..]));
    assert_eq!(many[4], None);
    assert_eq!(many[10], None);
    assert_eq!(many[11].as_deref(), Some(&b"0"[..]));
    let versioned = t.get_many_versioned(&cells[2..4]).await.unwrap();
    assert!(versioned[0].1.is_some() && versioned[1].1.is_none());
    t.rollback();

    store.hooks().by_op.lock().unwrap().clear();
    let t = c.begin().await.unwrap();
    let values = t.get_many(&cells).await.unwrap();
    for (cell, value) in cells.iter().zip(values) {
        let v = num(value).unwrap();
        t.set(cell.clone(), (v + 1).to_string());
    }
    t.commit().await.unwrap();
    let calls = store.hooks().by_op.lock().unwrap().clone();
    assert_eq!(
        calls,
        vec![
            Op::BatchGet,
            Op::BatchCompareAndSwap,
            Op::CompareAndSwap,
            Op::BatchCompareAndSwap
        ],
        "store calls of a 10-cell read-modify-write"
    );
}

/// A client remembers the head its commit left only for a cell written before (write-once
/// cells would fill the cache for nothing): a cell's first blind write guesses it absent
/// (prewrite and commit point: two calls), the second finds the guess wrong (one call more,
/// the CAS from the head the failed one returned), the third expects the remembered head
/// and costs two calls again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blind_writes_remember_only_cells_written_before() {
    let store = Arc::new(Intercepted::wrap(
        Arc::new(MemoryKv::new()) as Arc<dyn RawKv>,
        Calls::default(),
    ));
    let c = client_on(store.clone(), test_config());
    let mut costs = Vec::new();
    for round in 0..3 {
        store.hooks().by_op.lock().unwrap().clear();
        let t = c.begin().await.unwrap();
        t.set(acct(1), round.to_string());
        t.commit().await.unwrap();
        costs.push(store.hooks().by_op.lock().unwrap().clone());
    }
    let first = vec![Op::BatchCompareAndSwap, Op::CompareAndSwap];
    assert_eq!(costs[0], first, "first write of a new cell");
    assert_eq!(
        costs[1],
        vec![
            Op::BatchCompareAndSwap,
            Op::CompareAndSwap,
            Op::CompareAndSwap
        ],
        "second write: the cell was not remembered"
    );
    assert_eq!(
        costs[2], first,
        "third write: the remembered head was right"
    );
    let t = c.begin().await.unwrap();
    assert_eq!(t.get(&acct(1)).await.unwrap().as_deref(), Some(&b"2"[..]));
}

/// A decided fate is read once: the notifications of one batch of writes all name its
/// primary, and asking about it again costs no store call (a committed or rolled-back fate
/// never changes). The committing client knows its own commit without a read. An undecided
/// fate is read each time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decided_fate_is_read_once() {
    let counted = Arc::new(Intercepted::wrap(
        Arc::new(MemoryKv::new()),
        percolator::kv::intercept::OpCounts::default(),
    ));
    let c = client_on(counted.clone(), test_config());
    let primary = Cell::new("fate", "p", "v");
    let t = c.begin().await.unwrap();
    t.set(primary.clone(), "x");
    t.set(Cell::new("fate", "s", "v"), "y");
    let start = t.start_ts();
    t.commit().await.unwrap();
    let reads = |c: &Intercepted<percolator::kv::intercept::OpCounts>| {
        c.hooks().get(Op::Get) + c.hooks().get(Op::BatchGet) + c.hooks().get(Op::Scan)
    };
    let before = reads(&counted);
    let own = c.txn_status_with_ttl(&primary, start, 300).await.unwrap();
    assert!(matches!(own, TxnStatus::Committed(_)), "{own:?}");
    assert_eq!(
        reads(&counted) - before,
        0,
        "the writer knows its own commit"
    );
    // Another client asks.
    let asker = client_on(counted.clone(), test_config());
    let mut fates = Vec::new();
    for _ in 0..20 {
        fates.push(
            asker
                .txn_status_with_ttl(&primary, start, 300)
                .await
                .unwrap(),
        );
    }
    assert_eq!(fates[0], own, "the same commit_ts as the writer's");
    assert!(
        fates.iter().all(|f| matches!(f, TxnStatus::Committed(_))),
        "{fates:?}"
    );
    assert!(
        fates.windows(2).all(|w| w[0] == w[1]),
        "one commit_ts: {fates:?}"
    );
    assert_eq!(reads(&counted) - before, 1, "20 questions, one read");

    // A transaction still in flight (nothing written yet, its TTL not over): pending, and
    // read again each time.
    let live = c.begin().await.unwrap();
    let other = Cell::new("fate", "q", "v");
    let before = reads(&counted);
    for _ in 0..5 {
        let fate = c
            .txn_status_with_ttl(&other, live.start_ts(), 60_000)
            .await
            .unwrap();
        assert_eq!(fate, TxnStatus::Pending);
    }
    assert!(
        reads(&counted) - before >= 5,
        "an undecided fate is read each time"
    );
}

/// `Transaction::set_many` buffers what `set` one write after the other would: random
/// batches with repeated cells, over writes and deletes buffered before, read back the same
/// through the transaction and, once committed, from a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_many_buffers_what_sets_one_after_the_other_would() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5e7);
    for round in 0..20 {
        let c = memory_client();
        let (one_by_one, batched) = (c.begin().await.unwrap(), c.begin().await.unwrap());
        // Writes and deletes buffered before the batch.
        for i in 0..8 {
            if rng.gen_bool(0.5) {
                one_by_one.set(acct(i), format!("before{i}"));
                batched.set(acct(i), format!("before{i}"));
            } else if rng.gen_bool(0.5) {
                one_by_one.delete(acct(i));
                batched.delete(acct(i));
            }
        }
        let batch: Vec<(Cell, Vec<u8>)> = (0..rng.gen_range(0..40))
            .map(|w| {
                (
                    acct(rng.gen_range(0..16)),
                    format!("r{round}w{w}").into_bytes(),
                )
            })
            .collect();
        for (cell, value) in batch.clone() {
            one_by_one.set(cell, value);
        }
        batched.set_many(batch);
        let cells: Vec<Cell> = (0..16).map(acct).collect();
        let expected = one_by_one.get_many(&cells).await.unwrap();
        assert_eq!(
            batched.get_many(&cells).await.unwrap(),
            expected,
            "round {round}"
        );
        one_by_one.rollback();
        batched.commit().await.unwrap();
        let reader = c.begin().await.unwrap();
        assert_eq!(
            reader.get_many(&cells).await.unwrap(),
            expected,
            "round {round}"
        );
    }
}
