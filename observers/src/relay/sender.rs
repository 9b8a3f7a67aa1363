//! The sending end: a client's committed notify keys, relayed to the workers of its
//! namespace that listen for them.

use percolator::txn::CommittedNotify;
use percolator::Client;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::UdpSocket;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::time::Instant;

/// How often the relay reads the worker registry for the listening workers' addresses.
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(1);

/// Hints taken from the client's channel per round of sends at most.
const HINTS_PER_ROUND: usize = 256;

/// A worker whose heartbeat is this much older than the oracle's time gets no datagrams.
const STALE_AFTER: Duration = Duration::from_secs(60);

/// What a relay has done.
#[derive(Debug, Default)]
struct Counts {
    datagrams: AtomicU64,
    keys: AtomicU64,
    failed: AtomicU64,
    lost: AtomicU64,
}

/// Relays the notify keys of a client's commits to the workers of its namespace in other
/// processes that listen for them ([`super::HintListener`]), so that a worker beside a
/// loader in another process runs the loader's commits at once instead of finding them by
/// scanning. Best-effort, as in-process hints are: a datagram lost, or a worker not yet
/// known, leaves its keys to the scanners. Runs until dropped or [`HintRelay::stop`]ped.
pub struct HintRelay {
    targets: Arc<Mutex<Vec<SocketAddr>>>,
    counts: Arc<Counts>,
    task: tokio::task::JoinHandle<()>,
}

impl HintRelay {
    /// Starts relaying `client`'s commits from now on, reading the worker registry every
    /// `refresh` ([`DEFAULT_REFRESH`]). Needs a Tokio runtime.
    pub fn spawn(client: &Client, refresh: Duration) -> HintRelay {
        Self::spawn_beside(client, refresh, None)
    }

    /// [`HintRelay::spawn`] in a process whose workers listen on `own`: its address is left
    /// out (those workers get the client's commits as in-process hints already).
    pub fn spawn_beside(
        client: &Client,
        refresh: Duration,
        own: Option<&super::HintListener>,
    ) -> HintRelay {
        let own = own.and_then(|l| l.advertised().parse::<SocketAddr>().ok());
        let targets = Arc::new(Mutex::new(Vec::new()));
        let counts = Arc::new(Counts::default());
        let hints = client.notify_hints();
        let task = tokio::spawn(relay(
            client.clone(),
            hints,
            refresh,
            own,
            targets.clone(),
            counts.clone(),
        ));
        HintRelay {
            targets,
            counts,
            task,
        }
    }

    /// The workers' addresses the relay sends to, as last read.
    pub fn targets(&self) -> Vec<SocketAddr> {
        self.targets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Datagrams sent, over all targets.
    pub fn datagrams_sent(&self) -> u64 {
        self.counts.datagrams.load(Ordering::Relaxed)
    }

    /// Notify keys relayed (each counted once, however many workers it went to).
    pub fn keys_relayed(&self) -> u64 {
        self.counts.keys.load(Ordering::Relaxed)
    }

    /// Sends that failed (the datagram is lost; its keys are left to the scanners).
    pub fn sends_failed(&self) -> u64 {
        self.counts.failed.load(Ordering::Relaxed)
    }

    /// Commits whose hints the relay lost because it lagged behind the client's channel.
    pub fn hints_lost(&self) -> u64 {
        self.counts.lost.load(Ordering::Relaxed)
    }

    /// Stops relaying.
    pub fn stop(&self) {
        self.task.abort();
    }
}

impl Drop for HintRelay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The addresses of the listening workers of `client`'s namespace, but `own`: those of the
/// registry's workers with a beat within [`STALE_AFTER`] of the oracle's time (as
/// `percolator-ctl status` lists them; a worker that left deleted its records, one that died
/// leaves them behind).
async fn read_targets(
    client: &Client,
    own: Option<SocketAddr>,
) -> Result<Vec<SocketAddr>, crate::WorkerError> {
    // A worker whose beat is this old is taken for dead (workers judge liveness more
    // carefully for the hash split; here a wrong guess costs a datagram or a scan).
    let mut targets: Vec<SocketAddr> = crate::admin::workers(client, STALE_AFTER)
        .await?
        .into_iter()
        .filter(|w| w.live)
        .filter_map(|w| w.hint_addr?.parse().ok())
        .filter(|addr| Some(*addr) != own)
        .collect();
    targets.sort();
    targets.dedup();
    Ok(targets)
}

/// One socket per address family, bound on first use.
#[derive(Default)]
struct Sockets {
    by_family: [Option<UdpSocket>; 2],
}

impl Sockets {
    async fn send(&mut self, datagram: &[u8], target: SocketAddr) -> std::io::Result<()> {
        let family = usize::from(target.is_ipv6());
        let socket = match &mut self.by_family[family] {
            Some(socket) => socket,
            slot => {
                let any: SocketAddr = match target {
                    SocketAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
                    SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
                };
                slot.insert(UdpSocket::bind(any).await?)
            }
        };
        socket.send_to(datagram, target).await.map(|_| ())
    }
}

async fn relay(
    client: Client,
    mut hints: tokio::sync::broadcast::Receiver<Arc<CommittedNotify>>,
    refresh: Duration,
    own: Option<SocketAddr>,
    targets: Arc<Mutex<Vec<SocketAddr>>>,
    counts: Arc<Counts>,
) {
    let mut sockets = Sockets::default();
    let mut next_refresh = Instant::now();
    loop {
        // Biased: the registry first when it is due, so new workers are known before the
        // next hints go out.
        let first = tokio::select! {
            biased;
            _ = tokio::time::sleep_until(next_refresh) => {
                match read_targets(&client, own).await {
                    Ok(found) => *targets.lock().unwrap_or_else(|p| p.into_inner()) = found,
                    Err(e) => tracing::debug!(error = %e, "reading the workers' hint addresses"),
                }
                next_refresh = Instant::now() + refresh;
                continue;
            }
            hint = hints.recv() => hint,
        };
        let mut batch = Vec::new();
        let mut next = Some(first);
        while let Some(hint) = next.take() {
            match hint {
                Ok(hint) => batch.push(hint),
                Err(RecvError::Lagged(lost)) => {
                    counts.lost.fetch_add(lost, Ordering::Relaxed);
                }
                Err(RecvError::Closed) => return,
            }
            if batch.len() < HINTS_PER_ROUND {
                next = match hints.try_recv() {
                    Ok(hint) => Some(Ok(hint)),
                    Err(TryRecvError::Lagged(lost)) => Some(Err(RecvError::Lagged(lost))),
                    Err(_) => None,
                };
            }
        }
        let to: Vec<SocketAddr> = targets.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if to.is_empty() {
            continue;
        }
        let (keys, datagrams) = super::datagrams(&client, &batch);
        counts.keys.fetch_add(keys as u64, Ordering::Relaxed);
        for datagram in datagrams {
            for target in &to {
                match sockets.send(&datagram, *target).await {
                    Ok(()) => counts.datagrams.fetch_add(1, Ordering::Relaxed),
                    Err(e) => {
                        tracing::debug!(%target, error = %e, "relaying hints");
                        counts.failed.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
        }
    }
}
