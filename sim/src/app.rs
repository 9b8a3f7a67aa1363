//! The simulated application's observers: a strong observer on the events (recording each
//! committed run in its own transaction) whose output is observed by a guarded one (a
//! chain), a weak observer on pings and the timed window observer ([`crate::timed`]);
//! each process's worker runs photon's join beside them ([`crate::photon`]).

use crate::schema;
use observers::{observer_fn, ObserverError, Registry};
use percolator::{Cell, Client};
use std::sync::Arc;

/// The application's observers (without photon's join).
pub fn registry() -> Arc<Registry> {
    Arc::new(base())
}

/// The registry of process `p`'s worker `worker`: the application's observers and photon's
/// join of the process's pipeline ([`crate::photon::register`]).
pub fn process_registry(p: usize, worker: &str, client: &Client) -> Arc<Registry> {
    let mut r = base();
    crate::photon::register(&mut r, p, worker, client);
    Arc::new(r)
}

fn base() -> Registry {
    let mut r = Registry::new();
    r.strong(
        "events",
        "body",
        "count",
        observer_fn(|txn, cell: Cell| async move {
            let body = txn.get(&cell).await?;
            let runs = schema::runs(&cell.row, "strong");
            let n = schema::number(txn.get(&runs).await?).unwrap_or(0);
            txn.set(runs, (n + 1).to_string());
            if let Some(body) = body {
                txn.set(schema::derived(&cell.row), body.len().to_string());
            }
            Ok::<_, ObserverError>(())
        }),
    )
    .expect("one observer per column");
    r.guarded(
        "derived",
        "len",
        "total",
        observer_fn(|txn, cell: Cell| async move {
            let guard = schema::guard(&cell.row);
            if txn.get(&guard).await?.is_some() {
                return Ok(());
            }
            let runs = schema::runs(&cell.row, "guarded");
            let n = schema::number(txn.get(&runs).await?).unwrap_or(0);
            txn.set(runs, (n + 1).to_string());
            txn.set(guard, "1");
            Ok::<_, ObserverError>(())
        }),
    )
    .expect("one observer per column");
    weak_pings(&mut r);
    crate::timed::register(&mut r);
    r
}

/// The registry of the beacons' namespace: the weak observer alone, on a notify space
/// whose backlog is small, so its floor follows the clock closely.
pub fn floor_registry() -> Arc<Registry> {
    let mut r = Registry::new();
    weak_pings(&mut r);
    Arc::new(r)
}

/// The weak observer on pings, counting its runs (both namespaces run it).
fn weak_pings(r: &mut Registry) {
    r.weak(
        "pings",
        "hit",
        "pinged",
        observer_fn(|txn, cell: Cell| async move {
            let runs = schema::runs(&cell.row, "weak");
            let n = schema::number(txn.get(&runs).await?).unwrap_or(0);
            txn.set(runs, (n + 1).to_string());
            Ok::<_, ObserverError>(())
        }),
    )
    .expect("one observer per column");
}

/// Declares the application's columns to a client (every client of the namespace does),
/// photon's too.
pub fn declare(client: &Client, registry: &Registry) {
    client.write_once_column("events", "body");
    client.write_once_column("archive", "body");
    client.write_once_column("revised", "a");
    client.write_once_column("revised", "b");
    registry.declare(client);
    photon::schema::declare_columns(client);
}
