//! A namespace's table ids in the store (`percolator::design::layout`, "Table ids"): the
//! application declares them ([`declare_table_ids`]), every other client reads them
//! ([`stored_table_ids`]) and keys the tables by them.

use super::{TxnError, TxnResult};
use crate::codec::{KeyCodec, Space, TableIds, TableIdsError, TABLE_IDS_META};
use crate::kv::{RawKv, ScanOrder};

/// The table ids the store holds for `namespace`; empty if it holds none (its tables are
/// keyed by their names).
pub async fn stored_table_ids(kv: &dyn RawKv, namespace: &[u8]) -> TxnResult<TableIds> {
    let key = KeyCodec::new(namespace).meta(TABLE_IDS_META);
    match kv.get(&key).await? {
        None => Ok(TableIds::default()),
        Some(raw) => Ok(TableIds::decode(&raw)?),
    }
}

/// Makes `declared` the table ids of `namespace`, and returns them: they are written when
/// the store holds none, extended when `declared` adds tables to the stored ones (every
/// stored table with its stored id), and refused otherwise
/// ([`TableIdsError::Mismatch`]). A table that gains an id must hold no cell keyed by its
/// name ([`TableIdsError::NamedTable`]): a store written by a build without ids is refused,
/// not misread. Writes are CASes of the record, so concurrent declarations of one map agree.
pub async fn declare_table_ids(
    kv: &dyn RawKv,
    namespace: &[u8],
    declared: &TableIds,
) -> TxnResult<TableIds> {
    let named = KeyCodec::new(namespace);
    let key = named.meta(TABLE_IDS_META);
    loop {
        let raw = kv.get(&key).await?;
        let stored = match &raw {
            None => TableIds::default(),
            Some(raw) => TableIds::decode(raw)?,
        };
        if stored == *declared {
            return Ok(stored);
        }
        let extends = stored
            .iter()
            .all(|(name, id)| declared.id(name) == Some(id));
        if !extends {
            return Err(TableIdsError::Mismatch {
                stored: stored.describe_ids(),
                declared: declared.describe_ids(),
            }
            .into());
        }
        for (table, _) in declared
            .iter()
            .filter(|(name, _)| stored.id(name).is_none())
        {
            refuse_named_cells(kv, &named, table).await?;
        }
        let record = declared.encode();
        let outcome = kv
            .compare_and_swap(key.clone(), raw.clone(), record.clone())
            .await?
            .own_write_decided(raw, &record);
        if outcome.swapped {
            return Ok(declared.clone());
        }
        // Another client changed the record: compare again.
    }
}

/// Fails with [`TableIdsError::NamedTable`] if `table` holds a head, version, value or
/// write-once record keyed by its name (`named` keys every table by name). Notify keys are
/// ordered by bucket and not looked at: one without any of those is a notification of a
/// cell never written.
async fn refuse_named_cells(kv: &dyn RawKv, named: &KeyCodec, table: &[u8]) -> TxnResult<()> {
    for space in [Space::Head, Space::Version, Space::Data, Space::Once] {
        let range = named.rows_range(space, table, b"", None);
        if !kv.scan(range, 1, ScanOrder::Forward).await?.is_empty() {
            return Err(TxnError::TableIds(TableIdsError::NamedTable {
                table: table.escape_ascii().to_string(),
            }));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::MemoryKv;
    use crate::ts::LocalClock;
    use crate::{Cell, Client, ClientConfig};
    use std::sync::Arc;

    fn ids(tables: &[(&str, u16)]) -> TableIds {
        TableIds::new(tables.iter().copied()).expect("ids")
    }

    #[tokio::test]
    async fn declared_ids_are_written_extended_and_mismatches_refused() {
        let kv = MemoryKv::new();
        assert!(stored_table_ids(&kv, b"app")
            .await
            .expect("read")
            .is_empty());
        let first = ids(&[("clicks", 1), ("queries", 2)]);
        declare_table_ids(&kv, b"app", &first)
            .await
            .expect("declare");
        declare_table_ids(&kv, b"app", &first).await.expect("again");
        assert_eq!(stored_table_ids(&kv, b"app").await.expect("read"), first);
        assert!(stored_table_ids(&kv, b"other")
            .await
            .expect("read")
            .is_empty());
        let more = ids(&[("clicks", 1), ("queries", 2), ("joined", 3)]);
        declare_table_ids(&kv, b"app", &more).await.expect("extend");
        assert_eq!(stored_table_ids(&kv, b"app").await.expect("read"), more);
        let renumbered = ids(&[("clicks", 2), ("queries", 1), ("joined", 3)]);
        assert!(matches!(
            declare_table_ids(&kv, b"app", &renumbered).await,
            Err(TxnError::TableIds(TableIdsError::Mismatch { .. }))
        ));
        assert!(
            matches!(
                declare_table_ids(&kv, b"app", &first).await,
                Err(TxnError::TableIds(TableIdsError::Mismatch { .. })),
            ),
            "dropping a table is a mismatch too"
        );
    }

    /// A store whose table holds cells keyed by name refuses an id for it, and a client with
    /// the ids sees what it writes while one keyed by names does not.
    #[tokio::test]
    async fn a_table_written_by_name_refuses_an_id() {
        let kv = Arc::new(MemoryKv::new());
        let by_name = Client::with_config(
            kv.clone(),
            Arc::new(LocalClock::new()),
            ClientConfig::with_namespace("app"),
        );
        let cell = Cell::new("clicks", "c1", "event");
        let txn = by_name.begin().await.expect("begin");
        txn.set(cell.clone(), b"v".to_vec());
        txn.commit().await.expect("commit");
        let declared = ids(&[("clicks", 1), ("queries", 2)]);
        assert!(matches!(
            declare_table_ids(kv.as_ref(), b"app", &declared).await,
            Err(TxnError::TableIds(TableIdsError::NamedTable { table })) if table == "clicks"
        ));
        let declared = ids(&[("queries", 2)]);
        declare_table_ids(kv.as_ref(), b"app", &declared)
            .await
            .expect("queries holds nothing");
        let with_ids = Client::with_config(
            kv.clone(),
            Arc::new(LocalClock::new()),
            ClientConfig {
                table_ids: declared,
                ..ClientConfig::with_namespace("app")
            },
        );
        let query = Cell::new("queries", "q1", "event");
        let txn = with_ids.begin().await.expect("begin");
        txn.set(query.clone(), b"q".to_vec());
        txn.commit().await.expect("commit");
        let read = with_ids.begin().await.expect("begin");
        assert_eq!(read.get(&query).await.expect("get"), Some(b"q".to_vec()));
        assert_eq!(read.get(&cell).await.expect("get"), Some(b"v".to_vec()));
        let read = by_name.begin().await.expect("begin");
        assert_eq!(
            read.get(&query).await.expect("get"),
            None,
            "keyed by its id"
        );
    }
}
