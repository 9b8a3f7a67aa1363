//! The store every simulated process shares: one [`MemoryKv`] seen by each process (each
//! incarnation of it) through its own [`Intercepted`] fault layer. The layer traces every
//! call, injects the seed's faults while chaos is on (delays, calls held while others run,
//! failures before a call applies, lost replies of applied writes, outages), and stops a
//! crashed incarnation dead: its calls never return, so no task it left behind (a
//! publication, a heartbeat) acts after its crash.

use crate::faults::Faults;
use crate::trace::Trace;
use async_trait::async_trait;
use percolator::kv::intercept::{Call, Hooks, Intercepted, Op};
use percolator::kv::{CasOutcome, KvError, KvResult, MemoryKv};
use percolator::RawKv;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// How often a scan of the notify space fails in the weather's tail after chaos
/// ([`Faults::drain_weather`]).
const DRAIN_WEATHER_SCAN_FAIL: f64 = 0.3;

/// One incarnation of a process: dead once crashed.
#[derive(Debug)]
pub struct Life {
    /// The process's index.
    pub process: usize,
    /// Which incarnation (0 first, +1 per restart).
    pub incarnation: u32,
    dead: AtomicBool,
}

impl Life {
    /// A live incarnation.
    pub fn new(process: usize, incarnation: u32) -> Arc<Self> {
        Arc::new(Life {
            process,
            incarnation,
            dead: AtomicBool::new(false),
        })
    }

    /// Marks it crashed.
    pub fn kill(&self) {
        self.dead.store(true, Ordering::Relaxed);
    }

    /// Whether it crashed.
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Relaxed)
    }

    /// Never returns once crashed (a dead process makes no more calls).
    pub async fn stop_if_dead(&self) {
        if self.is_dead() {
            std::future::pending::<()>().await;
        }
    }
}

/// The shared memory store.
pub fn shared_store() -> Arc<dyn RawKv> {
    Arc::new(MemoryKv::new())
}

/// What a client of a process runs, for the faults aimed at one kind of caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The process's own client (workload actors, GC, and the worker unless it has its own).
    Process,
    /// A worker's client of its own.
    Worker,
    /// The stalled readers' client (a query service on the same host).
    Reader,
}

/// The hooks of one incarnation's view of the store.
pub struct FaultHooks {
    life: Arc<Life>,
    role: Role,
    faults: Arc<Faults>,
    trace: Trace,
    /// The store itself, read past the faults (a hold that waits for GC looks at it).
    store: Arc<dyn RawKv>,
}

impl std::fmt::Debug for FaultHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultHooks")
            .field("process", &self.life.process)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

/// One incarnation's store: the shared store behind its fault layer.
pub fn process_store(
    inner: Arc<dyn RawKv>,
    life: Arc<Life>,
    role: Role,
    faults: Arc<Faults>,
    trace: Trace,
) -> Arc<dyn RawKv> {
    Arc::new(Intercepted::wrap(
        inner.clone(),
        FaultHooks {
            life,
            role,
            faults,
            trace,
            store: inner,
        },
    ))
}

fn unavailable(op: &'static str, message: &str) -> KvError {
    KvError::Unavailable {
        op,
        message: message.to_string(),
    }
}

fn first_key<'a>(call: &'a Call<'a>) -> &'a [u8] {
    match call {
        Call::Get { key }
        | Call::Put { key, .. }
        | Call::Delete { key }
        | Call::CompareAndSwap { key, .. } => key,
        Call::BatchGet { keys } | Call::BatchDelete { keys } => {
            keys.first().map(|k| k.as_slice()).unwrap_or_default()
        }
        Call::BatchPut { pairs } => pairs.first().map(|p| p.0.as_slice()).unwrap_or_default(),
        Call::Scan { range, .. } => &range.start,
        Call::ScanMany { ranges, .. } => ranges
            .first()
            .map(|r| r.start.as_slice())
            .unwrap_or_default(),
        Call::BatchCompareAndSwap { requests } => requests
            .first()
            .map(|r| r.key.as_slice())
            .unwrap_or_default(),
        Call::Sync => &[],
    }
}

fn is_write(op: Op) -> bool {
    matches!(
        op,
        Op::Put | Op::BatchPut | Op::Delete | Op::BatchDelete | Op::CompareAndSwap
    )
}

impl FaultHooks {
    /// Whether the head at `key` keeps no committed version but its newest (GC trimmed the
    /// others, or there were none).
    async fn only_newest_version(&self, key: &[u8]) -> bool {
        match self.store.get(key).await {
            Ok(Some(raw)) => percolator::record::Head::decode(&raw)
                .is_ok_and(|head| head.latest.is_some() && head.recent.is_empty()),
            _ => false,
        }
    }

    fn record(&self, what: &str, op: Op, key: &[u8]) {
        let p = [self.life.process as u8];
        self.trace
            .record(&[&p, what.as_bytes(), op.name().as_bytes(), key], || {
                format!(
                    "p{} {what} {} {}",
                    self.life.process,
                    op.name(),
                    key.escape_ascii()
                )
            });
    }
}

#[async_trait]
impl Hooks for FaultHooks {
    async fn before(&self, call: Call<'_>) -> KvResult<()> {
        self.life.stop_if_dead().await;
        let op = call.op();
        let key = first_key(&call);
        self.record("call", op, key);
        if matches!(call, Call::BatchCompareAndSwap { .. }) {
            // Its requests are seen one by one next; faults go there.
            return Ok(());
        }
        let f = &self.faults;
        if let Some(per_call) = f.slowness(self.life.process) {
            // A slow machine: every call takes about `per_call`, and nothing else happens
            // to it but the outages everyone meets.
            tokio::time::sleep(per_call.mul_f64(f.rng.range(90, 111) as f64 / 100.0)).await;
            self.life.stop_if_dead().await;
            if f.in_outage(key) {
                self.record("outage", op, &[]);
                return Err(unavailable(op.name(), "simulated outage"));
            }
            f.note_heartbeat_put(&call);
            return Ok(());
        }
        if f.in_drain_weather()
            && matches!(call, Call::Scan { .. } if f.is_notify_key(key))
            && f.rng.chance(DRAIN_WEATHER_SCAN_FAIL)
        {
            // The tail of the weather in the liveness phase: the drain's quiescence checks
            // meet a failing notify scan now and then, and must look again.
            f.count();
            self.record("fail-notify-scan-drain", op, &[]);
            return Err(unavailable(
                op.name(),
                "simulated region error of a notify scan (the weather's tail)",
            ));
        }
        if f.chaos() {
            let rng = &f.rng;
            let fate = matches!(call, Call::Get { key } if f.fate_keys.contains(key));
            // A reader's fate check of a revised cell's write: one read of the primary's head
            // (`get`), or among others (`get_many`'s fate checks are batched).
            let revision_fate_key: Option<&[u8]> = match &call {
                _ if self.role != Role::Reader => None,
                Call::Get { key } => Some(*key).filter(|k| f.revision_fate_keys.contains(k)),
                Call::BatchGet { keys } => keys
                    .iter()
                    .map(Vec::as_slice)
                    .find(|k| f.revision_fate_keys.contains(k)),
                _ => None,
            };
            let role_hold = match self.role {
                Role::Process => None,
                Role::Worker => Some((f.rates.worker_fate_hold, 1_000, 4_000)),
                Role::Reader => Some((f.rates.reader_fate_hold, 12_000, 24_000)),
            };
            if self.role == Role::Reader
                && f.rates.reader_scan_hold > 0.0
                && matches!(call, Call::ScanMany { .. })
                && f.revision_scans.contains(key)
                && rng.chance(f.rates.reader_scan_hold)
            {
                f.count();
                self.record("hold-revision-scan", op, key);
                f.kick.notify_waiters();
                let hold = rng.millis(10_000, 20_000);
                tracing::debug!(process = self.life.process, ?hold, "revision scan held");
                tokio::time::sleep(hold).await;
            } else if let Some(key) = revision_fate_key
                .filter(|_| f.rates.reader_fate_hold > 0.0 && rng.chance(f.rates.reader_fate_hold))
            {
                // A reader's fate check of a revised cell's write, held at least 10 s and
                // until GC trimmed the primary's older versions from its head (the cell was
                // written again meanwhile, a pass whose safe point passed that write
                // collected the record the reader read and trimmed the evidence of its
                // commit), at most 40 s.
                f.count();
                self.record("hold-fate", op, key);
                f.kick.notify_waiters();
                let began = tokio::time::Instant::now();
                loop {
                    tokio::time::sleep(std::time::Duration::from_millis(250)).await;
                    let held = began.elapsed();
                    if held >= std::time::Duration::from_secs(40)
                        || (held >= std::time::Duration::from_secs(10)
                            && self.only_newest_version(key).await)
                    {
                        break;
                    }
                }
                tracing::debug!(process = self.life.process, "revision fate check held");
            } else if let Some((rate, low, high)) = role_hold.filter(|r| fate && r.0 > 0.0) {
                if rng.chance(rate) {
                    f.count();
                    self.record("hold-fate", op, key);
                    f.kick.notify_waiters();
                    let hold = rng.millis(low, high);
                    tracing::debug!(process = self.life.process, role = ?self.role, ?hold, "fate check held");
                    tokio::time::sleep(hold).await;
                }
            } else if fate
                && f.rates.fate_hold > 0.0
                && rng.chance(f.rates.fate_hold)
                && f.begin_fate_hold()
            {
                f.count();
                self.record("hold-fate", op, key);
                f.kick.notify_waiters();
                let max = f.rates.fate_hold_max.as_millis() as u64;
                // Released also if this task is dropped (a crash).
                struct Release<'a>(&'a Faults);
                impl Drop for Release<'_> {
                    fn drop(&mut self) {
                        self.0.end_fate_hold();
                    }
                }
                let _release = Release(f);
                let hold = rng.millis(max / 4, max);
                tracing::debug!(process = self.life.process, ?hold, "fate check held");
                tokio::time::sleep(hold).await;
            } else if let Some(until) = match call {
                Call::CompareAndSwap {
                    key, expected, new, ..
                } if f.rates.notify_put_hold > 0.0 => f.floor_raise_gate(key, expected, new),
                _ => None,
            } {
                // A raise past a held notify put's bucket waits for it to land and its
                // writer to read the floor below its key.
                f.count();
                self.record("gate-floor", op, key);
                tokio::time::sleep_until(until).await;
            } else if f.rates.floor_hold > 0.0
                && matches!(call, Call::CompareAndSwap { key, .. } if f.is_floor_key(key))
                && rng.chance(f.rates.floor_hold)
            {
                f.count();
                self.record("hold-floor", op, key);
                tokio::time::sleep(rng.millis(300, 1_500)).await;
            } else if f.rates.notify_put_hold > 0.0
                && matches!(call, Call::Put { .. } | Call::BatchPut { .. })
                && f.is_held_put_key(key)
                && rng.chance(f.rates.notify_put_hold)
            {
                f.count();
                self.record("hold-notify-put", op, key);
                let hold = rng.millis(1_200, 3_000);
                f.note_held_put(key, tokio::time::Instant::now() + hold);
                tokio::time::sleep(hold).await;
                self.record("lands-notify-put", op, key);
            } else if f.rates.heartbeat_hold > 0.0
                && matches!(call, Call::Put { key, .. } if f.is_worker_key(key))
                && rng.chance(f.rates.heartbeat_hold)
                && f.begin_heartbeat_hold()
            {
                f.count();
                self.record("hold-heartbeat", op, key);
                struct Release<'a>(&'a Faults);
                impl Drop for Release<'_> {
                    fn drop(&mut self) {
                        self.0.end_heartbeat_hold();
                    }
                }
                let _release = Release(f);
                let hold = rng.millis(4_000, 10_000);
                tracing::debug!(process = self.life.process, ?hold, "heartbeat held");
                tokio::time::sleep(hold).await;
            } else if f.rates.timed_hold > 0.0
                && matches!(call, Call::Get { key } if f.timed_keys.contains(key))
                && rng.chance(f.rates.timed_hold)
            {
                f.count();
                self.record("hold-timed", op, key);
                tokio::time::sleep(rng.millis(300, 1_500)).await;
            } else if rng.chance(f.rates.hold) {
                f.count();
                tokio::time::sleep(rng.millis(50, 1500)).await;
            } else if rng.chance(f.rates.delay) {
                tokio::time::sleep(rng.millis(0, 3)).await;
            }
            self.life.stop_if_dead().await;
            if f.in_outage(key) {
                self.record("outage", op, &[]);
                return Err(unavailable(op.name(), "simulated outage"));
            }
            // A scan of the notify space ending at a bucket is a floor raise's rescan (a
            // pass scans from the floor to the space's end): failed at one and a half times
            // the rate.
            let notify_scan = match &call {
                Call::Scan { range, .. } if f.is_notify_key(key) => {
                    Some(if f.is_rescan(range) { 1.5 } else { 1.0 })
                }
                _ => None,
            };
            let fails = notify_scan
                .filter(|_| f.rates.notify_scan_fail > 0.0)
                .is_some_and(|weight| rng.chance((f.rates.notify_scan_fail * weight).min(1.0)));
            if fails {
                f.count();
                self.record("fail-notify-scan", op, &[]);
                return Err(unavailable(
                    op.name(),
                    "simulated region error of a notify scan",
                ));
            }
            if rng.chance(f.rates.fail_before) {
                f.count();
                self.record("fail-before", op, &[]);
                return Err(unavailable(op.name(), "simulated failure before the call"));
            }
        }
        f.note_heartbeat_put(&call);
        Ok(())
    }

    async fn after(&self, op: Op) -> KvResult<()> {
        let f = &self.faults;
        if f.chaos()
            && f.slowness(self.life.process).is_none()
            && is_write(op)
            && f.rng.chance(f.rates.fail_after)
        {
            f.count();
            self.record("reply-lost", op, &[]);
            return Err(unavailable(
                op.name(),
                "simulated lost reply of an applied write",
            ));
        }
        self.record("ok", op, &[]);
        Ok(())
    }

    async fn swapped(&self, key: &[u8], _new: &[u8], outcome: CasOutcome) -> KvResult<CasOutcome> {
        self.record(
            if outcome.swapped { "swapped" } else { "kept" },
            Op::CompareAndSwap,
            key,
        );
        Ok(outcome)
    }
}
