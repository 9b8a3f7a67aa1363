//! An injectable wall clock stepped backwards (and frozen, and jumped forwards): timestamps
//! stay strictly increasing, in-process and through a server, and across a reopen.

use oracle::{
    ClientConfig, LocalOracle, ManualClock, OracleClient, ServerConfig, ServerHandle, WindowOptions,
};
use percolator::kv::MemoryKv;
use percolator::{RawKv, Timestamp};
use std::sync::Arc;
use tokio::net::TcpListener;

const T0: u64 = 1_800_000_000_000;

fn options(clock: &Arc<ManualClock>) -> WindowOptions {
    WindowOptions {
        clock: clock.clone(),
        ..WindowOptions::default()
    }
}

#[tokio::test]
async fn local_oracle_survives_clock_steps_and_reopen() {
    let kv: Arc<dyn RawKv> = Arc::new(MemoryKv::new());
    let clock = Arc::new(ManualClock::new(T0));
    let oracle = LocalOracle::open(kv.clone(), options(&clock))
        .await
        .unwrap();
    let mut prev = Timestamp::ZERO;
    // Checks the range `first .. first + n` against everything before it.
    let mut check = |first: Timestamp, n: u64| {
        assert!(first > prev, "{first} after {prev}");
        prev = Timestamp(first.0 + n - 1);
    };
    for step in [0i64, -10_000, 1, -1, 3_600_000, -7_200_000, 5, 0] {
        clock.step(step);
        for _ in 0..1000 {
            check(oracle.get_timestamps(1).await.unwrap(), 1);
        }
        // A frozen clock: more than 2^18 timestamps in one millisecond, through several
        // window extensions.
        for _ in 0..6 {
            check(oracle.get_timestamps(65_536).await.unwrap(), 65_536);
        }
    }
    // Restart with the clock an hour behind: above everything handed out before.
    drop(oracle);
    clock.step(-3_600_000);
    let reopened = LocalOracle::open(kv.clone(), options(&clock))
        .await
        .unwrap();
    check(reopened.get_timestamps(1).await.unwrap(), 1);
    // The old instance is deposed by the reopen: a fresh one after close also continues.
    reopened.close().await.unwrap();
    let again = LocalOracle::open(kv, options(&clock)).await.unwrap();
    check(again.get_timestamps(1).await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_survives_clock_steps() {
    let kv: Arc<dyn RawKv> = Arc::new(MemoryKv::new());
    let clock = Arc::new(ManualClock::new(T0));
    let config = ServerConfig {
        window: options(&clock),
        exclusive: true,
        ..ServerConfig::default()
    };
    let server =
        ServerHandle::start(config, kv, TcpListener::bind("127.0.0.1:0").await.unwrap()).unwrap();
    let client = OracleClient::new(
        vec![server.local_addr().to_string()],
        ClientConfig::default(),
    )
    .unwrap();
    let mut prev = Timestamp::ZERO;
    for step in [0i64, -5_000, 2, -2, 60_000, -120_000, 0] {
        clock.step(step);
        for _ in 0..500 {
            let ts = client.get_timestamp().await.unwrap();
            assert!(ts > prev, "{ts} after {prev} (clock step {step})");
            prev = ts;
        }
    }
    server.shutdown().await;
}

/// An oracle that takes over ahead of the wall clock (the previous leader's window ends a
/// minute after the wall clock's now) does not stand still until the wall clock catches up:
/// its physical time advances, so TTLs measured on oracle time still run out.
#[tokio::test]
async fn oracle_time_advances_after_a_takeover_ahead_of_the_wall_clock() {
    let kv: Arc<dyn RawKv> = Arc::new(MemoryKv::new());
    let clock = Arc::new(ManualClock::new(T0));
    let first = LocalOracle::open(kv.clone(), options(&clock))
        .await
        .unwrap();
    first.get_timestamps(1).await.unwrap();
    drop(first);
    // The wall clock (frozen from here on) is now a minute behind the persisted window.
    clock.step(-60_000);
    let reopened = LocalOracle::open(kv, options(&clock)).await.unwrap();
    let at_takeover = reopened.get_timestamps(1).await.unwrap();
    assert!(
        at_takeover.physical_ms() > T0,
        "starts above the old window"
    );
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    let later = reopened.get_timestamps(1).await.unwrap();
    let advanced = later.physical_ms() - at_takeover.physical_ms();
    assert!(
        (100..=400).contains(&advanced),
        "oracle time advanced {advanced} ms in 400 ms of real time"
    );
}

#[tokio::test]
async fn local_oracle_extends_its_window_before_it_runs_out() {
    let kv: Arc<dyn RawKv> = Arc::new(MemoryKv::new());
    let clock = Arc::new(ManualClock::new(T0));
    let opts = options(&clock);
    let key = oracle::record_key(&opts.namespace);
    let oracle = LocalOracle::open(kv.clone(), opts).await.unwrap();
    let window_end = |bytes: Option<Vec<u8>>| {
        oracle::record::OracleRecord::decode(&bytes.expect("the record"))
            .unwrap()
            .window_end
    };
    let first = oracle.get_timestamps(1).await.unwrap();
    let end = window_end(kv.get(&key).await.unwrap());
    assert!(first.0 <= end);
    // Two thirds of the 3 s window later, timestamps are still served from it, and the next
    // window's write starts in the background instead of when it runs out.
    clock.step(2_000);
    let second = oracle.get_timestamps(1).await.unwrap();
    assert!(second > first && second.0 <= end);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let now_end = window_end(kv.get(&key).await.unwrap());
        if now_end > end {
            assert!(
                Timestamp(now_end).physical_ms() >= T0 + 2_000 + 3_000,
                "a full window past the clock"
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the window was not extended ahead"
        );
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert!(oracle.get_timestamps(1).await.unwrap() > second);
}
