//! How the oracle serves strictly increasing timestamps across restarts, takeovers and clock
//! steps, and why invariant 1 of the transaction protocol (`percolator::design::commit`: the
//! oracle is linearizable) holds.
//!
//! `oracle serve --store <embedded:PATH|tikv:...> --listen 127.0.0.1:7707` runs one oracle
//! process; several may run against one store: one leads, the others stand by.
//! [`crate::OracleClient`] talks to them; [`crate::LocalOracle`] runs the same persisted window
//! in-process (embedded mode).
//!
//! ## Transport
//!
//! A small binary protocol over TCP ([`crate::proto`]), no second RPC stack: an 8-byte
//! handshake (`"PTSO"`, version u16, flags u16) in both directions, then frames `len u32 | kind
//! u8 | body` (big-endian, at most 1 KiB). A request is `get(req_id, count)`; replies are
//! `timestamps(req_id, first, count)` (the range `first..first+count`), `not_leader(req_id,
//! hint)` or `error(req_id, message)`. Garbage, an oversized or empty frame, an unknown kind, a
//! count outside `1..=65536`, a truncated frame or handshake, or another version closes that
//! connection with a logged reason (another version first gets the server's own hello back);
//! other connections are unaffected. Why not gRPC: one request type, a hot path of a few dozen
//! bytes, and the TiKV client already brings its own gRPC stack we do not want to duplicate.
//!
//! ## Batching and pipelining
//!
//! One `OracleClient` (clone it; clones share it) keeps one connection with up to
//! `MAX_IN_FLIGHT` (4) round trips in flight. Every `get_timestamp` call takes the next index in
//! the current *round*; the connection task takes the whole round pending at that moment, asks
//! for that many timestamps in one request and, when the reply comes, publishes the first one
//! and wakes the round's callers (caller `i` gets `first + i`): one allocation per round, none
//! per call. Requests that arrive while rounds are in flight form the next round, which goes out
//! at once instead of after the reply (with a single round in flight, client and server would
//! take turns idling for a whole round trip). Under concurrency the connection task yields (up
//! to 4 times, while requests keep arriving) before taking a round, so callers just woken by the
//! previous reply join this round instead of straggling into a tiny extra one. The server reads
//! every frame available on a connection as one batch: one allocation of a contiguous range, one
//! epoch check, one write (rounds that queue up while it serves merge into its next batch).
//!
//! Pipelining keeps timestamps linearizable: a request is only placed into a round taken after
//! it began, and the round's frame is written after it was taken; the server answers a
//! connection's frames in order, each after it arrived, from a range that only grows; and across
//! a leader change the epoch check covers every request of a batch (safety, below). Nothing is
//! ever served from a cached range, so each timestamp was allocated by the leader after its
//! request began. Replies are matched to rounds strictly in order by `req_id`; an unexpected
//! reply is a protocol error that drops the connection.
//!
//! ## Failover
//!
//! A failed connect or write, a closed or garbled connection, no reply to the oldest round
//! within `rpc_timeout` (1 s) of sending it, `not_leader` or `error` drops the connection; every
//! unanswered round is then sent again, in order and under new `req_id`s, to the next address
//! (or the `not_leader` hint), pausing `retry_backoff` after each full cycle of failed
//! addresses. Each round gives up once `request_timeout` (10 s) has passed since it was first
//! sent: its callers get `ClientError::Timeout` with the last failure. If the connection task
//! ends (the client's runtime shuts down), every round in flight or pending fails with `Closed`.
//!
//! ## The record
//!
//! Meta key `KeyCodec::new(namespace).meta("oracle")` ([`crate::OracleRecord`]), written only
//! by CAS, decoded with typed errors: `format u8 = 1 | epoch u64 | window_end u64 | seq u64 |
//! has_leader u8 | [leader_id u64 | addr_len u16 | addr]`. `seq` grows on every write, so the
//! bytes never repeat (no ABA; a CAS retried by the transport recognises its own write:
//! `percolator::design::kv`, "The retry hazard").
//!
//! ## The window
//!
//! The leader hands out `first = max(last + 1, now_ms << 18)` and never anything above the
//! `window_end` it has persisted under its epoch; a request that would cross it first CASes a
//! larger `window_end`. The heartbeat (every 500 ms) rewrites the record with `window_end =
//! max(now, last) + window` (3 s), so under normal load serving never waits for the store.
//! [`crate::LocalOracle`] has no heartbeat: once less than half a window is left ahead of the
//! timestamps it served (or of the clock), a call starts the same write in the background (one
//! at a time) and returns from the current window, so callers wait only when timestamps
//! outrun it. The safety argument is unchanged: an extension only raises `window_end`, by
//! the same CAS and sync, before any timestamp above the old end is handed out.
//! Every record write is followed by `RawKv::sync` before the window is used (an `fdatasync` of
//! an embedded store whatever its `--durability`; nothing for TiKV, which syncs its Raft log
//! before acknowledging), so after a power loss the record on disk is at least the window end of
//! every timestamp handed out. A new leader serves nothing from its takeover write (which has no
//! await after its CAS, so a leader shut down right then still releases): its first allocation
//! or heartbeat writes the record again and syncs it. For the same reason `--store memory` is
//! refused. When timestamps outrun the wall clock (more than 2^18 per ms) and serving has to
//! wait for an extension, the window doubles (up to 30 s).
//!
//! A new leader, including the same server after a restart, starts at `max(old window_end,
//! now)`, so everything it hands out is above everything ever handed out. Cost: after a crash,
//! physical time of timestamps can run up to one window ahead of the wall clock (more after
//! quick restarts in a row). `now_ms` above is then not the wall clock but `max(wall, start +
//! elapsed / 2)`: oracle time runs at half speed from where the new leader started until the
//! wall clock catches up, rather than standing still. Lock TTLs are measured on oracle time, so
//! a stalled oracle would keep crashed clients' locks alive for as long as it was ahead; at half
//! speed a TTL takes at most twice its length.
//!
//! ## Takeover
//!
//! A standby polls the record every `lease_timeout / 4`. It takes over when the record has no
//! leader (graceful shutdown releases it), when the record's bytes have not changed for
//! `lease_timeout` (3 s) on its own monotonic clock (the leader's heartbeat changes them), or at
//! once on an exclusive store (embedded or memory: the directory lock proves no other oracle
//! process is alive on it). Takeover is one CAS from exactly the bytes it observed to `epoch +
//! 1, leader = me, window_end = max(old end, now) + window`; losing the race means someone else
//! changed the record, and it keeps watching.
//!
//! ## Safety (invariant 1) does not depend on clocks
//!
//! Before sending any reply batch, after its requests arrived, the leader re-reads the record
//! and replies only if it still shows its epoch and id; otherwise it answers `not_leader` and
//! steps down. Take answers a (from deposed leader L1, epoch e) and b (from new leader L2, epoch
//! e+1):
//!
//! 1. If b was returned before a's request began: L2's takeover CAS precedes b, which precedes
//!    a's request, which precedes L1's re-read; a linearizable store makes that read see epoch
//!    `>= e+1`, so L1 does not answer a.
//! 2. If a was returned before b's request began: a `<=` a window_end that L1 persisted under
//!    epoch e; every such CAS expected L1's previous bytes, so all of them precede L2's
//!    takeover CAS, which read the newest window_end and starts L2 strictly above it: b > a.
//! 3. Within one leader, ranges are allocated under one mutex after the requests arrived, so a
//!    request that began after another returned gets a larger range.
//!
//! The clock only decides *when* a standby tries (liveness): a standby that takes over too
//! early, e.g. from a paused but live leader, only makes that leader's later batches fail the
//! check. `ServerHandle::pause` / `resume_serving_only` freeze a leader as SIGSTOP would (the
//! test freezes it after it has read requests, lets the standby take over and answer, then lets
//! the frozen leader serve before its heartbeat runs). `oracle-server/tests/multiprocess.rs`
//! does the same with two `oracle serve --store tikv:...` processes on an in-process
//! `minitikv`, with real SIGSTOP, SIGCONT and SIGKILL.
//!
//! **Clock assumptions.** None for safety. The wall clock may step in either direction (the
//! oracle keeps counting from `last`; [`crate::Clock`] is injectable and tested stepping
//! backwards, frozen, and jumping). Liveness assumes the leader heartbeats more often than
//! `lease_timeout`.
//!
//! **Cost of the check.** One store read per reply batch (a memtable read on the embedded store;
//! one RPC on TiKV, amortised over every request that arrived meanwhile on that connection).
//! Where the rest of the time goes: `docs/perf/oracle.md`.
