//! The dead-letter space: notifications whose observer failed too often, kept for an
//! operator to list and replay. Stored as meta records `M deadletter/<notify key>`.

use crate::error::WorkerError;
use percolator::kv::{scan_all, ScanOrder};
use percolator::Client;

const PREFIX: &[u8] = b"deadletter/";

/// A notification parked after repeated observer failures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetter {
    /// The notify key it came from.
    pub notify_key: Vec<u8>,
    /// The notify key's value (the notification record).
    pub notification: Vec<u8>,
    /// The last error message.
    pub error: String,
}

fn meta_key(client: &Client, notify_key: &[u8]) -> Vec<u8> {
    let mut name = PREFIX.to_vec();
    name.extend_from_slice(notify_key);
    client.codec().meta(name)
}

fn encode(d: &DeadLetter) -> Vec<u8> {
    let mut out = Vec::new();
    for part in [&d.notify_key[..], &d.notification[..], d.error.as_bytes()] {
        out.extend_from_slice(&(part.len() as u64).to_be_bytes());
        out.extend_from_slice(part);
    }
    out
}

fn decode(key: &[u8], bytes: &[u8]) -> Result<DeadLetter, WorkerError> {
    let corrupt = |reason: &str| WorkerError::CorruptDeadLetter {
        key: key.escape_ascii().to_string(),
        reason: reason.to_string(),
    };
    let mut parts = Vec::new();
    let mut rest = bytes;
    for _ in 0..3 {
        if rest.len() < 8 {
            return Err(corrupt("truncated length"));
        }
        let (len, tail) = rest.split_at(8);
        let len = u64::from_be_bytes(len.try_into().map_err(|_| corrupt("length"))?) as usize;
        if tail.len() < len {
            return Err(corrupt("truncated part"));
        }
        parts.push(tail[..len].to_vec());
        rest = &tail[len..];
    }
    if !rest.is_empty() {
        return Err(corrupt("trailing bytes"));
    }
    let error = String::from_utf8_lossy(&parts[2]).into_owned();
    Ok(DeadLetter {
        notify_key: parts[0].clone(),
        notification: parts[1].clone(),
        error,
    })
}

impl DeadLetter {
    /// Moves a notification into the dead-letter space (put the letter, then delete the key).
    pub(crate) async fn park(client: &Client, letter: &DeadLetter) -> Result<(), WorkerError> {
        client
            .store()
            .put(meta_key(client, &letter.notify_key), encode(letter))
            .await?;
        // A timed change's mark is set aside: its column's watermark does not wait for an
        // operator (`observers::design::time`).
        if let Ok(percolator::codec::Key::Notify { cell, .. }) =
            client.codec().decode(&letter.notify_key)
        {
            crate::time::set_aside(client, &cell).await?;
        }
        client
            .remove_notify_keys(vec![letter.notify_key.clone()])
            .await?;
        Ok(())
    }

    /// Every dead letter of the client's namespace.
    pub async fn list(client: &Client) -> Result<Vec<DeadLetter>, WorkerError> {
        let pairs = scan_all(
            client.store().as_ref(),
            client.codec().meta_prefix_range(PREFIX),
            ScanOrder::Forward,
        )
        .await?;
        pairs.iter().map(|(k, v)| decode(k, v)).collect()
    }

    /// Deletes the letter for good (an operator's decision: its notification is never run).
    pub async fn discard(&self, client: &Client) -> Result<(), WorkerError> {
        client
            .store()
            .delete(meta_key(client, &self.notify_key))
            .await?;
        Ok(())
    }

    /// Puts the notification back into the notify space and removes the letter, so workers
    /// run the observer again.
    pub async fn replay(&self, client: &Client) -> Result<(), WorkerError> {
        // Into a bucket scanners reach (the letter's own bucket is most likely below the
        // notify floor by now).
        let Ok(percolator::codec::Key::Notify { cell, ts, .. }) =
            client.codec().decode(&self.notify_key)
        else {
            return Err(WorkerError::CorruptDeadLetter {
                key: self.notify_key.escape_ascii().to_string(),
                reason: "not a notify key of this namespace".to_string(),
            });
        };
        crate::time::restore(client, &cell).await?;
        client
            .put_notification(&cell, ts, self.notification.clone())
            .await?;
        client
            .store()
            .delete(meta_key(client, &self.notify_key))
            .await?;
        Ok(())
    }
}
