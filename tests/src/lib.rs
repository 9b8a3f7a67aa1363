//! Cross-crate integration tests live in `tests/tests/`; this library holds nothing but the
//! helper binaries under `src/bin/` that those tests start as child processes.
