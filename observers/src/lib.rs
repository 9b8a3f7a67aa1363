//! Observers that run in their own transaction when a notify key marks a cell dirty, and the
//! Photon click-query join built on them. The subject of the observers and Photon issues; the
//! crate exists so that the workspace's crate graph is in place from the start.
