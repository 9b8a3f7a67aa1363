//! `percolator-ctl`: an operator's tool for observer applications. The data comes from
//! [`observers::admin`]; this crate holds the command line ([`cli`]) and renders the answers
//! as aligned text or one JSON document ([`render`]).

pub mod cli;
pub mod render;
