//! Start-up shared by the workspace's binaries (`oracle`, `minitikv`, `photon`); not meant
//! for library crates.
//!
//! - [`StoreSpec`]: the `--store` syntax ([`spec`]); [`store`]: opening the store a spec names,
//!   and a transaction client on it.
//! - [`config`]: one TOML configuration file under environment variables and flags, on
//!   the binaries' clap types (`--config FILE`, `--print-config`).
//! - [`shutdown_signal`] installs the SIGTERM and SIGINT handlers *when called* and returns
//!   a future that resolves on the first of them. Binaries call it before they announce
//!   readiness, so a supervisor (or test) that signals the instant it sees the readiness
//!   line always gets the graceful shutdown, never the default action of the signal.
//! - [`exit`]: the binaries' exit statuses, one per kind of failure.
//! - [`init_tracing`] sets up logging to stderr, with ANSI colours only when stderr is a
//!   terminal (redirected logs stay plain text).

use std::future::Future;
use std::io::IsTerminal;

pub mod config;
pub mod exit;
pub mod report;
pub mod spec;
pub mod store;
#[cfg(feature = "testkit")]
pub mod testkit;

pub use spec::{StoreSpec, StoreSpecError};

/// The shutdown signal that arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM (`kill`, `docker stop`, systemd).
    Terminate,
    /// SIGINT (Ctrl-C).
    Interrupt,
}

impl std::fmt::Display for Signal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Signal::Terminate => "SIGTERM",
            Signal::Interrupt => "SIGINT",
        })
    }
}

/// Errors of [`shutdown_signal`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SignalError {
    /// A handler could not be installed (or no tokio runtime with signals enabled is
    /// running).
    #[error("installing the {signal} handler: {source}")]
    Install {
        /// The signal.
        signal: Signal,
        /// The error.
        source: std::io::Error,
    },
}

/// Installs the SIGTERM and SIGINT handlers now, and returns a future that resolves with the
/// first of them to arrive after this call (a signal that arrives before the future is
/// first polled is not lost). Call it before printing any readiness line.
///
/// Must be called inside a tokio runtime with its I/O driver enabled (`enable_all`).
#[cfg(unix)]
pub fn shutdown_signal() -> Result<impl Future<Output = Signal> + Send + 'static, SignalError> {
    use tokio::signal::unix::{signal, SignalKind};
    let install = |kind: SignalKind, which: Signal| {
        signal(kind).map_err(|source| SignalError::Install {
            signal: which,
            source,
        })
    };
    // Both registered here, synchronously: `tokio::signal::ctrl_c()` would only install its
    // handler when first polled.
    let mut term = install(SignalKind::terminate(), Signal::Terminate)?;
    let mut int = install(SignalKind::interrupt(), Signal::Interrupt)?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => Signal::Terminate,
            _ = int.recv() => Signal::Interrupt,
        }
    })
}

/// Installs the Ctrl-C handler now and returns a future that resolves when it arrives
/// (no SIGTERM outside Unix).
#[cfg(windows)]
pub fn shutdown_signal() -> Result<impl Future<Output = Signal> + Send + 'static, SignalError> {
    let mut int = tokio::signal::windows::ctrl_c().map_err(|source| SignalError::Install {
        signal: Signal::Interrupt,
        source,
    })?;
    Ok(async move {
        int.recv().await;
        Signal::Interrupt
    })
}

/// Whether log output to stderr should carry ANSI colour codes: only when stderr is a
/// terminal and `NO_COLOR` is not set (<https://no-color.org>).
pub fn stderr_colours() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Sets up the global tracing subscriber: events to stderr, filtered by `RUST_LOG` (or
/// `default_filter`, e.g. `"info"`, when it is unset or invalid), coloured only on a
/// terminal ([`stderr_colours`]). Does nothing if a global subscriber is already set.
pub fn init_tracing(default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(stderr_colours())
        .try_init();
}
