//! The receiving end: one UDP socket per process, routing each datagram to the workers of
//! its namespace in this process.

use super::wire;
use crate::error::WorkerError;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// Datagrams waiting for one worker at most; more are dropped (their keys are found by
/// scanning, as lost hints' are).
const QUEUE: usize = 1024;

/// A worker's route: its namespace and where its datagrams' keys go.
struct Route {
    namespace: Vec<u8>,
    keys: mpsc::Sender<Vec<Vec<u8>>>,
}

/// A bound UDP socket on which workers of this process receive the notify keys that clients
/// in other processes committed ([`super::HintRelay`]). Pass it to every worker of the
/// process ([`crate::WorkerConfig::hint_listener`]); each registers the advertised address in
/// the worker registry and takes the keys of its own namespace.
pub struct HintListener {
    local: SocketAddr,
    advertised: String,
    routes: Mutex<Vec<Route>>,
    /// Datagrams received that were not a whole datagram of this version.
    malformed: AtomicU64,
    /// Datagrams dropped: no worker of their namespace here, or its queue was full.
    dropped: AtomicU64,
    /// The socket's receiving task (`None`: a detached listener, fed by [`HintListener::deliver`]).
    task: Option<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for HintListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HintListener")
            .field("local", &self.local)
            .field("advertised", &self.advertised)
            .finish_non_exhaustive()
    }
}

impl HintListener {
    /// Binds `listen` (port 0: any free port) and starts receiving. Loaders reach the workers
    /// at `advertise` (`host:port`, resolved here once; port 0 or none: the bound port);
    /// without it, at the bound address, which must then not be a wildcard (`0.0.0.0`,
    /// `::`): say which address other hosts reach this one at. Needs a Tokio runtime.
    pub async fn bind(
        listen: SocketAddr,
        advertise: Option<String>,
    ) -> Result<Arc<HintListener>, WorkerError> {
        let socket = tokio::net::UdpSocket::bind(listen)
            .await
            .map_err(|e| WorkerError::HintSocket(format!("binding {listen}: {e}")))?;
        let local = socket
            .local_addr()
            .map_err(|e| WorkerError::HintSocket(format!("the address bound for {listen}: {e}")))?;
        let advertised = match advertise {
            Some(a) => resolve(&a, local).await?.to_string(),
            None if local.ip().is_unspecified() => {
                return Err(WorkerError::HintSocket(format!(
                    "{listen} listens on every interface: say which address loaders reach it at"
                )))
            }
            None => local.to_string(),
        };
        let listener = Arc::new_cyclic(|weak: &std::sync::Weak<HintListener>| {
            let weak = weak.clone();
            HintListener {
                local,
                advertised,
                routes: Mutex::new(Vec::new()),
                malformed: AtomicU64::new(0),
                dropped: AtomicU64::new(0),
                task: Some(tokio::spawn(receive(socket, weak))),
            }
        });
        tracing::info!(%local, advertised = %listener.advertised, "listening for relayed hints");
        Ok(listener)
    }

    /// A listener with no socket, fed datagrams by [`HintListener::deliver`] (another
    /// transport: the simulator's network), advertised at `advertised`.
    pub fn detached(advertised: SocketAddr) -> Arc<HintListener> {
        Arc::new(HintListener {
            local: advertised,
            advertised: advertised.to_string(),
            routes: Mutex::new(Vec::new()),
            malformed: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            task: None,
        })
    }

    /// The address bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The address loaders are told to send to.
    pub fn advertised(&self) -> &str {
        &self.advertised
    }

    /// Datagrams received that were not a whole datagram of this version.
    pub fn malformed(&self) -> u64 {
        self.malformed.load(Ordering::Relaxed)
    }

    /// Datagrams dropped: no worker of their namespace in this process, or its queue full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// A new route for a worker of `namespace`: the keys of each datagram of it.
    pub(crate) fn route(&self, namespace: Vec<u8>) -> mpsc::Receiver<Vec<Vec<u8>>> {
        let (keys, receiver) = mpsc::channel(QUEUE);
        self.routes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Route { namespace, keys });
        receiver
    }

    /// Hands `datagram`'s keys to the workers of its namespace, as if it had arrived on the
    /// socket (what the receiving task does with each datagram).
    pub fn deliver(&self, datagram: &[u8]) {
        let Some(decoded) = wire::decode(datagram) else {
            self.malformed.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                bytes = datagram.len(),
                "not a relayed-hints datagram; dropped"
            );
            return;
        };
        let mut routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        // Routes of stopped workers go.
        routes.retain(|r| !r.keys.is_closed());
        let mut delivered = false;
        for route in routes.iter().filter(|r| r.namespace == decoded.namespace) {
            let keys = decoded.keys.iter().map(|k| k.to_vec()).collect();
            delivered |= route.keys.try_send(keys).is_ok();
        }
        if !delivered {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The address `advertise` names (`host:port` or `host`; port 0 or none: `local`'s), one of
/// `local`'s family if it has one.
async fn resolve(advertise: &str, local: SocketAddr) -> Result<SocketAddr, WorkerError> {
    let with_port = match advertise.rsplit_once(':') {
        Some((_, port)) if port.parse::<u16>().is_ok() && !advertise.ends_with(']') => {
            advertise.to_string()
        }
        _ => format!("{advertise}:0"),
    };
    let found: Vec<SocketAddr> = tokio::net::lookup_host(with_port.as_str())
        .await
        .map_err(|e| WorkerError::HintSocket(format!("--hint-advertise {advertise}: {e}")))?
        .collect();
    let mut addr = found
        .iter()
        .find(|a| a.is_ipv4() == local.is_ipv4())
        .or(found.first())
        .copied()
        .ok_or_else(|| {
            WorkerError::HintSocket(format!("--hint-advertise {advertise}: no address"))
        })?;
    if addr.port() == 0 {
        addr.set_port(local.port());
    }
    if addr.ip().is_unspecified() {
        return Err(WorkerError::HintSocket(format!(
            "--hint-advertise {advertise}: a wildcard address reaches no one"
        )));
    }
    Ok(addr)
}

impl Drop for HintListener {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// Receives datagrams until the listener is dropped.
async fn receive(socket: tokio::net::UdpSocket, listener: std::sync::Weak<HintListener>) {
    // One byte more than a datagram may have: a longer one arrives truncated to this and is
    // refused by its length.
    let mut buf = vec![0u8; wire::MAX_DATAGRAM + 1];
    loop {
        match socket.recv_from(&mut buf).await {
            Ok((len, _)) => {
                let Some(listener) = listener.upgrade() else {
                    return;
                };
                listener.deliver(&buf[..len]);
            }
            // An ICMP error reported on the socket, or a transient failure: the next
            // datagram is what matters.
            Err(e) => {
                tracing::debug!(error = %e, "receiving relayed hints");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_advertised_address_is_resolved_once_with_the_bound_port() {
        let local: SocketAddr = "127.0.0.1:4567".parse().unwrap();
        let at = |text: &'static str| async move { resolve(text, local).await };
        assert_eq!(at("10.1.2.3:99").await.unwrap().to_string(), "10.1.2.3:99");
        assert_eq!(at("10.1.2.3").await.unwrap().to_string(), "10.1.2.3:4567");
        assert_eq!(at("10.1.2.3:0").await.unwrap().to_string(), "10.1.2.3:4567");
        assert_eq!(at("[::1]:7").await.unwrap().to_string(), "[::1]:7");
        // A name resolves to an address of the bound family where it has one.
        assert_eq!(at("localhost").await.unwrap().to_string(), "127.0.0.1:4567");
        assert!(
            at("0.0.0.0:7070").await.is_err(),
            "a wildcard reaches no one"
        );
        assert!(at("no such host.invalid:7").await.is_err());
    }

    #[tokio::test]
    async fn a_wildcard_without_an_advertised_address_is_refused() {
        let refused = HintListener::bind("0.0.0.0:0".parse().unwrap(), None).await;
        assert!(matches!(refused, Err(WorkerError::HintSocket(_))));
        let bound = HintListener::bind("0.0.0.0:0".parse().unwrap(), Some("127.0.0.1".into()))
            .await
            .expect("bind");
        assert_eq!(
            bound.advertised(),
            format!("127.0.0.1:{}", bound.local_addr().port())
        );
    }
}
