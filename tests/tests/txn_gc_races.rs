//! Races between GC, readers and workers over write-once records and notify keys
//! (`percolator::design::gc`, `percolator::design::once`, `observers::design::processing`).
//! Each scenario places its race with the kv intercept, holding one store call of one
//! client while another runs (no sleep places a race; sleeps only let the oracle's clock
//! pass a TTL or the GC lag), and checks what snapshot isolation or exactly-once promises:
//! a committed write or notification is never lost, a read is its snapshot's value or
//! `SnapshotTooOld`, a scan page is full unless the range is exhausted. Every scenario runs
//! on the in-memory store, the embedded store and minitikv.

mod common;

use common::test_config;
use percolator::codec::Space;
use percolator::kv::intercept::{Call, Hooks, Intercepted};
use percolator::kv::{KvResult, MemoryKv, RawKv, ScanOrder};
use percolator::record::{Notification, OnceRecord};
use percolator::ts::{LocalClock, Timestamp};
use percolator::txn::{Client, ClientConfig, TxnError};
use percolator::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const EVENTS: &str = "events";

fn event(id: u64) -> Cell {
    Cell::new(EVENTS, format!("e{id:06}"), "body")
}

fn offset() -> Cell {
    Cell::new("loader", "file", "offset")
}

/// An ordinary observed cell (its notify key carries the strong record).
fn watched() -> Cell {
    Cell::new("watched", "r", "v")
}

/// Which calls a [`Hold`] holds back.
type Matcher = Box<dyn for<'a> Fn(&Call<'a>) -> bool + Send + Sync>;

/// Hooks that, once armed, hold back the first call matching a predicate until released.
struct Hold {
    armed: Mutex<Option<Matcher>>,
    reached: tokio::sync::Semaphore,
    release: tokio::sync::Semaphore,
}

impl Default for Hold {
    fn default() -> Self {
        Hold {
            armed: Mutex::new(None),
            reached: tokio::sync::Semaphore::new(0),
            release: tokio::sync::Semaphore::new(0),
        }
    }
}

impl Hold {
    fn arm(&self, matcher: impl for<'a> Fn(&Call<'a>) -> bool + Send + Sync + 'static) {
        *self.armed.lock().unwrap() = Some(Box::new(matcher));
    }

    /// Waits until the held call arrived (a 60 s hang guard, not a timing claim).
    async fn reached(&self) {
        tokio::time::timeout(Duration::from_secs(60), self.reached.acquire())
            .await
            .expect("the held call never came")
            .expect("open")
            .forget();
    }

    fn release(&self) {
        self.release.add_permits(1);
    }
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hold")
    }
}

#[async_trait::async_trait]
impl Hooks for Hold {
    async fn before(&self, call: Call<'_>) -> KvResult<()> {
        let hit = {
            let mut armed = self.armed.lock().unwrap();
            match armed.as_ref() {
                Some(matcher) if matcher(&call) => {
                    *armed = None;
                    true
                }
                _ => false,
            }
        };
        if hit {
            self.reached.add_permits(1);
            self.release.acquire().await.expect("open").forget();
        }
        Ok(())
    }
}

/// The matcher of a point read of `cell`'s head (a fate check reads its primary's head).
fn head_get(cell: &Cell) -> impl for<'a> Fn(&Call<'a>) -> bool + Send + Sync + 'static {
    let key = percolator::KeyCodec::new(test_config().namespace).head(cell);
    move |call: &Call<'_>| matches!(call, Call::Get { key: k } if *k == key.as_slice())
}

/// The clients of one scenario on one store: all share one oracle.
struct Scene {
    kv: Arc<dyn RawKv>,
    clock: Arc<LocalClock>,
    /// Writes the history: short lock TTL, so a fate check may fence a stale writer soon.
    writer: Client,
    /// Collects garbage with a short lag.
    gc: Client,
    _keep: Box<dyn std::any::Any + Send>,
}

impl Scene {
    fn new(kv: Arc<dyn RawKv>, keep: Box<dyn std::any::Any + Send>) -> Scene {
        let clock = Arc::new(LocalClock::new());
        let writer = Self::client_with(&kv, &clock, writer_config());
        let gc = Self::client_with(&kv, &clock, gc_config());
        Scene {
            kv,
            clock,
            writer,
            gc,
            _keep: keep,
        }
    }

    fn client_with(kv: &Arc<dyn RawKv>, clock: &Arc<LocalClock>, config: ClientConfig) -> Client {
        let client = Client::with_config(kv.clone(), clock.clone(), config);
        client.write_once_column(EVENTS, "body");
        client.observe_column("watched", "v");
        client
    }

    /// A client on this store whose calls go through a [`Hold`].
    fn held(&self, config: ClientConfig) -> (Client, Arc<Intercepted<Hold>>) {
        let kv = Arc::new(Intercepted::wrap(self.kv.clone(), Hold::default()));
        let client = Self::client_with(&(kv.clone() as Arc<dyn RawKv>), &self.clock, config);
        (client, kv)
    }

    async fn now(&self) -> Timestamp {
        let txn = self.writer.begin().await.unwrap();
        let ts = txn.start_ts();
        txn.rollback();
        ts
    }

    /// Commits `cells` (None: a delete) in one transaction of the writer.
    async fn commit(&self, cells: &[(Cell, Option<&str>)]) -> Timestamp {
        let txn = self.writer.begin().await.unwrap();
        for (cell, value) in cells {
            match value {
                Some(v) => txn.set(cell.clone(), *v),
                None => txn.delete(cell.clone()),
            }
        }
        txn.commit().await.unwrap()
    }

    /// Moves the offset on a few times, so that a GC pass past them trims the versions of
    /// the offset that prove earlier commits (the evidence of a record's fate).
    async fn bury_evidence(&self) {
        for i in 0..4 {
            self.commit(&[(offset(), Some(&format!("bury {i}")))]).await;
        }
    }

    /// A safe point above everything committed so far, once the GC lag allows it.
    async fn safe_point(&self) -> Timestamp {
        let sp = self.now().await;
        tokio::time::sleep(gc_config().gc_lag + Duration::from_millis(20)).await;
        sp
    }

    /// A whole GC pass of `client` at `sp`.
    async fn gc_with(client: &Client, sp: Timestamp) -> percolator::txn::GcStats {
        client.gc(sp).await.expect("gc pass")
    }

    async fn records(&self) -> Vec<(Vec<u8>, OnceRecord)> {
        let range = self.writer.codec().space_range(Space::Once);
        self.kv
            .scan(range, 10_000, ScanOrder::Forward)
            .await
            .unwrap()
            .into_iter()
            .map(|(k, v)| (k, OnceRecord::decode(&v).unwrap()))
            .collect()
    }

    async fn notify_keys(&self) -> Vec<Notification> {
        let range = self.writer.codec().space_range(Space::Notify);
        self.kv
            .scan(range, 10_000, ScanOrder::Forward)
            .await
            .unwrap()
            .into_iter()
            .map(|(_, v)| Notification::decode(&v).unwrap())
            .collect()
    }

    async fn read(&self, cell: &Cell) -> Option<Vec<u8>> {
        let txn = self.writer.begin().await.unwrap();
        txn.get(cell).await.unwrap()
    }
}

fn writer_config() -> ClientConfig {
    ClientConfig {
        lock_ttl: Duration::from_millis(50),
        ..test_config()
    }
}

fn gc_config() -> ClientConfig {
    ClientConfig {
        max_lifetime: Duration::from_millis(20),
        gc_lag: Duration::from_millis(30),
        ..test_config()
    }
}

/// A reader whose snapshot may outlive the GC lag of [`gc_config`].
fn stalled_reader_config() -> ClientConfig {
    ClientConfig {
        max_lifetime: Duration::from_secs(600),
        gc_lag: Duration::from_secs(601),
        ..test_config()
    }
}

/// Hole 1 (records): GC-B reads writer s1's pending record and is held in its fate check;
/// GC-A runs a whole pass (rewrites the record as committed, trims the evidence from the
/// primary); GC-B's fate check then finds no evidence and answers "rolled back". It must
/// not delete the record GC-A rewrote.
async fn two_gc_passes_keep_a_committed_record(scene: Scene) {
    scene
        .commit(&[(event(1), Some("kept")), (offset(), Some("1"))])
        .await;
    scene.bury_evidence().await;
    let sp = scene.safe_point().await;
    let (gc_b, held) = scene.held(gc_config());
    held.hooks().arm(head_get(&offset()));
    let pass_b = tokio::spawn(async move { Scene::gc_with(&gc_b, sp).await });
    held.hooks().reached().await;
    let stats = Scene::gc_with(&scene.gc, sp).await;
    assert_eq!(stats.records_resolved, 1, "{stats:?}");
    held.hooks().release();
    pass_b.await.unwrap();
    let records = scene.records().await;
    assert!(
        matches!(records.as_slice(), [(_, OnceRecord::Committed { .. })]),
        "the committed record is kept: {records:?}"
    );
    assert_eq!(scene.read(&event(1)).await, Some(b"kept".to_vec()));
}

/// Hole 1 (notify keys): as above, for a strong notify key GC-A rewrote as committed: GC-B
/// must not delete it (that change's observer would never run).
async fn two_gc_passes_keep_a_committed_notification(scene: Scene) {
    scene
        .commit(&[(offset(), Some("1")), (watched(), Some("change"))])
        .await;
    scene.bury_evidence().await;
    let sp = scene.safe_point().await;
    let (gc_b, held) = scene.held(gc_config());
    held.hooks().arm(head_get(&offset()));
    let pass_b = tokio::spawn(async move { Scene::gc_with(&gc_b, sp).await });
    held.hooks().reached().await;
    let stats = Scene::gc_with(&scene.gc, sp).await;
    assert_eq!(stats.notifications_resolved, 1, "{stats:?}");
    held.hooks().release();
    pass_b.await.unwrap();
    let keys = scene.notify_keys().await;
    assert!(
        matches!(keys.as_slice(), [Notification::Committed { .. }]),
        "the notification rewritten as committed is kept: {keys:?}"
    );
}

/// Found by the simulator (`percolator-sim`, seed 9): GC-B reads s1's pending record and is
/// held in its fate check; GC-A rewrites the record as committed, collects it under the
/// cell's newer head delete and shrinks that head to a tombstone; GC-B's check answers
/// "committed" (the evidence is still there). Its rewrite must not put the collected record
/// back: the deleted value would read again.
async fn two_gc_passes_do_not_bring_back_a_deleted_record(scene: Scene) {
    scene
        .commit(&[(event(1), Some("gone")), (offset(), Some("1"))])
        .await;
    scene.commit(&[(event(1), None)]).await;
    let sp = scene.safe_point().await;
    let (gc_b, held) = scene.held(gc_config());
    held.hooks().arm(head_get(&offset()));
    let pass_b = tokio::spawn(async move { Scene::gc_with(&gc_b, sp).await });
    held.hooks().reached().await;
    let stats = Scene::gc_with(&scene.gc, sp).await;
    assert_eq!(
        (stats.records_deleted, stats.heads_tombstoned),
        (1, 1),
        "{stats:?}"
    );
    held.hooks().release();
    pass_b.await.unwrap();
    assert_eq!(
        scene.records().await,
        vec![],
        "the collected record stays gone"
    );
    assert_eq!(scene.read(&event(1)).await, None);
}

/// Hole 2: a record put at c1, deleted through the cell's head at c2 (a transaction of
/// write-once cells only writes its first through the head), GC at or above c2: the value
/// must stay deleted for `get`, `get_many`, `scan` and `scan_page`.
async fn a_head_delete_stays_deleted_after_gc(scene: Scene) {
    scene
        .commit(&[
            (event(1), Some("gone")),
            (event(2), Some("stays")),
            (offset(), Some("1")),
        ])
        .await;
    scene.commit(&[(event(1), None)]).await;
    assert_eq!(scene.read(&event(1)).await, None);
    let sp = scene.safe_point().await;
    let stats = Scene::gc_with(&scene.gc, sp).await;
    assert_eq!(stats.heads_tombstoned, 1, "{stats:?}");
    assert_eq!(scene.read(&event(1)).await, None, "get after GC");
    let txn = scene.writer.begin().await.unwrap();
    assert_eq!(
        txn.get_many(&[event(1), event(2)]).await.unwrap(),
        vec![None, Some(b"stays".to_vec())]
    );
    assert_eq!(
        txn.scan(EVENTS.as_bytes(), b"", None).await.unwrap(),
        vec![(event(2), b"stays".to_vec())],
        "scan after GC"
    );
    let snap = scene.writer.snapshot_at(scene.now().await).await.unwrap();
    assert_eq!(
        snap.scan_page(EVENTS.as_bytes(), b"", None, None, 10)
            .await
            .unwrap(),
        vec![(event(2), b"stays".to_vec())],
        "scan_page after GC"
    );
    // A second pass changes nothing.
    Scene::gc_with(&scene.gc, scene.safe_point().await).await;
    assert_eq!(scene.read(&event(1)).await, None, "get after a second pass");
}

/// Hole 3: a worker reads a strong notify key and is held in its fate check; GC rewrites the
/// key as committed and trims the evidence; the check fences and answers "rolled back". The
/// worker must run the observer for that change (once), not delete its key.
async fn a_worker_racing_gc_runs_the_committed_change(scene: Scene) {
    scene
        .commit(&[(offset(), Some("1")), (watched(), Some("change"))])
        .await;
    scene.bury_evidence().await;
    let sp = scene.safe_point().await;
    let (client, held) = scene.held(writer_config());
    held.hooks().arm(head_get(&offset()));
    let runs = Arc::new(AtomicU64::new(0));
    let observer = observers::observer_fn_with(runs.clone(), |runs, _txn, _cell| async move {
        runs.fetch_add(1, Ordering::SeqCst);
        Ok(())
    });
    let registry = common::strong_registry("watched", "v", "count", observer);
    let worker = observers::Worker::start(client, registry, common::quick());
    held.hooks().reached().await;
    let stats = Scene::gc_with(&scene.gc, sp).await;
    assert_eq!(stats.notifications_resolved, 1, "{stats:?}");
    held.hooks().release();
    common::quiesce([&worker]).await;
    worker.shutdown().await;
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the committed change is observed once"
    );
    assert!(scene.notify_keys().await.is_empty());
}

/// Hole 4: a reader at R scans s1's committed (pending) record and is held in its fate
/// check; s2 (after R) writes the cell again; GC deletes s1's record under s2's and trims
/// s1's evidence. The reader must answer s1's value or `SnapshotTooOld`, never "absent".
async fn a_stalled_reader_is_refused_not_answered_absent(scene: Scene) {
    scene
        .commit(&[(event(1), Some("first")), (offset(), Some("1"))])
        .await;
    let (reader, held) = scene.held(stalled_reader_config());
    let snapshot = reader.begin().await.unwrap();
    held.hooks().arm(head_get(&offset()));
    let read = tokio::spawn(async move { snapshot.get(&event(1)).await });
    held.hooks().reached().await;
    scene
        .commit(&[(event(1), Some("second")), (offset(), Some("2"))])
        .await;
    scene.bury_evidence().await;
    let sp = scene.safe_point().await;
    let stats = Scene::gc_with(&scene.gc, sp).await;
    assert_eq!(stats.records_deleted, 1, "{stats:?}");
    held.hooks().release();
    match read.await.unwrap() {
        Ok(Some(value)) => assert_eq!(value, b"first"),
        Err(TxnError::SnapshotTooOld { .. }) => {}
        other => panic!("the snapshot's value or SnapshotTooOld, not {other:?}"),
    }
}

/// The matcher of a CAS of `cell`'s head (GC's trim of the head's older versions).
fn head_cas(cell: &Cell) -> impl for<'a> Fn(&Call<'a>) -> bool + Send + Sync + 'static {
    let key = percolator::KeyCodec::new(test_config().namespace).head(cell);
    move |call: &Call<'_>| matches!(call, Call::CompareAndSwap { key: k, .. } if *k == key.as_slice())
}

/// The matcher of a read of write-once records (a point read scans its cell's records in one
/// `scan_many`, after it read the cell's head).
fn records_scan(call: &Call<'_>) -> bool {
    matches!(call, Call::ScanMany { .. })
}

/// What a read at R between a record (committed at c2 <= R) and a newer head version (c3 >
/// R) may answer once GC passed R: the record's value or `SnapshotTooOld`.
fn assert_record_or_too_old(read: Result<Option<Vec<u8>>, TxnError>, what: &str) {
    match read {
        Ok(Some(value)) if value == b"record" => {}
        Err(TxnError::SnapshotTooOld { .. }) => {}
        other => panic!(
            "{what}: the record's value or SnapshotTooOld, not {:?}",
            other.map(|v| v.map(|v| String::from_utf8_lossy(&v).into_owned()))
        ),
    }
}

/// Hole 7 (the reviewer's interleaving): event 1 written through its head at c1 ("old", a
/// transaction of write-once cells only), then as a record at c2 ("record"), then through
/// its head again at c3 ("new"). A reader at R in [c2, c3). GC at sp >= c3 collects the
/// record (hidden under c3) and is held before it trims c1 from the head; the reader reads
/// meanwhile: its head shows c1 at R (inline, no safe point check) and the record is gone.
/// It must answer "record" or `SnapshotTooOld`, never "old".
///
/// Found by a targeted review (hole 7): a read checked the safe point after its records scan
/// only when its head answer came from `V` or a record of a writer after R, or committed
/// after R, was left. GC collects a record also under a newer *head* version, which a read
/// that read the head before the records scan may not have seen, so nothing triggered the
/// check. Now a read no record answers, and every scan or page, checks it
/// (`percolator::design::once`, "Snapshots under GC").
async fn a_read_between_gc_collecting_a_record_and_trimming_the_head(scene: Scene) {
    scene.commit(&[(event(1), Some("old"))]).await;
    scene
        .commit(&[(event(1), Some("record")), (offset(), Some("1"))])
        .await;
    let reader = Scene::client_with(&scene.kv, &scene.clock, stalled_reader_config());
    let snapshot = reader.begin().await.unwrap();
    scene.commit(&[(event(1), Some("new"))]).await;
    let sp = scene.safe_point().await;
    let (gc, held) = scene.held(gc_config());
    held.hooks().arm(head_cas(&event(1)));
    let pass = tokio::spawn(async move { Scene::gc_with(&gc, sp).await });
    held.hooks().reached().await;
    assert!(
        scene.records().await.is_empty(),
        "GC collected the record before trimming the head"
    );
    let read = snapshot.get(&event(1)).await;
    held.hooks().release();
    let stats = pass.await.unwrap();
    assert_eq!(
        (stats.records_deleted, stats.versions_deleted),
        (1, 1),
        "{stats:?}"
    );
    assert_record_or_too_old(read, "a read while GC trims the head");
}

/// Hole 7, the reader's side: the same history, the reader reads the head before c3 even
/// commits (it shows c1), and is held before its records scan; c3 commits, a whole GC pass
/// at sp >= c3 collects the record (and trims the head). The reader must answer "record"
/// or `SnapshotTooOld`, never "old".
async fn a_read_holding_its_records_scan_across_gc(scene: Scene) {
    scene.commit(&[(event(1), Some("old"))]).await;
    read_held_across_gc(scene, "a read held across GC").await;
}

/// The rest of the two hole-7 reads: event 1 written as a record at c2, a reader at R in
/// [c2, c3) held before its records scan, c3 written through the head, GC at sp >= c3.
async fn read_held_across_gc(scene: Scene, what: &str) {
    scene
        .commit(&[(event(1), Some("record")), (offset(), Some("1"))])
        .await;
    let (reader, held) = scene.held(stalled_reader_config());
    let snapshot = reader.begin().await.unwrap();
    held.hooks().arm(records_scan);
    let read = tokio::spawn(async move { snapshot.get(&event(1)).await });
    held.hooks().reached().await;
    scene.commit(&[(event(1), Some("new"))]).await;
    let sp = scene.safe_point().await;
    let stats = Scene::gc_with(&scene.gc, sp).await;
    assert_eq!(stats.records_deleted, 1, "{stats:?}");
    held.hooks().release();
    assert_record_or_too_old(read.await.unwrap(), what);
}

/// Hole 7 without an older head version: event 1 written only as a record at c2, then
/// through its (new) head at c3. A reader at R in [c2, c3) reads the head (none yet) and is
/// held before its records scan; GC at sp >= c3 collects the record under c3. The reader
/// must answer "record" or `SnapshotTooOld`, never "absent".
async fn a_read_holding_its_records_scan_across_gc_no_older_head(scene: Scene) {
    read_held_across_gc(scene, "a read held across GC (no older head)").await;
}

/// Hole 7 for scans: the history of [`a_read_holding_its_records_scan_across_gc`]; a scan at
/// R reads the heads of the table (event 1's shows c1) and is held before it scans the
/// table's records; c3 commits and GC at sp >= c3 collects the record. The scan must show
/// "record" for event 1 or fail with `SnapshotTooOld`, never show "old".
async fn a_scan_holding_its_records_scan_across_gc(scene: Scene) {
    scene.commit(&[(event(1), Some("old"))]).await;
    scene
        .commit(&[(event(1), Some("record")), (offset(), Some("1"))])
        .await;
    let (reader, held) = scene.held(stalled_reader_config());
    let snapshot = reader.begin().await.unwrap();
    let once = scene.writer.codec().space_range(Space::Once).start;
    held.hooks().arm(
        move |call: &Call<'_>| matches!(call, Call::Scan { range, .. } if range.start.starts_with(&once)),
    );
    let scan = tokio::spawn(async move { snapshot.scan(EVENTS.as_bytes(), b"", None).await });
    held.hooks().reached().await;
    scene.commit(&[(event(1), Some("new"))]).await;
    let sp = scene.safe_point().await;
    let stats = Scene::gc_with(&scene.gc, sp).await;
    assert_eq!(stats.records_deleted, 1, "{stats:?}");
    held.hooks().release();
    let read = scan.await.unwrap().map(|rows| {
        assert!(rows.len() <= 1, "{rows:?}");
        rows.into_iter().next().map(|(_, value)| value)
    });
    assert_record_or_too_old(read, "a scan held across GC");
}

/// Hole 5: pages over a mix of heads and records are full unless the range is exhausted.
async fn scan_pages_are_full_over_heads_and_records(scene: Scene) {
    scene
        .commit(&[
            (event(1), Some("1")),
            (event(2), Some("2")),
            (event(3), Some("3")),
            (offset(), Some("1")),
        ])
        .await;
    // e1 deleted through its head: its record's value is hidden.
    scene.commit(&[(event(1), None)]).await;
    let snap = scene.writer.snapshot_at(scene.now().await).await.unwrap();
    let page = |after: Option<Cell>, limit| {
        let snap = snap.clone();
        async move {
            snap.scan_page(EVENTS.as_bytes(), b"", None, after.as_ref(), limit)
                .await
                .unwrap()
        }
    };
    let cells = |page: Vec<(Cell, Vec<u8>)>| page.into_iter().map(|(c, _)| c).collect::<Vec<_>>();
    assert_eq!(cells(page(None, 2).await), vec![event(2), event(3)]);
    assert_eq!(cells(page(None, 1).await), vec![event(2)]);
    assert_eq!(cells(page(Some(event(2)), 1).await), vec![event(3)]);
    assert_eq!(cells(page(Some(event(3)), 1).await), Vec::<Cell>::new());
}

/// Hole 6: a transaction of write-once cells only that read a value of one may not write
/// it again (the guard must cover the cell written through its head).
async fn the_written_once_guard_covers_the_head_path(scene: Scene) {
    scene
        .commit(&[(event(1), Some("once")), (offset(), Some("1"))])
        .await;
    let txn = scene.writer.begin().await.unwrap();
    assert_eq!(txn.get(&event(1)).await.unwrap(), Some(b"once".to_vec()));
    txn.set(event(1), "twice");
    match txn.commit().await {
        Err(TxnError::WrittenOnce { cell }) => assert_eq!(cell, event(1)),
        other => panic!("expected WrittenOnce, got {other:?}"),
    }
    assert_eq!(scene.read(&event(1)).await, Some(b"once".to_vec()));
}

/// `snapshot_at` refuses a timestamp the oracle has not issued.
async fn a_snapshot_in_the_future_is_refused(scene: Scene) {
    let ahead = Timestamp(scene.now().await.0 + (3_600_000 << 18));
    match scene.writer.snapshot_at(ahead).await {
        Err(TxnError::InvalidArgument(_)) => {}
        Err(other) => panic!("expected InvalidArgument, got {other:?}"),
        Ok(_) => panic!("expected InvalidArgument, got a snapshot"),
    }
    assert!(scene.writer.snapshot_at(scene.now().await).await.is_ok());
}

macro_rules! scenarios {
    ($store:ident, $flavor:meta) => {
        mod $store {
            use super::*;
            #[$flavor]
            async fn two_gc_passes_keep_a_committed_record() {
                super::two_gc_passes_keep_a_committed_record(scene().await).await;
            }
            #[$flavor]
            async fn two_gc_passes_keep_a_committed_notification() {
                super::two_gc_passes_keep_a_committed_notification(scene().await).await;
            }
            #[$flavor]
            async fn two_gc_passes_do_not_bring_back_a_deleted_record() {
                super::two_gc_passes_do_not_bring_back_a_deleted_record(scene().await).await;
            }
            #[$flavor]
            async fn a_head_delete_stays_deleted_after_gc() {
                super::a_head_delete_stays_deleted_after_gc(scene().await).await;
            }
            #[$flavor]
            async fn a_worker_racing_gc_runs_the_committed_change() {
                super::a_worker_racing_gc_runs_the_committed_change(scene().await).await;
            }
            #[$flavor]
            async fn a_stalled_reader_is_refused_not_answered_absent() {
                super::a_stalled_reader_is_refused_not_answered_absent(scene().await).await;
            }
            #[$flavor]
            async fn a_read_between_gc_collecting_a_record_and_trimming_the_head() {
                super::a_read_between_gc_collecting_a_record_and_trimming_the_head(scene().await)
                    .await;
            }
            #[$flavor]
            async fn a_read_holding_its_records_scan_across_gc() {
                super::a_read_holding_its_records_scan_across_gc(scene().await).await;
            }
            #[$flavor]
            async fn a_read_holding_its_records_scan_across_gc_no_older_head() {
                super::a_read_holding_its_records_scan_across_gc_no_older_head(scene().await).await;
            }
            #[$flavor]
            async fn a_scan_holding_its_records_scan_across_gc() {
                super::a_scan_holding_its_records_scan_across_gc(scene().await).await;
            }
            #[$flavor]
            async fn scan_pages_are_full_over_heads_and_records() {
                super::scan_pages_are_full_over_heads_and_records(scene().await).await;
            }
            #[$flavor]
            async fn the_written_once_guard_covers_the_head_path() {
                super::the_written_once_guard_covers_the_head_path(scene().await).await;
            }
            #[$flavor]
            async fn a_snapshot_in_the_future_is_refused() {
                super::a_snapshot_in_the_future_is_refused(scene().await).await;
            }
        }
    };
}

mod on_memory {
    use super::*;
    async fn scene() -> Scene {
        Scene::new(Arc::new(MemoryKv::new()), Box::new(()))
    }
    scenarios!(s, tokio::test(flavor = "multi_thread", worker_threads = 2));
}

mod on_embedded {
    use super::*;
    async fn scene() -> Scene {
        let dir = tempfile::tempdir().expect("temp dir");
        let kv = percolator::txn::open_embedded(dir.path(), Default::default())
            .expect("open embedded store");
        Scene::new(Arc::new(kv), Box::new(dir))
    }
    scenarios!(s, tokio::test(flavor = "multi_thread", worker_threads = 2));
}

mod on_minitikv {
    use super::*;
    async fn scene() -> Scene {
        let store = common::tikv_store().await;
        let kv = store.kv.clone();
        Scene::new(kv, Box::new(store))
    }
    scenarios!(s, tokio::test(flavor = "multi_thread", worker_threads = 2));
}

/// GC that meets keys of a table id its client does not know (the map grew after it opened
/// the store) reads the store's map again and adopts it, then collects; a stored map that is
/// not a growth of the client's is refused, not adopted (invariant S4), and the pass with it:
/// records left unresolved would read as `CommitUnknown` once their primaries' evidence is
/// trimmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_adopts_a_grown_table_id_map_and_refuses_a_different_one() {
    use percolator::codec::{TableIds, TableIdsError};
    let kv: Arc<dyn RawKv> = Arc::new(MemoryKv::new());
    let ns = test_config().namespace;
    let old = TableIds::new([("loader", 1u16)]).unwrap();
    let old = percolator::txn::declare_table_ids(kv.as_ref(), &ns, &old)
        .await
        .unwrap();
    let grown = TableIds::new([("loader", 1u16), (EVENTS, 2u16)]).unwrap();
    let grown = percolator::txn::declare_table_ids(kv.as_ref(), &ns, &grown)
        .await
        .unwrap();
    let clock = Arc::new(LocalClock::new());
    let writer = Scene::client_with(
        &kv,
        &clock,
        ClientConfig {
            table_ids: grown.clone(),
            ..writer_config()
        },
    );
    let client_of = |table_ids: TableIds| {
        Scene::client_with(
            &kv,
            &clock,
            ClientConfig {
                table_ids,
                ..gc_config()
            },
        )
    };
    let stale = client_of(old);
    // Another build's map: id 3 for a table the store does not have.
    let other = client_of(TableIds::new([("loader", 1u16), ("other", 3u16)]).unwrap());
    let txn = writer.begin().await.unwrap();
    txn.set(event(1), "x");
    txn.set(offset(), "1");
    txn.commit().await.unwrap();
    let sp = {
        let t = writer.begin().await.unwrap();
        let ts = t.start_ts();
        t.rollback();
        ts
    };
    tokio::time::sleep(gc_config().gc_lag + Duration::from_millis(20)).await;
    match other.gc(sp).await {
        Err(TxnError::TableIds(TableIdsError::Mismatch { .. })) => {}
        other => panic!("expected Mismatch, got {other:?}"),
    }
    assert_ne!(other.codec().table_ids(), grown, "the other map is kept");
    stale.gc(sp).await.expect("gc with the grown map");
    assert_eq!(stale.codec().table_ids(), grown, "the stale client grew");
}
