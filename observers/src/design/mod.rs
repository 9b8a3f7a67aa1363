//! Design notes of the observer runtime: what the worker does and why each promise holds. The
//! author's view of the same promises is the [`crate::guide`]; the transaction side
//! (notify keys, hints, the notify space and its floor) is `percolator::design::notify`.
//!
//! | page | what it holds |
//! |---|---|
//! | [`processing`] | handling one notify key, acknowledgments, batches and why the strong guarantee holds per cell |
//! | [`worker`] | the worker's tasks: hints, scanners, membership and the hash split, orphan sweeps, backpressure, quiescence, failures and outages |
//! | [`time`] | event time: sources' watermarks, pending marks, a column's low watermark and why it never passes a pending change, timers exactly once and in order, late changes |
//! | [`operators`] | what operators read ([`crate::admin`]) and the drain check seen from another process |

pub mod operators;
pub mod processing;
pub mod time;
pub mod worker;
