//! The verbs of `percolator-ctl`, one module each: every verb takes a client (and its
//! arguments) and returns an [`Answer`](crate::Answer) or a [`CtlError`](crate::CtlError);
//! none prints.

pub mod dead_letters;
pub mod gc;
pub mod locks;
pub mod notifications;
pub mod renotify;
pub mod scan;
pub mod status;
pub mod wait;

/// Value bytes shown in text output.
pub(crate) const PREVIEW: usize = 48;

/// A duration in whole milliseconds, for JSON.
pub(crate) fn ms(d: std::time::Duration) -> u64 {
    d.as_millis() as u64
}

/// Refuses `table` if the namespace keys its tables by id and the store's map (as this
/// client read it) has no id for it: a mistyped name would otherwise read or notify nothing
/// and report success. A namespace without table ids keys tables by name: any name goes.
pub(crate) fn known_table(client: &percolator::Client, table: &str) -> Result<(), crate::CtlError> {
    let ids = client.codec().table_ids();
    if ids.is_empty() || ids.id(table.as_bytes()).is_some() {
        return Ok(());
    }
    let names: Vec<String> = ids
        .iter()
        .map(|(name, _)| name.escape_ascii().to_string())
        .collect();
    Err(crate::CtlError::Usage(format!(
        "no table {table:?} in this namespace (its tables: {})",
        names.join(", ")
    )))
}
