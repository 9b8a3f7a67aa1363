//! Crash-test child: opens an embedded store at the directory given as first argument and
//! writes keys `w/<n>` forever (alternating put, batch put and CAS), printing `ack <n>` on
//! stdout after each write is acknowledged. The parent kills it with SIGKILL at a random
//! moment and checks that every acknowledged key survived.

use percolator::kv::{EmbeddedKv, RawKv};
use std::io::Write;

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let dir = std::env::args()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("usage: kv-crash-writer <data-dir>"))?;
    let kv = EmbeddedKv::open(&dir)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    writeln!(out, "ready")?;
    out.flush()?;
    let key = |n: u64| format!("w/{n:012}").into_bytes();
    let mut n: u64 = 0;
    loop {
        match n % 3 {
            0 => kv.put(key(n), n.to_be_bytes().to_vec()).await?,
            1 => {
                kv.batch_put(vec![(key(n), n.to_be_bytes().to_vec())])
                    .await?
            }
            _ => {
                let out = kv
                    .compare_and_swap(key(n), None, n.to_be_bytes().to_vec())
                    .await?;
                anyhow::ensure!(out.swapped, "CAS on fresh key {n} did not swap");
            }
        }
        writeln!(out, "ack {n}")?;
        out.flush()?;
        n += 1;
    }
}
