//! Families read at each scrape from counters kept elsewhere: the application's atomics
//! (GC passes, loader lines, the oracle's timestamps served, Photon's join statistics) stay
//! the source of truth that code and tests read, and a [`Sampled`] family shows them to
//! Prometheus without a second copy (a prometheus-client `Collector`).

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use std::sync::Arc;

/// The labels of one sampled series, as (name, value) pairs.
pub type Labels = Vec<(String, String)>;

/// A sampled value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    /// A counter's total (rendered with `_total`).
    Counter(u64),
    /// A gauge's current value.
    Gauge(f64),
}

type Read = Arc<dyn Fn() -> Vec<(Labels, Value)> + Send + Sync>;

/// One family whose series `read` returns at each scrape; every value it returns must be of
/// the family's kind (a counter or a gauge; a value of the other kind is skipped).
pub struct Sampled {
    name: String,
    help: String,
    counter: bool,
    read: Read,
}

impl std::fmt::Debug for Sampled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampled").field("name", &self.name).finish()
    }
}

impl Sampled {
    /// A counter family named `name` (without `_total`: added when rendered).
    pub fn counter(
        name: impl Into<String>,
        help: impl Into<String>,
        read: impl Fn() -> Vec<(Labels, u64)> + Send + Sync + 'static,
    ) -> Self {
        Sampled {
            name: name.into(),
            help: help.into(),
            counter: true,
            read: Arc::new(move || {
                read()
                    .into_iter()
                    .map(|(l, v)| (l, Value::Counter(v)))
                    .collect()
            }),
        }
    }

    /// A gauge family named `name`.
    pub fn gauge(
        name: impl Into<String>,
        help: impl Into<String>,
        read: impl Fn() -> Vec<(Labels, f64)> + Send + Sync + 'static,
    ) -> Self {
        Sampled {
            name: name.into(),
            help: help.into(),
            counter: false,
            read: Arc::new(move || {
                read()
                    .into_iter()
                    .map(|(l, v)| (l, Value::Gauge(v)))
                    .collect()
            }),
        }
    }
}

impl Collector for Sampled {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let kind = if self.counter {
            MetricType::Counter
        } else {
            MetricType::Gauge
        };
        let mut family = encoder.encode_descriptor(&self.name, &self.help, None, kind)?;
        for (labels, value) in (self.read)() {
            match (self.counter, value) {
                (true, Value::Counter(v)) => {
                    ConstCounter::new(v).encode(family.encode_family(&labels)?)?
                }
                (false, Value::Gauge(v)) => {
                    ConstGauge::new(v).encode(family.encode_family(&labels)?)?
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// `[("namespace", namespace)]` plus `more`: the labels most sampled series carry.
pub fn labels(namespace: &str, more: &[(&str, &str)]) -> Labels {
    std::iter::once(("namespace", namespace))
        .chain(more.iter().copied())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
