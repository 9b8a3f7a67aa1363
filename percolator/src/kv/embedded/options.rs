//! The options of an [`EmbeddedKv`](super::EmbeddedKv): [`Durability`] (also the binaries'
//! `--durability process|fsync`), memory knobs (also from the environment) and the key split.

use super::host_memory::default_write_buffer_bytes;
use super::KeySplit;
use std::sync::Arc;

/// How far an acknowledged write is guaranteed to survive (the binaries' `--durability
/// process|fsync`). Whatever the mode, [`RawKv::sync`](crate::kv::RawKv::sync) makes the writes acknowledged so far
/// survive power loss (the oracle syncs its record that way before using a window).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// Flushed to the operating system: survives a crash or `kill -9` of the process, not a
    /// power loss or kernel panic. The default.
    #[default]
    Process,
    /// Also `fdatasync`ed before the write is acknowledged (writers share fsyncs: group
    /// commit): survives power loss.
    Fsync,
}

/// Options for [`EmbeddedKv::open`](super::EmbeddedKv::open).
#[derive(Clone, Debug)]
pub struct EmbeddedOptions {
    /// Durability of acknowledged writes.
    pub durability: Durability,
    /// Block cache size in bytes.
    pub cache_bytes: u64,
    /// Memtables in memory at most, in bytes (fjall's write buffer; at least 1 MiB): past it,
    /// memtables are flushed to disk segments. Half of it is each partition's memtable size,
    /// fixed when the store is created (fjall keeps a partition's options). By default a
    /// sixteenth of the memory the process may use, between 64 MiB and 1 GiB
    /// ([`default_write_buffer_bytes`]): fewer, larger flushes leave fewer segments for every
    /// range scan to merge and less to compact, and a short run may never flush
    /// (`percolator::design::kv`, "Memtables of half the write buffer").
    pub write_buffer_bytes: u64,
    /// Keys kept in a partition of their own (`None`: every key in one). The layer that owns
    /// the key layout supplies it (the transaction layer: `percolator::codec::notify_split`);
    /// a store opened once with a split must always be opened with the same one (else
    /// [`KvError::SplitMismatch`](crate::kv::KvError::SplitMismatch)).
    pub split: Option<Arc<dyn KeySplit>>,
}

impl Default for EmbeddedOptions {
    fn default() -> Self {
        EmbeddedOptions {
            durability: Durability::Process,
            cache_bytes: 64 * 1024 * 1024,
            write_buffer_bytes: default_write_buffer_bytes(),
            split: None,
        }
    }
}

/// Environment variable overriding [`EmbeddedOptions::cache_bytes`] (MiB) in
/// [`EmbeddedOptions::from_env`].
pub const CACHE_MB_ENV: &str = "PERCOLATOR_EMBEDDED_CACHE_MB";
/// Environment variable overriding [`EmbeddedOptions::write_buffer_bytes`] (MiB) in
/// [`EmbeddedOptions::from_env`].
pub const WRITE_BUFFER_MB_ENV: &str = "PERCOLATOR_EMBEDDED_WRITE_BUFFER_MB";

impl EmbeddedOptions {
    /// The defaults, with the memory knobs taken from the environment where set
    /// ([`CACHE_MB_ENV`], [`WRITE_BUFFER_MB_ENV`], in MiB; unparsable values are ignored
    /// with a warning). Every binary that opens an embedded store from a `--store` spec uses
    /// it (`percolator_cli::store::open_store`).
    pub fn from_env() -> Self {
        let mib = |name: &str| -> Option<u64> {
            let value = std::env::var(name).ok()?;
            match value.trim().parse::<u64>() {
                Ok(n) => Some(n * 1024 * 1024),
                Err(_) => {
                    tracing::warn!(name, value, "not a whole number of MiB; ignored");
                    None
                }
            }
        };
        let defaults = EmbeddedOptions::default();
        EmbeddedOptions {
            cache_bytes: mib(CACHE_MB_ENV).unwrap_or(defaults.cache_bytes),
            write_buffer_bytes: mib(WRITE_BUFFER_MB_ENV).unwrap_or(defaults.write_buffer_bytes),
            ..defaults
        }
    }
}

/// A `--durability` value that is neither `process` nor `fsync`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid durability {0:?} (expected process or fsync)")]
pub struct DurabilityError(pub String);

impl std::str::FromStr for Durability {
    type Err = DurabilityError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "process" => Ok(Durability::Process),
            "fsync" => Ok(Durability::Fsync),
            _ => Err(DurabilityError(text.to_string())),
        }
    }
}

impl std::fmt::Display for Durability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Durability::Process => "process",
            Durability::Fsync => "fsync",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durability_round_trips_and_refuses_the_rest() {
        for d in [Durability::Process, Durability::Fsync] {
            assert_eq!(d.to_string().parse(), Ok(d));
        }
        assert_eq!(
            "sync".parse::<Durability>(),
            Err(DurabilityError("sync".to_string()))
        );
    }
}
