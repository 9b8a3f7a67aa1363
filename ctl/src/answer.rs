//! What a verb produced: the text an operator reads, the JSON document scripts read, and
//! the exit status.

use serde_json::Value;

/// A verb's answer. The binary prints `text`, or `json` with `--json`, and exits with
/// `status`.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    /// Aligned text, ending with a newline.
    pub text: String,
    /// The same answer as one JSON document.
    pub json: Value,
    /// The process exit status: 0, or a verb-specific code (`wait` timed out: 3; `dead-letters
    /// drop` without `--yes`: 1; `docs/operating.md`, "Exit status").
    pub status: i32,
}

impl Answer {
    /// A successful answer (exit status 0).
    pub fn ok(text: String, json: Value) -> Answer {
        Answer {
            text,
            json,
            status: 0,
        }
    }
}
