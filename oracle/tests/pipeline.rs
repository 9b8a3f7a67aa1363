//! The client's pipelining against scripted oracles (delayed, silent, "not leader", or
//! answering the wrong request): several rounds in flight on one connection, replies matched
//! in order, every unanswered round resent on failover, each round timed out on its own.

use oracle::client::MAX_IN_FLIGHT;
use oracle::proto::{self, GetRequest, Reply};
use oracle::testkit::{check_all, free_port, wait_until, Call};
use oracle::{ClientConfig, ClientError, OracleClient};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

const GUARD: Duration = Duration::from_secs(30);

/// How a scripted oracle answers one request (`None`: never).
type Respond = Arc<dyn Fn(GetRequest) -> Option<Reply> + Send + Sync>;

/// Counters of a scripted oracle.
#[derive(Default)]
struct Seen {
    /// Requests read, over all connections.
    received: AtomicUsize,
    /// Most requests read but not yet answered on one connection at once.
    max_outstanding: AtomicUsize,
}

/// A scripted oracle on loopback: answers each connection's requests in order, each `delay`
/// after it arrived, as `respond` says.
struct Fake {
    addr: String,
    seen: Arc<Seen>,
    task: tokio::task::JoinHandle<()>,
}

impl Fake {
    async fn start(delay: Duration, respond: Respond) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let seen = Arc::new(Seen::default());
        let task = tokio::spawn(accept(listener, delay, respond, seen.clone()));
        Fake { addr, seen, task }
    }

    /// A leader handing out `next, next + 1, ...` in arrival order.
    async fn serving(delay: Duration, next: u64) -> Fake {
        let next = Arc::new(AtomicU64::new(next));
        Fake::start(
            delay,
            Arc::new(move |req: GetRequest| {
                Some(Reply::Timestamps {
                    req_id: req.req_id,
                    first: next.fetch_add(u64::from(req.count), Ordering::SeqCst),
                    count: req.count,
                })
            }),
        )
        .await
    }

    /// Reads requests, answers none.
    async fn silent() -> Fake {
        Fake::start(Duration::ZERO, Arc::new(|_| None)).await
    }

    fn received(&self) -> usize {
        self.seen.received.load(Ordering::SeqCst)
    }

    fn max_outstanding(&self) -> usize {
        self.seen.max_outstanding.load(Ordering::SeqCst)
    }

    /// Crash: closes the listener and every connection, unanswered requests included.
    async fn kill(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

async fn accept(listener: TcpListener, delay: Duration, respond: Respond, seen: Arc<Seen>) {
    // Owned here, so aborting this task drops every connection.
    let mut conns = JoinSet::new();
    loop {
        let (stream, _) = listener.accept().await.unwrap();
        conns.spawn(serve(stream, delay, respond.clone(), seen.clone()));
    }
}

async fn serve(stream: TcpStream, delay: Duration, respond: Respond, seen: Arc<Seen>) {
    let (mut rd, mut wr) = stream.into_split();
    let mut hello = [0u8; proto::HELLO_LEN];
    if rd.read_exact(&mut hello).await.is_err()
        || wr.write_all(&proto::hello(proto::VERSION)).await.is_err()
    {
        return;
    }
    let outstanding = Arc::new(AtomicUsize::new(0));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let reader = {
        let outstanding = outstanding.clone();
        async move {
            let (mut buf, mut chunk) = (Vec::new(), [0u8; 1024]);
            loop {
                while let Some((req, used)) = proto::decode_request(&buf).unwrap() {
                    buf.drain(..used);
                    seen.received.fetch_add(1, Ordering::SeqCst);
                    let now = outstanding.fetch_add(1, Ordering::SeqCst) + 1;
                    seen.max_outstanding.fetch_max(now, Ordering::SeqCst);
                    let _ = tx.send((req, tokio::time::Instant::now() + delay));
                }
                match rd.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
        }
    };
    let writer = async move {
        while let Some((req, due)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if let Some(reply) = respond(req) {
                outstanding.fetch_sub(1, Ordering::SeqCst);
                let mut out = Vec::new();
                proto::encode_reply(&reply, &mut out);
                if wr.write_all(&out).await.is_err() {
                    return;
                }
            }
        }
    };
    tokio::join!(reader, writer);
}

/// A spawned `get_timestamp`: its outcome, when it began and when it returned.
type Pending = tokio::task::JoinHandle<(Result<u64, ClientError>, Instant, Instant)>;

/// One `get_timestamp` on a spawned task.
fn call(client: &OracleClient) -> Pending {
    let client = client.clone();
    tokio::spawn(async move {
        let start = Instant::now();
        let got = client.get_timestamp().await.map(|ts| ts.0);
        (got, start, Instant::now())
    })
}

/// Issues waves of `per_wave` calls until `silent` holds [`MAX_IN_FLIGHT`] unanswered rounds,
/// then one more wave that has to wait for room.
async fn fill_pipeline(client: &OracleClient, silent: &Fake, per_wave: usize) -> Vec<Pending> {
    let mut calls = Vec::new();
    for wave in 0..=MAX_IN_FLIGHT {
        for _ in 0..per_wave {
            calls.push(call(client));
        }
        let want = (wave + 1).min(MAX_IN_FLIGHT);
        wait_until("a round to be sent", GUARD, || silent.received() >= want).await;
    }
    // The last wave gets no room: nothing more is sent.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(silent.received(), MAX_IN_FLIGHT);
    assert_eq!(silent.max_outstanding(), MAX_IN_FLIGHT);
    calls
}

/// Awaits the calls; all must have succeeded.
async fn successes(calls: Vec<Pending>) -> Vec<Call> {
    let mut out = Vec::new();
    for (caller, c) in calls.into_iter().enumerate() {
        let (got, start, end) = c.await.unwrap();
        let ts = got.unwrap_or_else(|e| panic!("call {caller} failed: {e}"));
        out.push(Call {
            caller,
            start,
            end,
            ts,
        });
    }
    out
}

fn patient() -> ClientConfig {
    ClientConfig {
        rpc_timeout: Duration::from_secs(20),
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(25),
        retry_backoff: Duration::from_millis(10),
        give_up_refused: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_rounds_stay_linearizable() {
    const TASKS: usize = 64;
    const CALLS: usize = 100;
    let server = Fake::serving(Duration::from_millis(2), 1).await;
    let client = OracleClient::new(vec![server.addr.clone()], ClientConfig::default()).unwrap();
    let log = oracle::testkit::Log::default();
    let mut tasks = Vec::new();
    for caller in 0..TASKS {
        let (client, log) = (client.clone(), log.clone());
        tasks.push(tokio::spawn(async move {
            let mut calls = Vec::with_capacity(CALLS);
            for _ in 0..CALLS {
                let start = Instant::now();
                let ts = client.get_timestamp().await.unwrap().0;
                calls.push(Call {
                    caller,
                    start,
                    end: Instant::now(),
                    ts,
                });
            }
            log.push(calls);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let calls = log.take();
    assert_eq!(calls.len(), TASKS * CALLS);
    check_all(&calls);
    // Rounds overlapped on the one connection, never more than allowed.
    let overlap = server.max_outstanding();
    assert!(
        (2..=MAX_IN_FLIGHT).contains(&overlap),
        "{overlap} rounds in flight at most"
    );
    let stats = client.stats();
    assert_eq!(stats.timestamps, (TASKS * CALLS) as u64);
    assert_eq!(stats.round_trips, server.received() as u64);
    server.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_resends_every_round_in_flight() {
    const BASE: u64 = 1 << 40;
    let a = Fake::silent().await;
    let b = Fake::serving(Duration::ZERO, BASE).await;
    let client = OracleClient::new(vec![a.addr.clone(), b.addr.clone()], patient()).unwrap();
    let calls = fill_pipeline(&client, &a, 8).await;
    a.kill().await;
    let calls = successes(calls).await;
    assert!(
        calls.iter().all(|c| c.ts >= BASE),
        "answered by the dead server"
    );
    check_all(&calls);
    // The rounds in flight went out again as they were, then the waiting one.
    assert_eq!(b.received(), MAX_IN_FLIGHT + 1);
    b.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_leader_sends_every_round_in_flight_to_the_hint() {
    const BASE: u64 = 1 << 40;
    let leader = Fake::serving(Duration::ZERO, BASE).await;
    let other = Fake::silent().await;
    let hint = leader.addr.clone();
    // Answers late, so that several rounds are in flight when the first answer comes.
    let standby = Fake::start(
        Duration::from_millis(300),
        Arc::new(move |req: GetRequest| {
            Some(Reply::NotLeader {
                req_id: req.req_id,
                hint: hint.clone(),
            })
        }),
    )
    .await;
    let addrs = vec![
        standby.addr.clone(),
        other.addr.clone(),
        leader.addr.clone(),
    ];
    let client = OracleClient::new(addrs, patient()).unwrap();
    let mut calls = Vec::new();
    for wave in 0..3 {
        for _ in 0..8 {
            calls.push(call(&client));
        }
        wait_until("a round to be sent", GUARD, || standby.received() > wave).await;
    }
    let calls = successes(calls).await;
    assert!(calls.iter().all(|c| c.ts >= BASE));
    check_all(&calls);
    assert!(standby.max_outstanding() >= 2);
    // Straight to the hinted leader, skipping the address in between.
    assert_eq!(other.received(), 0);
    for fake in [leader, other, standby] {
        fake.kill().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reply_to_an_unknown_request_drops_the_connection() {
    const BASE: u64 = 1 << 40;
    let liar = Fake::start(
        Duration::ZERO,
        Arc::new(|req: GetRequest| {
            Some(Reply::Timestamps {
                req_id: req.req_id + 1,
                first: 1,
                count: req.count,
            })
        }),
    )
    .await;
    let good = Fake::serving(Duration::ZERO, BASE).await;
    let client = OracleClient::new(vec![liar.addr.clone(), good.addr.clone()], patient()).unwrap();
    let calls: Vec<_> = (0..32).map(|_| call(&client)).collect();
    let calls = successes(calls).await;
    assert!(
        calls.iter().all(|c| c.ts >= BASE),
        "took a mismatched reply"
    );
    check_all(&calls);
    assert!(liar.received() >= 1);
    liar.kill().await;
    good.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rounds_in_flight_time_out_each_on_its_own() {
    let silent = Fake::silent().await;
    let config = ClientConfig {
        rpc_timeout: Duration::from_millis(100),
        connect_timeout: Duration::from_millis(100),
        request_timeout: Duration::from_millis(600),
        retry_backoff: Duration::from_millis(10),
        give_up_refused: None,
    };
    let client = OracleClient::new(vec![silent.addr.clone()], config.clone()).unwrap();
    let mut calls = Vec::new();
    for wave in 0..3 {
        for _ in 0..4 {
            calls.push(call(&client));
        }
        wait_until("a round to be sent", GUARD, || silent.received() > wave).await;
    }
    for c in calls {
        let (got, start, end) = c.await.unwrap();
        match got {
            Err(ClientError::Timeout { last, .. }) => {
                assert!(last.contains(&silent.addr), "{last}");
                assert!(last.contains("no reply"), "{last}");
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
        let took = end - start;
        assert!(took >= config.request_timeout, "gave up after {took:?}");
        // Past it, the round gives up at its next failure: within one round trip timeout.
        let slack = config.rpc_timeout + Duration::from_secs(2);
        assert!(took < config.request_timeout + slack, "took {took:?}");
    }
    silent.kill().await;
}

#[test]
fn requests_fail_when_the_connection_task_ends() {
    let requesters = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    // The connection task's runtime never runs it: its requests stay pending.
    let doomed = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let client = {
        let _in = doomed.enter();
        OracleClient::new(vec![addr], ClientConfig::default()).unwrap()
    };
    let waiting = {
        let client = client.clone();
        requesters.spawn(async move { client.get_timestamp().await })
    };
    std::thread::sleep(Duration::from_millis(50));
    drop(doomed);
    requesters.block_on(async {
        let got = tokio::time::timeout(GUARD, waiting).await.unwrap().unwrap();
        assert_eq!(got, Err(ClientError::Closed));
        assert_eq!(client.get_timestamp().await, Err(ClientError::Closed));
    });
}
