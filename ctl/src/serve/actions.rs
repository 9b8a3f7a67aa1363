//! The dashboard's only writes: dead-letter replay and drop, each in two steps. `prepare`
//! names the letters and returns a single-use confirmation token (nothing changes); only a
//! `confirm` with that token, within [`TOKEN_LIFETIME`], runs the action, through the same
//! library call as `percolator-ctl dead-letters replay|drop`, on exactly the letters the
//! operator was shown.

use crate::cli::DeadLetterCommand;
use crate::verbs::dead_letters::dead_letters;
use crate::{Answer, CtlError};
use percolator::Client;
use serde_json::json;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a confirmation token stays valid.
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(300);

/// A dead-letter action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Put the notifications back, so workers run their observers again.
    Replay,
    /// Delete the letters for good.
    Drop,
}

impl Action {
    /// Parses `replay` or `drop`.
    pub fn parse(s: &str) -> Option<Action> {
        match s {
            "replay" => Some(Action::Replay),
            "drop" => Some(Action::Drop),
            _ => None,
        }
    }

    /// `replay` or `drop`.
    pub fn name(self) -> &'static str {
        match self {
            Action::Replay => "replay",
            Action::Drop => "drop",
        }
    }
}

struct Pending {
    action: Action,
    /// Full ids of the letters shown.
    ids: Vec<String>,
    expires: Instant,
}

/// Prepared actions waiting for their confirmation.
#[derive(Default)]
pub struct Confirmations {
    pending: Mutex<HashMap<String, Pending>>,
}

/// A fresh unguessable token: two 64-bit keys of the standard library's randomly seeded
/// hasher (seeded from the OS), mixed with a counter and the time.
fn token() -> String {
    let mut out = String::new();
    for salt in 0..2u64 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(salt);
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        out.push_str(&format!("{:016x}", h.finish()));
    }
    out
}

impl Confirmations {
    /// Step one: the letters `id` (a unique prefix) or `all` name, as `dead-letters list
    /// --json` shows them, with a token that confirms `action` on exactly them.
    pub async fn prepare(
        &self,
        client: &Client,
        action: Action,
        id: Option<&str>,
        all: bool,
    ) -> Result<serde_json::Value, CtlError> {
        let letters = if all {
            observers::admin::dead_letters(client).await?
        } else {
            let id = id.unwrap_or_default();
            let found = observers::admin::find_dead_letters(client, id).await?;
            if found.len() != 1 {
                return Err(CtlError::Usage(format!(
                    "{} dead letters have ids starting with {id:?}",
                    found.len()
                )));
            }
            found
        };
        if letters.is_empty() {
            return Err(CtlError::Usage(format!(
                "no dead letters to {}",
                action.name()
            )));
        }
        let ids: Vec<String> = letters.iter().map(|d| d.id.clone()).collect();
        let listed = dead_letters(client, &DeadLetterCommand::List).await?.json;
        let shown: Vec<_> = listed["dead_letters"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| ids.iter().any(|id| d["id"] == id.as_str()))
            .cloned()
            .collect();
        let token = token();
        let mut pending = self.pending.lock().expect("confirmations lock");
        let now = Instant::now();
        pending.retain(|_, p| p.expires > now);
        pending.insert(
            token.clone(),
            Pending {
                action,
                ids,
                expires: now + TOKEN_LIFETIME,
            },
        );
        Ok(json!({
            "action": action.name(),
            "token": token,
            "letters": shown,
            "expires_in_ms": TOKEN_LIFETIME.as_millis() as u64,
        }))
    }

    /// Step two: runs the action `token` confirms (once; an unknown or expired token does
    /// nothing). Returns the verbs' answers, one per letter.
    pub async fn confirm(&self, client: &Client, token: &str) -> Result<Vec<Answer>, CtlError> {
        let pending = {
            let mut pending = self.pending.lock().expect("confirmations lock");
            pending.remove(token)
        };
        let Some(p) = pending.filter(|p| p.expires > Instant::now()) else {
            return Err(CtlError::Usage(
                "unknown or expired confirmation token: prepare the action again".to_string(),
            ));
        };
        let mut answers = Vec::new();
        for id in p.ids {
            let command = match p.action {
                Action::Replay => DeadLetterCommand::Replay {
                    id: Some(id),
                    all: false,
                },
                Action::Drop => DeadLetterCommand::Drop {
                    id: Some(id),
                    all: false,
                    yes: true,
                },
            };
            answers.push(dead_letters(client, &command).await?);
        }
        tracing::info!(
            action = p.action.name(),
            letters = answers.len(),
            "dead-letter action confirmed"
        );
        Ok(answers)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn tokens_differ() {
        let a = super::token();
        assert_eq!(a.len(), 32);
        assert_ne!(a, super::token());
    }
}
