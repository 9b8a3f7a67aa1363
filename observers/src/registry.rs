//! Registration of observers on (table, column).

use crate::error::{ObserverError, WorkerError};
use async_trait::async_trait;
use percolator::{Cell, Client, FastMap, Transaction};
use std::future::Future;
use std::sync::Arc;

/// Code run when an observed cell changes. It gets the transaction it runs in (the framework
/// commits it and retries on conflicts) and the dirty cell.
///
/// A worker may hand an observer (strong or weak) several dirty cells in one transaction (a batch, up
/// to [`crate::WorkerConfig::batch_size`], or `max_batch_size` in a burst): it calls [`Observer::observe_batch`], whose
/// default calls [`Observer::observe`] for each cell in turn. Authors who do not want batches
/// implement `observe` only.
#[async_trait]
pub trait Observer: Send + Sync + 'static {
    /// Handles a change of `cell`; reads and writes go through `txn`.
    async fn observe(&self, txn: Transaction, cell: Cell) -> Result<(), ObserverError>;

    /// Handles changes of `cells` (distinct cells, in the worker's order) in one
    /// transaction. Cells of a batch see each other's writes: the transaction is shared, so
    /// a write made for one cell is read by the code run for a later one (as if the changes
    /// had been handled one after the other). Failing fails the whole batch; the worker then
    /// splits it and retries the halves, down to single cells, so a failing cell is
    /// reported (and dead-lettered) alone. Override it to batch reads across cells.
    async fn observe_batch(&self, txn: Transaction, cells: &[Cell]) -> Result<(), ObserverError> {
        for cell in cells {
            self.observe(txn.clone(), cell.clone()).await?;
        }
        Ok(())
    }

    /// What the worker calls for one cell: [`Observer::observe`], also told the commit_ts
    /// the notification states (the writer's, or that of a transaction that only notified;
    /// `None` for a weak one). A cell written twice before its observer ran has a
    /// notification per write and both runs read the newest write (a strong observer's
    /// acknowledgment covers the second; a guarded or weak observer runs it): an observer
    /// that wants to tell a repeat of a change from a later change overrides this and
    /// [`Observer::observe_changes`] (batches of more than one cell call that one). The
    /// default ignores the timestamp.
    async fn observe_change(
        &self,
        txn: Transaction,
        cell: Cell,
        commit_ts: Option<u64>,
    ) -> Result<(), ObserverError> {
        let _ = commit_ts;
        self.observe(txn, cell).await
    }

    /// What the worker calls for a batch: [`Observer::observe_batch`], also told the commit
    /// timestamp of the change behind each cell's notification (`commit_ts[i]` for
    /// `cells[i]`), as [`Observer::observe_change`] is. The default ignores the timestamps.
    async fn observe_changes(
        &self,
        txn: Transaction,
        cells: &[Cell],
        commit_ts: &[Option<u64>],
    ) -> Result<(), ObserverError> {
        let _ = commit_ts;
        self.observe_batch(txn, cells).await
    }
}

struct FnObserver<F>(F);

#[async_trait]
impl<F, Fut> Observer for FnObserver<F>
where
    F: Fn(Transaction, Cell) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), ObserverError>> + Send + 'static,
{
    async fn observe(&self, txn: Transaction, cell: Cell) -> Result<(), ObserverError> {
        (self.0)(txn, cell).await
    }
}

/// An [`Observer`] from an async closure `|txn, cell| async move { ... }`.
pub fn observer_fn<F, Fut>(f: F) -> Arc<dyn Observer>
where
    F: Fn(Transaction, Cell) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), ObserverError>> + Send + 'static,
{
    Arc::new(FnObserver(f))
}

/// An [`Observer`] from an async closure that gets a clone of `state` on every run:
/// `observer_fn_with(counter.clone(), |counter, txn, cell| async move { ... })`, where
/// [`observer_fn`] would need the clone spelled out before its `async move` block.
pub fn observer_fn_with<S, F, Fut>(state: S, f: F) -> Arc<dyn Observer>
where
    S: Clone + Send + Sync + 'static,
    F: Fn(S, Transaction, Cell) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), ObserverError>> + Send + 'static,
{
    observer_fn(move |txn, cell| f(state.clone(), txn, cell))
}

/// How an observer is triggered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObserverKind {
    /// Transactional: every committed write of the column notifies; at most one run commits
    /// per change (the acknowledgment column decides).
    Strong,
    /// Non-transactional: runs on explicit weak notifications, at least once, possibly more.
    Weak,
    /// Transactional like [`ObserverKind::Strong`] (every committed write of the column
    /// notifies, runs see only committed changes), but without the acknowledgment column:
    /// the observer's own transaction guards against a second run, which finds the first
    /// one's effect and writes nothing (e.g. an IdRegistry entry written with the output). Saves the
    /// acknowledgment's read and write (a lock and a commit) per change; see
    /// [`Registry::guarded`] for the contract.
    Guarded,
}

/// A registered observer.
#[derive(Clone)]
pub(crate) struct Registered {
    pub name: String,
    pub kind: ObserverKind,
    pub observer: Arc<dyn Observer>,
    /// How many of its transactions go at once ([`crate::lane`]).
    pub lane: Arc<crate::lane::Lane>,
}

/// The observers of an application, by (table, column).
#[derive(Clone, Default)]
pub struct Registry {
    /// table -> column -> observer (nested so lookups borrow the cell instead of cloning).
    observers: FastMap<Vec<u8>, FastMap<Vec<u8>, Registered>>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    fn add(
        &mut self,
        table: &[u8],
        column: &[u8],
        name: &str,
        kind: ObserverKind,
        observer: Arc<dyn Observer>,
    ) -> Result<&mut Self, WorkerError> {
        let columns = self.observers.entry(table.to_vec()).or_default();
        if columns.contains_key(column) {
            return Err(WorkerError::DuplicateObserver {
                table: table.escape_ascii().to_string(),
                column: column.escape_ascii().to_string(),
            });
        }
        columns.insert(
            column.to_vec(),
            Registered {
                name: name.to_string(),
                kind,
                observer,
                lane: Arc::default(),
            },
        );
        Ok(self)
    }

    /// Registers a strong (transactional) observer named `name` on `table`/`column`.
    pub fn strong(
        &mut self,
        table: impl AsRef<[u8]>,
        column: impl AsRef<[u8]>,
        name: &str,
        observer: Arc<dyn Observer>,
    ) -> Result<&mut Self, WorkerError> {
        self.add(
            table.as_ref(),
            column.as_ref(),
            name,
            ObserverKind::Strong,
            observer,
        )
    }

    /// Registers a weak observer named `name` on `table`/`column`.
    pub fn weak(
        &mut self,
        table: impl AsRef<[u8]>,
        column: impl AsRef<[u8]>,
        name: &str,
        observer: Arc<dyn Observer>,
    ) -> Result<&mut Self, WorkerError> {
        self.add(
            table.as_ref(),
            column.as_ref(),
            name,
            ObserverKind::Weak,
            observer,
        )
    }

    /// Registers a guarded observer named `name` on `table`/`column`: triggered like a
    /// strong one (every committed write of the column notifies; a run sees the change
    /// committed), run without the acknowledgment column.
    ///
    /// The contract the observer keeps: every run reads a guard cell and, when it finds the
    /// change already handled there, writes nothing; a run that handles the change writes
    /// the guard cell in the same transaction as its effects (any other write it may make
    /// must leave the same state when repeated). Runs of one change can repeat (a notify
    /// key whose delete failed, two workers meeting one key); two concurrent runs that
    /// both find the guard empty both write it, so snapshot isolation lets only one
    /// commit, and a later run sees the guard. So at most one committed run with effects
    /// per change still holds, for one read and one write (a lock and a commit) fewer per
    /// change than [`Registry::strong`]. Every run that has an effect must write the
    /// guard, and two runs that could both have an effect must write a common cell (photon's
    /// click join: `photon::design::join`).
    pub fn guarded(
        &mut self,
        table: impl AsRef<[u8]>,
        column: impl AsRef<[u8]>,
        name: &str,
        observer: Arc<dyn Observer>,
    ) -> Result<&mut Self, WorkerError> {
        self.add(
            table.as_ref(),
            column.as_ref(),
            name,
            ObserverKind::Guarded,
            observer,
        )
    }

    /// Declares every strong or guarded observer's column to `client`, so its writes
    /// notify. Writers (loaders) must call this too; [`crate::Worker::start`] does it for
    /// the worker's client.
    pub fn declare(&self, client: &Client) {
        for (table, columns) in &self.observers {
            for (column, r) in columns {
                if r.kind != ObserverKind::Weak {
                    client.observe_column(table, column);
                }
            }
        }
    }

    /// Every observed column, as (table, column, observer name).
    pub(crate) fn columns(&self) -> Vec<(Vec<u8>, Vec<u8>, String)> {
        self.observers
            .iter()
            .flat_map(|(table, columns)| {
                columns
                    .iter()
                    .map(|(c, r)| (table.clone(), c.clone(), r.name.clone()))
            })
            .collect()
    }

    pub(crate) fn get(&self, cell: &Cell) -> Option<&Registered> {
        self.observers.get(&cell.table)?.get(&cell.column)
    }

    /// The acknowledgment cell of the observer of `cell`'s column: same table and row, a
    /// reserved column holding the last commit_ts processed.
    pub fn ack_cell(cell: &Cell, observer_name: &str) -> Cell {
        let mut column = b"_ack/".to_vec();
        column.extend_from_slice(observer_name.as_bytes());
        column.push(b'/');
        column.extend_from_slice(&cell.column);
        Cell {
            table: cell.table.clone(),
            row: cell.row.clone(),
            column,
        }
    }
}
