//! `percolator-ctl`: an operator's tool for observer applications. The data comes from
//! [`observers::admin`] (and [`observers::renotify`]); this crate holds the command line
//! ([`cli`]), the verbs ([`verbs`]: each takes a client and its arguments and returns an
//! [`Answer`], so they are tested without the binary) and renders the answers as aligned
//! text or one JSON document ([`render`]). [`serve`] is the live dashboard on the same
//! verbs. The binary only parses, opens the store and
//! dispatches.

pub mod answer;
pub mod cli;
pub mod error;
pub mod render;
pub mod serve;
pub mod verbs;

pub use answer::Answer;
pub use error::CtlError;
