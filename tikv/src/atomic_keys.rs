//! Which keys only the atomic client may write ([`AtomicKeys`]).
//!
//! TiKV serialises a raw CAS only against the writes that take its latches: those sent in
//! atomic mode (`for_cas`). A plain `RawPut`/`RawDelete` takes no latch (tikv/tikv#10594), so
//! a plain write racing a CAS of the same key can be lost under the CAS, or the CAS can
//! compare against a value that is gone. The rule is therefore per key: every write of a key
//! that is ever CASed goes through the atomic client, and every write of any other key
//! through the plain one (batched deletes, no latches). A key never receives both kinds.
//!
//! [`AtomicKeys::PercolatorLayout`] derives the set from the key codec
//! ([`percolator::codec`]), for every namespace at once: a key is `enc(namespace) ‖ tag ‖ …`,
//! and the tag names its space. The spaces that are CASed, heads (`H`) and meta records
//! (`M`: oracle record, notify floor, GC safe point, and the worker registry and dead letters
//! that share the space), are atomic; versions (`V`), out-of-line data (`D`) and notify keys
//! (`Q`) are only ever put and deleted, and are plain. A key that is not a codec key (no
//! namespace part, or an unknown tag) is atomic: slower, never unsafe. The space-to-kind map
//! is an exhaustive `match`, so a new space does not compile until it is given a kind.

use percolator::codec::{decode_part, Space};
use percolator::KeyCodec;
use std::sync::Arc;

/// Which keys are CASed, and so must only be written through the atomic client.
#[derive(Clone, Default)]
pub enum AtomicKeys {
    /// Every write goes through the atomic client (always safe; writes are slower because
    /// TiKV takes latches, and deletes cannot be batched).
    #[default]
    All,
    /// The CASed spaces of the percolator key layout, in every namespace: heads (`H`) and
    /// meta records (`M`), and every key that is not a codec key; versions, data and notify
    /// keys are plain. What the binaries use (see the module documentation).
    PercolatorLayout,
    /// Keys starting with any of these prefixes are atomic; the rest are plain.
    Prefixes(Vec<Vec<u8>>),
    /// Keys for which the predicate holds are atomic; the rest are plain. It must give the
    /// same answer for a key for the life of the data.
    Predicate(KeyPredicate),
}

/// A rule on keys, as used by [`AtomicKeys::Predicate`].
pub type KeyPredicate = Arc<dyn Fn(&[u8]) -> bool + Send + Sync>;

/// Whether keys of `space` are ever CASed (and so must be written in atomic mode).
pub fn space_is_atomic(space: Space) -> bool {
    match space {
        // Write-once records: GC rewrites a pending record as committed by a CAS from the
        // pending bytes (`percolator::design::once`).
        Space::Head | Space::Meta | Space::Once => true,
        Space::Version | Space::Data | Space::Notify => false,
    }
}

/// The space of a key of the percolator layout (any namespace), `None` for other keys.
pub fn layout_space(key: &[u8]) -> Option<Space> {
    let (_, rest) = decode_part(key).ok()?;
    rest.first().copied().and_then(Space::from_tag)
}

impl AtomicKeys {
    /// The CASed spaces of the percolator key layout for one namespace: heads (`H`), meta
    /// records (`M`) and write-once records (`W`).
    pub fn percolator_spaces(codec: &KeyCodec) -> Self {
        AtomicKeys::Prefixes(vec![
            codec.space_range(Space::Head).start,
            codec.space_range(Space::Meta).start,
            codec.space_range(Space::Once).start,
        ])
    }

    /// Whether writes of `key` must use the atomic client.
    pub fn is_atomic(&self, key: &[u8]) -> bool {
        match self {
            AtomicKeys::All => true,
            AtomicKeys::PercolatorLayout => layout_space(key).is_none_or(space_is_atomic),
            AtomicKeys::Prefixes(prefixes) => prefixes.iter().any(|p| key.starts_with(p)),
            AtomicKeys::Predicate(f) => f(key),
        }
    }
}

impl std::fmt::Debug for AtomicKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AtomicKeys::All => write!(f, "All"),
            AtomicKeys::PercolatorLayout => write!(f, "PercolatorLayout"),
            AtomicKeys::Prefixes(p) => f.debug_tuple("Prefixes").field(p).finish(),
            AtomicKeys::Predicate(_) => write!(f, "Predicate(..)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use percolator::Cell;

    #[test]
    fn the_layout_rule_follows_the_codec_in_every_namespace() {
        let rule = AtomicKeys::PercolatorLayout;
        let cell = Cell::new("t", "r\0w", "c");
        for ns in ["app", "photon-oracle", "", "a\0b"] {
            let codec = KeyCodec::new(ns);
            assert!(rule.is_atomic(&codec.head(&cell)), "{ns}");
            assert!(rule.is_atomic(&codec.meta("oracle")), "{ns}");
            assert!(rule.is_atomic(&codec.meta("workers/1")), "{ns}");
            assert!(!rule.is_atomic(&codec.version(&cell, 7)), "{ns}");
            assert!(!rule.is_atomic(&codec.data(&cell, 7)), "{ns}");
            assert!(!rule.is_atomic(&codec.notify(&cell, 7, 1)), "{ns}");
            for space in [Space::Head, Space::Meta, Space::Version, Space::Data] {
                let start = codec.space_range(space).start;
                assert_eq!(
                    rule.is_atomic(&start),
                    space_is_atomic(space),
                    "{ns} {space:?}"
                );
            }
        }
        // Not codec keys: atomic (slower, never unsafe).
        assert!(rule.is_atomic(b"raw key"));
        assert!(rule.is_atomic(b""));
        assert!(rule.is_atomic(b"ns\0\x01Z"));
    }
}
