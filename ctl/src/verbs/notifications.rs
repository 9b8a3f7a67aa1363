//! `notifications`: the backlog, oldest bucket first.

use super::ms;
use crate::render::{self, table};
use crate::{Answer, CtlError};
use observers::admin;
use percolator::Client;
use serde_json::json;

/// The first `limit` notifications of the backlog.
pub async fn notifications(client: &Client, limit: usize) -> Result<Answer, CtlError> {
    let list = admin::notifications(client, limit).await?;
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|n| {
            vec![
                render::duration(n.age),
                render::cell(&n.cell),
                n.ts.to_string(),
                render::notification(n.notification.as_ref()).0,
            ]
        })
        .collect();
    let mut text = table(&["AGE", "CELL", "TS", "NOTIFICATION"], &rows);
    text.push_str(&format!(
        "{} notifications shown (oldest bucket first, --limit {limit})\n",
        list.len()
    ));
    let json = json!({
        "notifications": list.iter().map(|n| json!({
            "cell": render::cell_json(&n.cell),
            "bucket": n.bucket,
            "ts": n.ts,
            "age_ms": ms(n.age),
            "notification": render::notification(n.notification.as_ref()).1,
        })).collect::<Vec<_>>(),
    });
    Ok(Answer::ok(text, json))
}
