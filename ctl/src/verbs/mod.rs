//! The verbs of `percolator-ctl`, one module each: every verb takes a client (and its
//! arguments) and returns an [`Answer`](crate::Answer) or a [`CtlError`](crate::CtlError);
//! none prints.

pub mod dead_letters;
pub mod gc;
pub mod locks;
pub mod notifications;
pub mod renotify;
pub mod scan;
pub mod status;
pub mod wait;

/// Value bytes shown in text output.
pub(crate) const PREVIEW: usize = 48;

/// A duration in whole milliseconds, for JSON.
pub(crate) fn ms(d: std::time::Duration) -> u64 {
    d.as_millis() as u64
}
