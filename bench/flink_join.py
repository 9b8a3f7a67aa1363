#!/usr/bin/env python3
"""The click-query join of `photon run` as a Flink job, for `bench/ab.py --job` to run side
by side with photon on the same generated logs (issue 42's comparison with Flink).

A regular (unwindowed) inner join of every click line with the query line of its
`query_id`, both sides kept in Flink's state, exactly-once checkpoints every 2 s,
parallelism 2, 512 MB of managed memory (what a TaskManager of Flink's default size gives
RocksDB), written by Flink's filesystem sink as JSON lines (committed at each
checkpoint, so exactly once as photon's output is). State in the heap (`hashmap`) or in
RocksDB (`rocksdb`). The logs are `photon gen`'s: `queries-*.jsonl` and `clicks-*.jsonl`.

Runs in a Python that has PyFlink (`pip install apache-flink`; it needs a Java runtime):

    python3 bench/flink_join.py --logs DIR --work DIR [--state hashmap|rocksdb]

Prints one JSON line: the job's net runtime as Flink reports it (`net_s`, without the JVM's
start and the job's planning), the JVM's CPU seconds and peak RSS (read from /proc before
this process exits: the JVM is its child, and is not waited for), the rows written and the
distinct clicks among them (a click delivered twice is joined twice by a regular join;
photon joins it once)."""

import argparse, glob, json, os, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from utilization import proc_stat  # noqa: E402


def link_logs(logs, work, kind):
    """A directory holding only the `kind` logs (the filesystem source reads directories)."""
    path = os.path.join(work, "in", kind)
    os.makedirs(path)
    files = sorted(glob.glob(os.path.join(logs, f"{kind}-*.jsonl")))
    if not files:
        raise SystemExit(f"no {kind}-*.jsonl in {logs}")
    for f in files:
        os.symlink(os.path.abspath(f), os.path.join(path, os.path.basename(f)))
    return path


def count_output(path):
    rows, clicks = 0, set()
    for root, _, files in os.walk(path):
        for name in files:
            if name.startswith("."):  # in-progress or pending files: not committed
                continue
            with open(os.path.join(root, name), "rb") as f:
                for line in f:
                    rows += 1
                    clicks.add(json.loads(line)["click_id"])
    return rows, len(clicks)


def descendants_usage():
    """CPU seconds and peak RSS (MB) of this process's descendants still running (the JVM
    PyFlink started, which this process's exit would not account for)."""
    stats = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            ppid, used = proc_stat(pid)
            with open(f"/proc/{pid}/status") as f:
                hwm = next((int(l.split()[1]) // 1024 for l in f if l.startswith("VmHWM:")), 0)
            stats[int(pid)] = (ppid, used, hwm)
        except (OSError, IndexError, ValueError):
            continue
    mine, cpu, rss = {os.getpid()}, 0.0, 0
    grew = True
    while grew:
        grew = False
        for pid, (ppid, used, hwm) in stats.items():
            if ppid in mine and pid not in mine:
                mine.add(pid)
                cpu, rss, grew = cpu + used, max(rss, hwm), True
    return cpu, rss


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--logs", required=True)
    parser.add_argument("--work", required=True, help="an empty directory for Flink's files")
    parser.add_argument("--state", choices=["hashmap", "rocksdb"], default="hashmap")
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--managed-mb", type=int, default=512,
                        help="Flink's managed memory (RocksDB's caches and write buffers). "
                        "Local execution gives it 128 MB unless told; a standalone "
                        "TaskManager of Flink's default size gets about 512")
    args = parser.parse_args()

    from pyflink.table import EnvironmentSettings, TableEnvironment

    queries = link_logs(args.logs, args.work, "queries")
    clicks = link_logs(args.logs, args.work, "clicks")
    out = os.path.join(args.work, "out")
    checkpoints = os.path.join(args.work, "checkpoints")

    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    conf = env.get_config()
    for key, value in {
        "parallelism.default": str(args.parallelism),
        "execution.checkpointing.interval": "2s",
        "execution.checkpointing.mode": "EXACTLY_ONCE",
        "state.backend.type": args.state,
        "execution.checkpointing.storage": "filesystem",
        "execution.checkpointing.dir": "file://" + checkpoints,
        "table.exec.resource.default-parallelism": str(args.parallelism),
        "taskmanager.memory.managed.size": f"{args.managed_mb}m",
    }.items():
        conf.set(key, value)

    env.execute_sql(f"""
        CREATE TABLE queries (query_id STRING, event_time BIGINT, terms STRING)
        WITH ('connector' = 'filesystem', 'path' = 'file://{queries}', 'format' = 'json',
              'json.ignore-parse-errors' = 'true')""")
    env.execute_sql(f"""
        CREATE TABLE clicks (click_id STRING, query_id STRING, event_time BIGINT, ad BIGINT)
        WITH ('connector' = 'filesystem', 'path' = 'file://{clicks}', 'format' = 'json',
              'json.ignore-parse-errors' = 'true')""")
    env.execute_sql(f"""
        CREATE TABLE joined (click_id STRING, query_id STRING, click_time BIGINT, ad BIGINT,
                             query_time BIGINT, terms STRING)
        WITH ('connector' = 'filesystem', 'path' = 'file://{out}', 'format' = 'json')""")
    started = time.monotonic()
    result = env.execute_sql("""
        INSERT INTO joined
        SELECT c.click_id, c.query_id, c.event_time, c.ad, q.event_time, q.terms
        FROM clicks AS c JOIN queries AS q ON c.query_id = q.query_id""")
    job = result.get_job_client().get_job_execution_result().result()
    wall = time.monotonic() - started
    jvm_cpu_s, jvm_rss_mb = descendants_usage()
    rows, distinct = count_output(out)
    print(json.dumps({
        "jvm_cpu_s": round(jvm_cpu_s, 2),
        "jvm_max_rss_mb": jvm_rss_mb,
        "net_s": round(job.get_net_runtime() / 1000.0, 2),
        "submit_to_end_s": round(wall, 2),
        "rows": rows,
        "distinct_clicks": distinct,
        "state": args.state,
    }), flush=True)


if __name__ == "__main__":
    main()
