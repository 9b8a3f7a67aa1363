//! Dead letters with what their keys say, and their short ids.

use super::{age, oracle_ms};
use crate::deadletter::DeadLetter;
use crate::error::WorkerError;
use percolator::codec::Key;
use percolator::record::Notification;
use percolator::{Cell, Client};
use std::time::Duration;

/// A dead letter with what its key says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetterInfo {
    /// A short stable id: 16 hex digits of a hash of the notify key ([`dead_letter_id`]).
    pub id: String,
    /// The notified cell (`None` if the key does not decode).
    pub cell: Option<Cell>,
    /// The timestamp in the notify key.
    pub ts: Option<u64>,
    /// Age of that timestamp.
    pub age: Option<Duration>,
    /// The notification record (`None` if it does not decode: such keys are dead-lettered
    /// at once).
    pub notification: Option<Notification>,
    /// The letter itself ([`DeadLetter::replay`], [`DeadLetter::discard`]).
    pub letter: DeadLetter,
}

/// The id of a dead letter: FNV-1a (64 bits) of its notify key, in hex. Stable across
/// processes and versions, short enough to type.
pub fn dead_letter_id(letter: &DeadLetter) -> String {
    let hash = letter
        .notify_key
        .iter()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
    format!("{hash:016x}")
}

/// Every dead letter of the namespace, in key order (by the bucket and cell of its key).
pub async fn dead_letters(client: &Client) -> Result<Vec<DeadLetterInfo>, WorkerError> {
    let now = oracle_ms(client).await?;
    Ok(DeadLetter::list(client)
        .await?
        .into_iter()
        .map(|letter| {
            let (cell, ts) = match client.codec().decode(&letter.notify_key) {
                Ok(Key::Notify { cell, ts, .. }) => (Some(cell), Some(ts)),
                _ => (None, None),
            };
            DeadLetterInfo {
                id: dead_letter_id(&letter),
                cell,
                ts,
                age: ts.map(|ts| age(now, ts)),
                notification: Notification::decode(&letter.notification).ok(),
                letter,
            }
        })
        .collect())
}

/// The dead letters whose id starts with `id` (a full id, or a prefix as `git` takes one).
pub async fn find_dead_letters(
    client: &Client,
    id: &str,
) -> Result<Vec<DeadLetterInfo>, WorkerError> {
    let id = id.to_ascii_lowercase();
    Ok(dead_letters(client)
        .await?
        .into_iter()
        .filter(|d| !id.is_empty() && d.id.starts_with(&id))
        .collect())
}
