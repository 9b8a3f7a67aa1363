//! The oracle service: leader election through the store, the serving loop, and the
//! per-batch epoch check (safety argument in `oracle::design`).

use crate::lease::Lease;
use crate::proto::{self, GetRequest, ProtocolError, Reply};
use crate::record::OracleRecord;
use crate::{record_key, OracleError, WindowOptions};
use percolator::RawKv;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

/// Settings of one oracle server.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The persisted window.
    pub window: WindowOptions,
    /// How often the leader rewrites the record (heartbeat and window extension).
    pub heartbeat_interval: Duration,
    /// A standby takes over when the record has not changed for this long on its monotonic
    /// clock (liveness only; safety does not depend on it).
    pub lease_timeout: Duration,
    /// The store is owned by this process alone (embedded directory lock, memory): no other
    /// oracle can be alive on it, so take over at once instead of waiting out the lease.
    pub exclusive: bool,
    /// Address written into the record as the leader hint; defaults to the bound address.
    pub advertise: Option<String>,
    /// How long a new connection may take to send its handshake.
    pub handshake_timeout: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            window: WindowOptions::default(),
            heartbeat_interval: Duration::from_millis(500),
            lease_timeout: Duration::from_secs(3),
            exclusive: false,
            advertise: None,
            handshake_timeout: Duration::from_secs(5),
        }
    }
}

/// What a server has done since it started: plain counters, for the binary's metrics
/// (`oracle serve --metrics-addr`) and tests.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Timestamps handed out (the sum of the counts of answered requests).
    pub timestamps_served: AtomicU64,
    /// Requests answered with timestamps.
    pub requests_served: AtomicU64,
    /// Requests answered "not leader" (the client is redirected to the leader).
    pub not_leader_replies: AtomicU64,
    /// Times this server took over as leader.
    pub took_over: AtomicU64,
    /// Times this server stepped down (deposed by another's takeover, or its epoch moved).
    pub stepped_down: AtomicU64,
}

struct Shared {
    stats: Arc<ServerStats>,
    kv: Arc<dyn RawKv>,
    key: Vec<u8>,
    config: ServerConfig,
    id: u64,
    addr: String,
    lease: Mutex<Option<Arc<Lease>>>,
    hint: Mutex<String>,
    paused: watch::Sender<bool>,
    role_paused: watch::Sender<bool>,
    role_wake: Notify,
    /// Set once the role loop has looked at the record (and so knows the leader, or leads):
    /// connections are accepted only then, so no client is told "not leader" without the
    /// leader's address just because the server was younger than its first look.
    looked: watch::Sender<bool>,
}

impl Shared {
    fn current(&self) -> Option<Arc<Lease>> {
        self.lease
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .filter(|l| !l.is_deposed())
    }

    fn set_lease(&self, lease: Option<Arc<Lease>>) {
        *self.lease.lock().unwrap_or_else(|p| p.into_inner()) = lease;
    }

    fn hint(&self) -> String {
        self.hint.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Test hook: waits while the serving path is paused (emulated SIGSTOP).
    async fn gate(&self) {
        wait_unpaused(&self.paused).await;
    }

    /// Test hook: waits while the heartbeat and election are paused.
    async fn role_gate(&self) {
        wait_unpaused(&self.role_paused).await;
    }

    /// Serves one batch of requests read from a connection.
    async fn serve_batch(&self, reqs: &[GetRequest], out: &mut Vec<u8>) {
        let not_leader = |out: &mut Vec<u8>, hint: String| {
            let n = reqs.len() as u64;
            self.stats
                .not_leader_replies
                .fetch_add(n, Ordering::Relaxed);
            for r in reqs {
                let reply = Reply::NotLeader {
                    req_id: r.req_id,
                    hint: hint.clone(),
                };
                proto::encode_reply(&reply, out);
            }
        };
        let error = |out: &mut Vec<u8>, message: String| {
            for r in reqs {
                let reply = Reply::Error {
                    req_id: r.req_id,
                    message: message.clone(),
                };
                proto::encode_reply(&reply, out);
            }
        };
        let Some(lease) = self.current() else {
            return not_leader(out, self.hint());
        };
        let total: u64 = reqs.iter().map(|r| u64::from(r.count)).sum();
        // The heartbeat (`role_loop`) keeps the window ahead: the "less than half left" flag
        // is for the in-process oracle, which has none.
        let first = match lease.allocate(total).await {
            Ok((first, _)) => first,
            Err(OracleError::NotLeader) => {
                self.role_wake.notify_one();
                return not_leader(out, String::new());
            }
            Err(e) => return error(out, e.to_string()),
        };
        // The epoch check: after the requests arrived, before any reply leaves.
        match lease.check_epoch().await {
            Ok(true) => {}
            Ok(false) => {
                warn!(
                    epoch = lease.epoch(),
                    "epoch moved: another oracle took over; stepping down"
                );
                self.role_wake.notify_one();
                return not_leader(out, String::new());
            }
            Err(e) => return error(out, e.to_string()),
        }
        let stats = &self.stats;
        stats.timestamps_served.fetch_add(total, Ordering::Relaxed);
        stats
            .requests_served
            .fetch_add(reqs.len() as u64, Ordering::Relaxed);
        let mut next = first;
        for r in reqs {
            let reply = Reply::Timestamps {
                req_id: r.req_id,
                first: next,
                count: r.count,
            };
            proto::encode_reply(&reply, out);
            next += u64::from(r.count);
        }
    }
}

async fn wait_unpaused(flag: &watch::Sender<bool>) {
    let paused = *flag.borrow();
    if paused {
        let mut rx = flag.subscribe();
        let _ = rx.wait_for(|p| !*p).await;
    }
}

/// A running server. Dropping it does not stop it; call [`ServerHandle::shutdown`] or
/// [`ServerHandle::kill`].
pub struct ServerHandle {
    shared: Arc<Shared>,
    local_addr: SocketAddr,
    stop: watch::Sender<bool>,
    tasks: tokio::task::JoinHandle<()>,
}

impl ServerHandle {
    /// Starts serving on `listener` over `kv`. Returns at once; the server becomes leader
    /// when it wins the record (immediately on an exclusive store or an empty record).
    pub fn start(
        config: ServerConfig,
        kv: Arc<dyn RawKv>,
        listener: TcpListener,
    ) -> Result<ServerHandle, OracleError> {
        let local_addr = listener.local_addr()?;
        let addr = config
            .advertise
            .clone()
            .unwrap_or_else(|| local_addr.to_string());
        let shared = Arc::new(Shared {
            stats: Arc::default(),
            key: record_key(&config.window.namespace),
            kv,
            config,
            id: rand::random(),
            addr,
            lease: Mutex::new(None),
            hint: Mutex::new(String::new()),
            paused: watch::channel(false).0,
            role_paused: watch::channel(false).0,
            role_wake: Notify::new(),
            looked: watch::channel(false).0,
        });
        let (stop, stop_rx) = watch::channel(false);
        let tasks = tokio::spawn(run(shared.clone(), listener, stop_rx));
        Ok(ServerHandle {
            shared,
            local_addr,
            stop,
            tasks,
        })
    }

    /// The server's counters (shared: they go on counting).
    pub fn stats(&self) -> Arc<ServerStats> {
        self.shared.stats.clone()
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Whether this server currently believes it leads (it still checks its epoch per batch).
    pub fn is_leader(&self) -> bool {
        self.shared.current().is_some()
    }

    /// The epoch this server leads in, if any.
    pub fn epoch(&self) -> Option<u64> {
        self.shared.current().map(|l| l.epoch())
    }

    /// Fault injection for tests: freezes the serving path (requests are read but not
    /// answered) and the heartbeat, as SIGSTOP would.
    pub fn pause(&self) {
        self.shared.role_paused.send_replace(true);
        self.shared.paused.send_replace(true);
    }

    /// Undoes [`ServerHandle::pause`].
    pub fn resume(&self) {
        self.shared.paused.send_replace(false);
        self.shared.role_paused.send_replace(false);
    }

    /// Fault injection for tests: after [`ServerHandle::pause`], lets only the serving path
    /// run while the heartbeat and election stay frozen: the worst schedule after SIGCONT,
    /// where the deposed leader answers before its heartbeat could notice the takeover.
    pub fn resume_serving_only(&self) {
        self.shared.paused.send_replace(false);
    }

    /// Graceful stop: closes the listener and connections, then releases leadership in the
    /// record so a standby takes over without waiting.
    pub async fn shutdown(self) {
        self.stop.send_replace(true);
        let _ = self.tasks.await;
        if let Some(lease) = self.shared.current() {
            match lease.release().await {
                Ok(()) => info!("released leadership"),
                Err(e) => warn!(error = %e, "could not release leadership"),
            }
        }
        self.shared.set_lease(None);
    }

    /// Crash emulation: stops every task at once, releasing nothing.
    pub async fn kill(self) {
        self.tasks.abort();
        let _ = self.tasks.await;
        if let Some(lease) = self.shared.current() {
            // Not a release: only makes sure nothing in this process serves any more.
            drop(lease);
        }
        self.shared.set_lease(None);
    }
}

async fn run(shared: Arc<Shared>, listener: TcpListener, mut stop: watch::Receiver<bool>) {
    let mut tasks = JoinSet::new();
    tasks.spawn(role_loop(shared.clone()));
    // Clients that connect meanwhile wait in the listen backlog.
    let mut looked = shared.looked.subscribe();
    tokio::select! {
        _ = async { let _ = stop.wait_for(|s| *s).await; } => {
            tasks.shutdown().await;
            return;
        }
        _ = async { let _ = looked.wait_for(|l| *l).await; } => {}
    }
    loop {
        tokio::select! {
            _ = async { let _ = stop.wait_for(|s| *s).await; } => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    tasks.spawn(connection(shared.clone(), stream, peer));
                }
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    tasks.shutdown().await;
}

/// Leader: heartbeat (which also extends the window). Standby: watch the record and take
/// over when it stops changing for `lease_timeout`, or at once if it has no leader.
async fn role_loop(shared: Arc<Shared>) {
    let cfg = &shared.config;
    let poll = (cfg.lease_timeout / 4).max(Duration::from_millis(10));
    let mut observed: Option<(Option<Vec<u8>>, Instant)> = None;
    let mut first = true;
    loop {
        shared.role_gate().await;
        let held = shared
            .lease
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(lease) = held {
            if !lease.is_deposed() {
                match lease.extend(None).await {
                    Ok(()) => {}
                    Err(OracleError::NotLeader) => {}
                    Err(e) => warn!(error = %e, "heartbeat failed"),
                }
            }
            if lease.is_deposed() {
                warn!(epoch = lease.epoch(), "deposed: now a standby");
                shared.stats.stepped_down.fetch_add(1, Ordering::Relaxed);
                shared.set_lease(None);
                observed = None;
                continue;
            }
            tokio::select! {
                _ = tokio::time::sleep(cfg.heartbeat_interval) => {}
                _ = shared.role_wake.notified() => {}
            }
            continue;
        }
        let step = standby_step(&shared, &mut observed, first).await;
        // Looked (even if the store failed us: then clients get no hint, as before).
        shared.looked.send_replace(true);
        match step {
            Ok(true) => {
                first = false;
                continue;
            }
            Ok(false) => {}
            Err(e) => warn!(error = %e, "standby could not check the oracle record"),
        }
        first = false;
        tokio::time::sleep(poll).await;
    }
}

/// One look at the record as a standby; `Ok(true)` if we became leader.
async fn standby_step(
    shared: &Arc<Shared>,
    observed: &mut Option<(Option<Vec<u8>>, Instant)>,
    first: bool,
) -> Result<bool, OracleError> {
    let cfg = &shared.config;
    let bytes = shared.kv.get(&shared.key).await?;
    let rec = match &bytes {
        Some(b) => Some(OracleRecord::decode(b)?),
        None => None,
    };
    let leaderless = rec.as_ref().is_none_or(|r| r.leader.is_none());
    if let Some(leader) = rec.as_ref().and_then(|r| r.leader.as_ref()) {
        *shared.hint.lock().unwrap_or_else(|p| p.into_inner()) = leader.addr.clone();
    }
    let stale = match observed {
        Some((seen, since)) if *seen == bytes => since.elapsed() >= cfg.lease_timeout,
        _ => {
            *observed = Some((bytes.clone(), Instant::now()));
            false
        }
    };
    if !(leaderless || stale || (first && cfg.exclusive)) {
        return Ok(false);
    }
    let lease = Lease::take_over(
        shared.kv.clone(),
        shared.key.clone(),
        cfg.window.clone(),
        shared.id,
        shared.addr.clone(),
        bytes,
    )
    .await?;
    match lease {
        Some(lease) => {
            info!(
                epoch = lease.epoch(),
                previous = ?rec.map(|r| r.epoch),
                addr = %shared.addr,
                "took over: serving as leader"
            );
            shared.set_lease(Some(Arc::new(lease)));
            shared.stats.took_over.fetch_add(1, Ordering::Relaxed);
            *observed = None;
            Ok(true)
        }
        None => {
            debug!("lost the takeover race");
            *observed = None;
            Ok(false)
        }
    }
}

async fn connection(shared: Arc<Shared>, mut stream: TcpStream, peer: SocketAddr) {
    if let Err(reason) = serve_connection(&shared, &mut stream).await {
        match reason {
            ConnEnd::Protocol(e) => warn!(%peer, reason = %e, "closing connection"),
            ConnEnd::Io(e) => debug!(%peer, error = %e, "connection ended"),
            ConnEnd::HandshakeTimeout => warn!(%peer, "closing connection: no handshake in time"),
        }
    }
}

enum ConnEnd {
    Protocol(ProtocolError),
    Io(std::io::Error),
    HandshakeTimeout,
}

impl From<std::io::Error> for ConnEnd {
    fn from(e: std::io::Error) -> Self {
        ConnEnd::Io(e)
    }
}

impl From<ProtocolError> for ConnEnd {
    fn from(e: ProtocolError) -> Self {
        ConnEnd::Protocol(e)
    }
}

async fn serve_connection(shared: &Shared, stream: &mut TcpStream) -> Result<(), ConnEnd> {
    let _ = stream.set_nodelay(true);
    let mut hello = [0u8; proto::HELLO_LEN];
    let mut got = 0;
    let deadline = tokio::time::Instant::now() + shared.config.handshake_timeout;
    while got < hello.len() {
        let n = tokio::time::timeout_at(deadline, stream.read(&mut hello[got..]))
            .await
            .map_err(|_| ConnEnd::HandshakeTimeout)??;
        if n == 0 {
            return Err(ProtocolError::Truncated(got).into());
        }
        got += n;
    }
    let version = proto::parse_hello(&hello)?;
    stream.write_all(&proto::hello(proto::VERSION)).await?;
    if version != proto::VERSION {
        return Err(ProtocolError::UnsupportedVersion(version).into());
    }
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    let mut chunk = vec![0u8; 16 * 1024];
    let mut reqs = Vec::new();
    let mut out = Vec::with_capacity(4096);
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            if buf.is_empty() {
                return Ok(());
            }
            return Err(ProtocolError::Truncated(buf.len()).into());
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut pos = 0;
        // A protocol error closes the connection after the valid requests before it are served.
        let mut violation = None;
        loop {
            match proto::decode_request(&buf[pos..]) {
                Ok(Some((req, used))) => {
                    reqs.push(req);
                    pos += used;
                }
                Ok(None) => break,
                Err(e) => {
                    violation = Some(e);
                    break;
                }
            }
        }
        buf.drain(..pos);
        if !reqs.is_empty() {
            shared.gate().await;
            out.clear();
            shared.serve_batch(&reqs, &mut out).await;
            reqs.clear();
            stream.write_all(&out).await?;
        }
        if let Some(e) = violation {
            return Err(e.into());
        }
    }
}
