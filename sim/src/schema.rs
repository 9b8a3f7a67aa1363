//! The simulated application's cells and values: the ring of the cycle workload, the
//! events the loaders write (a write-once column), their dedup and retention state, the
//! observers' outputs and the run counts they record inside their own transactions.

use percolator::Cell;

/// Keys in the ring.
pub const RING: u64 = 6;
/// Rows of weak notifications.
pub const PING_ROWS: u64 = 8;

/// Ring key `i`'s pointer to the next key.
pub fn ring(i: u64) -> Cell {
    Cell::new("ring", format!("k{i}"), "next")
}

/// Row of event `id`.
pub fn event_row(id: u64) -> String {
    format!("e{id:06}")
}

/// The event's body (write-once, observed by the strong observer).
pub fn event(id: u64) -> Cell {
    Cell::new("events", event_row(id), "body")
}

/// The event's copy in the archive (write-once, unobserved: its rows hold nothing else,
/// so pages over it are pages of events alone).
pub fn archive(id: u64) -> Cell {
    Cell::new("archive", event_row(id), "body")
}

/// The body every delivery of event `id` carries.
pub fn event_body(id: u64) -> Vec<u8> {
    format!("event {id} {}", "x".repeat((id % 7) as usize)).into_bytes()
}

/// The event's dedup and retention state: `L` loaded, `D` deleted by retention.
pub fn seen(id: u64) -> Cell {
    Cell::new("seen", event_row(id), "state")
}

/// Loader `j`'s committed offset.
pub fn offset(j: usize) -> Cell {
    Cell::new("offsets", format!("l{j}"), "pos")
}

/// The strong observer's output, observed by the guarded observer (a chain).
pub fn derived(id_row: &[u8]) -> Cell {
    Cell::new("derived", id_row, "len")
}

/// The guarded observer's guard.
pub fn guard(id_row: &[u8]) -> Cell {
    Cell::new("guards", id_row, "done")
}

/// Committed runs of observer `which` (`strong`, `guarded`, `weak`) on row `row`.
pub fn runs(row: &[u8], which: &str) -> Cell {
    Cell::new("runs", row, which)
}

/// A weak notification's cell.
pub fn ping(n: u64) -> Cell {
    Cell::new("pings", format!("p{n}"), "hit")
}

/// Beacon `seq` of process `p`: a weak notification of a row of its own (so a lost one is
/// not covered by another run of the same row).
pub fn beacon(p: usize, seq: u64) -> Cell {
    Cell::new("pings", format!("b{p}-{seq:06}"), "hit")
}

/// The cell process `p`'s lease writer commits again and again (others read it).
pub fn lease(p: usize) -> Cell {
    Cell::new("leases", format!("p{p}"), "seq")
}

/// Lease `seq`'s value: every third one padded past the client's inline limit (1 KiB), so
/// its commit puts an out-of-line value before its lock (riding in the lock's call where the
/// store takes both at once) and readers fetch it from there.
pub fn lease_value(seq: u64) -> Vec<u8> {
    let mut value = seq.to_string().into_bytes();
    if seq.is_multiple_of(3) {
        value.resize(1_500, b'.');
    }
    value
}

/// Parses a decimal value.
pub fn number(v: Option<Vec<u8>>) -> Option<u64> {
    v.and_then(|v| std::str::from_utf8(&v).ok()?.parse().ok())
}
