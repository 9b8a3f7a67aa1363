//! `gc`: garbage collection at the newest safe point the policy allows.

use super::ms;
use crate::render::{self, table};
use crate::{Answer, CtlError};
use percolator::{Client, Timestamp};
use serde_json::json;

/// Collects below the safe point the GC lag allows and says what was removed.
pub async fn gc(client: &Client) -> Result<Answer, CtlError> {
    let now = client.oracle().get_timestamp().await?;
    let lag = client.config().gc_lag;
    // The newest safe point the policy allows: the GC lag (longer than any transaction's
    // lifetime) behind the oracle.
    let safe_point = Timestamp::compose(now.physical_ms().saturating_sub(ms(lag)), 0);
    let before = client.gc_safe_point().await?;
    let stats = client.gc(safe_point).await?;
    let text = format!(
        "gc at safe point {} ({} behind the oracle; previous safe point {})\n{}",
        safe_point,
        render::duration(lag),
        before,
        table(
            &[
                "LOCKS_RESOLVED",
                "VERSIONS_DELETED",
                "DATA_DELETED",
                "HEADS_TOMBSTONED",
                "NOTIFICATIONS_RESOLVED",
                "RECORDS_RESOLVED",
                "RECORDS_DELETED"
            ],
            &[vec![
                stats.locks_resolved.to_string(),
                stats.versions_deleted.to_string(),
                stats.data_deleted.to_string(),
                stats.heads_tombstoned.to_string(),
                stats.notifications_resolved.to_string(),
                stats.records_resolved.to_string(),
                stats.records_deleted.to_string(),
            ]],
        )
    );
    let json = json!({
        "safe_point": safe_point.0,
        "previous_safe_point": before.0,
        "gc_lag_ms": ms(lag),
        "locks_resolved": stats.locks_resolved,
        "versions_deleted": stats.versions_deleted,
        "data_deleted": stats.data_deleted,
        "heads_tombstoned": stats.heads_tombstoned,
        "notifications_resolved": stats.notifications_resolved,
        "records_resolved": stats.records_resolved,
        "records_deleted": stats.records_deleted,
    });
    Ok(Answer::ok(text, json))
}
