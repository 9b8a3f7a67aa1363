//! `locks [--resolve]`: locks held on cells.

use crate::render::{self, table};
use crate::{Answer, CtlError};
use observers::admin;
use percolator::Client;
use serde_json::json;

/// Every lock, and with `resolve` every lock resolved (crashed writers rolled forward or
/// back, live ones waited for).
pub async fn locks(client: &Client, resolve: bool) -> Result<Answer, CtlError> {
    let locks = admin::locks(client).await?;
    let rows: Vec<Vec<String>> = locks
        .iter()
        .map(|l| vec![render::cell(&l.cell), render::lock(l)])
        .collect();
    let mut text = table(&["CELL", "LOCK"], &rows);
    text.push_str(&format!(
        "{} locks, {} older than their TTL\n",
        locks.len(),
        locks.iter().filter(|l| l.expired).count()
    ));
    let mut resolved = None;
    if resolve {
        let n = client.resolve_all_locks().await?;
        text.push_str(&format!("resolved {n} locks\n"));
        resolved = Some(n);
    }
    let json = json!({
        "locks": locks.iter().map(render::lock_json).collect::<Vec<_>>(),
        "resolved": resolved,
    });
    Ok(Answer::ok(text, json))
}
