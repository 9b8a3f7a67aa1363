//! How the binaries print an error that stops them: the message and each cause once, on one
//! line, without a backtrace.
//!
//! Errors here often include their cause in their own message (`"{path}: {source}"`) and
//! also return it as their `source()`; printing the chain as it is (anyhow's `{:#}`) then
//! shows that cause twice. And `main` returning an `anyhow::Error` prints it with `{:?}`,
//! which appends a backtrace whenever `RUST_BACKTRACE` is set: noise for an ordinary error
//! (a bad flag, a store that cannot be opened, unreadable input). The binaries print with
//! [`error_line`] and exit with their status instead (panics still print their backtrace).

use std::error::Error;

/// `error` and its causes as one line, `message: cause: cause`, each cause once: a cause
/// whose text the line already holds (an error that includes its source in its message) is
/// not repeated.
pub fn error_line(error: &(dyn Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if !text.is_empty() && !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        next = cause.source();
    }
    line
}

/// Prints `Error: ` and [`error_line`] of `error` to stderr, then exits with `status`.
pub fn exit_with(error: &(dyn Error + 'static), status: i32) -> ! {
    eprintln!("Error: {}", error_line(error));
    std::process::exit(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("{path}: {source}")]
    struct Io {
        path: String,
        source: std::io::Error,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("loading")]
    struct Outer {
        #[source]
        inner: Io,
    }

    #[test]
    fn each_cause_is_printed_once() {
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let inner = Io {
            path: "logs/a.jsonl".into(),
            source: io(),
        };
        assert_eq!(error_line(&inner), "logs/a.jsonl: no such file");
        let outer = Outer {
            inner: Io {
                path: "logs/a.jsonl".into(),
                source: io(),
            },
        };
        assert_eq!(error_line(&outer), "loading: logs/a.jsonl: no such file");
        assert_eq!(error_line(&io()), "no such file");
    }
}
