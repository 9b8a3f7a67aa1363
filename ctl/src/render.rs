//! Rendering [`observers::admin`] answers: aligned text tables, human durations, value
//! previews, and their JSON forms.

use observers::admin::{CellVersion, LockInfo, StoredValue};
use percolator::record::Notification;
use percolator::Cell;
use serde_json::{json, Value};
use std::time::Duration;

/// Rows under headers, each column padded to its widest entry (two spaces apart).
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                let pad = widths[i] - cell.chars().count();
                out.push_str(cell);
                out.push_str(&" ".repeat(pad + 2));
            }
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
        out
    };
    let mut out = line(headers.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

/// A duration as an operator reads it: `850ms`, `12.3s`, `4m05s`, `2h03m`.
pub fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{:.1}s", d.as_secs_f64()),
        60_000..3_600_000 => format!("{}m{:02}s", ms / 60_000, ms % 60_000 / 1000),
        _ => format!("{}h{:02}m", ms / 3_600_000, ms % 3_600_000 / 60_000),
    }
}

/// Bytes as text: printable ASCII kept, the rest escaped.
pub fn text(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        match b {
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out
}

/// The first `max` bytes of a value, escaped, with `...` and the length if cut.
pub fn preview(bytes: &[u8], max: usize) -> String {
    if bytes.len() <= max {
        text(bytes)
    } else {
        format!("{}... ({} bytes)", text(&bytes[..max]), bytes.len())
    }
}

/// `table/row/column`, escaped.
pub fn cell(c: &Cell) -> String {
    format!("{}/{}/{}", text(&c.table), text(&c.row), text(&c.column))
}

/// A cell as JSON (escaped strings).
pub fn cell_json(c: &Cell) -> Value {
    json!({"table": text(&c.table), "row": text(&c.row), "column": text(&c.column)})
}

/// A stored value, previewed.
pub fn value(v: &StoredValue, max: usize) -> String {
    match v {
        StoredValue::Bytes(b) => preview(b, max),
        StoredValue::Deleted => "(deleted)".to_string(),
        StoredValue::Missing { len } => format!("(out-of-line value of {len} bytes collected)"),
    }
}

/// A version as JSON (the value in full, escaped).
pub fn version_json(v: &CellVersion) -> Value {
    let (kind, value) = match &v.value {
        StoredValue::Bytes(b) => ("put", Value::String(text(b))),
        StoredValue::Deleted => ("delete", Value::Null),
        StoredValue::Missing { .. } => ("missing", Value::Null),
    };
    json!({"commit_ts": v.commit_ts, "start_ts": v.start_ts, "op": kind, "value": value})
}

/// A lock in a few words: `start_ts 123 (primary | primary t/r/c), expired after 3000ms`.
pub fn lock(l: &LockInfo) -> String {
    let primary = match &l.lock.primary {
        None => "primary".to_string(),
        Some(p) => format!("primary {}", cell(p)),
    };
    let state = if l.expired { "EXPIRED" } else { "live" };
    format!(
        "start_ts {} ({primary}), {state}, age {} of ttl {}",
        l.lock.start_ts,
        duration(l.age),
        duration(Duration::from_millis(l.lock.ttl_ms))
    )
}

/// A lock as JSON.
pub fn lock_json(l: &LockInfo) -> Value {
    json!({
        "cell": cell_json(&l.cell),
        "start_ts": l.lock.start_ts,
        "primary": l.lock.primary.as_ref().map(cell_json),
        "ttl_ms": l.lock.ttl_ms,
        "age_ms": l.age.as_millis() as u64,
        "expired": l.expired,
    })
}

/// Every line of `block` indented by two spaces.
pub fn indent(block: &str) -> String {
    block.lines().map(|l| format!("  {l}\n")).collect()
}

/// A notification record in a few words, and as JSON (`None`: it does not decode).
pub fn notification(n: Option<&percolator::record::Notification>) -> (String, Value) {
    match n {
        Some(Notification::Strong {
            start_ts, primary, ..
        }) => (
            format!("strong (writer {start_ts}, primary {})", cell(primary)),
            json!({"kind": "strong", "start_ts": start_ts, "primary": cell_json(primary)}),
        ),
        Some(Notification::Committed { commit_ts }) => (
            format!("committed at {commit_ts}"),
            json!({"kind": "committed", "commit_ts": commit_ts}),
        ),
        Some(Notification::Weak) => ("weak".to_string(), json!({"kind": "weak"})),
        None => ("corrupt".to_string(), json!({"kind": "corrupt"})),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns() {
        let out = table(
            &["A", "LONGER"],
            &[
                vec!["xyz".into(), "1".into()],
                vec!["a".into(), "22".into()],
            ],
        );
        assert_eq!(out, "A    LONGER\nxyz  1\na    22\n");
    }

    #[test]
    fn durations_read_as_people_do() {
        assert_eq!(duration(Duration::from_millis(850)), "850ms");
        assert_eq!(duration(Duration::from_millis(12_340)), "12.3s");
        assert_eq!(duration(Duration::from_secs(245)), "4m05s");
        assert_eq!(duration(Duration::from_secs(7380)), "2h03m");
    }

    #[test]
    fn previews_cut_long_values() {
        assert_eq!(preview(b"abc", 8), "abc");
        assert_eq!(preview(b"abcdef\x00", 3), "abc... (7 bytes)");
        assert_eq!(preview(b"a\x00\"", 8), "a\\x00\"");
    }
}
