//! Revised write-once cells: a few cells of a write-once column written again and again,
//! each write at random as records (beside an ordinary cell, the primary) or through the
//! cell's head (a transaction of write-once cells only), read by readers on a client of
//! their own whose reads GC overtakes: their fate checks (of a pending record's primary)
//! and their record scans are held while the cell is written again and a GC pass collects
//! the record they are about to answer (holes 4 and 7 of the write-once GC races,
//! `tests/tests/txn_gc_races.rs`).
//!
//! Each write writes one version `n` to the cell's two columns, `a` (the first, so the one
//! a transaction of write-once cells only writes through its head) and `b` (always a
//! record). Each process writes cells of its own, one task per cell, so versions only grow
//! (a crashed incarnation's write is decided before the next incarnation's begins: its
//! primary is never committed after the crash): a snapshot begun after version `n` was
//! acknowledged reads `a` and `b` equal and at `n` or later, or `SnapshotTooOld`.
//!
//! Cells are written in bursts: a write after a pause of 3-8 s, most often a second one
//! 0.3-1.2 s later. A reader
//! is told of the first write of a burst and reads the cell at once, between the two: it
//! meets the first write's record pending and checks its fate, or has its record scan
//! held, while the second write is committed and a GC pass passes it.

use crate::model::Shared;
use crate::workload::{commit_retrying, Ctx};
use percolator::{Cell, TxnError};
use std::collections::{BTreeMap, VecDeque};

/// Cells each process writes.
pub const CELLS_PER_PROCESS: u64 = 3;

/// The pause before a burst, ms.
const PAUSE: (u64, u64) = (2_000, 6_000);

/// The pause before a burst's second write, ms.
const AGAIN: (u64, u64) = (300, 1_200);

/// What the harness knows of the revised cells.
#[derive(Debug, Default)]
pub struct RevisionModel {
    /// The last version drawn for each cell (a write of it may be unacknowledged).
    pub drawn: BTreeMap<u64, u64>,
    /// The newest version acknowledged committed for each cell.
    pub acked: BTreeMap<u64, u64>,
    /// Cells whose write was just acknowledged and will be written again at once: a
    /// reader reads each (its snapshot between the two writes).
    pub fresh: VecDeque<u64>,
    /// Reads the readers completed (answered or refused).
    pub reads: u64,
    /// Reads refused `SnapshotTooOld`.
    pub too_old: u64,
}

/// The cells process `p` writes.
pub fn cells_of(p: usize) -> impl Iterator<Item = u64> {
    let p = p as u64;
    p * CELLS_PER_PROCESS..(p + 1) * CELLS_PER_PROCESS
}

/// Every revised cell.
pub fn all(processes: usize) -> impl Iterator<Item = u64> {
    0..processes as u64 * CELLS_PER_PROCESS
}

/// Column `col` (`a` or `b`) of revised cell `k`.
pub fn cell(k: u64, col: &str) -> Cell {
    Cell::new("revised", format!("r{k}"), col)
}

/// The ordinary cell a write as records writes beside them (its primary).
pub fn primary(k: u64) -> Cell {
    Cell::new("revisions", format!("r{k}"), "n")
}

fn body(k: u64, n: u64) -> String {
    format!("r{k} v{n}")
}

fn version(k: u64, v: &[u8]) -> Option<u64> {
    std::str::from_utf8(v)
        .ok()?
        .strip_prefix(&format!("r{k} v"))?
        .parse()
        .ok()
}

/// The columns whose record scans the fault layer holds: `a`'s and `b`'s of every cell.
pub fn columns(processes: usize) -> Vec<Cell> {
    all(processes)
        .flat_map(|k| [cell(k, "a"), cell(k, "b")])
        .collect()
}

/// The writer of cell `k`: bursts of one or two versions, each through the head or as
/// records, retried until acknowledged.
pub async fn reviser(ctx: Ctx, k: u64) {
    let mut again = false;
    loop {
        let (low, high) = if again { AGAIN } else { PAUSE };
        tokio::time::sleep(ctx.rng.millis(low, high)).await;
        again = !again && ctx.rng.chance(0.7);
        let n = ctx.model.with(|m| {
            let n = m.revisions.drawn.entry(k).or_insert(0);
            *n += 1;
            *n
        });
        let through_head = ctx.rng.chance(0.5);
        let value = body(k, n);
        let done = commit_retrying(&ctx, "revise", |txn| {
            let value = value.clone();
            async move {
                if !through_head {
                    txn.set(primary(k), n.to_string());
                }
                txn.set(cell(k, "a"), value.clone());
                txn.set(cell(k, "b"), value);
                Ok(())
            }
        })
        .await;
        if done.is_none() {
            return;
        }
        tracing::debug!(k, n, through_head, "revised");
        ctx.model.with(|m| {
            let acked = m.revisions.acked.entry(k).or_insert(0);
            *acked = (*acked).max(n);
            if again {
                m.revisions.fresh.push_back(k);
            }
        });
    }
}

/// Readers: a read of each cell just written once a burst began (read between its two
/// writes), and every 0.4-1.2 s of a random cell, each in a task of its own (a held read
/// does not hold up the next; at most `RANDOM_READS` random ones at once); the tasks
/// end with this one (a crash).
pub async fn readers(ctx: Ctx, processes: usize) {
    let mut fresh_reads = tokio::task::JoinSet::new();
    let mut random_reads = tokio::task::JoinSet::new();
    let cells = processes as u64 * CELLS_PER_PROCESS;
    loop {
        tokio::time::sleep(ctx.rng.millis(100, 300)).await;
        while fresh_reads.try_join_next().is_some() {}
        while random_reads.try_join_next().is_some() {}
        while let Some(k) = ctx.model.with(|m| m.revisions.fresh.pop_front()) {
            fresh_reads.spawn(read(ctx.clone(), k));
        }
        if random_reads.len() < RANDOM_READS && ctx.rng.chance(0.25) {
            random_reads.spawn(read(ctx.clone(), ctx.rng.range(0, cells)));
        }
    }
}

/// Reads of random revised cells one reader process runs at once.
const RANDOM_READS: usize = 3;

/// One read of cell `k`: begins a snapshot after noting its newest acknowledged version,
/// reads both its columns at once (or `b` alone), and checks them.
async fn read(ctx: Ctx, k: u64) {
    // Acknowledged before the snapshot's start_ts is drawn: committed below it.
    let known = ctx
        .model
        .with(|m| m.revisions.acked.get(&k).copied().unwrap_or(0));
    let Ok(txn) = ctx.client.begin().await else {
        return;
    };
    let asked = tokio::time::Instant::now();
    // Half the reads read `b` alone: its older records are decided by another primary
    // than its newer ones when the writes took different paths, so a read of `b` can be
    // answered by an older record when a newer one is wrongly skipped (a read of `a`
    // answered by its head is checked against the safe point).
    let read = if ctx.rng.chance(0.5) {
        txn.get_many(&[cell(k, "a"), cell(k, "b")]).await
    } else {
        txn.get(&cell(k, "b")).await.map(|b| vec![b.clone(), b])
    };
    tracing::debug!(p = ctx.process, k, known, start_ts = %txn.start_ts(), ?read, took = ?asked.elapsed(), "read a revised cell");
    txn.rollback();
    match read {
        Ok(values) => {
            ctx.model.with(|m| m.revisions.reads += 1);
            check_read(&ctx.model, k, known, &values, &format!("p{}", ctx.process));
        }
        Err(TxnError::SnapshotTooOld { .. }) => ctx.model.with(|m| {
            m.revisions.reads += 1;
            m.revisions.too_old += 1;
        }),
        Err(_) => {}
    }
}

/// Checks one read of cell `k`'s columns by a snapshot begun after version `known` was
/// acknowledged: both columns hold one version, at `known` or later.
fn check_read(model: &Shared, k: u64, known: u64, values: &[Option<Vec<u8>>], who: &str) {
    let show = |v: &Option<Vec<u8>>| v.as_ref().map(|v| String::from_utf8_lossy(v).into_owned());
    let (a, b) = (&values[0], &values[1]);
    let n = a.as_deref().and_then(|v| version(k, v));
    if a != b || (a.is_some() && n.is_none()) {
        model.violation(format!(
            "{who}: revised cell r{k} read as a {:?}, b {:?} in one snapshot (written together)",
            show(a),
            show(b)
        ));
    } else if n.unwrap_or(0) < known {
        model.violation(format!(
            "{who}: revised cell r{k} read as {:?} by a snapshot begun after version {known} \
             was acknowledged",
            show(a)
        ));
    }
}

/// The final check: every revised cell reads its newest acknowledged version or a later one.
pub async fn check(
    client: &percolator::Client,
    model: &Shared,
    processes: usize,
) -> Result<(), TxnError> {
    for k in all(processes) {
        let known = model.with(|m| m.revisions.acked.get(&k).copied().unwrap_or(0));
        let values = client
            .run(|txn| async move { txn.get_many(&[cell(k, "a"), cell(k, "b")]).await })
            .await?;
        check_read(model, k, known, &values, "final");
    }
    Ok(())
}
