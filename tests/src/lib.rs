//! Cross-crate integration tests live in `tests/tests/`; this library holds nothing but the
//! helper binaries under `src/bin/` that those tests start as child processes.

/// The README's examples, compiled as doc tests (here, where every crate is a dependency) so
/// they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
