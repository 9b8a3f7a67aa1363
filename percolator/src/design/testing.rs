//! # Crash injection and the protocol tests
//!
//! Crash injection (feature `failpoints`, compiled out otherwise, `TxnError::InjectedCrash`
//! included): `Transaction::set_crash_hook` is asked at each [`crate::txn::CrashPoint`] (after
//! each confirmed lock, after all prewrites, right after the commit point, after each secondary
//! commit) and can stop the transaction dead, leaving its locks. With batching, the locks of one
//! batched round are confirmed together, so a crash at `Prewrote { locked: k }` leaves every
//! lock of the round that confirmed the k-th (and none of later rounds); a crash *inside* a
//! batch is injected through the store instead (`tests/tests/txn_batch.rs`: a hook lets a
//! random subset of one batched CAS reach the store, then loses every reply and fails every
//! later call of that transaction).
//!
//! `kv::FaultyKv` (feature `testkit`) injects the CAS retry hazard, random delays and
//! unavailable stores (failing before the call, or after it applied: a lost reply). It is built
//! on `kv::intercept::Intercepted`, the one `RawKv` wrapper of the test kit: it forwards every
//! call and runs a test's `Hooks` around it (before each call, with its kind and arguments;
//! after each answered call; after a scan with its pairs; after a CAS with its outcome, for
//! hooks that ask for it), which
//! is how the tests hold back a CAS or a read, count reads by key space, model delete markers or
//! witness retried CASes. A batched CAS is seen once as `Call::BatchCompareAndSwap`, then
//! request by request as `Call::CompareAndSwap { batched: true, .. }` with the single-CAS hooks,
//! so a fault injected per key hits any subset of a batch (`tests/tests/kv_batch_cas.rs`).
//!
//! Tests (`tests/tests/txn_*.rs`, bodies in `tests/tests/common/`, generic over the store):
//! Hermitage-style anomalies (G0, G1a, G1b, G1c, P4, G-single, phantoms prevented; G2-item
//! allowed), bank with crash injection on the embedded and the faulty store, randomized
//! histories checked against a model, delayed prewrites after a rollback, the CAS hazard, GC
//! visibility and boundedness, corrupt records. `txn_tikv.rs` runs all of them on `TikvKv`
//! through an in-process `minitikv` (every anomaly and protocol check; a shorter bank and fewer
//! histories; the bank and the GC checks again with `AtomicKeys::percolator_spaces`), plus
//! histories under a 500 us gRPC timeout, where tikv-client's own retries make applied CASes
//! report `swapped = false` (the test checks that this happened). The same file runs every
//! anomaly and protocol check, the bank with crashes and the model histories again "in the
//! weather" (`common::weather_server`: three stores, ~100 regions through the test namespace
//! with a split, merge or leader move every 10 ms, `Faults::weather`), and the anomaly and
//! protocol checks once more in a storm of ten times those rates; `kv_conformance_tikv.rs` runs
//! the conformance suite in the same weather.
