//! How much memory this process may use, for the embedded store's default write buffer
//! ([`default_write_buffer_bytes`]): the smaller of the machine's (`MemTotal` of
//! `/proc/meminfo`) and the limit of the process's cgroup or any of its ancestors (v2
//! `memory.max`, v1 `memory.limit_in_bytes`), so that a container's limit counts, not its
//! host's. Linux only; elsewhere, or when nothing can be read, the fixed fallback applies.
//! Two small files are read once per process: no crate needed.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const MIB: u64 = 1024 * 1024;

/// The smallest default write buffer (a host or container with less than 1 GiB).
pub const MIN_DEFAULT_WRITE_BUFFER_BYTES: u64 = 64 * MIB;
/// The largest default write buffer (hosts with 16 GiB or more): beyond it the journal a
/// reopened store replays, which grows with the buffer (`EmbeddedKv::open`), would take
/// longer than a few seconds.
pub const MAX_DEFAULT_WRITE_BUFFER_BYTES: u64 = 1024 * MIB;
/// The default write buffer when the process's memory cannot be read.
pub const FALLBACK_WRITE_BUFFER_BYTES: u64 = 256 * MIB;
/// The share of the process's memory the default write buffer takes: one sixteenth.
const SHARE_DIVISOR: u64 = 16;

/// The default of [`EmbeddedOptions::write_buffer_bytes`](super::EmbeddedOptions): a
/// sixteenth of the memory this process may use ([`process_memory_bytes`]), at least 64 MiB
/// and at most 1 GiB (256 MiB when that memory cannot be read). Read once per process.
///
/// Why by the host: a short run may never flush, and a longer one flushes larger
/// memtables into fewer segments, which range scans merge and compaction rewrites; the
/// price is memory (resident memory grows towards the buffer while memtables fill) and
/// the journal a reopened store replays (`percolator::design::kv`, "Memtables").
pub fn default_write_buffer_bytes() -> u64 {
    static DEFAULT: OnceLock<u64> = OnceLock::new();
    *DEFAULT.get_or_init(|| write_buffer_for(process_memory_bytes()))
}

/// The default write buffer for a process that may use `memory` bytes (`None`: unknown).
fn write_buffer_for(memory: Option<u64>) -> u64 {
    match memory {
        Some(bytes) => (bytes / SHARE_DIVISOR).clamp(
            MIN_DEFAULT_WRITE_BUFFER_BYTES,
            MAX_DEFAULT_WRITE_BUFFER_BYTES,
        ),
        None => FALLBACK_WRITE_BUFFER_BYTES,
    }
}

/// The memory this process may use, in bytes: the machine's, or its cgroup's limit if that
/// is lower. `None` when the machine's cannot be read (not Linux).
pub fn process_memory_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    memory_bytes_in(&meminfo, &own, Path::new("/sys/fs/cgroup"))
}

/// [`process_memory_bytes`] from a `/proc/meminfo` text, a `/proc/self/cgroup` text and the
/// cgroup file systems' mount point.
fn memory_bytes_in(meminfo: &str, own_cgroups: &str, root: &Path) -> Option<u64> {
    let machine = meminfo_total(meminfo)?;
    let limit = cgroup_limit_files(own_cgroups, root)
        .iter()
        .filter_map(|file| std::fs::read_to_string(file).ok())
        .filter_map(|text| cgroup_limit(&text))
        .min();
    Some(limit.map_or(machine, |l| l.min(machine)))
}

/// `MemTotal` of a `/proc/meminfo` text, in bytes.
fn meminfo_total(text: &str) -> Option<u64> {
    let rest = text.lines().find_map(|l| l.strip_prefix("MemTotal:"))?;
    let mut words = rest.split_whitespace();
    let number: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => number.checked_mul(1024),
        None => Some(number),
        Some(_) => None,
    }
}

/// A cgroup limit file's value in bytes; `None` for no limit (`max`) or an unreadable text.
/// (cgroup v1 writes "no limit" as a number near 2^63, which the machine's memory caps.)
fn cgroup_limit(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// The limit files that bound a process whose `/proc/self/cgroup` reads `own`: for its
/// cgroup v2 path and its v1 memory controller's path, the file of that cgroup and of every
/// ancestor (a limit set on a parent bounds its children), under `root` (v1's memory
/// controller mounted at `root/memory`, as systemd and Docker mount it; a controller
/// mounted elsewhere is not found, and the machine's memory applies). A path with `..`
/// (a cgroup outside this cgroup namespace) is skipped: its files are not under `root`.
fn cgroup_limit_files(own: &str, root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for line in own.lines() {
        // `hierarchy-id:controllers:path`; the path may itself hold colons.
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let (base, file) = if id == "0" && controllers.is_empty() {
            (root.to_path_buf(), "memory.max")
        } else if controllers.split(',').any(|c| c == "memory") {
            (root.join("memory"), "memory.limit_in_bytes")
        } else {
            continue;
        };
        if path.split('/').any(|p| p == "..") {
            continue;
        }
        let mut dir = base.clone();
        let mut chain = vec![base.join(file)];
        for part in path.split('/').filter(|p| !p.is_empty()) {
            dir.push(part);
            chain.push(dir.join(file));
        }
        files.extend(chain);
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_a_sixteenth_of_memory_within_its_bounds() {
        const GIB: u64 = 1024 * MIB;
        assert_eq!(write_buffer_for(Some(24 * GIB)), GIB);
        assert_eq!(write_buffer_for(Some(16 * GIB)), GIB);
        assert_eq!(write_buffer_for(Some(8 * GIB)), 512 * MIB);
        assert_eq!(write_buffer_for(Some(6 * GIB)), 384 * MIB);
        assert_eq!(write_buffer_for(Some(4 * GIB)), 256 * MIB);
        assert_eq!(write_buffer_for(Some(0)), 64 * MIB);
        assert_eq!(write_buffer_for(Some(512 * MIB)), 64 * MIB);
        assert_eq!(write_buffer_for(None), FALLBACK_WRITE_BUFFER_BYTES);
        let here = default_write_buffer_bytes();
        assert!(
            (MIN_DEFAULT_WRITE_BUFFER_BYTES..=MAX_DEFAULT_WRITE_BUFFER_BYTES).contains(&here),
            "{here}"
        );
        if cfg!(target_os = "linux") {
            assert!(process_memory_bytes().is_some_and(|m| m > 0));
        }
    }

    #[test]
    fn meminfo_and_limits_are_read_in_bytes() {
        let meminfo = "MemTotal:       24684092 kB\nMemFree:         1234 kB\n";
        assert_eq!(meminfo_total(meminfo), Some(24_684_092 * 1024));
        assert_eq!(meminfo_total("MemFree: 1 kB\n"), None);
        assert_eq!(meminfo_total("MemTotal: lots kB\n"), None);
        assert_eq!(meminfo_total("MemTotal: 5 MB\n"), None);
        assert_eq!(cgroup_limit("2147483648\n"), Some(2 << 30));
        assert_eq!(cgroup_limit("max\n"), None);
        assert_eq!(cgroup_limit(""), None);
    }

    /// The limit files of a `/proc/self/cgroup` text under `/cg`, as strings.
    fn limit_files(own: &str) -> Vec<String> {
        cgroup_limit_files(own, Path::new("/cg"))
            .iter()
            .map(|p| p.display().to_string())
            .collect()
    }

    #[test]
    fn limit_files_cover_the_cgroup_and_its_ancestors() {
        assert_eq!(
            limit_files("0::/kubepods/pod1/c:1\n"),
            [
                "/cg/memory.max",
                "/cg/kubepods/memory.max",
                "/cg/kubepods/pod1/memory.max",
                "/cg/kubepods/pod1/c:1/memory.max",
            ]
        );
        assert_eq!(
            limit_files("9:pids:/\n4:memory:/docker/abc\n1:cpu,cpuacct:/\n"),
            [
                "/cg/memory/memory.limit_in_bytes",
                "/cg/memory/docker/memory.limit_in_bytes",
                "/cg/memory/docker/abc/memory.limit_in_bytes",
            ]
        );
        assert!(limit_files("garbage\n\n").is_empty());
        // Outside the namespace's root: nothing under `root` is ours.
        assert!(limit_files("0::/../other\n").is_empty());
        // Inside a cgroup namespace (a container's own v2 cgroup is the root).
        assert_eq!(limit_files("0::/\n"), ["/cg/memory.max"]);
    }

    /// The smallest of the machine's memory and every limit found wins; "max", the v1
    /// "unlimited" number and missing files do not count.
    #[test]
    fn the_tightest_limit_wins() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let meminfo = "MemTotal: 8388608 kB\n"; // 8 GiB
        let write = |rel: &str, text: &str| {
            let path = root.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        // No limit files at all: the machine's.
        assert_eq!(memory_bytes_in(meminfo, "0::/a/b\n", root), Some(8 << 30));
        write("memory.max", "max\n");
        write("a/memory.max", "2147483648\n");
        write("a/b/memory.max", "max\n");
        assert_eq!(memory_bytes_in(meminfo, "0::/a/b\n", root), Some(2 << 30));
        // A v1 hierarchy beside it: its "unlimited" loses to the machine, a lower limit wins.
        write("memory/memory.limit_in_bytes", "9223372036854771712\n");
        write("memory/x/memory.limit_in_bytes", "1073741824\n");
        let both = "4:memory:/x\n0::/a/b\n";
        assert_eq!(memory_bytes_in(meminfo, both, root), Some(1 << 30));
        assert_eq!(
            memory_bytes_in(meminfo, "4:memory:/\n", root),
            Some(8 << 30)
        );
        // Without the machine's memory there is no answer.
        assert_eq!(memory_bytes_in("", both, root), None);
    }
}
