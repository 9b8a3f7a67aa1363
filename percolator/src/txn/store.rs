//! Opening an embedded store for transaction data: the store itself knows nothing of the key
//! layout, so the transaction layer supplies its key split ([`crate::codec::notify_split`]).

use crate::codec::notify_split;
use crate::kv::{EmbeddedKv, EmbeddedOptions, KvResult};
use std::path::Path;

/// `options` with the key split of the transaction layout (notify keys in a partition of
/// their own): the options of every embedded store holding transaction data.
pub fn embedded_options(options: EmbeddedOptions) -> EmbeddedOptions {
    EmbeddedOptions {
        split: Some(notify_split()),
        ..options
    }
}

/// Opens (creating if needed) the embedded store in `path` for transaction data: `options`
/// with the transaction layout's key split ([`embedded_options`]).
pub fn open_embedded(path: impl AsRef<Path>, options: EmbeddedOptions) -> KvResult<EmbeddedKv> {
    EmbeddedKv::open_with(path, embedded_options(options))
}
