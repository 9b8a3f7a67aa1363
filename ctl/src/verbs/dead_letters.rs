//! `dead-letters list|show|replay|drop`.

use super::ms;
use crate::cli::DeadLetterCommand;
use crate::render::{self, table};
use crate::{Answer, CtlError};
use observers::admin::{self, DeadLetterInfo};
use percolator::Client;
use serde_json::{json, Value};

fn letter_json(d: &DeadLetterInfo) -> Value {
    json!({
        "id": d.id,
        "cell": d.cell.as_ref().map(render::cell_json),
        "ts": d.ts,
        "age_ms": d.age.map(ms),
        "notification": render::notification(d.notification.as_ref()).1,
        "error": d.letter.error,
        "notify_key": render::text(&d.letter.notify_key),
    })
}

fn letter_rows(letters: &[DeadLetterInfo]) -> String {
    let rows: Vec<Vec<String>> = letters
        .iter()
        .map(|d| {
            vec![
                d.id.clone(),
                d.cell.as_ref().map_or("?".to_string(), render::cell),
                d.age.map_or("?".to_string(), render::duration),
                d.letter.error.clone(),
            ]
        })
        .collect();
    table(&["ID", "CELL", "AGE", "ERROR"], &rows)
}

/// The letters `id` (a unique prefix) or `all` name; an error if `id` names none or several.
async fn select(
    client: &Client,
    id: Option<&str>,
    all: bool,
) -> Result<Vec<DeadLetterInfo>, CtlError> {
    if all {
        return Ok(admin::dead_letters(client).await?);
    }
    let id = id.unwrap_or_default();
    let found = admin::find_dead_letters(client, id).await?;
    match found.len() {
        0 => Err(CtlError::Usage(format!(
            "no dead letter with id {id:?} (see `dead-letters list`)"
        ))),
        1 => Ok(found),
        n => Err(CtlError::Usage(format!(
            "{n} dead letters have ids starting with {id:?}: give more digits"
        ))),
    }
}

/// Runs one `dead-letters` subcommand.
pub async fn dead_letters(
    client: &Client,
    command: &DeadLetterCommand,
) -> Result<Answer, CtlError> {
    match command {
        DeadLetterCommand::List => {
            let letters = admin::dead_letters(client).await?;
            let mut text = letter_rows(&letters);
            text.push_str(&format!("{} dead letters\n", letters.len()));
            let json = json!({"dead_letters": letters.iter().map(letter_json).collect::<Vec<_>>()});
            Ok(Answer::ok(text, json))
        }
        DeadLetterCommand::Show { id } => {
            let letters = select(client, Some(id), false).await?;
            let d = &letters[0];
            let text = format!(
                "id            {}\ncell          {}\nts            {}\nage           {}\nnotification  {}\nnotify key    {}\nerror         {}\n",
                d.id,
                d.cell.as_ref().map_or("?".to_string(), render::cell),
                d.ts.map_or("?".to_string(), |t| t.to_string()),
                d.age.map_or("?".to_string(), render::duration),
                render::notification(d.notification.as_ref()).0,
                render::text(&d.letter.notify_key),
                d.letter.error
            );
            Ok(Answer::ok(text, letter_json(d)))
        }
        DeadLetterCommand::Replay { id, all } => {
            let letters = select(client, id.as_deref(), *all).await?;
            for d in &letters {
                d.letter.replay(client).await?;
            }
            let mut text = letter_rows(&letters);
            text.push_str(&format!(
                "replayed {} dead letters: workers will run their observers again\n",
                letters.len()
            ));
            let json = json!({"replayed": letters.iter().map(letter_json).collect::<Vec<_>>()});
            Ok(Answer::ok(text, json))
        }
        DeadLetterCommand::Drop { id, all, yes } => {
            let letters = select(client, id.as_deref(), *all).await?;
            let mut text = letter_rows(&letters);
            if !*yes {
                text.push_str(&format!(
                    "would drop {} dead letters; nothing dropped: pass --yes to drop them\n",
                    letters.len()
                ));
                let json = json!({
                    "dropped": [],
                    "would_drop": letters.iter().map(letter_json).collect::<Vec<_>>(),
                    "confirmed": false,
                });
                return Ok(Answer {
                    text,
                    json,
                    status: 1,
                });
            }
            for d in &letters {
                d.letter.discard(client).await?;
            }
            text.push_str(&format!(
                "dropped {} dead letters for good\n",
                letters.len()
            ));
            let json = json!({
                "dropped": letters.iter().map(letter_json).collect::<Vec<_>>(),
                "confirmed": true,
            });
            Ok(Answer::ok(text, json))
        }
    }
}
