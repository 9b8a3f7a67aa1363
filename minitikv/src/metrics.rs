//! minitikv's metrics (`minitikv serve --metrics-addr`): the RPCs served by method, the keys
//! scans read, the faults injected by kind and the regions of the layout, as
//! `percolator_minitikv_*` families read at each scrape from the server's counters.
//! docs/metrics.md lists every metric.

use crate::service::State;
use crate::RunningServer;
use percolator_metrics::{Labels, Metrics, Sampled};
use std::sync::Arc;

fn label(name: &str, value: &str) -> Labels {
    vec![(name.to_string(), value.to_string())]
}

impl RunningServer {
    /// Registers this server's families in `metrics` (they read its counters at each scrape,
    /// for as long as the process runs).
    pub fn register_metrics(&self, metrics: &Metrics) {
        register(metrics, self.state.clone());
    }
}

fn register(metrics: &Metrics, state: Arc<State>) {
    let requests = {
        let state = state.clone();
        Sampled::counter(
            "percolator_minitikv_requests",
            "RPCs served (PD and raw KV), by method.",
            move || {
                state
                    .rpc_counts()
                    .calls
                    .into_iter()
                    .map(|(method, n)| (label("method", method), n))
                    .collect()
            },
        )
    };
    let scanned = {
        let state = state.clone();
        Sampled::counter(
            "percolator_minitikv_scanned_keys",
            "Keys read by RawScan and RawBatchScan answers.",
            move || vec![(Vec::new(), state.rpc_counts().scanned_keys)],
        )
    };
    let faults = {
        let state = state.clone();
        Sampled::counter(
            "percolator_minitikv_faults",
            "Faults injected (and stale routes refused), by kind.",
            move || {
                let f = state.fault_counts();
                [
                    ("server_busy", f.server_busy),
                    ("region_error", f.region_error),
                    ("lost_reply", f.lost_reply),
                    ("delay", f.delay),
                    ("stale_route", f.stale_route),
                    ("applied_region_error", f.applied_region_error),
                ]
                .into_iter()
                .map(|(kind, n)| (label("kind", kind), n))
                .collect()
            },
        )
    };
    let regions = Sampled::gauge(
        "percolator_minitikv_regions",
        "Regions of the emulated cluster's layout.",
        move || vec![(Vec::new(), state.layout.all().len() as f64)],
    );
    metrics.register_sampled([requests, scanned, faults, regions]);
}
