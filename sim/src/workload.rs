//! The workload's actors, each a loop a process runs until it crashes or chaos ends:
//! loaders, retention deletes, weak notifications, cycle transactions with their check,
//! readers with stalled snapshots, and GC passes. Every transaction is retried on transient
//! errors (the store or oracle failing under the seed's faults), as an application does.

use crate::model::Shared;
use crate::rng::SimRng;
use crate::schema::{self, RING};
use percolator::{Client, Timestamp, TxnError};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// What every actor of a process holds.
#[derive(Clone, Debug)]
pub struct Ctx {
    /// The process's index.
    pub process: usize,
    /// The process's client.
    pub client: Client,
    /// The harness's model.
    pub model: Shared,
    /// The seed's generator.
    pub rng: SimRng,
    /// The seed's faults (GC actors wait on their kick, [`crate::faults::Faults::kick`]).
    pub faults: Arc<crate::faults::Faults>,
}

/// Runs `body` until it commits or fails with an error that is not transient; transient
/// failures (conflicts, an unreachable store or oracle, an unknown commit outcome) are
/// retried after a pause. A non-transient failure is a violation.
pub(crate) async fn commit_retrying<T, F, Fut>(ctx: &Ctx, what: &str, mut body: F) -> Option<T>
where
    F: FnMut(percolator::Transaction) -> Fut,
    Fut: std::future::Future<Output = Result<T, TxnError>>,
{
    loop {
        match ctx.client.run(&mut body).await {
            Ok(v) => {
                ctx.model.with(|m| m.transactions += 1);
                return Some(v);
            }
            Err(e) if e.is_transient() => {
                tokio::time::sleep(ctx.rng.millis(5, 100)).await;
            }
            Err(e) => {
                ctx.model
                    .violation(format!("p{} {what}: unexpected error {e}", ctx.process));
                return None;
            }
        }
    }
}

/// Loader `j`: takes its source from the committed offset in batches of 1-4 entries (one in
/// five of 20-40 in burst seeds, `Model::bursts`); each
/// batch re-reads the offset, writes every event not seen before (dedup through an
/// ordinary cell both loaders write) and the new offset, in one transaction.
pub async fn loader(ctx: Ctx, j: usize) {
    let source = ctx.model.with(|m| m.sources[j].clone());
    loop {
        tokio::time::sleep(ctx.rng.millis(100, 500)).await;
        let mut take = ctx.rng.range(1, 5) as usize;
        // A burst now and then in burst seeds (their own draws: other seeds keep theirs).
        if ctx.model.with(|m| m.bursts) && ctx.rng.chance(0.2) {
            take = ctx.rng.range(20, 41) as usize;
        }
        let written = commit_retrying(&ctx, "load", |txn| {
            let source = &source;
            async move {
                let pos = schema::number(txn.get(&schema::offset(j)).await?).unwrap_or(0) as usize;
                let end = (pos + take).min(source.len());
                let mut written = Vec::new();
                for &id in &source[pos..end] {
                    if txn.get(&schema::seen(id)).await?.is_none() && !written.contains(&id) {
                        txn.set(schema::seen(id), "L");
                        txn.set(schema::event(id), schema::event_body(id));
                        txn.set(schema::archive(id), schema::event_body(id));
                        written.push(id);
                    }
                }
                txn.set(schema::offset(j), end.to_string());
                Ok(written)
            }
        })
        .await;
        let Some(written) = written else { return };
        let now = Instant::now();
        ctx.model.with(|m| {
            for id in written {
                m.loaded.insert(id, now);
            }
        });
        if ctx.rng.chance(0.2) {
            let n = ctx.rng.range(0, schema::PING_ROWS);
            if ctx.client.weak_notify(&schema::ping(n)).await.is_ok() {
                ctx.model.with(|m| m.pings.insert(n));
            }
        }
    }
}

/// Beacons: weak notifications of fresh rows every 20-200 ms (numbered on from the last
/// row any incarnation of the process used), each acknowledged one to be observed at least
/// once. On a host whose clock is behind they go in the bucket of the floor this client
/// last saw, while scanners raise it past them (invariant N2).
pub async fn beacons(ctx: Ctx) {
    loop {
        tokio::time::sleep(ctx.rng.millis(20, 200)).await;
        let seq = ctx.model.with(|m| {
            let seq = m.beacon_seqs.entry(ctx.process).or_default();
            *seq += 1;
            *seq
        });
        let cell = schema::beacon(ctx.process, seq);
        if ctx.client.weak_notify(&cell).await.is_ok() {
            let p = ctx.process;
            ctx.model.with(|m| m.beacons.insert((p, seq)));
        }
    }
}

/// How long a machine must have been slow before its commits are judged: its client has
/// measured a slow round trip by then (leases carry twice the slowest recent one).
pub const SLOW_WARMUP: Duration = Duration::from_secs(2);

/// A lease writer: commits its process's lease cell again and again (a one-cell write; other
/// processes' pokers read it and fence an expired lock). A commit fenced (`Aborted`) while
/// its machine was slow, but no slower than for [`SLOW_WARMUP`] before it began, with no
/// outage or takeover around it, is a live commit fenced: leases must carry twice the
/// slowest recent round trip (`percolator::design::commit`).
pub async fn lease_writer(ctx: Ctx) {
    let p = ctx.process;
    // A new incarnation's client has measured nothing yet: judged only after its warm-up.
    let born = Instant::now();
    let mut seq = 0u64;
    loop {
        tokio::time::sleep(ctx.rng.millis(100, 400)).await;
        seq += 1;
        let began = Instant::now();
        let Ok(txn) = ctx.client.begin().await else {
            continue;
        };
        txn.set(schema::lease(p), schema::lease_value(seq));
        let outcome = txn.commit().await;
        let ended = Instant::now();
        let judged = ctx.model.with(|m| {
            m.lease_commits += 1;
            let slow = m.slow_episodes.iter().any(|&(q, from, until)| {
                q == p && from.max(born) + SLOW_WARMUP <= began && ended <= until
            });
            let quiet = !m
                .disturbances
                .iter()
                .any(|&(from, until)| from <= ended && began <= until + Duration::from_secs(1));
            let judged = slow && quiet;
            m.lease_commits_slow += u64::from(judged);
            judged
        });
        if let Err(TxnError::Aborted { start_ts }) = outcome {
            tracing::debug!(p, start_ts, judged, took = ?ended - began, "lease commit fenced");
            if judged {
                ctx.model.violation(format!(
                    "p{p} lease commit {start_ts} fenced while it ran ({:?}) on a machine slow \
                     for {SLOW_WARMUP:?} before it began",
                    ended - began
                ));
            }
        }
    }
}

/// A poker: reads every lease cell now and then (resolving the locks it meets: waiting on a
/// live one, fencing an expired one). A committed lease whose out-of-line value is gone (a
/// `Corrupt` read at a fresh snapshot, which GC cannot explain) is a violation.
pub async fn poker(ctx: Ctx) {
    let cells: Vec<_> = (0..crate::world::PROCESSES).map(schema::lease).collect();
    loop {
        tokio::time::sleep(ctx.rng.millis(100, 300)).await;
        let cells = &cells;
        let read = ctx
            .client
            .run(|txn| async move { txn.get_many(cells).await })
            .await;
        if let Err(e @ TxnError::Corrupt { .. }) = read {
            ctx.model
                .violation(format!("p{} read a lease: {e}", ctx.process));
        }
    }
}

/// Retention: now and then deletes one loaded event (a head delete of a write-once cell).
pub async fn retention(ctx: Ctx) {
    loop {
        tokio::time::sleep(ctx.rng.millis(500, 2500)).await;
        let candidates: Vec<u64> = ctx.model.with(|m| {
            m.loaded
                .keys()
                .filter(|id| !m.delete_tried.contains_key(id))
                .copied()
                .collect()
        });
        if candidates.is_empty() {
            continue;
        }
        // The event a stalled reader is about to read, now and then: written again (deleted)
        // after its snapshot, while its fate check may be held (issue 38, hole 4).
        let target = ctx
            .model
            .with(|m| m.reader_target.take())
            .filter(|id| candidates.contains(id));
        let id = match target {
            Some(id) if ctx.rng.chance(0.7) => id,
            _ => candidates[ctx.rng.index(candidates.len())],
        };
        tracing::debug!(id, targeted = target == Some(id), "retention deletes");
        ctx.model
            .with(|m| m.delete_tried.insert(id, Instant::now()));
        // Half the deletes in the marking transaction (the delete is a write-once record),
        // half in a transaction of their own (a transaction of write-once cells only writes
        // through the head: a head delete). A crash between the two leaves the delete to
        // the liveness phase ([`finish_deletes`]).
        let alone = ctx.rng.chance(0.5);
        let done = commit_retrying(&ctx, "retention", |txn| async move {
            if txn.get(&schema::seen(id)).await?.as_deref() == Some(b"L") {
                txn.set(schema::seen(id), "D");
                if !alone {
                    txn.delete(schema::event(id));
                    txn.delete(schema::archive(id));
                }
            }
            Ok(())
        })
        .await;
        if done.is_none() {
            return;
        }
        tracing::debug!(id, alone, "retention marked");
        if alone && delete_alone(&ctx, id).await.is_none() {
            return;
        }
    }
}

/// Deletes event `id` in a transaction that writes nothing else (the head path), once:
/// before each attempt a transaction of its own reads whether it is still there (a
/// transaction that read a write-once cell may not write it), so an attempt whose outcome
/// was unknown is not repeated once it applied. Only this caller deletes the event.
async fn delete_alone(ctx: &Ctx, id: u64) -> Option<()> {
    delete_cell_alone(ctx, id, schema::event(id)).await?;
    delete_cell_alone(ctx, id, schema::archive(id)).await
}

async fn delete_cell_alone(ctx: &Ctx, id: u64, cell: percolator::Cell) -> Option<()> {
    loop {
        let cell = &cell;
        let present = commit_retrying(ctx, "retention read", |txn| async move {
            Ok(txn.get(cell).await?.is_some())
        })
        .await?;
        if !present {
            return Some(());
        }
        let outcome = ctx
            .client
            .run(|txn| async move {
                txn.delete(cell.clone());
                Ok::<_, TxnError>(())
            })
            .await;
        match outcome {
            Ok(()) => {
                ctx.model.with(|m| m.transactions += 1);
                return Some(());
            }
            Err(e) if e.is_transient() => tokio::time::sleep(ctx.rng.millis(5, 100)).await,
            Err(e) => {
                ctx.model.violation(format!(
                    "p{} retention delete of event {id}: unexpected error {e}",
                    ctx.process
                ));
                return None;
            }
        }
    }
}

/// The liveness phase's end of deletes a crash cut short: every event marked deleted is
/// deleted (again, harmlessly, where it already was).
pub async fn finish_deletes(ctx: &Ctx, ids: impl IntoIterator<Item = u64>) {
    for id in ids {
        let seen = ctx
            .client
            .run(|txn| async move { txn.get(&schema::seen(id)).await })
            .await;
        if let Ok(Some(b)) = seen {
            if b == b"D" {
                delete_alone(ctx, id).await;
            }
        }
    }
}

/// Now and then a transaction reads an event and writes it again (nothing else): the
/// store must refuse it (`TxnError::WrittenOnce`), a write-once cell read by a
/// transaction is never written by it.
pub async fn rewriter(ctx: Ctx) {
    loop {
        tokio::time::sleep(ctx.rng.millis(1_000, 4_000)).await;
        let candidates: Vec<u64> = ctx.model.with(|m| m.loaded.keys().copied().collect());
        if candidates.is_empty() {
            continue;
        }
        let id = candidates[ctx.rng.index(candidates.len())];
        let outcome = ctx
            .client
            .run(|txn| async move {
                let body = txn.get(&schema::event(id)).await?;
                if let Some(body) = &body {
                    txn.set(schema::event(id), body.clone());
                }
                Ok::<_, TxnError>(body.is_some())
            })
            .await;
        if let Ok(true) = outcome {
            ctx.model.violation(format!(
                "p{} a transaction read event {id} and wrote it again, and committed",
                ctx.process
            ));
        }
    }
}

/// Now and then pages through a few rows of the archive around a recent retention delete
/// (a mix of records and head deletes GC has not collected yet), at page sizes 1, 2 and 3,
/// and compares the pages with a full scan of the same snapshot: a page is full unless the
/// range is exhausted (issue 38, hole 5).
pub async fn pager(ctx: Ctx) {
    loop {
        tokio::time::sleep(ctx.rng.millis(300, 1_500)).await;
        let now = Instant::now();
        let (recent, loaded): (Vec<u64>, Vec<u64>) = ctx.model.with(|m| {
            (
                m.delete_tried
                    .iter()
                    .filter(|(_, at)| now.duration_since(**at) < Duration::from_secs(12))
                    .map(|(id, _)| *id)
                    .collect(),
                m.loaded.keys().copied().collect(),
            )
        });
        let id = if !recent.is_empty() && ctx.rng.chance(0.8) {
            recent[ctx.rng.index(recent.len())]
        } else if !loaded.is_empty() {
            loaded[ctx.rng.index(loaded.len())]
        } else {
            continue;
        };
        let start = schema::event_row(id.saturating_sub(ctx.rng.range(0, 4)));
        let end = schema::event_row(id + ctx.rng.range(1, 6));
        check_pages(&ctx, start.as_bytes(), end.as_bytes()).await;
    }
}

async fn check_pages(ctx: &Ctx, start: &[u8], end: &[u8]) {
    let Ok(txn) = ctx.client.begin().await else {
        return;
    };
    let full = match txn.scan(b"archive", start, Some(end)).await {
        Ok(full) => full,
        Err(_) => return,
    };
    let Ok(snapshot) = ctx.client.snapshot_at(txn.start_ts()).await else {
        return;
    };
    txn.rollback();
    const MAX_PAGES: usize = 12;
    for limit in [1usize, 2, 3] {
        let mut paged = Vec::new();
        let mut after: Option<percolator::Cell> = None;
        let mut exhausted = false;
        for _ in 0..MAX_PAGES {
            let page = match snapshot
                .scan_page(b"archive", start, Some(end), after.as_ref(), limit)
                .await
            {
                Ok(page) => page,
                Err(_) => return,
            };
            let short = page.len() < limit;
            after = page.last().map(|(c, _)| c.clone()).or(after);
            paged.extend(page);
            if short {
                exhausted = true;
                break;
            }
        }
        let want = if exhausted {
            &full[..]
        } else {
            &full[..paged.len().min(full.len())]
        };
        if paged.as_slice() != want {
            let rows = |cells: &[(percolator::Cell, Vec<u8>)]| {
                cells
                    .iter()
                    .map(|(c, _)| String::from_utf8_lossy(&c.row).into_owned())
                    .collect::<Vec<_>>()
            };
            ctx.model.violation(format!(
                "p{} snapshot {}: pages of {limit} over archive rows {}..{} return {:?}, \
                 a scan {:?}",
                ctx.process,
                snapshot.start_ts(),
                String::from_utf8_lossy(start),
                String::from_utf8_lossy(end),
                rows(&paged),
                rows(&full)
            ));
            return;
        }
    }
}

/// Whether `next` (ring key -> next key) is one cycle through every key.
pub fn is_ring(next: &[Option<u64>]) -> bool {
    let mut at = 0u64;
    for step in 1..=RING {
        match next.get(at as usize).copied().flatten() {
            Some(n) if n < RING => at = n,
            _ => return false,
        }
        if at == 0 {
            return step == RING;
        }
    }
    false
}

/// FoundationDB's Cycle: each transaction reads a key, the next and the one after, and
/// rewires them so the ring stays one cycle; every few transactions a snapshot of the whole
/// ring is checked.
pub async fn cycle(ctx: Ctx) {
    loop {
        tokio::time::sleep(ctx.rng.millis(20, 250)).await;
        let a = ctx.rng.range(0, RING);
        let ok = commit_retrying(&ctx, "cycle", |txn| async move {
            let get = |i: u64| {
                let txn = txn.clone();
                async move {
                    let v = txn.get(&schema::ring(i)).await?;
                    schema::number(v)
                        .filter(|n| *n < RING)
                        .ok_or_else(|| TxnError::User(format!("ring key {i} holds no key")))
                }
            };
            let r = get(a).await?;
            let r2 = get(r).await?;
            let r3 = get(r2).await?;
            txn.set(schema::ring(a), r2.to_string());
            txn.set(schema::ring(r), r3.to_string());
            txn.set(schema::ring(r2), r.to_string());
            Ok(())
        })
        .await;
        if ok.is_none() {
            return;
        }
        if ctx.rng.chance(0.2) {
            check_ring_now(&ctx).await;
        }
    }
}

/// Reads the whole ring in one snapshot and checks it is one cycle.
async fn check_ring_now(ctx: &Ctx) {
    let Ok(txn) = ctx.client.begin().await else {
        return;
    };
    match read_ring(&txn).await {
        Ok(next) if !is_ring(&next) => ctx.model.violation(format!(
            "p{} snapshot {} of the ring is not one cycle: {next:?}",
            ctx.process,
            txn.start_ts()
        )),
        _ => {}
    }
    txn.rollback();
}

async fn read_ring(txn: &percolator::Transaction) -> Result<Vec<Option<u64>>, TxnError> {
    let cells: Vec<_> = (0..RING).map(schema::ring).collect();
    Ok(txn
        .get_many(&cells)
        .await?
        .into_iter()
        .map(schema::number)
        .collect())
}

/// A reader that begins a snapshot, stalls (past GC's lag at times), then reads the ring
/// and an event it knew committed before it began: each read is its snapshot's value or
/// `SnapshotTooOld`, never anything else.
pub async fn stalled_reader(ctx: Ctx) {
    loop {
        tokio::time::sleep(ctx.rng.millis(200, 1500)).await;
        let Ok(txn) = ctx.client.begin().await else {
            continue;
        };
        let began = Instant::now();
        let known: Vec<u64> = ctx.model.with(|m| {
            m.loaded
                .iter()
                .filter(|(id, at)| **at < began && !m.delete_tried.contains_key(id))
                .map(|(id, _)| *id)
                .collect()
        });
        // Half the time the newest: its record may still be pending (its fate is checked
        // on the read), and retention is asked to delete it after our snapshot began.
        let newest = ctx.model.with(|m| {
            known
                .iter()
                .copied()
                .max_by_key(|id| (m.loaded.get(id).copied(), *id))
        });
        let event = match newest {
            Some(id) if ctx.rng.chance(0.5) => {
                ctx.model.with(|m| m.reader_target = Some(id));
                Some(id)
            }
            _ => (!known.is_empty()).then(|| known[ctx.rng.index(known.len())]),
        };
        let stall = if ctx.rng.chance(0.3) {
            ctx.rng.millis(3_000, 12_000)
        } else {
            ctx.rng.millis(0, 1_500)
        };
        tokio::time::sleep(stall).await;
        let p = ctx.process;
        let ts = txn.start_ts();
        match read_ring(&txn).await {
            Ok(next) if !is_ring(&next) => ctx.model.violation(format!(
                "p{p} stalled snapshot {ts} of the ring is not one cycle: {next:?}"
            )),
            Err(TxnError::SnapshotTooOld { .. }) => ctx.model.with(|m| m.too_old += 1),
            _ => {}
        }
        if let Some(id) = event {
            let asked = Instant::now();
            let read = txn.get(&schema::event(id)).await;
            tracing::debug!(p, id, ?read, took = ?asked.elapsed(), "stalled read of an event");
            match read {
                Ok(Some(v)) if v == schema::event_body(id) => {}
                Ok(other) => ctx.model.violation(format!(
                    "p{p} stalled snapshot {ts} read event {id} (committed before it began, \
                     not deleted) as {:?}",
                    other.map(|v| String::from_utf8_lossy(&v).into_owned())
                )),
                Err(TxnError::SnapshotTooOld { .. }) => ctx.model.with(|m| m.too_old += 1),
                Err(_) => {}
            }
        }
        txn.rollback();
    }
}

/// The periodic GC of one process: a pass every 1-4 s at the oldest safe point the lag
/// allows; now and then two passes at once from this process.
pub async fn gc(ctx: Ctx, lag: Duration) {
    // A process's GC starts a while after it does (unless a held fate check kicks it), so
    // workers coming back to an old backlog meet it mid-way.
    tokio::select! {
        biased;
        _ = ctx.faults.kick.notified() => {}
        _ = tokio::time::sleep(ctx.rng.millis(0, 5_000)) => {}
    }
    loop {
        // Passes start near whole seconds of simulated time, so the periodic passes of
        // different processes overlap often (as leases taken on skewed clocks let them).
        let period = ctx.rng.range(1, 4) * 1_000;
        let wait = period - (ctx.client.wall_ms() % 1_000) + ctx.rng.range(0, 30);
        // A held fate check starts a pass at once: it may run whole while the held one waits.
        tokio::select! {
            biased;
            _ = ctx.faults.kick.notified() => {}
            _ = tokio::time::sleep(Duration::from_millis(wait)) => {}
        }
        if ctx.model.with(|m| m.gc_paused) {
            continue;
        }
        let passes = if ctx.rng.chance(0.15) { 2 } else { 1 };
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..passes {
            let ctx = ctx.clone();
            // A pass that failed on a fault of the store is tried again soon (a pass fails
            // whole on one failed call, and most would under the seed's faults).
            set.spawn(async move {
                for _ in 0..4 {
                    if gc_pass(&ctx, lag).await {
                        break;
                    }
                    tokio::time::sleep(ctx.rng.millis(20, 200)).await;
                }
            });
        }
        while set.join_next().await.is_some() {}
    }
}

/// One GC pass, counted in the model (and as an overlap if another is running); `false`
/// if it failed on a transient fault.
pub async fn gc_pass(ctx: &Ctx, lag: Duration) -> bool {
    let Ok(now) = ctx.client.oracle().get_timestamp().await else {
        return false;
    };
    let lag_ms = lag.as_millis() as u64 + 50;
    let Some(ms) = now.physical_ms().checked_sub(lag_ms) else {
        return true;
    };
    let safe_point = Timestamp::compose(ms, 0);
    let _running = Running::start(&ctx.model);
    let began = Instant::now();
    let result = ctx.client.gc(safe_point).await;
    tracing::debug!(p = ctx.process, %safe_point, ?result, took = ?began.elapsed(), "gc pass");
    if result.is_ok() {
        // Photon's GC pass goes on with the handled parked-click index.
        if let Err(e) = crate::photon::purge_parked(&ctx.client, safe_point.physical_ms()).await {
            if !e.is_transient() {
                ctx.model
                    .violation(format!("p{} purge of the parked index: {e}", ctx.process));
            }
        }
    }
    match result {
        Ok(_) => true,
        Err(e) if e.is_transient() => false,
        Err(TxnError::InvalidArgument(_)) => true,
        Err(e) => {
            ctx.model
                .violation(format!("p{} gc at {safe_point}: {e}", ctx.process));
            true
        }
    }
}

/// A GC pass in flight (counted down when dropped, also by a crash).
struct Running(Shared);

impl Running {
    fn start(model: &Shared) -> Self {
        model.with(|m| {
            m.gc_passes += 1;
            if m.gc_running > 0 {
                m.gc_overlaps += 1;
            }
            m.gc_running += 1;
        });
        Running(model.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.with(|m| m.gc_running -= 1);
    }
}
