//! Event time for observer authors (MillWheel's low watermarks and timers).
//!
//! - **Timed changes.** A writer marks a change of a timed column with its event time
//!   ([`set_timed`], [`mark`]; the loader does it for the columns a mapping declares timed);
//!   the observer's run takes the mark ([`take`], or write the observer with
//!   [`timed_observer_fn`]) and learns the event time and whether the change is **late**
//!   (below the column's watermark: what waited for the watermark may have fired).
//! - **Sources' watermarks.** Each loader publishes, per timed column it writes, the event
//!   time below which it loads nothing more ([`publish_source`]; `u64::MAX` at the end of a
//!   bounded input; idle sources do not hold the column back).
//! - **Chains.** A column written by observers of another column (a later stage) declares
//!   that one its upstream column ([`declare_upstream`]); its watermark then waits for the
//!   upstream column's as for a source's.
//! - **A column's low watermark** is the smaller of its inputs' watermark (sources and
//!   upstream columns) and the least event time of its pending changes, computed in one
//!   snapshot and published only forward ([`advance`], [`published`]). No change of the column below it is pending; one that
//!   arrives later is delivered as late.
//! - **Timers** ([`set_timer`], [`delete_timer`]) fire once the column's watermark passes
//!   an event time ([`TimerAt::EventTime`]) or the oracle passes a time
//!   ([`TimerAt::OracleTime`]): [`fire_due`] or a [`TimerDriver`] runs the handler
//!   ([`OnTimer`]) in the transaction that deletes the timer, so at most one firing per set
//!   timer commits, in time order per row; timers are cells, so they survive crashes.
//!
//! The argument (why the watermark never passes a pending change, crashes, lost replies,
//! stalled workers, GC): [`crate::design::time`]. State layout: module `keys`.

mod change;
pub(crate) use change::{restore, set_aside};
mod keys;
mod timers;
mod watermark;

pub use change::{late_changes, mark, mark_many, set_timed, take, timed_observer_fn, Change};
pub use keys::{
    SourceMark, PENDING_BY_TIME_TABLE, PENDING_TABLE, SET_ASIDE_TABLE, TIMER_TABLE, WATERMARK_TABLE,
};
pub use timers::{
    all_pending_timers, delete_timer, fire_due, fire_due_taking, on_timer_fn, pending_timers,
    set_timer, timer, FireReport, OnTimer, RowFilter, Takes, Timer, TimerAt, TimerDriver,
    TimerSpec, TimerStats,
};
pub use watermark::{
    advance, columns, compute, declare_upstream, forget_upstream, inputs_watermark, pending,
    publish_source, published, sources, sources_watermark, upstreams, Column, ColumnTime,
};
