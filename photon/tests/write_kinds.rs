//! The binaries' TiKV writes, key by key: a photon run (`gen`, `load`, two `work
//! --until-drained` workers, `verify`) and its oracle service on an in-process minitikv
//! that records which kinds of write each key received, with one write in fifty applied and
//! then answered with a region error (a leader change after apply: the client repeats
//! writes that already applied, CASes included).
//!
//! - No key receives both a plain write and a latched one (atomic-mode write or CAS): TiKV
//!   does not serialise the two (tikv/tikv#10594), and the binaries route writes by
//!   `AtomicKeys::PercolatorLayout`, derived from the key codec.
//! - The kinds follow the codec's spaces: CASed and atomic keys are heads, meta records and
//!   write-once records (GC rewrites a record by CAS), plain keys are versions, data and notify
//!   keys.
//! - The join stays exact (`photon verify`) although CASes were repeated after they applied.

mod common;
use percolator::codec::{decode_part, Space};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio::process::Command;

const PHOTON: &str = env!("CARGO_BIN_EXE_photon");
/// Hang guard (not a timing assertion).
const PATIENCE: Duration = Duration::from_secs(240);

fn space_of(key: &[u8]) -> Option<Space> {
    let (_, rest) = decode_part(key).ok()?;
    rest.first().copied().and_then(Space::from_tag)
}

async fn run(args: &[&str], store: &[String], extra: &[&Path]) {
    let mut cmd = Command::new(PHOTON);
    cmd.args(args).args(store).args(extra);
    let out = tokio::time::timeout(PATIENCE, cmd.stdin(Stdio::null()).output())
        .await
        .expect("photon hung")
        .expect("photon");
    assert!(
        out.status.success(),
        "photon {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_key_gets_both_plain_and_atomic_writes_and_repeated_cases_stay_exact() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = minitikv::start(minitikv::ServerConfig {
        record_writes: true,
        faults: minitikv::Faults {
            seed: 26,
            applied_region_error: 0.02,
            ..minitikv::Faults::none()
        },
        ..minitikv::ServerConfig::in_memory()
    })
    .await
    .expect("minitikv");
    let (oracle, store) = common::oracle_on(&server).await;
    let logs = dir.path().join("logs");
    run(
        &["gen", "--queries", "300", "--seed", "26", "--out"],
        &[],
        &[&logs],
    )
    .await;
    let rejects = dir.path().join("rejects.txt");
    run(
        &["load", "--namespace", "wk"],
        &store,
        &[Path::new("--rejects"), &rejects, &logs],
    )
    .await;
    let workers: Vec<_> = ["A", "B"]
        .iter()
        .map(|pipeline| {
            let mut cmd = Command::new(PHOTON);
            cmd.arg("work")
                .args(&store)
                .args(["--namespace", "wk", "--pipeline", pipeline])
                .args(["--until-drained", "--input"])
                .arg(&logs)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true);
            cmd.status()
        })
        .collect();
    for status in futures::future::join_all(workers.into_iter().map(|w| async {
        tokio::time::timeout(PATIENCE, w)
            .await
            .expect("photon work --until-drained never exited")
            .expect("photon work")
    }))
    .await
    {
        assert!(status.success(), "photon work: {status}");
    }
    run(&["verify", "--namespace", "wk"], &store, &[&logs]).await;

    let kinds = server.write_kinds();
    let mixed: Vec<_> = kinds.iter().filter(|(_, k)| k.mixed()).collect();
    assert!(
        mixed.is_empty(),
        "keys with plain and latched writes: {mixed:?}"
    );
    let (mut latched, mut plain) = (0, 0);
    for (key, k) in &kinds {
        let space = space_of(key);
        if k.cas > 0 || k.atomic > 0 {
            latched += 1;
            assert!(
                matches!(space, Some(Space::Head | Space::Meta | Space::Once)),
                "latched writes of {key:?} ({space:?}): {k:?}"
            );
        } else {
            plain += 1;
            assert!(
                matches!(space, Some(Space::Version | Space::Data | Space::Notify)),
                "plain writes of {key:?} ({space:?}): {k:?}"
            );
        }
    }
    assert!(
        latched > 0 && plain > 0,
        "{latched} latched, {plain} plain keys"
    );
    assert!(server.fault_counts().applied_region_error > 0);
    oracle.shutdown().await;
    server.shutdown().await;
}
