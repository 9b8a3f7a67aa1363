//! Bank: 50 accounts, 16 concurrent tasks doing random transfers with random crash injection;
//! concurrent read-only audits always see the constant total; after a resolution pass no
//! lock is left and the total still holds. Run on several stores by `txn_bank.rs` and
//! `txn_tikv.rs`.

use super::{count_locks, num};
use percolator::txn::{Client, TxnError};
use percolator::Cell;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const ACCOUNTS: usize = 50;
const INITIAL: i64 = 100;

fn account(i: usize) -> Cell {
    Cell::new("bank", format!("acct{i:03}"), "balance")
}

async fn audit(c: &Client) -> Result<i64, TxnError> {
    let t = c.begin().await?;
    let rows = t.scan(b"bank", b"", None).await?;
    assert_eq!(rows.len(), ACCOUNTS, "an account vanished");
    let total = rows
        .iter()
        .map(|(_, v)| String::from_utf8_lossy(v).parse::<i64>().expect("balance"))
        .sum();
    t.commit().await?;
    Ok(total)
}

/// Runs the bank for `seconds` on `c` (an empty namespace) and checks it; the transfer tasks
/// must commit more than `min_committed` transfers.
pub async fn bank(c: Client, seconds: u64, min_committed: u64) {
    let init = c.begin().await.unwrap();
    for i in 0..ACCOUNTS {
        init.set(account(i), INITIAL.to_string());
    }
    init.commit().await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (committed, crashed, conflicts, audits) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let mut tasks = Vec::new();
    for task in 0..16u64 {
        let (c, stop) = (c.clone(), stop.clone());
        let (committed, crashed, conflicts) =
            (committed.clone(), crashed.clone(), conflicts.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(task);
            while !stop.load(Ordering::Relaxed) {
                let from = rng.gen_range(0..ACCOUNTS);
                let to = (from + rng.gen_range(1..ACCOUNTS)) % ACCOUNTS;
                let amount = rng.gen_range(1..20);
                let crash_at: Option<u32> = rng.gen_bool(0.05).then(|| rng.gen_range(0..4));
                let t = c.begin().await.unwrap();
                if let Some(k) = crash_at {
                    let seen = Arc::new(AtomicU64::new(0));
                    t.set_crash_hook(Arc::new(move |_| {
                        seen.fetch_add(1, Ordering::SeqCst) == k as u64
                    }));
                }
                let result = async {
                    let a = num(t.get(&account(from)).await?).expect("balance");
                    let b = num(t.get(&account(to)).await?).expect("balance");
                    t.set(account(from), (a - amount).to_string());
                    t.set(account(to), (b + amount).to_string());
                    t.commit().await
                }
                .await;
                match result {
                    Ok(_) => committed.fetch_add(1, Ordering::Relaxed),
                    Err(TxnError::InjectedCrash(_)) => crashed.fetch_add(1, Ordering::Relaxed),
                    Err(e) if e.is_retryable() => conflicts.fetch_add(1, Ordering::Relaxed),
                    Err(e) => panic!("transfer failed: {e}"),
                };
            }
        }));
    }
    let auditor = {
        let (c, stop, audits) = (c.clone(), stop.clone(), audits.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                match audit(&c).await {
                    Ok(total) => {
                        assert_eq!(total, ACCOUNTS as i64 * INITIAL, "audit saw a broken total");
                        audits.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => panic!("audit failed: {e}"),
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    auditor.await.unwrap();
    c.resolve_all_locks().await.unwrap();
    assert_eq!(
        count_locks(&c).await,
        0,
        "locks left after the resolution pass"
    );
    assert_eq!(audit(&c).await.unwrap(), ACCOUNTS as i64 * INITIAL);
    let (committed, crashed) = (
        committed.load(Ordering::Relaxed),
        crashed.load(Ordering::Relaxed),
    );
    eprintln!(
        "committed {committed}, crashed {crashed}, conflicts {}, audits {}",
        conflicts.load(Ordering::Relaxed),
        audits.load(Ordering::Relaxed)
    );
    assert!(
        committed > min_committed,
        "too few transfers committed: {committed} (wanted > {min_committed})"
    );
    assert!(crashed > 0, "no crash was injected");
    assert!(audits.load(Ordering::Relaxed) > 0);
}
