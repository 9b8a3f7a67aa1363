//! The datagram of relayed hints: a namespace and the notify keys one client committed.
//!
//! ```text
//! magic "PCH" and version 1 (4 bytes) | namespace length (u16, big-endian) | namespace
//! then, to the end of the datagram: key length (u16, big-endian) | notify key
//! ```
//!
//! A datagram stays within [`MAX_DATAGRAM`] bytes, below a typical path MTU, so that it is
//! never fragmented; a commit's keys are spread over as many datagrams as they need.

/// The first four bytes of every datagram: magic and version.
const MAGIC: [u8; 4] = *b"PCH\x01";

/// The largest datagram sent, and received (a longer one is refused unread): within a
/// 1,500-byte Ethernet MTU after IP and UDP headers.
pub const MAX_DATAGRAM: usize = 1400;

/// The most keys a datagram may name (a notify key is tens of bytes; this bounds the work
/// a datagram of tiny keys can ask for).
pub const MAX_KEYS: usize = 64;

/// A decoded datagram.
#[derive(Debug, PartialEq, Eq)]
pub struct Datagram<'a> {
    /// The namespace of the client that committed the keys.
    pub namespace: &'a [u8],
    /// The notify keys, in the order committed.
    pub keys: Vec<&'a [u8]>,
}

/// Reads a two-byte big-endian length at the start of `input`, then that many bytes.
fn part(input: &[u8]) -> Option<(&[u8], &[u8])> {
    let (len, rest) = input.split_first_chunk::<2>()?;
    let len = usize::from(u16::from_be_bytes(*len));
    (rest.len() >= len).then(|| rest.split_at(len))
}

/// Decodes `bytes`; `None` if they are not a whole datagram of this version within
/// [`MAX_DATAGRAM`] bytes and [`MAX_KEYS`] keys.
pub fn decode(bytes: &[u8]) -> Option<Datagram<'_>> {
    if bytes.len() > MAX_DATAGRAM {
        return None;
    }
    let rest = bytes.strip_prefix(&MAGIC)?;
    let (namespace, mut rest) = part(rest)?;
    let mut keys = Vec::new();
    while !rest.is_empty() {
        let (key, more) = part(rest)?;
        if keys.len() == MAX_KEYS {
            return None;
        }
        keys.push(key);
        rest = more;
    }
    Some(Datagram { namespace, keys })
}

/// Encodes `keys` of `namespace` into datagrams of at most `max` bytes (at most
/// [`MAX_DATAGRAM`]) and [`MAX_KEYS`] keys each, in order. A key
/// that cannot fit in a datagram of its own is left out (its notification is found by
/// scanning, as a lost hint's is); so is everything if the namespace alone does not fit.
pub fn encode<'a>(
    namespace: &[u8],
    keys: impl IntoIterator<Item = &'a [u8]>,
    max: usize,
) -> Vec<Vec<u8>> {
    let Ok(ns_len) = u16::try_from(namespace.len()) else {
        return Vec::new();
    };
    let max = max.min(MAX_DATAGRAM);
    let header_len = MAGIC.len() + 2 + namespace.len();
    let header = || {
        let mut d = Vec::with_capacity(max);
        d.extend_from_slice(&MAGIC);
        d.extend_from_slice(&ns_len.to_be_bytes());
        d.extend_from_slice(namespace);
        d
    };
    let mut out = Vec::new();
    let mut current = header();
    let mut in_current = 0;
    for key in keys {
        let Ok(len) = u16::try_from(key.len()) else {
            continue;
        };
        if header_len + 2 + key.len() > max {
            continue;
        }
        if current.len() + 2 + key.len() > max || in_current == MAX_KEYS {
            out.push(std::mem::replace(&mut current, header()));
            in_current = 0;
        }
        current.extend_from_slice(&len.to_be_bytes());
        current.extend_from_slice(key);
        in_current += 1;
    }
    if current.len() > header_len {
        out.push(current);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_across_datagrams_of_bounded_size() {
        let keys: Vec<Vec<u8>> = (0..200u32)
            .map(|i| format!("notify-key-{i:05}").into_bytes())
            .collect();
        let datagrams = encode(b"photon", keys.iter().map(|k| k.as_slice()), 120);
        assert!(datagrams.len() > 1, "200 keys do not fit in 120 bytes");
        let mut seen = Vec::new();
        for d in &datagrams {
            assert!(d.len() <= 120, "a datagram of {} bytes", d.len());
            let decoded = decode(d).expect("decodes");
            assert_eq!(decoded.namespace, b"photon");
            assert!(!decoded.keys.is_empty());
            seen.extend(decoded.keys.iter().map(|k| k.to_vec()));
        }
        assert_eq!(seen, keys, "every key, in order");
    }

    #[test]
    fn a_key_too_long_for_any_datagram_is_left_out() {
        let long = vec![7u8; 200];
        let d = encode(b"ns", [b"a".as_slice(), &long, b"b"], 100);
        assert_eq!(d.len(), 1);
        assert_eq!(decode(&d[0]).unwrap().keys, vec![b"a".as_slice(), b"b"]);
        assert!(encode(b"ns", [long.as_slice()], 100).is_empty());
    }

    #[test]
    fn what_is_not_a_whole_datagram_is_refused() {
        let d = encode(b"ns", [b"key".as_slice()], MAX_DATAGRAM).remove(0);
        assert!(decode(&d).is_some());
        for cut in 0..d.len() {
            if cut == MAGIC.len() + 2 + 2 {
                // The header alone: a datagram with no key, which is whole.
                continue;
            }
            assert!(decode(&d[..cut]).is_none(), "cut at {cut}");
        }
        let mut other = d.clone();
        other[3] = 2;
        assert!(decode(&other).is_none(), "another version");
        assert!(decode(b"GET / HTTP/1.1\r\n").is_none());
    }

    #[test]
    fn a_datagram_names_at_most_max_keys() {
        let keys: Vec<[u8; 1]> = (0..200u8).map(|i| [i]).collect();
        let datagrams = encode(b"ns", keys.iter().map(|k| k.as_slice()), MAX_DATAGRAM);
        assert_eq!(datagrams.len(), 200usize.div_ceil(MAX_KEYS));
        assert!(datagrams.iter().all(|d| decode(d).is_some()));
        // One key more than allowed, hand-made: refused whole.
        let mut d = MAGIC.to_vec();
        d.extend_from_slice(&2u16.to_be_bytes());
        d.extend_from_slice(b"ns");
        for _ in 0..=MAX_KEYS {
            d.extend_from_slice(&1u16.to_be_bytes());
            d.push(0);
        }
        assert!(decode(&d).is_none());
        let mut long = MAGIC.to_vec();
        long.extend_from_slice(&2u16.to_be_bytes());
        long.extend_from_slice(b"ns");
        long.extend_from_slice(&1500u16.to_be_bytes());
        long.extend(std::iter::repeat_n(0u8, 1500));
        assert!(decode(&long).is_none(), "longer than MAX_DATAGRAM");
    }
}
