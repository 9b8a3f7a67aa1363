//! `observers::admin::is_drained` from another process's point of view, with the worker
//! registry written by hand: a worker whose published progress moves during the check is
//! busy, one that stops heartbeating is silent, one whose progress stands still is idle, and
//! any notify key is a backlog.

use observers::admin::{is_drained, NotDrained};
use percolator::kv::MemoryKv;
use percolator::ts::LocalClock;
use percolator::{Cell, Client};
use std::sync::Arc;
use std::time::Duration;

const LIVENESS: Duration = Duration::from_millis(300);

fn client() -> Client {
    Client::new(Arc::new(MemoryKv::new()), Arc::new(LocalClock::new()))
}

/// Writes worker `id`'s record as a worker's heartbeat does: beat (oracle ms), progress.
async fn beat(client: &Client, id: &str, handled: u64) {
    let now = client.oracle().get_timestamp().await.expect("ts");
    let mut record = now.physical_ms().to_be_bytes().to_vec();
    record.extend_from_slice(&handled.to_be_bytes());
    let key = client.codec().meta(format!("workers/{id}"));
    client.store().put(key, record).await.expect("put");
}

/// A fake worker that has beaten once and goes on heartbeating every 20 ms until aborted;
/// `busy` makes its progress move on every beat.
async fn heartbeating(
    client: &Client,
    id: &'static str,
    busy: bool,
) -> tokio::task::JoinHandle<()> {
    beat(client, id, 7).await;
    let client = client.clone();
    tokio::spawn(async move {
        let mut handled = 7;
        loop {
            tokio::time::sleep(Duration::from_millis(20)).await;
            if busy {
                handled += 1;
            }
            beat(&client, id, handled).await;
        }
    })
}

#[tokio::test]
async fn an_idle_worker_and_no_backlog_is_drained() {
    let client = client();
    let idle = heartbeating(&client, "idle", false).await;
    assert_eq!(is_drained(&client, LIVENESS).await.expect("check"), Ok(()));
    idle.abort();
}

#[tokio::test]
async fn a_worker_whose_progress_moves_during_the_check_is_busy() {
    let client = client();
    let idle = heartbeating(&client, "idle", false).await;
    let busy = heartbeating(&client, "busy", true).await;
    assert_eq!(
        is_drained(&client, LIVENESS).await.expect("check"),
        Err(NotDrained::Busy {
            worker: "busy".to_string()
        })
    );
    idle.abort();
    busy.abort();
}

#[tokio::test]
async fn a_live_worker_that_stops_heartbeating_is_silent() {
    let client = client();
    beat(&client, "quiet", 3).await;
    assert_eq!(
        is_drained(&client, LIVENESS).await.expect("check"),
        Err(NotDrained::Silent {
            worker: "quiet".to_string()
        })
    );
    // Once its heartbeat is older than the liveness horizon it counts as dead.
    tokio::time::sleep(LIVENESS * 2).await;
    assert_eq!(is_drained(&client, LIVENESS).await.expect("check"), Ok(()));
}

#[tokio::test]
async fn any_notification_left_is_a_backlog() {
    let client = client();
    let cell = Cell::new("t", "r", "c");
    client.weak_notify(&cell).await.expect("notify");
    assert_eq!(
        is_drained(&client, LIVENESS).await.expect("check"),
        Err(NotDrained::Backlog { cell })
    );
}
