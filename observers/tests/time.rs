//! Event time (`observers::time`): a column's low watermark from its sources and pending
//! marks, published forward only; late changes; timers fired once, in time order per row,
//! by two drivers at once; resets, deletes and oracle-time timers.

use observers::time::{
    advance, delete_timer, fire_due, mark, on_timer_fn, pending, pending_timers, publish_source,
    published, set_timed, set_timer, take, Column, TimerAt,
};
use observers::ObserverError;
use percolator::kv::MemoryKv;
use percolator::ts::LocalClock;
use percolator::{Cell, Client, TxnError};
use rand::{Rng, SeedableRng};
use std::sync::Arc;

fn client() -> Client {
    Client::new(Arc::new(MemoryKv::new()), Arc::new(LocalClock::new()))
}

fn column() -> Column {
    Column::new("clicks", "event")
}

async fn source(client: &Client, name: &str, wm: u64, idle: bool) {
    client
        .run(|txn| async move {
            publish_source(&txn, &column(), name, wm, idle, 0).await?;
            Ok::<_, TxnError>(())
        })
        .await
        .expect("publish source");
}

async fn write(client: &Client, row: &str, event_time: u64) {
    client
        .run(|txn| async move {
            set_timed(&txn, Cell::new("clicks", row, "event"), "x", event_time).await?;
            Ok::<_, TxnError>(())
        })
        .await
        .expect("write");
}

async fn take_it(client: &Client, row: &str) -> Option<observers::time::Change> {
    client
        .run(|txn| async move { take(&txn, &Cell::new("clicks", row, "event")).await })
        .await
        .expect("take")
}

#[tokio::test]
async fn the_watermark_waits_for_pending_changes_and_never_moves_back() {
    let c = client();
    assert_eq!(advance(&c, &column()).await.unwrap(), None, "no source yet");
    source(&c, "a", 100, false).await;
    write(&c, "r1", 60).await;
    write(&c, "r1", 80).await; // the same cell again, later: it stays pending at 60
    assert_eq!(advance(&c, &column()).await.unwrap(), Some(60));
    source(&c, "a", 300, false).await;
    assert_eq!(
        advance(&c, &column()).await.unwrap(),
        Some(60),
        "r1 is pending"
    );
    let change = take_it(&c, "r1").await.expect("a timed change");
    assert_eq!((change.event_time_ms, change.late), (60, false));
    assert_eq!(take_it(&c, "r1").await, None, "taken once");
    assert_eq!(advance(&c, &column()).await.unwrap(), Some(300));
    // A second source that starts low does not move the published watermark back; its
    // changes below it are late.
    source(&c, "b", 10, false).await;
    write(&c, "r2", 20).await;
    assert_eq!(advance(&c, &column()).await.unwrap(), Some(300));
    let change = take_it(&c, "r2").await.unwrap();
    assert!(change.late, "{change:?}");
    assert_eq!(change.watermark_ms, Some(300));
    // A source's own watermark never moves back either.
    source(&c, "a", 200, false).await;
    let snap = c.begin().await.unwrap();
    let marks = observers::time::sources(&snap, &column()).await.unwrap();
    assert!(
        marks.iter().any(|(n, m)| n == "a" && m.watermark_ms == 300),
        "{marks:?}"
    );
    // b holds the computed value at 10 until it goes idle; then a's 300 counts, and once
    // a ends (u64::MAX) and b is idle, the greatest idle value: b's.
    source(&c, "b", 400, false).await;
    source(&c, "a", 500, false).await;
    assert_eq!(advance(&c, &column()).await.unwrap(), Some(400));
    source(&c, "b", 400, true).await;
    assert_eq!(advance(&c, &column()).await.unwrap(), Some(500));
    source(&c, "a", u64::MAX, false).await;
    assert_eq!(advance(&c, &column()).await.unwrap(), Some(u64::MAX));
    assert_eq!(
        published(&c.begin().await.unwrap(), &column())
            .await
            .unwrap(),
        Some(u64::MAX)
    );
}

/// Marks taken by runs that roll back (a conflict, a failure) stay: the watermark waits.
#[tokio::test]
async fn a_rolled_back_run_leaves_its_change_pending() {
    let c = client();
    source(&c, "a", 1_000, false).await;
    write(&c, "r", 5).await;
    let txn = c.begin().await.unwrap();
    assert!(take(&txn, &Cell::new("clicks", "r", "event"))
        .await
        .unwrap()
        .is_some());
    txn.rollback();
    assert_eq!(advance(&c, &column()).await.unwrap(), Some(5));
    let (least, count) = pending(&c.begin().await.unwrap(), &column()).await.unwrap();
    assert_eq!((least, count), (Some(5), 1));
    // A mark written alone (a cell written elsewhere) at or above the watermark holds it
    // the same way; one below it is a late change, which holds nothing.
    c.run(|txn| async move {
        mark(&txn, &Cell::new("clicks", "s", "event"), 7).await?;
        mark(&txn, &Cell::new("clicks", "late", "event"), 3).await?;
        Ok::<_, TxnError>(())
    })
    .await
    .unwrap();
    assert_eq!(advance(&c, &column()).await.unwrap(), Some(5), "never back");
    take_it(&c, "r").await.unwrap();
    assert_eq!(
        advance(&c, &column()).await.unwrap(),
        Some(7),
        "s at 7 still pending"
    );
    take_it(&c, "s").await.unwrap();
    assert_eq!(
        advance(&c, &column()).await.unwrap(),
        Some(1_000),
        "the late one holds nothing"
    );
    assert!(take_it(&c, "late").await.unwrap().late);
}

/// The log a handler appends each firing to, per row: `tag@time` lines.
async fn log_of(c: &Client, row: &[u8]) -> Vec<String> {
    let txn = c.begin().await.unwrap();
    let v = txn.get(&Cell::new("log", row, "fired")).await.unwrap();
    String::from_utf8(v.unwrap_or_default())
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn appending_handler() -> Arc<dyn observers::time::OnTimer> {
    on_timer_fn(|txn, timer| async move {
        let cell = Cell::new("log", &timer.row, "fired");
        let mut log = txn.get(&cell).await?.unwrap_or_default();
        let at = match timer.at {
            TimerAt::EventTime(t) | TimerAt::OracleTime(t) => t,
        };
        log.extend_from_slice(format!("{}@{at}\n", timer.tag).as_bytes());
        txn.set(cell, log);
        Ok::<_, ObserverError>(())
    })
}

/// Random timers on a few rows, moved and deleted at random; the watermark raised in steps
/// while two passes fire at once: every timer still set fires once, at its last time, and
/// each row's firings come in time order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_fire_once_in_time_order_per_row_under_two_drivers() {
    for seed in 0..4u64 {
        let c = client();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut expected: std::collections::BTreeMap<(Vec<u8>, String), u64> = Default::default();
        for _ in 0..120 {
            let row = format!("row{}", rng.gen_range(0..6)).into_bytes();
            let tag = format!("t{}", rng.gen_range(0..5));
            if rng.gen_bool(0.15) {
                let (r, t) = (row.clone(), tag.clone());
                c.run(|txn| {
                    let (r, t) = (r.clone(), t.clone());
                    async move { delete_timer(&txn, "obs", &r, &t).await }
                })
                .await
                .unwrap();
                expected.remove(&(row, tag));
                continue;
            }
            let at = rng.gen_range(1..1_000u64);
            let (r, t) = (row.clone(), tag.clone());
            c.run(|txn| {
                let (r, t) = (r.clone(), t.clone());
                async move { set_timer(&txn, "obs", &r, &t, TimerAt::EventTime(at)).await }
            })
            .await
            .unwrap();
            expected.insert((row, tag), at);
        }
        let (events, oracle) = pending_timers(&c.begin().await.unwrap(), "obs")
            .await
            .unwrap();
        assert_eq!((events as usize, oracle), (expected.len(), 0));
        let handler = appending_handler();
        for step in [250u64, 500, 750, 1_001] {
            source(&c, "src", step, false).await;
            let drive = || {
                let (c, handler) = (c.clone(), handler.clone());
                tokio::spawn(async move {
                    loop {
                        let r = fire_due(&c, "obs", Some(&column()), handler.as_ref(), 7)
                            .await
                            .expect("a pass");
                        assert_eq!(r.failed, 0);
                        if !r.more {
                            return;
                        }
                    }
                })
            };
            let (a, b) = (drive(), drive());
            a.await.unwrap();
            b.await.unwrap();
            // A third pass finds nothing left below the watermark.
            let r = fire_due(&c, "obs", Some(&column()), handler.as_ref(), 1_000)
                .await
                .unwrap();
            assert_eq!(r.fired, 0, "seed {seed} step {step}");
        }
        for row in (0..6).map(|i| format!("row{i}").into_bytes()) {
            let log = log_of(&c, &row).await;
            let mut want: Vec<(u64, String)> = expected
                .iter()
                .filter(|((r, _), _)| *r == row)
                .map(|((_, t), at)| (*at, format!("{t}@{at}")))
                .collect();
            want.sort();
            let times: Vec<u64> = log
                .iter()
                .map(|l| l.rsplit('@').next().unwrap().parse().unwrap())
                .collect();
            assert!(
                times.windows(2).all(|w| w[0] <= w[1]),
                "seed {seed}: out of order {log:?}"
            );
            let mut got = log.clone();
            got.sort();
            let mut want: Vec<String> = want.into_iter().map(|(_, l)| l).collect();
            want.sort();
            assert_eq!(
                got,
                want,
                "seed {seed}, row {}",
                String::from_utf8_lossy(&row)
            );
        }
        let (events, _) = pending_timers(&c.begin().await.unwrap(), "obs")
            .await
            .unwrap();
        assert_eq!(events, 0);
    }
}

#[tokio::test]
async fn oracle_time_timers_fire_once_the_oracle_passes_them() {
    let c = client();
    let now = c.begin().await.unwrap().start_ts().physical_ms();
    for (tag, at) in [("past", now - 1), ("future", now + 3_600_000)] {
        c.run(
            |txn| async move { set_timer(&txn, "obs", b"r", tag, TimerAt::OracleTime(at)).await },
        )
        .await
        .unwrap();
    }
    let handler = appending_handler();
    let r = fire_due(&c, "obs", None, handler.as_ref(), 10)
        .await
        .unwrap();
    assert_eq!((r.fired, r.watermark_ms), (1, None));
    assert_eq!(log_of(&c, b"r").await, vec![format!("past@{}", now - 1)]);
    let (_, oracle) = pending_timers(&c.begin().await.unwrap(), "obs")
        .await
        .unwrap();
    assert_eq!(oracle, 1);
}

/// A handler that fails leaves its timer (tried again), and a later timer of the same row
/// waits for it.
#[tokio::test]
async fn a_failing_handler_keeps_its_timer_and_holds_its_row() {
    let c = client();
    for (tag, at) in [("first", 10), ("second", 20)] {
        c.run(|txn| async move { set_timer(&txn, "obs", b"r", tag, TimerAt::EventTime(at)).await })
            .await
            .unwrap();
    }
    source(&c, "src", 100, false).await;
    let fail = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let handler = {
        let fail = fail.clone();
        let inner = appending_handler();
        on_timer_fn(move |txn, timer| {
            let (fail, inner) = (fail.clone(), inner.clone());
            async move {
                if fail.load(std::sync::atomic::Ordering::Relaxed) && timer.tag == "first" {
                    return Err(ObserverError::failed("not yet"));
                }
                inner.on_timer(txn, timer).await
            }
        })
    };
    let r = fire_due(&c, "obs", Some(&column()), handler.as_ref(), 10)
        .await
        .unwrap();
    assert_eq!((r.fired, r.failed, r.skipped), (0, 1, 1));
    fail.store(false, std::sync::atomic::Ordering::Relaxed);
    let r = fire_due(&c, "obs", Some(&column()), handler.as_ref(), 10)
        .await
        .unwrap();
    assert_eq!(r.fired, 2);
    assert_eq!(log_of(&c, b"r").await, vec!["first@10", "second@20"]);
}

/// What operators read: every timed column with its sources and pending changes, and the
/// timers waiting per observer.
#[tokio::test]
async fn operators_see_columns_sources_pending_changes_and_timers() {
    let c = client();
    source(&c, "loader", 700, true).await;
    write(&c, "r", 650).await;
    advance(&c, &column()).await.unwrap();
    c.run(|txn| async move {
        set_timer(&txn, "obs", b"r", "a", TimerAt::EventTime(10)).await?;
        set_timer(&txn, "obs", b"r", "b", TimerAt::OracleTime(10)).await?;
        set_timer(&txn, "other", b"r", "a", TimerAt::EventTime(10)).await
    })
    .await
    .unwrap();
    let snap = c.begin().await.unwrap();
    let columns = observers::time::columns(&snap).await.unwrap();
    assert_eq!(columns.len(), 1);
    let col = &columns[0];
    assert_eq!(col.column, column());
    assert_eq!(col.published_ms, Some(650));
    assert_eq!(col.pending, (Some(650), 1));
    assert_eq!(col.sources.len(), 1);
    assert!(col.sources[0].1.idle);
    let timers = observers::time::all_pending_timers(&snap).await.unwrap();
    assert_eq!(
        timers,
        vec![("obs".to_string(), 1, 1), ("other".to_string(), 1, 0)]
    );
}

fn worker(c: &Client, id: &str) -> observers::Worker {
    let config = observers::WorkerConfig {
        id: id.to_string(),
        idle_interval: std::time::Duration::from_millis(20),
        max_idle_interval: std::time::Duration::from_millis(200),
        heartbeat: std::time::Duration::from_millis(100),
        ..observers::WorkerConfig::default()
    };
    observers::Worker::start(c.clone(), Arc::new(observers::Registry::new()), config)
}

async fn set_many(c: &Client, rows: std::ops::Range<u32>) {
    for i in rows {
        c.run(|txn| async move {
            set_timer(
                &txn,
                "obs",
                format!("row{i}").as_bytes(),
                "t",
                TimerAt::EventTime(10),
            )
            .await
        })
        .await
        .unwrap();
    }
}

async fn wait_fired(c: &Client) {
    tokio::time::timeout(std::time::Duration::from_secs(60), async {
        loop {
            let t = c.begin().await.unwrap();
            let (events, _) = pending_timers(&t, "obs").await.unwrap();
            t.rollback();
            if events == 0 {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("every timer fired");
}

/// Drivers on two workers split the timers by the workers' shares and fire each once; when
/// one worker leaves, the other fires the timers of its share too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drivers_on_workers_split_the_timers_and_hand_them_over() {
    let c = client();
    let (a, b) = (worker(&c, "a"), worker(&c, "b"));
    a.wait_until_settled().await;
    b.wait_until_settled().await;
    source(&c, "src", 100, false).await;
    let spec = || {
        let mut spec = observers::time::TimerSpec::new("obs", Some(column()), appending_handler());
        spec.poll = std::time::Duration::from_millis(20);
        spec
    };
    let (da, db) = (
        observers::time::TimerDriver::start_on(&a, spec()),
        observers::time::TimerDriver::start_on(&b, spec()),
    );
    set_many(&c, 0..200).await;
    wait_fired(&c).await;
    // The per-row logs prove each timer fired once (the drivers' counters are added at the
    // end of a pass, after its last commit).
    for i in 0..200 {
        assert_eq!(log_of(&c, format!("row{i}").as_bytes()).await, vec!["t@10"]);
    }
    db.shutdown().await;
    b.shutdown().await;
    set_many(&c, 200..300).await;
    wait_fired(&c).await;
    for i in 200..300 {
        assert_eq!(log_of(&c, format!("row{i}").as_bytes()).await, vec!["t@10"]);
    }
    da.shutdown().await;
    a.shutdown().await;
}

/// A timed change whose observer keeps failing is dead-lettered with its mark set aside (the
/// watermark goes on); replayed, it is marked again and its run told it is late.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_lettered_change_does_not_hold_the_watermark_and_is_late_when_replayed() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let c = client();
    source(&c, "src", 1_000, false).await;
    let failing = Arc::new(AtomicBool::new(true));
    let seen: Arc<std::sync::Mutex<Vec<observers::time::Change>>> = Default::default();
    let mut registry = observers::Registry::new();
    {
        let (failing, seen) = (failing.clone(), seen.clone());
        registry
            .strong(
                "clicks",
                "event",
                "obs",
                observers::time::timed_observer_fn(move |_txn, _cell, change| {
                    let (failing, seen) = (failing.clone(), seen.clone());
                    async move {
                        if failing.load(Ordering::Relaxed) {
                            return Err(ObserverError::failed("not today"));
                        }
                        seen.lock().unwrap().extend(change);
                        Ok(())
                    }
                }),
            )
            .unwrap();
    }
    let config = observers::WorkerConfig {
        id: "w".to_string(),
        max_failures: 2,
        retry_backoff: std::time::Duration::from_millis(5),
        idle_interval: std::time::Duration::from_millis(20),
        ..observers::WorkerConfig::default()
    };
    let w = observers::Worker::start(c.clone(), Arc::new(registry), config);
    write(&c, "r", 5).await;
    let letters = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        loop {
            let letters = observers::DeadLetter::list(&c).await.unwrap();
            if !letters.is_empty() {
                return letters;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("dead-lettered");
    assert_eq!(
        advance(&c, &column()).await.unwrap(),
        Some(1_000),
        "not held"
    );
    failing.store(false, Ordering::Relaxed);
    letters[0].replay(&c).await.unwrap();
    w.wait_until_quiescent().await.unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!((seen[0].event_time_ms, seen[0].late), (5, true));
    w.shutdown().await;
}

/// `held`: a change at or above every source's watermark held the column's watermark until
/// its run; one below a source's (the loader let it be late) may not have.
#[tokio::test]
async fn a_change_at_or_above_the_sources_held_the_watermark() {
    let c = client();
    source(&c, "a", 100, false).await;
    source(&c, "b", 300, true).await; // idle, but an advance may have used it
    write(&c, "low", 200).await;
    write(&c, "high", 300).await;
    assert!(!take_it(&c, "low").await.unwrap().held);
    let high = take_it(&c, "high").await.unwrap();
    assert!(high.held && !high.late, "{high:?}");
}

/// A column written only by observers of another (a later stage) waits for its upstream
/// column: its watermark never passes a change pending upstream, nor one pending at itself.
#[tokio::test]
async fn a_downstream_column_waits_for_its_upstream_column() {
    use observers::time::{compute, declare_upstream, forget_upstream};
    let c = client();
    let totals = Column::new("totals", "count");
    let upstream = || async {
        c.run(|txn| async move {
            declare_upstream(&txn, &Column::new("totals", "count"), &column()).await
        })
        .await
        .unwrap()
    };
    upstream().await;
    assert_eq!(
        advance(&c, &totals).await.unwrap(),
        None,
        "no source upstream yet: changes of any time may come"
    );
    source(&c, "a", 100, false).await;
    write(&c, "r1", 60).await;
    assert_eq!(
        advance(&c, &totals).await.unwrap(),
        Some(60),
        "r1 pending upstream"
    );
    // The observer of clicks/event takes r1 and writes its output, timed at r1's time, in
    // one transaction: the change moves from upstream to downstream, never out of sight.
    c.run(|txn| async move {
        let change = take(&txn, &Cell::new("clicks", "r1", "event"))
            .await?
            .expect("a timed change");
        set_timed(
            &txn,
            Cell::new("totals", "r1", "count"),
            "1",
            change.event_time_ms,
        )
        .await?;
        Ok::<_, TxnError>(())
    })
    .await
    .unwrap();
    assert_eq!(advance(&c, &column()).await.unwrap(), Some(100));
    assert_eq!(
        advance(&c, &totals).await.unwrap(),
        Some(60),
        "r1 pending downstream"
    );
    let change = c
        .run(|txn| async move { take(&txn, &Cell::new("totals", "r1", "count")).await })
        .await
        .unwrap()
        .expect("timed");
    assert!(!change.late);
    assert!(
        !change.held,
        "a column with an upstream column is never held"
    );
    assert_eq!(advance(&c, &totals).await.unwrap(), Some(100));
    source(&c, "a", 250, false).await;
    assert_eq!(
        advance(&c, &totals).await.unwrap(),
        Some(250),
        "follows upstream"
    );

    // An upstream column that no source feeds yet leaves the downstream one without a
    // watermark; a cycle of upstream columns adds nothing and ends.
    let (g, h) = (Column::new("g", "v"), Column::new("h", "v"));
    c.run(|txn| {
        let (g, h) = (g.clone(), h.clone());
        async move {
            declare_upstream(&txn, &g, &h).await?;
            declare_upstream(&txn, &h, &g).await?;
            declare_upstream(&txn, &g, &Column::new("nowhere", "v")).await
        }
    })
    .await
    .unwrap();
    assert_eq!(compute(&c.begin().await.unwrap(), &h).await.unwrap(), None);
    c.run(|txn| {
        let g = g.clone();
        async move {
            forget_upstream(&txn, &g, &Column::new("nowhere", "v")).await?;
            declare_upstream(&txn, &g, &column()).await
        }
    })
    .await
    .unwrap();
    let snap = c.begin().await.unwrap();
    assert_eq!(compute(&snap, &h).await.unwrap(), Some(250));
    assert_eq!(compute(&snap, &g).await.unwrap(), Some(250));
    // A change pending in the cycle holds both.
    c.run(|txn| async move { set_timed(&txn, Cell::new("h", "x", "v"), "y", 90).await })
        .await
        .unwrap();
    let snap = c.begin().await.unwrap();
    assert_eq!(compute(&snap, &g).await.unwrap(), Some(90));
    assert_eq!(compute(&snap, &h).await.unwrap(), Some(90));
    // Operators see the chain.
    let listed = observers::time::columns(&snap).await.unwrap();
    let of = |col: &Column| {
        listed
            .iter()
            .find(|t| t.column == *col)
            .map(|t| t.upstreams.clone())
    };
    assert_eq!(of(&totals), Some(vec![column()]));
    assert_eq!(of(&g), Some(vec![h.clone(), column()]));
}

/// Two loaders of one source: only the one at the stored watermark (or past it) sets the
/// source's idle flag.
#[tokio::test]
async fn a_loader_behind_another_of_its_source_does_not_set_the_idle_flag() {
    let c = client();
    let idle = |c: &Client| {
        let c = c.clone();
        async move {
            let snap = c.begin().await.unwrap();
            let marks = observers::time::sources(&snap, &column()).await.unwrap();
            let (_, mark) = marks.iter().find(|(n, _)| n == "s").expect("source s");
            (mark.watermark_ms, mark.idle)
        }
    };
    source(&c, "s", 500, false).await; // loader A, loading
    source(&c, "s", 300, true).await; // loader B, idle behind it
    assert_eq!(
        idle(&c).await,
        (500, false),
        "B's idleness says nothing of A"
    );
    source(&c, "s", 500, true).await; // A idle at the front
    assert_eq!(idle(&c).await, (500, true));
    source(&c, "s", 300, false).await; // B loading behind: its records are late anyway
    assert_eq!(idle(&c).await, (500, true));
    source(&c, "s", 600, false).await; // B passes the front: loading
    assert_eq!(idle(&c).await, (600, false));
}
