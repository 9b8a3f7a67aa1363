//! The notify split: which raw keys of this layout are notify keys, and which ranges can hold
//! them, so the embedded store can keep them in a partition of their own ([`NotifySplit`],
//! given to the store through [`EmbeddedOptions::split`](crate::kv::EmbeddedOptions::split)).
//!
//! The rule looks at raw bytes only: a key's first encoded part is its namespace (escaped
//! zeros never end a part), and the byte after it is the space tag. So it classifies the keys
//! of every namespace at once, and keys of no layout at all (raw keys of other users of the
//! store) simply land in the main partition.

use super::{Space, TERMINATOR};
use crate::kv::{KeyRange, KeySplit};
use std::sync::Arc;

/// Where a raw key's first encoded part (its namespace, if the key is of this layout) ends:
/// just after the first `0x00 0x01`. Escaped zeros (`0x00 0xFF`) never match, so for a key
/// of this layout this is the end of its namespace.
fn namespace_end(key: &[u8]) -> Option<usize> {
    key.windows(2)
        .position(|w| w == [0x00, TERMINATOR])
        .map(|i| i + 2)
}

/// Whether a raw key is a notify key of this layout (of any namespace): the byte after its
/// namespace is the notify tag. A pure function of the key's bytes, so a store may keep such
/// keys apart (the embedded store does: a partition of their own).
pub fn is_notify_key(key: &[u8]) -> bool {
    namespace_end(key).is_some_and(|end| key.get(end) == Some(&Space::Notify.tag()))
}

/// Which keys a range can hold, by [`is_notify_key`]: `(notify keys, other keys)`. Exact for
/// the ranges the codec builds inside one space of one namespace (one side is `false`); any
/// other range may hold both (both `true`).
pub fn notify_sides(range: &KeyRange) -> (bool, bool) {
    let both = (true, true);
    let (Some(p), Some(end)) = (namespace_end(&range.start), range.end.as_deref()) else {
        return both;
    };
    // Every key in [start, end) starts with the namespace part `start[..p]` when `end` does.
    if end.len() <= p || end[..p] != range.start[..p] {
        return both;
    }
    let q = Space::Notify.tag();
    let low = range.start.get(p).copied();
    // The highest tag byte a key of the range can have, and whether keys with it fit below
    // `end` (not when `end` is the bare tag).
    let (high, high_fits) = (end[p], end.len() > p + 1);
    let all_notify = low == Some(q) && (high == q || (high == q + 1 && !high_fits));
    let no_notify = low.is_some_and(|l| l > q) || high < q || (high == q && !high_fits);
    if all_notify {
        (true, false)
    } else if no_notify {
        (false, true)
    } else {
        both
    }
}

/// The key split of this layout for the embedded store: notify keys (of any namespace,
/// [`is_notify_key`]) in a partition of their own, `notify`. A notification is put, then
/// deleted once handled, so the notify space is mostly delete markers of recent keys; apart,
/// scans of it merge only its own memtable and segments, and compaction of the rest of the
/// data no longer rewrites those markers. Every embedded store holding transaction data is
/// opened with it (stores written since the split was introduced record it and refuse to open
/// without it).
#[derive(Clone, Copy, Debug, Default)]
pub struct NotifySplit;

impl KeySplit for NotifySplit {
    fn partition(&self) -> &'static str {
        "notify"
    }

    fn holds(&self, key: &[u8]) -> bool {
        is_notify_key(key)
    }

    fn sides(&self, range: &KeyRange) -> (bool, bool) {
        notify_sides(range)
    }
}

/// [`NotifySplit`], as [`EmbeddedOptions::split`](crate::kv::EmbeddedOptions::split) takes it.
pub fn notify_split() -> Arc<dyn KeySplit> {
    Arc::new(NotifySplit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{Cell, KeyCodec};
    use crate::kv::{CasRequest, EmbeddedKv, EmbeddedOptions, KvError, MemoryKv, RawKv, ScanOrder};
    use fjall::{Config, PartitionCreateOptions, PersistMode};
    use rand::{Rng, SeedableRng};

    /// An embedded store in `dir` with the notify split.
    fn open_split(dir: &std::path::Path) -> EmbeddedKv {
        EmbeddedKv::open_with(
            dir,
            EmbeddedOptions {
                split: Some(notify_split()),
                ..EmbeddedOptions::default()
            },
        )
        .unwrap()
    }

    /// `is_notify_key` picks exactly the notify keys of any namespace (zero bytes in names
    /// included), and `notify_sides` never rules out a side that a codec range holds.
    #[test]
    fn notify_keys_and_the_sides_of_ranges() {
        let cell = Cell::new("t\0", "r\0\x01", "c");
        let mut keys = Vec::new();
        for ns in ["", "a", "a\0", "a\0\x01Q", "ab"] {
            let c = KeyCodec::new(ns);
            assert!(is_notify_key(&c.notify(&cell, 3, 4)));
            for other in [
                c.head(&cell),
                c.version(&cell, 3),
                c.data(&cell, 3),
                c.meta("m"),
            ] {
                assert!(!is_notify_key(&other), "{other:?}");
                keys.push(other);
            }
            keys.push(c.notify(&cell, 3, 4));
            keys.push(c.notify(&cell, 1, 0));
        }
        let mut ranges = Vec::new();
        for ns in ["", "a", "a\0", "ab"] {
            let c = KeyCodec::new(ns);
            assert_eq!(notify_sides(&c.space_range(Space::Notify)), (true, false));
            assert_eq!(notify_sides(&c.notify_from(3)), (true, false));
            assert_eq!(notify_sides(&c.notify_between(1, 3)), (true, false));
            for space in [Space::Head, Space::Version, Space::Data, Space::Meta] {
                assert_eq!(notify_sides(&c.space_range(space)), (false, true));
            }
            assert_eq!(notify_sides(&c.namespace_range()), (true, true));
            ranges.push(c.namespace_range());
            ranges.push(c.space_range(Space::Head));
            ranges.push(c.notify_from(2));
        }
        for a in &keys {
            for b in &keys {
                ranges.push(KeyRange::new(a.clone(), b.clone()));
            }
        }
        for range in &ranges {
            let (notify, other) = notify_sides(range);
            for k in keys.iter().filter(|k| range.contains(k)) {
                assert!(
                    if is_notify_key(k) { notify } else { other },
                    "{k:?} in {range:?}"
                );
            }
        }
    }

    /// Keys of every space of two namespaces (one a prefix of the other), plus raw keys of no
    /// layout: the notify keys go to their own partition, the rest to `kv`.
    fn mixed_keys(rng: &mut impl Rng) -> Vec<Vec<u8>> {
        let mut keys = Vec::new();
        for ns in ["app", "appN"] {
            let codec = KeyCodec::new(ns);
            for i in 0..40u64 {
                let cell = Cell::new("t", format!("r{}", rng.gen_range(0..12)), "c");
                keys.push(codec.notify(&cell, i, rng.gen_range(0..4)));
                keys.push(codec.head(&cell));
                keys.push(codec.version(&cell, i));
                keys.push(codec.data(&cell, i));
                keys.push(codec.meta(format!("m{i}")));
            }
        }
        for _ in 0..40 {
            let len = rng.gen_range(1..6);
            keys.push((0..len).map(|_| rng.gen_range(0..4u8) * 0x40).collect());
            keys.push(vec![b'a', b'p', b'p', 0x00, 0x01, b'Q', rng.gen()]);
        }
        keys
    }

    /// Randomized: the embedded store (two partitions) answers every scan like the in-memory
    /// store given the same writes: codec ranges that hit one partition, and arbitrary ranges
    /// that span both, forward and reverse, at small limits.
    #[tokio::test]
    async fn scans_across_the_partitions_match_the_memory_store() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let dir = tempfile::tempdir().unwrap();
        let kv = open_split(dir.path());
        let model = MemoryKv::new();
        let keys = mixed_keys(&mut rng);
        for (i, key) in keys.iter().enumerate() {
            let value = i.to_be_bytes().to_vec();
            match rng.gen_range(0..4) {
                0 => {
                    let mut batch =
                        vec![(key.clone(), value.clone()), (keys[i / 2].clone(), value)];
                    batch.dedup_by(|a, b| a.0 == b.0);
                    kv.batch_put(batch.clone()).await.unwrap();
                    model.batch_put(batch).await.unwrap();
                }
                1 => {
                    let req = vec![CasRequest {
                        key: key.clone(),
                        expected: model.get(key).await.unwrap(),
                        new: value,
                    }];
                    assert!(kv.batch_compare_and_swap(req.clone()).await.unwrap()[0].swapped);
                    model.batch_compare_and_swap(req).await.unwrap();
                }
                _ => {
                    kv.put(key.clone(), value.clone()).await.unwrap();
                    model.put(key.clone(), value).await.unwrap();
                }
            }
            if rng.gen_bool(0.2) {
                let victim = keys[rng.gen_range(0..=i)].clone();
                kv.delete(victim.clone()).await.unwrap();
                model.delete(victim).await.unwrap();
            }
        }
        let codec = KeyCodec::new("app");
        let mut ranges = vec![
            codec.space_range(Space::Notify),
            codec.notify_from(2),
            codec.notify_between(1, 3),
            codec.space_range(Space::Head),
            codec.space_range(Space::Version),
            codec.namespace_range(),
            KeyCodec::new("appN").namespace_range(),
            KeyRange {
                start: Vec::new(),
                end: None,
            },
        ];
        for _ in 0..300 {
            let (a, b) = (
                &keys[rng.gen_range(0..keys.len())],
                &keys[rng.gen_range(0..keys.len())],
            );
            let (start, end) = if a <= b { (a, b) } else { (b, a) };
            ranges.push(KeyRange::new(start.clone(), end.clone()));
        }
        for range in ranges {
            for order in [ScanOrder::Forward, ScanOrder::Reverse] {
                for limit in [1, 3, 50, 10_000] {
                    assert_eq!(
                        kv.scan(range.clone(), limit, order).await.unwrap(),
                        model.scan(range.clone(), limit, order).await.unwrap(),
                        "{range:?} {order:?} limit {limit}"
                    );
                }
            }
        }
        for key in &keys {
            assert_eq!(kv.get(key).await.unwrap(), model.get(key).await.unwrap());
        }
    }

    /// A store written before the partition split (notify keys in `kv`) has them moved on
    /// its first open: found by gets and notify-space scans, and only once.
    #[tokio::test]
    async fn notify_keys_of_an_older_store_are_moved_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let codec = KeyCodec::new("app");
        let cell = Cell::new("t", "r", "c");
        let (notify, head) = (codec.notify(&cell, 5, 9), codec.head(&cell));
        {
            let keyspace = Config::new(dir.path().join("fjall")).open().unwrap();
            let old = keyspace
                .open_partition("kv", PartitionCreateOptions::default())
                .unwrap();
            old.insert(&notify, b"n").unwrap();
            old.insert(&head, b"h").unwrap();
            keyspace.persist(PersistMode::SyncAll).unwrap();
        }
        for _ in 0..2 {
            let kv = open_split(dir.path());
            assert_eq!(kv.get(&notify).await.unwrap(), Some(b"n".to_vec()));
            assert_eq!(kv.main_partition().get(&notify).unwrap(), None);
            assert_eq!(
                kv.scan(codec.space_range(Space::Notify), 10, ScanOrder::Forward)
                    .await
                    .unwrap(),
                vec![(notify.clone(), b"n".to_vec())]
            );
            assert_eq!(
                kv.scan(codec.namespace_range(), 10, ScanOrder::Forward)
                    .await
                    .unwrap()
                    .len(),
                2
            );
        }
    }

    /// A split store is never opened without its split (it would miss the notify keys), nor
    /// with another; a store never split opens without one and keeps working.
    #[tokio::test]
    async fn a_split_store_refuses_to_open_without_its_split() {
        #[derive(Debug)]
        struct Other;
        impl KeySplit for Other {
            fn partition(&self) -> &'static str {
                "other"
            }
            fn holds(&self, key: &[u8]) -> bool {
                key.starts_with(b"o")
            }
            fn sides(&self, _: &KeyRange) -> (bool, bool) {
                (true, true)
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let key = KeyCodec::new("app").notify(&Cell::new("t", "r", "c"), 1, 0);
        open_split(dir.path())
            .put(key.clone(), b"n".to_vec())
            .await
            .unwrap();
        for split in [None, Some(Arc::new(Other) as Arc<dyn KeySplit>)] {
            let given = split.as_ref().map(|s| s.partition().to_string());
            let options = EmbeddedOptions {
                split,
                ..EmbeddedOptions::default()
            };
            match EmbeddedKv::open_with(dir.path(), options) {
                Err(KvError::SplitMismatch {
                    recorded, given: g, ..
                }) => assert_eq!((recorded.as_str(), g), ("notify", given)),
                other => panic!("opened a split store with {given:?}: {other:?}"),
            }
        }
        assert_eq!(
            open_split(dir.path()).get(&key).await.unwrap(),
            Some(b"n".to_vec())
        );
        let plain = tempfile::tempdir().unwrap();
        for _ in 0..2 {
            let kv = EmbeddedKv::open(plain.path()).unwrap();
            kv.put(key.clone(), b"n".to_vec()).await.unwrap();
            assert_eq!(
                kv.main_partition().get(&key).unwrap().as_deref(),
                Some(&b"n"[..])
            );
        }
        let reserved = EmbeddedOptions {
            split: Some(Arc::new(Reserved)),
            ..EmbeddedOptions::default()
        };
        assert!(matches!(
            EmbeddedKv::open_with(plain.path(), reserved),
            Err(KvError::InvalidArgument { .. })
        ));
    }

    /// A split naming the main partition (refused).
    #[derive(Debug)]
    struct Reserved;

    impl KeySplit for Reserved {
        fn partition(&self) -> &'static str {
            "kv"
        }
        fn holds(&self, _: &[u8]) -> bool {
            true
        }
        fn sides(&self, _: &KeyRange) -> (bool, bool) {
            (true, true)
        }
    }
}
