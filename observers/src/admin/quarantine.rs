//! Input sources a loader quarantined, as another process sees them: a loader that meets a
//! fault of a source's input (a file whose loaded bytes changed or were cut short, one taken
//! for another log, a read error) skips that source, and records it in the namespace's meta
//! record `quarantine/<source>` (when and why), so that `percolator-ctl status` and the
//! dashboard show it beside the backlog. A later batch of that source loaded clears it.

use crate::error::WorkerError;
use percolator::{Client, TxnError};

/// Prefix of the meta records of quarantined sources; the rest of the name is the source's.
pub const QUARANTINE_META: &[u8] = b"quarantine/";

/// The version byte of a quarantine record: version, the wall-clock ms it was first
/// recorded (u64, big-endian), then the cause as UTF-8.
const QUARANTINE_RECORD_V1: u8 = 1;

/// A source the loader quarantined.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quarantined {
    /// The source's name (a file's path relative to the loaded directory).
    pub source: String,
    /// Why: the loader's error, which names the fault.
    pub cause: String,
    /// When it was first quarantined for this cause: milliseconds since the Unix epoch on
    /// the loader's wall clock.
    pub since_ms: u64,
}

fn key(client: &Client, source: &str) -> Vec<u8> {
    let mut name = QUARANTINE_META.to_vec();
    name.extend_from_slice(source.as_bytes());
    client.codec().meta(name)
}

fn decode(value: &[u8]) -> Option<(u64, String)> {
    let (&QUARANTINE_RECORD_V1, rest) = value.split_first()? else {
        return None;
    };
    let (when, cause) = rest.split_first_chunk::<8>()?;
    Some((
        u64::from_be_bytes(*when),
        String::from_utf8_lossy(cause).into_owned(),
    ))
}

/// Records that `source` is quarantined for `cause` (a plain put of its meta record). A
/// record of the same cause keeps the time it was first made (a restarted loader meets the
/// fault again).
pub async fn record_quarantine(client: &Client, source: &str, cause: &str) -> Result<(), TxnError> {
    let key = key(client, source);
    let kv = client.store();
    if let Some(old) = kv.get(&key).await? {
        if decode(&old).is_some_and(|(_, old_cause)| old_cause == cause) {
            return Ok(());
        }
    }
    let mut value = vec![QUARANTINE_RECORD_V1];
    value.extend_from_slice(&client.wall_ms().to_be_bytes());
    value.extend_from_slice(cause.as_bytes());
    kv.put(key, value).await?;
    Ok(())
}

/// Removes the quarantine record of `source`, if any (its input loads again). Returns whether
/// there was one.
pub async fn clear_quarantine(client: &Client, source: &str) -> Result<bool, TxnError> {
    let key = key(client, source);
    let kv = client.store();
    if kv.get(&key).await?.is_none() {
        return Ok(false);
    }
    kv.delete(key).await?;
    Ok(true)
}

/// Every quarantined source of the namespace, by name.
pub async fn quarantined(client: &Client) -> Result<Vec<Quarantined>, WorkerError> {
    Ok(super::meta_records(client, QUARANTINE_META)
        .await?
        .into_iter()
        .filter_map(|(source, value)| {
            let (since_ms, cause) = decode(&value)?;
            Some(Quarantined {
                source: String::from_utf8_lossy(&source).into_owned(),
                cause,
                since_ms,
            })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use percolator::kv::MemoryKv;
    use std::sync::Arc;

    #[tokio::test]
    async fn quarantines_are_recorded_kept_and_cleared() {
        let client = Client::new(
            Arc::new(MemoryKv::new()),
            Arc::new(percolator::ts::LocalClock::new()),
        );
        assert!(quarantined(&client).await.expect("read").is_empty());
        record_quarantine(&client, "a/queries.jsonl", "changed")
            .await
            .expect("record");
        record_quarantine(&client, "b.jsonl", "cut short")
            .await
            .expect("record");
        let first = quarantined(&client).await.expect("read");
        assert_eq!(first.len(), 2);
        assert_eq!(first[0].source, "a/queries.jsonl");
        assert_eq!(first[0].cause, "changed");
        assert!(first[0].since_ms > 0);
        record_quarantine(&client, "a/queries.jsonl", "changed")
            .await
            .expect("again");
        assert_eq!(quarantined(&client).await.expect("read"), first, "kept");
        assert!(clear_quarantine(&client, "a/queries.jsonl")
            .await
            .expect("clear"));
        assert!(!clear_quarantine(&client, "a/queries.jsonl")
            .await
            .expect("clear"));
        let left = quarantined(&client).await.expect("read");
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].source, "b.jsonl");
    }
}
