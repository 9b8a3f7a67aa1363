//! The final checks of a run, on a quiet system (faults off, observers drained, after a
//! last GC): the ring is one cycle; every event is as its loaders and retention left it
//! (an acknowledged write is readable, nothing half-written); each strong observer ran
//! exactly once per change (at most twice for an event written then deleted, once per
//! change, coalesced or not); the chained guarded observer once per output; every
//! acknowledged weak notification observed; a scan and its pages agree with cell reads;
//! nothing dead-lettered. Violations go to the model; returns the observer runs counted.

use crate::error::SimError;
use crate::model::Shared;
use crate::schema;
use crate::workload::is_ring;
use percolator::{Cell, Client, Transaction, TxnError};
use std::collections::{BTreeMap, BTreeSet};

fn harness(step: &'static str) -> impl FnOnce(TxnError) -> SimError {
    move |source| SimError::Harness { step, source }
}

async fn number(txn: &Transaction, cell: &Cell) -> Result<u64, SimError> {
    Ok(schema::number(txn.get(cell).await.map_err(harness("final read"))?).unwrap_or(0))
}

/// Runs every final check; returns the committed observer runs.
pub async fn final_checks(client: &Client, model: &Shared) -> Result<u64, SimError> {
    let txn = client.begin().await.map_err(harness("final begin"))?;
    let ring: Vec<_> = (0..schema::RING).map(schema::ring).collect();
    let next: Vec<_> = txn
        .get_many(&ring)
        .await
        .map_err(harness("final ring"))?
        .into_iter()
        .map(schema::number)
        .collect();
    if !is_ring(&next) {
        model.violation(format!("final ring is not one cycle: {next:?}"));
    }

    let (sources, loaded, pings) =
        model.with(|m| (m.sources.clone(), m.loaded.clone(), m.pings.clone()));
    let ids: BTreeSet<u64> = sources.iter().flatten().copied().collect();
    let mut runs_total = 0;
    let mut expected_scan = BTreeMap::new();
    for &id in &ids {
        let row = schema::event_row(id);
        let seen = txn
            .get(&schema::seen(id))
            .await
            .map_err(harness("final seen"))?;
        let body = txn
            .get(&schema::event(id))
            .await
            .map_err(harness("final event"))?;
        let strong = number(&txn, &schema::runs(row.as_bytes(), "strong")).await?;
        let guarded = number(&txn, &schema::runs(row.as_bytes(), "guarded")).await?;
        let derived = txn
            .get(&schema::derived(row.as_bytes()))
            .await
            .map_err(harness("final derived"))?;
        runs_total += strong + guarded;
        let want = schema::event_body(id);
        let bad = |what: String| model.violation(format!("event {id}: {what}"));
        match seen.as_deref() {
            None => {
                if loaded.contains_key(&id) {
                    bad("its load was acknowledged but it is not marked seen".into());
                }
                if body.is_some() || strong > 0 || guarded > 0 {
                    bad(format!(
                        "never loaded, yet body {:?}, strong runs {strong}, guarded runs {guarded}",
                        body.is_some()
                    ));
                }
            }
            Some(b"L") => {
                if body.as_deref() != Some(want.as_slice()) {
                    bad(format!(
                        "loaded and not deleted, but reads {:?}",
                        body.map(|b| String::from_utf8_lossy(&b).into_owned())
                    ));
                }
                if strong != 1 {
                    bad(format!(
                        "strong observer committed {strong} runs for one change"
                    ));
                }
                if derived.as_deref() != Some(want.len().to_string().as_bytes()) {
                    bad(format!("chained output is {derived:?}"));
                }
                if guarded != 1 {
                    bad(format!(
                        "guarded observer committed {guarded} runs for one output"
                    ));
                }
                expected_scan.insert(row.clone(), want.clone());
            }
            Some(b"D") => {
                if let Some(b) = body {
                    bad(format!(
                        "deleted by retention, but reads {:?}",
                        String::from_utf8_lossy(&b)
                    ));
                }
                if !(1..=2).contains(&strong) {
                    bad(format!(
                        "strong observer committed {strong} runs for a write and a delete"
                    ));
                }
                if guarded > 1 || (derived.is_some() && guarded != 1) {
                    bad(format!(
                        "guarded observer committed {guarded} runs (output {derived:?})"
                    ));
                }
            }
            Some(other) => bad(format!("seen holds {:?}", other.escape_ascii().to_string())),
        }
    }
    for (j, source) in sources.iter().enumerate() {
        let pos = number(&txn, &schema::offset(j)).await? as usize;
        for &id in &source[..pos.min(source.len())] {
            if txn
                .get(&schema::seen(id))
                .await
                .map_err(harness("final seen"))?
                .is_none()
            {
                model.violation(format!(
                    "loader {j} committed offset {pos} but event {id} below it is not seen"
                ));
            }
        }
    }
    for n in 0..schema::PING_ROWS {
        let row = schema::ping(n).row;
        let weak = number(&txn, &schema::runs(&row, "weak")).await?;
        runs_total += weak;
        if pings.contains(&n) && weak == 0 {
            model.violation(format!(
                "weak notification of ping {n} acknowledged but never observed"
            ));
        }
    }

    // Scans: the whole table, and page by page, agree with the cell reads.
    let scanned: BTreeMap<String, Vec<u8>> = txn
        .scan(b"events", b"", None)
        .await
        .map_err(harness("final scan"))?
        .into_iter()
        // The strong observer's acknowledgments live in the same rows.
        .filter(|(cell, _)| cell.column == b"body")
        .map(|(cell, v)| (String::from_utf8_lossy(&cell.row).into_owned(), v))
        .collect();
    if scanned != expected_scan {
        model.violation(format!(
            "a scan of the events returns {} cells, cell reads {} (first difference at {:?})",
            scanned.len(),
            expected_scan.len(),
            first_difference(&scanned, &expected_scan)
        ));
    }
    let snapshot = client
        .snapshot_at(txn.start_ts())
        .await
        .map_err(harness("final snapshot"))?;
    for limit in [1usize, 2, 3, 5] {
        let mut paged = BTreeMap::new();
        let mut after: Option<Cell> = None;
        loop {
            let page = snapshot
                .scan_page(b"archive", b"", None, after.as_ref(), limit)
                .await
                .map_err(harness("final scan_page"))?;
            let full = page.len() >= limit;
            for (cell, v) in page {
                if cell.column == b"body" {
                    paged.insert(String::from_utf8_lossy(&cell.row).into_owned(), v);
                }
                after = Some(cell);
            }
            if !full {
                break;
            }
        }
        if paged != expected_scan {
            model.violation(format!(
                "pages of {limit} over the archive return {} cells, event reads {} \
                 (first difference at {:?})",
                paged.len(),
                expected_scan.len(),
                first_difference(&paged, &expected_scan)
            ));
            break;
        }
    }
    txn.rollback();

    match observers::DeadLetter::list(client).await {
        Ok(letters) if !letters.is_empty() => model.violation(format!(
            "{} notifications dead-lettered by faults of the store or oracle (first: {:?})",
            letters.len(),
            letters[0]
        )),
        Ok(_) => {}
        Err(e) => model.violation(format!("listing dead letters failed: {e}")),
    }
    Ok(runs_total)
}

/// The beacons' check, in the namespace of their own (`crate::world::FLOOR_NAMESPACE`):
/// every acknowledged weak notification was observed at least once (invariants N1, N2).
/// Returns the observer runs counted.
pub async fn check_beacons(client: &Client, model: &Shared) -> Result<u64, SimError> {
    let txn = client.begin().await.map_err(harness("beacons begin"))?;
    let beacons = model.with(|m| m.beacons.clone());
    let mut runs_total = 0;
    for &(p, seq) in &beacons {
        let row = schema::beacon(p, seq).row;
        let weak = number(&txn, &schema::runs(&row, "weak")).await?;
        runs_total += weak;
        if weak == 0 {
            model.violation(format!(
                "weak notification of beacon {p}-{seq} acknowledged but never observed"
            ));
        }
    }
    txn.rollback();
    Ok(runs_total)
}

fn first_difference(
    a: &BTreeMap<String, Vec<u8>>,
    b: &BTreeMap<String, Vec<u8>>,
) -> Option<String> {
    a.keys()
        .chain(b.keys())
        .filter(|k| a.get(*k) != b.get(*k))
        .min()
        .map(|k| {
            let show = |v: Option<&Vec<u8>>| v.map(|v| String::from_utf8_lossy(v).into_owned());
            format!("{k}: {:?} vs {:?}", show(a.get(k)), show(b.get(k)))
        })
}
