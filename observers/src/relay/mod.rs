//! Relayed hints: a loader's commits handed to the workers of other processes.
//!
//! In one process, a commit hands its notify keys to the process's workers at once (the hint
//! path, [`crate::design::worker`]). A worker in another process had only its scanners: it
//! followed a loader's commits through the shared notify counts, a pass every ~50 ms at best,
//! and found them in bursts. With relayed hints:
//!
//! - a worker given a [`HintListener`] (one UDP socket per process,
//!   [`crate::WorkerConfig::hint_listener`]) puts the listener's advertised address under
//!   `M hint-addrs/<worker id>` beside its heartbeat record, and deletes it when it leaves;
//! - a loader process runs a [`HintRelay`] on its client: it reads those addresses (of workers
//!   with a recent heartbeat) every second, and sends each commit's notify keys, a few dozen
//!   per datagram ([`wire`]), to every listening worker of its namespace;
//! - a worker takes the keys of cells it observes and owns, reads them from the store (at
//!   most one `batch_get` per datagram: datagrams that queued up share one), and dispatches
//!   those still there with the value read, as hinted keys (a key of a cell in flight waits
//!   for the run on it): the store is the truth, and a datagram only says where to look.
//!
//! **Why only pacing rests on a datagram.** A datagram names keys; it carries no value and no
//! fate. The worker reads each key, decides its writer's fate through the writer's primary,
//! and runs it under the same per-cell exclusion, ledger of keys handled recently and
//! acknowledgment as any scanned key. So a lost, late, repeated, forged or misrouted datagram
//! costs at most a read, or a run a scanner would also have started: the scanners still pass
//! over the whole notify space, so every key is found without hints. A forged datagram cannot
//! make a worker run on a key that is not in the store, nor carry a fate the worker believes.
//!
//! **Pacing.** While relayed keys have arrived within `hint_grace`, scanners leave keys younger
//! than that to the hint path, as they do for the process's own commits, so the two paths
//! rarely race for a key (a key taken by both is one more run at most).

mod listener;
mod sender;
pub mod wire;

pub use listener::HintListener;
pub use sender::{HintRelay, DEFAULT_REFRESH};

/// Meta records `hint-addrs/<worker id>`: where a listening worker takes relayed hints.
pub(crate) const HINT_ADDRS_META: &[u8] = b"hint-addrs/";

/// The datagrams that relay `hints` (commits of `client`) to a listening worker, and how
/// many notify keys they name: what [`HintRelay`] sends, and what another transport (the
/// simulator's network) carries.
pub fn datagrams(
    client: &percolator::Client,
    hints: &[std::sync::Arc<percolator::txn::CommittedNotify>],
) -> (usize, Vec<Vec<u8>>) {
    let codec = client.codec();
    let keys: Vec<Vec<u8>> = hints
        .iter()
        .flat_map(|hint| {
            hint.cells
                .iter()
                .map(|cell| codec.notify(cell, hint.notify_ts, hint.bucket))
        })
        .collect();
    let datagrams = wire::encode(
        &codec.namespace(),
        keys.iter().map(|k| k.as_slice()),
        wire::MAX_DATAGRAM,
    );
    (keys.len(), datagrams)
}
