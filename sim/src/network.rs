//! The simulated network of relayed hints (`observers::relay`): each process's workers of the
//! application's namespace listen on a detached `HintListener`, and a relay actor per process
//! sends the notify keys of its loader client's commits to every process's listener (its own
//! too: in most seeds its worker has a client of its own, which the loader's in-process hints
//! do not reach), each datagram lost, late, repeated or reordered as the seed's draws say.
//! In half the seeds nothing is relayed, so the scanners' paths stay as they were.
//!
//! The draws come from a generator of their own (seeded from the seed), so turning the relay
//! on moves no other draw of the seed.

use crate::rng::SimRng;
use observers::HintListener;
use percolator::Client;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// The listeners of the live incarnations, by process.
#[derive(Clone)]
pub struct Network {
    on: bool,
    rng: SimRng,
    listeners: Arc<Mutex<Vec<Option<Arc<HintListener>>>>>,
}

impl Network {
    /// The network of seed `seed`'s `processes` processes (on in half the seeds).
    pub fn new(seed: u64, processes: usize) -> Network {
        let rng = SimRng::new(seed ^ 0x7e1a_7e1a_7e1a_7e1a);
        Network {
            on: rng.chance(0.5),
            rng,
            listeners: Arc::new(Mutex::new(vec![None; processes])),
        }
    }

    /// Whether this seed relays.
    pub fn on(&self) -> bool {
        self.on
    }

    /// A listener for incarnation `incarnation` of process `process`, in place of its last
    /// one (`None` when the seed does not relay).
    pub fn listen(&self, process: usize, incarnation: u32) -> Option<Arc<HintListener>> {
        if !self.on {
            return None;
        }
        let addr = SocketAddr::from(([10, 0, process as u8, 1], 7000 + incarnation as u16));
        let listener = HintListener::detached(addr);
        self.lock()[process] = Some(listener.clone());
        Some(listener)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Option<Arc<HintListener>>>> {
        self.listeners.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Relays `client`'s commits until the process dies (the actor is one of its tasks; a
    /// datagram already sent still arrives, as on a real network).
    pub async fn relay(self, client: Client) {
        if !self.on {
            return;
        }
        let mut hints = client.notify_hints();
        loop {
            let hint = match hints.recv().await {
                Ok(hint) => hint,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            };
            let (_, datagrams) = observers::relay::datagrams(&client, &[hint]);
            let processes = self.lock().len();
            for datagram in datagrams {
                for to in 0..processes {
                    // Lost one in ten; repeated one in twenty; each copy late by up to
                    // 40 ms (so copies reorder).
                    if self.rng.chance(0.1) {
                        continue;
                    }
                    let copies = if self.rng.chance(0.05) { 2 } else { 1 };
                    for _ in 0..copies {
                        let delay = self.rng.millis(0, 40);
                        let network = self.clone();
                        let datagram = datagram.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(delay).await;
                            // Whoever listens for the process when it arrives (a restarted
                            // incarnation, or no one).
                            let listener = network.lock()[to].clone();
                            if let Some(listener) = listener {
                                listener.deliver(&datagram);
                            }
                        });
                    }
                }
            }
        }
    }
}
