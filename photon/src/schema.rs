//! Where Photon keeps its data: tables and cells (all in one namespace).

use percolator::{Cell, Client};

/// Queries: `queries/<query_id>/event` (observed).
pub const QUERIES: &str = "queries";
/// Clicks: `clicks/<click_id>/event` (observed).
pub const CLICKS: &str = "clicks";
/// The IdRegistry: one entry per click id, `idregistry/id/<click_id>/token` (whatever the
/// event times of the click's deliveries), and its index by event day,
/// `idregistry/day/<day:08>/<click_id>/entry`, by which GC finds the entries of the days
/// behind its boundary (`photon::design::join`, "IdRegistry"). Stores written before hold
/// entries keyed `idregistry/<day:08>/<click_id>/token` (read by the join and purged by day
/// until they fall behind the boundary).
pub const IDREGISTRY: &str = "idregistry";
/// Joined output: `joined/<click_id>/<token>` (one column per join: duplicates are visible).
pub const JOINED: &str = "joined";
/// Clicks waiting for their query: `pending/<query_id>/clicks` (a JSON list of click ids).
pub const PENDING: &str = "pending";
/// Per-click outcome other than joined: `outcomes/<click_id>/outcome`.
pub const OUTCOMES: &str = "outcomes";
/// Loader progress: `loader/<file>/offset`.
pub const LOADER: &str = "loader";
/// Control cells (the IdRegistry GC boundary).
pub const CONTROL: &str = "control";
/// The column of a query or click holding the event (a click's is observed).
pub const EVENT: &str = "event";
/// The column of a query row that holds nothing and is only notified: a notification there
/// runs the query's wake observer (by a park on the query, and by the wake check of the
/// loader's batch that loaded the query, when clicks wait for it). Loading a query notifies
/// nobody otherwise: most queries have no click waiting, and a wake run per query was more
/// than half of all observer runs.
pub const WAKE: &str = "wake";
/// The loader's wake checks: a row per committed batch that loaded queries (see
/// [`wake_check_cell`]).
pub const WAKE_CHECKS: &str = "wakechecks";
/// The observed column of a wake check: the batch's query ids (a JSON list).
pub const QUERY_IDS: &str = "queries";

/// Photon's tables and their ids (`percolator::design::layout`, "Table ids"): keys carry
/// the id instead of the name. An id, once given, is never changed or reused; a new table
/// takes a new id (a store extends its map; an older build opening it then is refused, and
/// one already running meets keys with an id it does not know).
pub const TABLES: [(&str, u16); 10] = [
    (QUERIES, 1),
    (CLICKS, 2),
    (IDREGISTRY, 3),
    (JOINED, 4),
    (PENDING, 5),
    (OUTCOMES, 6),
    (LOADER, 7),
    (CONTROL, 8),
    (WAKE_CHECKS, 9),
    (crate::parked::PARKED, 10),
];

/// [`TABLES`] as the key codec takes them.
pub fn table_ids() -> percolator::codec::TableIds {
    percolator::codec::TableIds::new(TABLES)
        .expect("TABLES names each table once and gives each its own id")
}

/// A client configuration for photon's tables in `namespace`: keyed by [`table_ids`]. The
/// store must hold the same map: declare it first
/// ([`percolator::txn::declare_table_ids`]; the binaries open their clients through
/// `percolator_cli::store::open_client` with `Some(&table_ids())`, which does), or a tool
/// reading the store with the store's map would not find these cells.
pub fn client_config(namespace: &str) -> percolator::ClientConfig {
    percolator::ClientConfig {
        table_ids: table_ids(),
        ..percolator::ClientConfig::with_namespace(namespace)
    }
}

/// Declares photon's columns to `client`: the observed ones (`clicks/event`,
/// `wakechecks/queries`), so its writes of clicks and wake checks put notify keys, and the
/// write-once ones (events, wake checks, joined outputs, the IdRegistry's day index, the
/// index of parked clicks: `percolator::design::once`), so they are written and read as
/// records without heads (a record is one put in the commit's first round; a head costs a
/// lock and a commit, two compare-and-swaps, each an RPC on TiKV). The declaration lives in
/// the client, not in the store: every client that reads or writes them needs it, not only
/// the workers' (a loader in its own process would otherwise load clicks no observer ever
/// hears of, and a verifier would not find the records). Queries' wake cells are notified
/// explicitly.
///
/// Every cell declared write-once is written by one committed transaction: events and wake
/// checks by the loader batch that moves its file's offset past them (the offset cell is
/// where duplicated loaders conflict), a joined output and a day index cell by the run that
/// writes the click's IdRegistry entry (where two pipelines conflict; the entry itself stays a
/// head, since that conflict is what makes the join happen once). Stores written before the
/// day index was declared hold its cells as heads: [`crate::registry`]'s GC reads both. An
/// index cell of a parked click may be written again, by a park and a sweep's refile of the
/// same click in the same second, always with the same empty value: nothing to conflict on
/// (`crate::parked`).
pub fn declare_columns(client: &Client) {
    client.observe_column(CLICKS, EVENT);
    client.observe_column(WAKE_CHECKS, QUERY_IDS);
    client.write_once_column(CLICKS, EVENT);
    client.write_once_column(QUERIES, EVENT);
    client.write_once_column(WAKE_CHECKS, QUERY_IDS);
    client.write_once_table(JOINED);
    client.write_once_column(IDREGISTRY, REGISTRY_DAY_COLUMN);
    client.write_once_table(crate::parked::PARKED);
}

/// Makes `client` remember its loads of clicks and queries, so the join runs of this process
/// read the events it loaded from memory (`photon::design::join`, "Events read from memory").
/// Every pipeline's start calls it ([`crate::pipeline::Pipeline::start_instrumented`]): a
/// process that only loads remembers nothing it would not read.
pub fn remember_loaded_events(client: &Client) {
    client.remember_recent_writes(CLICKS, EVENT);
    client.remember_recent_writes(QUERIES, EVENT);
}

/// The cell holding query `query_id`.
pub fn query_cell(query_id: &str) -> Cell {
    Cell::new(QUERIES, query_id, EVENT)
}

/// The wake cell of query `query_id` (see [`WAKE`]).
pub fn wake_cell(query_id: &str) -> Cell {
    Cell::new(QUERIES, query_id, WAKE)
}

/// The wake check of the loader's batch `batch` (`<file key>@<start offset>`, see
/// `app::load::Batch::id`): written with the batch (its value the batch's query ids), so
/// its observer runs after the batch commits, and deleted by it.
pub fn wake_check_cell(batch: &str) -> Cell {
    Cell::new(WAKE_CHECKS, batch, QUERY_IDS)
}

/// The cell holding click `click_id`.
pub fn click_cell(click_id: &str) -> Cell {
    Cell::new(CLICKS, click_id, EVENT)
}

/// The IdRegistry entry of `click_id` (one per click id, whatever its event times).
pub fn idregistry_cell(click_id: &str) -> Cell {
    Cell::new(
        IDREGISTRY,
        format!("{REGISTRY_ENTRY_PREFIX}{click_id}"),
        "token",
    )
}

/// The IdRegistry's index cell of `click_id`'s entry, filed under event day `day` (the day of
/// the delivery whose run wrote the entry): GC deletes the entry through it.
pub fn idregistry_day_cell(day: u64, click_id: &str) -> Cell {
    Cell::new(
        IDREGISTRY,
        format!("{REGISTRY_DAY_PREFIX}{day:08}/{click_id}"),
        REGISTRY_DAY_COLUMN,
    )
}

/// The column of the IdRegistry's day index cells (write-once: [`declare_columns`]).
pub const REGISTRY_DAY_COLUMN: &str = "entry";

/// The IdRegistry entry of `click_id` on event day `day` as stores written before entries
/// were keyed by click id alone hold it (read by the join, purged by day).
pub fn legacy_idregistry_cell(day: u64, click_id: &str) -> Cell {
    Cell::new(IDREGISTRY, format!("{day:08}/{click_id}"), "token")
}

/// The row prefix of IdRegistry entries (after every legacy `<day:08>/` row: letters sort
/// after digits).
pub const REGISTRY_ENTRY_PREFIX: &str = "id/";

/// The row prefix of the IdRegistry's day index.
pub const REGISTRY_DAY_PREFIX: &str = "day/";

/// The joined-output cell of `click_id` written by the join with `token`.
pub fn joined_cell(click_id: &str, token: &str) -> Cell {
    Cell::new(JOINED, click_id, token)
}

/// The list of clicks waiting for `query_id`.
pub fn pending_cell(query_id: &str) -> Cell {
    Cell::new(PENDING, query_id, "clicks")
}

/// The outcome of `click_id` when it was not (yet) joined.
pub fn outcome_cell(click_id: &str) -> Cell {
    Cell::new(OUTCOMES, click_id, "outcome")
}

/// The loader's progress through the file whose record is keyed `file`.
pub fn offset_cell(file: &str) -> Cell {
    app::load::lines::offset_cell(LOADER, file)
}

/// The IdRegistry GC boundary: event days below it are closed.
pub fn boundary_cell() -> Cell {
    Cell::new(CONTROL, "idregistry", "boundary_day")
}

/// A stored event: the event and when it was loaded.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Stored<T> {
    /// The event.
    pub event: T,
    /// Load time, ms since the epoch.
    pub loaded_at: u64,
}

/// A stored event as the join reads it: its ids and event time (read by
/// `event::line::EventLine`, which also checks the text), its load time, and its
/// JSON text as stored, which goes into the joined output as it is: the event's other
/// fields are never parsed into a map and serialized again.
pub struct StoredEvent {
    bytes: Vec<u8>,
    /// Where the event's text lies in `bytes`.
    text: std::ops::Range<usize>,
    /// The click's id (`None` for a query).
    pub click_id: Option<String>,
    /// The query's id (a click's query).
    pub query_id: String,
    /// The event time, ms since the epoch.
    pub event_time: u64,
    /// Load time, ms since the epoch.
    pub loaded_at: u64,
}

/// What comes before a stored event's text ([`stored_text`]; serializing a [`Stored`] gives
/// the same).
const STORED_HEAD: &[u8] = b"{\"event\":";
/// What comes between a stored event's text and its load time.
const STORED_LOADED_AT: &[u8] = b",\"loaded_at\":";

impl StoredEvent {
    /// Reads the bytes of a stored event of `kind` (written by [`stored_text`], or a
    /// serialized [`Stored`]): fails unless they read as a [`Stored`] of `kind`'s event
    /// would. The text is found by the layout both writers give (`{"event":`, the text,
    /// `,"loaded_at":`, digits, `}`) and parsed once, as the ids are read; other bytes
    /// are read by serde_json, the text borrowed (`RawValue`), then parsed the same way.
    pub fn read(bytes: Vec<u8>, kind: crate::event::Kind) -> serde_json::Result<StoredEvent> {
        let by_layout = Self::by_layout(&bytes).and_then(|(text, loaded_at)| {
            let ids = Self::ids(&bytes, text.clone(), kind).ok()?;
            Some((text, loaded_at, ids))
        });
        let (text, loaded_at, (click_id, query_id, event_time)) = match by_layout {
            Some(found) => found,
            None => {
                #[derive(serde::Deserialize)]
                struct Raw<'a> {
                    #[serde(borrow)]
                    event: &'a serde_json::value::RawValue,
                    loaded_at: u64,
                }
                let raw: Raw<'_> = serde_json::from_slice(&bytes)?;
                // The borrowed text lies in `bytes`: its place is where it starts.
                let start =
                    (raw.event.get().as_ptr() as usize).wrapping_sub(bytes.as_ptr() as usize);
                let text = start..start + raw.event.get().len();
                let ids = Self::ids(&bytes, text.clone(), kind)?;
                (text, raw.loaded_at, ids)
            }
        };
        Ok(StoredEvent {
            bytes,
            text,
            click_id,
            query_id,
            event_time,
            loaded_at,
        })
    }

    /// Where the text and the load time are if `bytes` have the writers' layout.
    fn by_layout(bytes: &[u8]) -> Option<(std::ops::Range<usize>, u64)> {
        let body = bytes.strip_prefix(STORED_HEAD)?.strip_suffix(b"}")?;
        // The last `,"loaded_at":` is the layout's: the text's own come before it.
        let at = body
            .windows(STORED_LOADED_AT.len())
            .rposition(|w| w == STORED_LOADED_AT)?;
        let digits = &body[at + STORED_LOADED_AT.len()..];
        if digits.is_empty() || digits.len() > 20 || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let loaded_at = std::str::from_utf8(digits).ok()?.parse().ok()?;
        Some((STORED_HEAD.len()..STORED_HEAD.len() + at, loaded_at))
    }

    /// The ids and event time of the event of `kind` whose text is `bytes[text]`.
    fn ids(
        bytes: &[u8],
        text: std::ops::Range<usize>,
        kind: crate::event::Kind,
    ) -> serde_json::Result<(Option<String>, String, u64)> {
        let slice = bytes.get(text).ok_or_else(|| {
            <serde_json::Error as serde::de::Error>::custom("the event's text is out of place")
        })?;
        let event = crate::event::line::EventLine::parse_bytes(slice, kind)?;
        Ok((
            event.click_id.map(|id| id.0.into_owned()),
            event.query_id.0.into_owned(),
            event.event_time,
        ))
    }

    /// The event's JSON text, as stored.
    pub fn text(&self) -> &[u8] {
        &self.bytes[self.text.clone()]
    }
}

/// The stored form of an event given as its JSON text (a log line the loader accepted:
/// [`crate::load::Parsed`]): the bytes of `{"event":<text>,"loaded_at":<loaded_at>}`, which
/// read back as the [`Stored`] of the event parsed from `text`, without parsing the event's
/// fields into a map and serializing them again.
pub fn stored_text(text: &str, loaded_at: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(STORED_HEAD.len() + text.len() + STORED_LOADED_AT.len() + 21);
    out.extend_from_slice(STORED_HEAD);
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(STORED_LOADED_AT);
    out.extend_from_slice(loaded_at.to_string().as_bytes());
    out.push(b'}');
    out
}

/// Wall-clock now in ms since the epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

/// Deletes outright (raw deletes, no transaction) every key of `table`'s rows in
/// `[row_start, row_end)`: values, versions and write-once records first, then heads, so a
/// crash between spaces never leaves a head whose versions are gone. Only for rows no transaction can read or
/// write any more (the caller's argument); the table must not be observed (its notify keys,
/// ordered by bucket, are not touched). Each page starts after the last key deleted, so a
/// pass does not walk its own delete markers again. Returns the keys deleted.
pub async fn purge_rows(
    client: &Client,
    table: &str,
    row_start: &[u8],
    row_end: &[u8],
) -> Result<usize, percolator::TxnError> {
    use percolator::codec::Space;
    use percolator::kv::{RangePager, ScanOrder};
    /// Keys deleted per store call.
    const PAGE: usize = 1000;
    let mut deleted = 0;
    for space in [Space::Data, Space::Version, Space::Once, Space::Head] {
        let range = client
            .codec()
            .rows_range(space, table.as_bytes(), row_start, Some(row_end));
        let mut pager = RangePager::new(client.store().as_ref(), range, ScanOrder::Forward, PAGE);
        while let Some(page) = pager.next_page().await? {
            deleted += page.len();
            client
                .store()
                .batch_delete(page.into_iter().map(|(k, _)| k).collect())
                .await?;
        }
    }
    Ok(deleted)
}

/// What [`purge_settled_rows`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Purged {
    /// Keys deleted.
    pub deleted: usize,
    /// Cells kept because a transaction whose primary they may be is not resolved yet.
    pub deferred: usize,
    /// Cells kept because their latest version is not the one the caller's index entry
    /// names: another transaction wrote them, which files them under an index entry of
    /// its own (or none).
    pub rewritten: usize,
}

/// [`purge_rows`] for rows whose cells may be primaries of transactions with records or
/// locks elsewhere: the rows in `[row_start, row_end)` are deleted only if every head in
/// them is settled at or below `resolved_below` (read from `Client::gc_resolved_below`
/// before this call; `percolator::design::gc`, "Resolved below") and, with `written_by`,
/// holds as its latest version one written by that transaction. Each such head is fenced
/// first (`Client::fence_settled`: from then on no transaction can lock it, and only this
/// call deletes it), so a transaction that writes the cell after the check cannot lose its
/// head to this delete. Otherwise nothing is deleted: the unsettled cells are counted as
/// deferred, for a later pass after GC has resolved their transactions; the cells another
/// transaction wrote, or another purge fenced, as rewritten; with `written_by`, a row with no
/// head counts as rewritten too (the writer's cell is gone, and a run may be creating it
/// again). A row of several heads of which only some could be fenced keeps those fenced (read
/// as before, never written again). The same conditions as [`purge_rows`] apply.
pub async fn purge_settled_rows(
    client: &Client,
    table: &str,
    row_start: &[u8],
    row_end: &[u8],
    resolved_below: percolator::Timestamp,
    written_by: Option<percolator::Timestamp>,
) -> Result<Purged, percolator::TxnError> {
    use percolator::codec::{Key, Space};
    use percolator::kv::{RangePager, ScanOrder};
    use percolator::txn::Fence;
    /// Heads read per store call.
    const PAGE: usize = 1000;
    let range = client
        .codec()
        .rows_range(Space::Head, table.as_bytes(), row_start, Some(row_end));
    let mut pager = RangePager::new(client.store().as_ref(), range, ScanOrder::Forward, PAGE);
    let mut kept = Purged::default();
    // Heads fenced by this call.
    let mut fenced = 0;
    while let Some(page) = pager.next_page().await? {
        for (key, _) in page {
            let Ok(Key::Head(cell)) = client.codec().decode(&key) else {
                continue;
            };
            // Planted bug `RegistryPurgeIgnoresResolution` (`percolator::planted`): deleted
            // without a look at the head.
            #[cfg(feature = "planted")]
            if percolator::planted::active(percolator::planted::Bug::RegistryPurgeIgnoresResolution)
            {
                fenced += 1;
                continue;
            }
            match client
                .fence_settled(&cell, resolved_below, written_by)
                .await?
            {
                Fence::Fenced => fenced += 1,
                Fence::Unsettled => kept.deferred += 1,
                Fence::Rewritten | Fence::FencedByAnother => kept.rewritten += 1,
                Fence::Absent => {}
            }
        }
    }
    if written_by.is_some() && fenced == 0 && kept.deferred == 0 {
        kept.rewritten = kept.rewritten.max(1);
    }
    if kept.deferred > 0 || kept.rewritten > 0 {
        return Ok(kept);
    }
    let deleted = purge_rows(client, table, row_start, row_end).await?;
    Ok(Purged {
        deleted,
        ..Purged::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stored click reads as `Stored<Click>` reads it, written either way (by the loader's
    /// `stored_text`, or serialized as before it), and by the fallback when the bytes do
    /// not have the writers' layout; its text is the event's. Fails if the layout path
    /// takes a `,"loaded_at":` inside the event for the layout's, or accepts bytes
    /// `Stored<Click>` refuses.
    #[test]
    fn a_stored_event_reads_as_the_stored_event_it_is() {
        use crate::event::{Click, Kind};
        let click = r#"{"click_id":"c1","query_id":"q1","event_time":7,"x":",\"loaded_at\":9}"}"#;
        let serialized = serde_json::to_vec(&Stored {
            event: serde_json::from_str::<Click>(click).unwrap(),
            loaded_at: 42,
        })
        .unwrap();
        let written = [
            stored_text(click, 42),
            serialized,
            format!(r#"{{"loaded_at":42,"event":{click}}}"#).into_bytes(),
            format!(r#" {{ "event" : {click} , "loaded_at" : 42 }} "#).into_bytes(),
        ];
        for bytes in written {
            let read = StoredEvent::read(bytes.clone(), Kind::Click)
                .unwrap_or_else(|e| panic!("{}: {e}", String::from_utf8_lossy(&bytes)));
            let expected: Stored<Click> = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(
                (
                    read.click_id.as_deref(),
                    read.query_id.as_str(),
                    read.event_time,
                    read.loaded_at
                ),
                (Some("c1"), "q1", 7, 42)
            );
            let text: Click = serde_json::from_slice(read.text()).unwrap();
            assert_eq!(text, expected.event);
        }
        let refused = [
            format!(r#"{{"event":{click},"loaded_at":1,"loaded_at":42}}"#),
            format!(r#"{{"event":{click},"loaded_at":-1}}"#),
            format!(r#"{{"event":{click}}}"#),
            format!(r#"{{"event":{click},"loaded_at":42}}x"#),
            r#"{"event":{"query_id":"q1","event_time":7},"loaded_at":42}"#.to_string(),
            r#"{"event":[1],"loaded_at":42}"#.to_string(),
            r#"{"event":{"click_id":"c1","query_id":"q1","event_time":7},"loaded_at":42"#
                .to_string(),
        ];
        for bytes in refused {
            assert!(
                serde_json::from_slice::<Stored<Click>>(bytes.as_bytes()).is_err(),
                "{bytes}"
            );
            assert!(
                StoredEvent::read(bytes.clone().into_bytes(), Kind::Click).is_err(),
                "{bytes}"
            );
        }
    }

    #[test]
    fn every_table_has_its_own_id() {
        let ids = table_ids();
        for (name, id) in TABLES {
            assert_eq!(ids.id(name.as_bytes()), Some(id));
        }
    }
}
