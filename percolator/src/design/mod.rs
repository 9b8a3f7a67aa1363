//! Design notes of the core: what each part does and why it is safe. Each safety argument lives
//! in exactly one of these pages; `ARCHITECTURE.md` at the repository root points here.
//!
//! | page | what it holds |
//! |---|---|
//! | [`kv`] | the raw store contract, the CAS retry hazard, the embedded and in-memory backends, the conformance suite |
//! | [`layout`] | the key layout (spaces, encoding) and timestamps |
//! | [`commit`] | the protocol invariants, the head record, the commit path, batched prewrite and commit, leases and heartbeats, versions kept in the head, remembered heads, reads |
//! | [`locks`] | status through the primary and lock resolution |
//! | [`gc`] | garbage collection and why snapshots stay exact under it |
//! | [`once`] | write-once records: cells without heads, their contract, reads, GC |
//! | [`recent`] | reads answered from this client's remembered commits of write-once cells |
//! | [`notify`] | notify keys and hints, the notify space, its buckets and the floor record |
//! | [`testing`] | crash injection, the fault-injecting store and the protocol tests |
//!
//! Where the invariants are numbered ("invariant 2"), the numbers are those of
//! [`commit`], "Protocol invariants".

pub mod commit;
pub mod gc;
pub mod kv;
pub mod layout;
pub mod locks;
pub mod notify;
pub mod once;
pub mod recent;
pub mod testing;
