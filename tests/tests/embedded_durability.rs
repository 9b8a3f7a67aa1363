//! Durability and exclusivity of the embedded backend across processes.

use percolator::kv::{EmbeddedKv, KvError, RawKv};
use rand::Rng;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A child writes keys and prints each acknowledged one; it is killed with SIGKILL at a random
/// moment; after reopening, every acknowledged key is there with its value.
#[tokio::test]
async fn acknowledged_writes_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = rand::thread_rng();
    let mut total_acked = 0u64;
    // Several kill/reopen rounds on the same directory, each appending more keys.
    for round in 0..3 {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kv-crash-writer"))
            .arg(dir.path())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn kv-crash-writer");
        let stdout = child.stdout.take().unwrap();
        let kill_after = Duration::from_millis(rng.gen_range(0..550));
        // Read acks on a thread so the kill happens at a moment of the writer's choosing; the
        // random delay starts at its first acknowledgment, so a slow start (a loaded machine,
        // a journal to recover) cannot leave a round with nothing to check.
        let (first_ack, acking) = std::sync::mpsc::channel::<()>();
        let reader = std::thread::spawn(move || {
            let mut acked = Vec::new();
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(n) = line.strip_prefix("ack ") {
                    acked.push(n.parse::<u64>().expect("ack number"));
                    if acked.len() == 1 {
                        let _ = first_ack.send(());
                    }
                }
            }
            acked
        });
        // An error here means the writer ended without acknowledging anything: the assertion
        // below reports it.
        let writing = acking.recv().is_ok();
        let start = Instant::now();
        if writing {
            std::thread::sleep(kill_after);
        }
        child.kill().expect("SIGKILL the writer");
        child.wait().unwrap();
        let acked = reader.join().unwrap();
        assert!(
            !acked.is_empty(),
            "round {round}: the writer exited without acknowledging anything ({:?})",
            start.elapsed()
        );
        let kv = EmbeddedKv::open(dir.path()).expect("reopen after SIGKILL");
        for n in &acked {
            let key = format!("w/{n:012}").into_bytes();
            let got = kv.get(&key).await.unwrap();
            assert_eq!(
                got,
                Some(n.to_be_bytes().to_vec()),
                "round {round}: acknowledged key {n} lost after SIGKILL"
            );
        }
        total_acked = total_acked.max(acked.len() as u64);
        drop(kv);
    }
    assert!(total_acked > 0);
}

/// A second opener of the same directory gets a clear error, in another process and in this one.
#[tokio::test]
async fn second_opener_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_kv-crash-writer"))
        .arg(dir.path())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn kv-crash-writer");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    match EmbeddedKv::open(dir.path()) {
        Err(KvError::DirectoryInUse { path, .. }) => assert_eq!(path, dir.path()),
        other => panic!("expected DirectoryInUse while another process holds it, got {other:?}"),
    }
    child.kill().unwrap();
    child.wait().unwrap();
    drop(lines);
    let first = EmbeddedKv::open(dir.path()).expect("open once the holder died");
    let second = EmbeddedKv::open(dir.path());
    assert!(
        matches!(second, Err(KvError::DirectoryInUse { .. })),
        "a second handle in one process must be refused"
    );
    let message = second.unwrap_err().to_string();
    assert!(message.contains("already in use"), "message: {message}");
    drop(first);
    EmbeddedKv::open(dir.path()).expect("open after the handle is dropped");
}

/// Data written through one handle is there after a clean close and reopen, also with fsync.
#[tokio::test]
async fn reopen_keeps_data_with_fsync_durability() {
    use percolator::kv::{Durability, EmbeddedOptions};
    let dir = tempfile::tempdir().unwrap();
    let options = EmbeddedOptions {
        durability: Durability::Fsync,
        ..EmbeddedOptions::default()
    };
    {
        let kv = EmbeddedKv::open_with(dir.path(), options.clone()).unwrap();
        kv.put(b"a".to_vec(), b"1".to_vec()).await.unwrap();
        kv.batch_put(vec![(b"b".to_vec(), b"2".to_vec())])
            .await
            .unwrap();
        assert!(
            kv.compare_and_swap(b"c".to_vec(), None, b"3".to_vec())
                .await
                .unwrap()
                .swapped
        );
        kv.delete(b"a".to_vec()).await.unwrap();
    }
    let kv = EmbeddedKv::open_with(dir.path(), options).unwrap();
    assert_eq!(kv.get(b"a").await.unwrap(), None);
    assert_eq!(kv.get(b"b").await.unwrap(), Some(b"2".to_vec()));
    assert_eq!(kv.get(b"c").await.unwrap(), Some(b"3".to_vec()));
}
