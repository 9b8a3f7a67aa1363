//! The timestamp oracle (TSO). Its service, persisted window and batched client are the
//! subject of the oracle issue; the crate exists so that the workspace's crate graph
//! (percolator <- oracle <- observers) is in place from the start.
