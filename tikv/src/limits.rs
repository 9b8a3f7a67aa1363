//! TiKV's size limits, checked before a request is sent: keys of at most `max-key-size`
//! (8 KiB), writes that fit in one raft entry (`raft-entry-max-size`, 8 MiB). Both are
//! permanent: TiKV refuses a longer key in every call, and answers a write over the entry
//! limit with the region error `RaftEntryTooLarge` however often it is repeated.

use crate::TikvKv;
use percolator::kv::{KvError, KvResult};

/// Bytes kept free in a raft entry for the command around a pair's key and value (header,
/// column family, the data-key prefix): a pair is refused when its key and value come within
/// this of [`crate::TikvConfig::max_entry_bytes`].
pub const ENTRY_OVERHEAD_BYTES: usize = 1024;

/// The start of `key` for an error message (keys can be 8 KiB long).
pub(crate) fn show_key(key: &[u8]) -> String {
    const SHOWN: usize = 48;
    if key.len() <= SHOWN {
        format!("\"{}\"", key.escape_ascii())
    } else {
        format!(
            "\"{}\"... ({} bytes)",
            key[..SHOWN].escape_ascii(),
            key.len()
        )
    }
}

impl TikvKv {
    /// Refuses a key longer than TiKV accepts.
    pub(crate) fn check_key(&self, op: &'static str, key: &[u8]) -> KvResult<()> {
        let limit = self.config.max_key_bytes;
        if key.len() > limit {
            tracing::debug!(op, len = key.len(), limit, "key over TiKV's max-key-size");
            return Err(KvError::InvalidArgument {
                op,
                message: format!(
                    "key {} is {} bytes, over TiKV's max-key-size of {limit} bytes",
                    show_key(key),
                    key.len()
                ),
            });
        }
        Ok(())
    }

    /// Refuses a write of `key` with a value of `value_len` bytes that TiKV would refuse:
    /// a key over the key limit, or a pair that does not fit in one raft entry.
    pub(crate) fn check_write(
        &self,
        op: &'static str,
        key: &[u8],
        value_len: usize,
    ) -> KvResult<()> {
        self.check_key(op, key)?;
        let limit = self.config.max_entry_bytes;
        let size = key.len().saturating_add(value_len);
        if size.saturating_add(ENTRY_OVERHEAD_BYTES) > limit {
            tracing::debug!(op, size, limit, "write over TiKV's raft-entry-max-size");
            return Err(too_large(op, key, size as u64, limit));
        }
        Ok(())
    }
}

/// The error for a write of `key` (`size` bytes of key and value) over the raft entry limit.
pub(crate) fn too_large(op: &'static str, key: &[u8], size: u64, limit: usize) -> KvError {
    KvError::InvalidArgument {
        op,
        message: format!(
            "writing key {} ({size} bytes of key and value) needs a raft entry over TiKV's \
             raft-entry-max-size of {limit} bytes; split the value",
            show_key(key)
        ),
    }
}

/// The `RaftEntryTooLarge` region error inside a client error (also inside the errors the
/// client collects from several regions): `(region id, entry size)`.
pub(crate) fn raft_entry_too_large(e: &tikv_client::Error) -> Option<(u64, u64)> {
    use tikv_client::Error as E;
    match e {
        E::RegionError(region) => region
            .raft_entry_too_large
            .as_ref()
            .map(|t| (t.region_id, t.entry_size)),
        E::ExtractedErrors(errors) | E::MultipleKeyErrors(errors) => {
            errors.iter().find_map(raft_entry_too_large)
        }
        _ => None,
    }
}

/// A write's [`KvError::InvalidArgument`] (from TiKV's `RaftEntryTooLarge`: the only one a
/// write call returns) with the written key and size named; other errors unchanged.
pub(crate) fn name_key(e: KvError, key: &[u8], size: usize) -> KvError {
    match e {
        KvError::InvalidArgument { op, message } => KvError::InvalidArgument {
            op,
            message: format!(
                "{message}; key {} ({size} bytes of key and value)",
                show_key(key)
            ),
        },
        other => other,
    }
}
