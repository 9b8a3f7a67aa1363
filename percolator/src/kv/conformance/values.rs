//! Reads and writes of single keys and batches: absent against empty values, binary keys, large values, batched calls.

use super::key;
use crate::kv::{scan_all, KeyRange, RawKv, ScanOrder};

/// An absent key reads as `None`; an empty value reads as `Some(empty)`; delete removes.
pub async fn absent_vs_empty(kv: &dyn RawKv, prefix: &[u8]) {
    let absent = key(prefix, b"absent");
    let empty = key(prefix, b"empty");
    assert_eq!(
        kv.get(&absent).await.unwrap(),
        None,
        "absent key must read None"
    );
    kv.put(empty.clone(), Vec::new()).await.unwrap();
    assert_eq!(
        kv.get(&empty).await.unwrap(),
        Some(Vec::new()),
        "empty value must read Some(empty)"
    );
    let got = kv
        .batch_get(&[absent.clone(), empty.clone()])
        .await
        .unwrap();
    assert_eq!(
        got,
        vec![None, Some(Vec::new())],
        "batch_get keeps absent vs empty"
    );
    let scanned = scan_all(kv, KeyRange::prefix(prefix), ScanOrder::Forward)
        .await
        .unwrap();
    assert_eq!(
        scanned,
        vec![(empty.clone(), Vec::new())],
        "scan returns empty values"
    );
    kv.delete(empty.clone()).await.unwrap();
    assert_eq!(
        kv.get(&empty).await.unwrap(),
        None,
        "deleted key must read None"
    );
    kv.delete(absent).await.unwrap();
}

/// Keys and values with every byte value, `0x00` and `0xFF` included, round-trip and sort
/// bytewise.
pub async fn binary_keys(kv: &dyn RawKv, prefix: &[u8]) {
    let suffixes: Vec<Vec<u8>> = vec![
        vec![0x00],
        vec![0x00, 0x00],
        vec![0x00, 0xFF],
        vec![0x01],
        vec![0x7F, 0x80],
        vec![0xFF],
        vec![0xFF, 0x00],
        vec![0xFF, 0xFF, 0xFF],
    ];
    for (i, s) in suffixes.iter().enumerate() {
        let value: Vec<u8> = (0..=255u8).rev().chain([i as u8]).collect();
        kv.put(key(prefix, s), value).await.unwrap();
    }
    for (i, s) in suffixes.iter().enumerate() {
        let value: Vec<u8> = (0..=255u8).rev().chain([i as u8]).collect();
        assert_eq!(
            kv.get(&key(prefix, s)).await.unwrap(),
            Some(value),
            "binary key {s:?}"
        );
    }
    let scanned = scan_all(kv, KeyRange::prefix(prefix), ScanOrder::Forward)
        .await
        .unwrap();
    let keys: Vec<Vec<u8>> = scanned.into_iter().map(|(k, _)| k).collect();
    let mut expected: Vec<Vec<u8>> = suffixes.iter().map(|s| key(prefix, s)).collect();
    expected.sort();
    assert_eq!(keys, expected, "binary keys must sort bytewise");
}

/// A 1 MiB value round-trips through put, get, scan and CAS.
pub async fn large_values(kv: &dyn RawKv, prefix: &[u8]) {
    let big: Vec<u8> = (0..1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let k = key(prefix, b"big");
    kv.put(k.clone(), big.clone()).await.unwrap();
    assert_eq!(
        kv.get(&k).await.unwrap().as_deref(),
        Some(big.as_slice()),
        "1 MiB get"
    );
    let scanned = kv
        .scan(KeyRange::prefix(prefix), 10, ScanOrder::Forward)
        .await
        .unwrap();
    assert_eq!(scanned.len(), 1);
    assert_eq!(scanned[0].1.len(), big.len(), "1 MiB scan");
    let mut bigger = big.clone();
    bigger.reverse();
    let out = kv
        .compare_and_swap(k.clone(), Some(big.clone()), bigger.clone())
        .await
        .unwrap();
    let out = out.own_write_decided(Some(big.clone()), &bigger);
    assert!(out.swapped, "CAS with a matching 1 MiB value must swap");
    assert_eq!(kv.get(&k).await.unwrap(), Some(bigger), "1 MiB CAS result");
}

/// batch_put, batch_get and batch_delete behave like their single-key forms.
pub async fn batch_calls(kv: &dyn RawKv, prefix: &[u8]) {
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..100u32)
        .map(|i| (key(prefix, &i.to_be_bytes()), i.to_le_bytes().to_vec()))
        .collect();
    kv.batch_put(pairs.clone()).await.unwrap();
    let mut keys: Vec<Vec<u8>> = pairs.iter().map(|(k, _)| k.clone()).collect();
    keys.push(key(prefix, b"missing"));
    let got = kv.batch_get(&keys).await.unwrap();
    assert_eq!(got.len(), keys.len(), "batch_get answers every key");
    for (i, (_, v)) in pairs.iter().enumerate() {
        assert_eq!(got[i].as_ref(), Some(v), "batch_get value {i}");
    }
    assert_eq!(got[100], None, "batch_get of a missing key");
    kv.batch_delete(keys[..50].to_vec()).await.unwrap();
    let got = kv.batch_get(&keys).await.unwrap();
    assert!(
        got[..50].iter().all(Option::is_none),
        "batch_delete removed"
    );
    assert!(
        got[50..100].iter().all(Option::is_some),
        "batch_delete kept the rest"
    );
    kv.batch_put(Vec::new()).await.unwrap();
    kv.batch_delete(Vec::new()).await.unwrap();
    assert!(kv.batch_get(&[]).await.unwrap().is_empty());
}
