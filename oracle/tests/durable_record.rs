//! The oracle's record is on disk before any timestamp of its window is handed out: every
//! write of the record is followed by `RawKv::sync` before the window is used, so after a
//! power loss a restarted oracle starts above every timestamp already handed out, whatever
//! durability the store acknowledges ordinary writes with.

use async_trait::async_trait;
use oracle::record::OracleRecord;
use oracle::{record_key, WindowOptions};
use oracle::{ClientConfig, LocalOracle, ManualClock, OracleClient, ServerConfig, ServerHandle};
use percolator::kv::intercept::{Hooks, Intercepted, Op};
use percolator::kv::{CasOutcome, Durability, EmbeddedKv, EmbeddedOptions, KvResult, MemoryKv};
use percolator::RawKv;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Records the window ends written to the oracle record and the syncs, in order.
#[derive(Default)]
struct Recorder {
    key: Vec<u8>,
    state: Mutex<Synced>,
}

#[derive(Default)]
struct Synced {
    /// The last window end written (not necessarily synced yet).
    written: u64,
    /// The window end on disk: the last one written before the last sync.
    durable: u64,
    syncs: usize,
}

impl Recorder {
    fn durable(&self) -> u64 {
        self.state.lock().unwrap().durable
    }
}

#[async_trait]
impl Hooks for Recorder {
    async fn after(&self, op: Op) -> KvResult<()> {
        if op == Op::Sync {
            let mut s = self.state.lock().unwrap();
            s.durable = s.written;
            s.syncs += 1;
        }
        Ok(())
    }

    async fn swapped(&self, key: &[u8], new: &[u8], outcome: CasOutcome) -> KvResult<CasOutcome> {
        if key == self.key && outcome.swapped {
            let record = OracleRecord::decode(new).expect("a valid record");
            self.state.lock().unwrap().written = record.window_end;
        }
        Ok(outcome)
    }
}

fn watched(namespace: &str) -> Arc<Intercepted<Recorder>> {
    let hooks = Recorder {
        key: record_key(namespace),
        ..Recorder::default()
    };
    Arc::new(Intercepted::wrap(Arc::new(MemoryKv::new()), hooks))
}

/// The in-process oracle on a clock stepped past its window before each call: every call
/// extends the window, and every timestamp is at or below a window end already synced.
#[tokio::test]
async fn local_oracle_syncs_each_window_before_using_it() {
    let kv = watched("o");
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let options = WindowOptions {
        namespace: "o".to_string(),
        window: Duration::from_millis(50),
        max_window: Duration::from_millis(50),
        clock: clock.clone(),
    };
    let oracle = LocalOracle::open(kv.clone(), options).await.unwrap();
    for _ in 0..20 {
        let ts = oracle.get_timestamps(3).await.unwrap();
        assert!(
            ts.0 + 2 <= kv.hooks().durable(),
            "timestamp {} handed out above the synced window end {}",
            ts.0 + 2,
            kv.hooks().durable()
        );
        clock.step(100);
    }
    assert!(kv.hooks().state.lock().unwrap().syncs >= 20);
}

/// The same for the oracle service: its window extensions (the heartbeat included) sync
/// before the window is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_syncs_each_window_before_serving_it() {
    let kv = watched("default");
    let config = ServerConfig {
        window: WindowOptions {
            window: Duration::from_millis(20),
            max_window: Duration::from_millis(20),
            ..WindowOptions::default()
        },
        heartbeat_interval: Duration::from_millis(10),
        exclusive: true,
        ..ServerConfig::default()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = ServerHandle::start(config, kv.clone(), listener).unwrap();
    let client = OracleClient::new(
        vec![server.local_addr().to_string()],
        ClientConfig::default(),
    )
    .unwrap();
    let mut last = 0;
    for _ in 0..200 {
        let ts = client.get_timestamp().await.unwrap();
        assert!(ts.0 > last);
        last = ts.0;
        assert!(
            ts.0 <= kv.hooks().durable(),
            "timestamp {} served above the synced window end {}",
            ts.0,
            kv.hooks().durable()
        );
    }
    server.shutdown().await;
}

/// On a real embedded store acknowledging writes without fsync (`Durability::Process`), each
/// window the oracle serves from is still `fdatasync`ed first.
#[tokio::test]
async fn an_embedded_store_without_fsync_still_syncs_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let options = EmbeddedOptions {
        durability: Durability::Process,
        ..EmbeddedOptions::default()
    };
    let kv = Arc::new(EmbeddedKv::open_with(dir.path(), options).unwrap());
    kv.put(b"k".to_vec(), b"v".to_vec()).await.unwrap();
    assert_eq!(kv.fsyncs(), 0, "ordinary writes are not synced");
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let options = WindowOptions {
        namespace: "o".to_string(),
        window: Duration::from_millis(50),
        clock: clock.clone(),
        ..WindowOptions::default()
    };
    let store: Arc<dyn RawKv> = kv.clone();
    let oracle = LocalOracle::open(store, options).await.unwrap();
    oracle.get_timestamps(1).await.unwrap();
    assert_eq!(kv.fsyncs(), 1, "the first window was synced");
    oracle.get_timestamps(1).await.unwrap();
    assert_eq!(kv.fsyncs(), 1, "served from the synced window");
    clock.step(100);
    oracle.get_timestamps(1).await.unwrap();
    assert_eq!(kv.fsyncs(), 2, "the window extension synced");
}
