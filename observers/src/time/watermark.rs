//! Sources' watermarks, pending-change markers, and the low watermark of a column computed
//! from them and published (never moving back). The argument: `crate::design::time`.

use super::keys::{self, SourceMark};
use percolator::{Cell, Client, Transaction, TxnError};
use std::future::Future;
use std::pin::Pin;

/// A timed column: a (table, column) whose changes carry an event time.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Column {
    /// The table.
    pub table: Vec<u8>,
    /// The column.
    pub column: Vec<u8>,
}

impl Column {
    /// The column `table`/`column`.
    pub fn new(table: impl AsRef<[u8]>, column: impl AsRef<[u8]>) -> Self {
        Column {
            table: table.as_ref().to_vec(),
            column: column.as_ref().to_vec(),
        }
    }

    /// The column of `cell`.
    pub fn of(cell: &Cell) -> Self {
        Column::new(&cell.table, &cell.column)
    }

    pub(crate) fn id(&self) -> Result<Vec<u8>, TxnError> {
        keys::column_id(&self.table, &self.column)
    }
}

impl std::fmt::Display for Column {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{}",
            self.table.escape_ascii(),
            self.column.escape_ascii()
        )
    }
}

/// Stores, in `txn`, source `source`'s watermark for `column`: `watermark_ms` unless the
/// source already stored a later one (a source's watermark never moves back, whichever of
/// two loaders of the same input writes it), and whether it is idle. A source that
/// publishes for a column holds that column's watermark back from then on (until it is idle
/// or its input ends: `u64::MAX`).
///
/// Only a writer at the stored watermark or past it sets the idle flag: of two loaders of
/// one source, one idle behind the other does not mark the source idle while the other
/// loads (it flipped the flag back and forth, and the column's watermark passed what the
/// loading one was about to write), and one loading behind an idle one does not clear it
/// (what it loads is below the stored watermark, late whatever the flag says).
pub async fn publish_source(
    txn: &Transaction,
    column: &Column,
    source: &str,
    watermark_ms: u64,
    idle: bool,
    wall_ms: u64,
) -> Result<SourceMark, TxnError> {
    let cell = keys::source_cell(&column.id()?, source);
    let old = match txn.get(&cell).await? {
        Some(bytes) => Some(SourceMark::decode(&cell, &bytes)?),
        None => None,
    };
    let idle = match old {
        Some(o) if watermark_ms < o.watermark_ms => o.idle,
        _ => idle,
    };
    let mark = SourceMark {
        watermark_ms: old.map_or(watermark_ms, |o| o.watermark_ms.max(watermark_ms)),
        idle,
        updated_ms: wall_ms,
    };
    if old.is_none_or(|o| o.watermark_ms != mark.watermark_ms || o.idle != mark.idle) {
        txn.set(cell, mark.encode());
    }
    Ok(mark)
}

/// Every source's stored watermark for `column`, by source name.
pub async fn sources(
    txn: &Transaction,
    column: &Column,
) -> Result<Vec<(String, SourceMark)>, TxnError> {
    let prefix = keys::source_prefix(&column.id()?);
    let end = keys::prefix_end(&prefix);
    let rows = txn
        .scan(keys::WATERMARK_TABLE.as_bytes(), &prefix, end.as_deref())
        .await?;
    rows.into_iter()
        .map(|(cell, bytes)| {
            let mark = SourceMark::decode(&cell, &bytes)?;
            Ok((keys::source_name(&prefix, &cell.row), mark))
        })
        .collect()
}

/// Declares, in `txn`, `upstream` an upstream column of `column`: observers of `upstream`
/// write `column`'s timed changes ([`crate::time::set_timed`]) at or above the event time of
/// the change they take, so `column`'s watermark waits for `upstream`'s (MillWheel's
/// injected low watermark of a later stage: a column written only by observers has no
/// source of its own). Kept until [`forget_upstream`]; declaring it again writes nothing.
pub async fn declare_upstream(
    txn: &Transaction,
    column: &Column,
    upstream: &Column,
) -> Result<(), TxnError> {
    let cell = keys::upstream_cell(&column.id()?, &upstream.id()?);
    if txn.get(&cell).await?.is_none() {
        txn.set(cell, Vec::new());
    }
    Ok(())
}

/// Removes `upstream` from `column`'s upstream columns (no observer writes `column` from it
/// any more). The watermark then no longer waits for it.
pub async fn forget_upstream(
    txn: &Transaction,
    column: &Column,
    upstream: &Column,
) -> Result<(), TxnError> {
    txn.delete(keys::upstream_cell(&column.id()?, &upstream.id()?));
    Ok(())
}

/// The upstream columns of `column` ([`declare_upstream`]).
pub async fn upstreams(txn: &Transaction, column: &Column) -> Result<Vec<Column>, TxnError> {
    let prefix = keys::upstream_prefix(&column.id()?);
    let end = keys::prefix_end(&prefix);
    let rows = txn
        .scan(keys::WATERMARK_TABLE.as_bytes(), &prefix, end.as_deref())
        .await?;
    rows.into_iter()
        .map(|(cell, _)| {
            cell.row
                .get(prefix.len()..)
                .and_then(keys::take_part)
                .and_then(|(table, rest)| Some(Column::new(table, keys::take_part(rest)?.0)))
                .ok_or_else(|| keys::corrupt(&cell, "an upstream row"))
        })
        .collect()
}

/// The smallest pending event time of `column` (markers of changes not yet observed), and
/// how many cells have one.
pub async fn pending(txn: &Transaction, column: &Column) -> Result<(Option<u64>, u64), TxnError> {
    let prefix = column.id()?;
    let end = keys::prefix_end(&prefix);
    let rows = txn
        .scan(keys::PENDING_TABLE.as_bytes(), &prefix, end.as_deref())
        .await?;
    let mut least: Option<u64> = None;
    for (cell, bytes) in &rows {
        let e = keys::be_u64(bytes).ok_or_else(|| keys::corrupt(cell, "a pending marker"))?;
        least = Some(least.map_or(e, |l| l.min(e)));
    }
    Ok((least, rows.len() as u64))
}

/// The low watermark of `column` as of `txn`'s snapshot, from its inputs and its pending
/// changes: the smaller of its inputs' watermark ([`inputs_watermark`]: its sources' and its
/// upstream columns') and the least pending event time. `None` while it has no input with a
/// watermark (no source ever published for it, nor for its upstream columns).
pub async fn compute(txn: &Transaction, column: &Column) -> Result<Option<u64>, TxnError> {
    compute_visiting(txn, column, &mut Vec::new()).await
}

/// [`compute`], leaving out the columns in `visiting` (the chain that led here: a cycle of
/// upstream columns adds nothing, its changes all start at some source or pending mark).
fn compute_visiting<'a>(
    txn: &'a Transaction,
    column: &'a Column,
    visiting: &'a mut Vec<Column>,
) -> Pin<Box<dyn Future<Output = Result<Option<u64>, TxnError>> + Send + 'a>> {
    Box::pin(async move {
        let Some(from_inputs) = inputs_visiting(txn, column, visiting).await? else {
            return Ok(None);
        };
        // The least pending event time from the published watermark up to the inputs': a
        // mark below the published watermark is a late change, which holds nothing (the
        // watermark passed it already), and one at or above the inputs' does not lower the
        // result. The by-time index makes this a read of that range, not of every mark.
        let from = published(txn, column).await?.unwrap_or(0);
        let least_pending = if from < from_inputs {
            least_pending_between(txn, column, from, from_inputs).await?
        } else {
            None
        };
        Ok(Some(
            least_pending.map_or(from_inputs, |p| p.min(from_inputs)),
        ))
    })
}

/// The inputs' part of `column`'s watermark as of `txn`'s snapshot: the least of its
/// sources' ([`sources_watermark`]) and of each upstream column's computed watermark
/// ([`compute`]). `None` while neither gives one, or an upstream column has none yet (it
/// may still receive changes of any event time).
pub async fn inputs_watermark(txn: &Transaction, column: &Column) -> Result<Option<u64>, TxnError> {
    inputs_visiting(txn, column, &mut Vec::new()).await
}

async fn inputs_visiting(
    txn: &Transaction,
    column: &Column,
    visiting: &mut Vec<Column>,
) -> Result<Option<u64>, TxnError> {
    let mut least = sources_watermark(txn, column).await?;
    let nested = !visiting.is_empty();
    visiting.push(column.clone());
    for upstream in upstreams(txn, column).await? {
        if visiting.contains(&upstream) {
            // Back to a column of the chain that led here: its changes come from that
            // column's other inputs, which the caller counts. Here it bounds nothing.
            if nested {
                least = least.or(Some(u64::MAX));
            }
            continue;
        }
        let Some(w) = compute_visiting(txn, &upstream, visiting).await? else {
            visiting.pop();
            return Ok(None);
        };
        least = Some(least.map_or(w, |l| l.min(w)));
    }
    visiting.pop();
    Ok(least)
}

/// The least event time of a pending change of `column` in `[from, below)`, from the
/// by-time index.
async fn least_pending_between(
    txn: &Transaction,
    column: &Column,
    from: u64,
    below: u64,
) -> Result<Option<u64>, TxnError> {
    let id = column.id()?;
    let (mut start, mut end) = (id.clone(), id.clone());
    start.extend_from_slice(&from.to_be_bytes());
    end.extend_from_slice(&below.to_be_bytes());
    let rows = txn
        .scan(keys::PENDING_BY_TIME_TABLE.as_bytes(), &start, Some(&end))
        .await?;
    match rows.first() {
        Some((cell, _)) => Ok(Some(
            cell.row
                .get(id.len()..)
                .and_then(keys::be_u64)
                .ok_or_else(|| keys::corrupt(cell, "a by-time index row"))?,
        )),
        None => Ok(None),
    }
}

/// The sources' part of `column`'s watermark as of `txn`'s snapshot: the least of the
/// sources that are not idle (when every one is idle, the least of all). `None` while no
/// source ever published for the column.
pub async fn sources_watermark(
    txn: &Transaction,
    column: &Column,
) -> Result<Option<u64>, TxnError> {
    let sources = sources(txn, column).await?;
    let active = sources
        .iter()
        .filter(|(_, m)| !m.idle)
        .map(|(_, m)| m.watermark_ms)
        .min();
    Ok(active.or_else(|| sources.iter().map(|(_, m)| m.watermark_ms).min()))
}

/// The published low watermark of `column` as of `txn`'s snapshot (`None`: never
/// published). A change of the column with an event time below it is late.
pub async fn published(txn: &Transaction, column: &Column) -> Result<Option<u64>, TxnError> {
    let cell = keys::published_cell(&column.id()?);
    match txn.get(&cell).await? {
        Some(bytes) => {
            Ok(Some(keys::be_u64(&bytes).ok_or_else(|| {
                keys::corrupt(&cell, "a published watermark")
            })?))
        }
        None => Ok(None),
    }
}

/// Computes `column`'s low watermark and publishes it if it is later than the published one
/// (one transaction: the computation's snapshot and the publication commit together, or
/// not at all). Returns the published watermark afterwards.
pub async fn advance(client: &Client, column: &Column) -> Result<Option<u64>, TxnError> {
    client
        .run(|txn| async move {
            let old = published(&txn, column).await?;
            let Some(computed) = compute(&txn, column).await? else {
                return Ok(old);
            };
            if old.is_some_and(|o| o >= computed) {
                return Ok(old);
            }
            txn.set(
                keys::published_cell(&column.id()?),
                computed.to_be_bytes().to_vec(),
            );
            tracing::debug!(%column, from = ?old, to = computed, start_ts = %txn.start_ts(), "watermark advance");
            Ok::<_, TxnError>(Some(computed))
        })
        .await
}

/// One timed column as operators see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ColumnTime {
    /// The column.
    pub column: Column,
    /// Its published low watermark (`u64::MAX`: every source's input ended).
    pub published_ms: Option<u64>,
    /// Its sources' stored watermarks.
    pub sources: Vec<(String, SourceMark)>,
    /// Its upstream columns ([`declare_upstream`]).
    pub upstreams: Vec<Column>,
    /// The least pending event time and the number of cells with a pending change.
    pub pending: (Option<u64>, u64),
}

/// Every timed column of the namespace (every column with a source, an upstream column or a
/// published watermark), read in `txn`'s snapshot.
pub async fn columns(txn: &Transaction) -> Result<Vec<ColumnTime>, TxnError> {
    let rows = txn
        .scan(keys::WATERMARK_TABLE.as_bytes(), b"", None)
        .await?;
    let mut found: std::collections::BTreeSet<Column> = Default::default();
    for (cell, _) in &rows {
        let id = &cell.row[1.min(cell.row.len())..];
        if let Some((table, rest)) = keys::take_part(id) {
            if let Some((column, _)) = keys::take_part(rest) {
                found.insert(Column::new(table, column));
            }
        }
    }
    let mut out = Vec::with_capacity(found.len());
    for column in found {
        out.push(ColumnTime {
            published_ms: published(txn, &column).await?,
            sources: sources(txn, &column).await?,
            upstreams: upstreams(txn, &column).await?,
            pending: pending(txn, &column).await?,
            column,
        });
    }
    Ok(out)
}
