#!/usr/bin/env python3
"""Runs `photon demo` for several builds (or environments) alternately, side by side on one
machine, and reports each run and each variant's spread: joined clicks/s, us of CPU per joined
click (the demo process's user + system time), peak RSS, duplicates and lost; through TiKV also
the RPCs per joined click by method, counted by minitikv, and minitikv's own CPU (issue 42's
benchmarks). The RPCs and minitikv's CPU cover the whole demo: its load and join, and also its
verification at the end (paged scans of the output) and the oracle's heartbeats; the demo's
own `store_calls_per_joined` counts only load and join. The variants run with the caller's
environment minus every PERCOLATOR_* and MINITIKV_* variable: each says what it sets.

Usage:
  python3 bench/ab.py [--clicks 200000] [--rounds 3] [--tikv single|even1024|spread] VARIANT...

VARIANT is `LABEL=PHOTON_BINARY` or `LABEL=PHOTON_BINARY,ENV=VALUE,...` (the variables are
set for that variant's demo; `clicks=N` instead gives that variant its own --clicks, e.g. to
compare the rates of 100,000 and 1,000,000 clicks). With --job QUERIES the runs are whole jobs
instead: `photon gen` once, then `photon run --until-drained --pipelines 1` of the same logs on
a fresh embedded store per run (job seconds, CPU, RSS; then `photon verify`, untimed, for
duplicates and lost). In --job mode a variant `LABEL=flink:hashmap` (or `flink:rocksdb`) runs
the same join as a Flink job instead (`bench/flink_join.py`: a regular join, exactly-once
checkpoints every 2 s, parallelism 2, state in the heap or in RocksDB) with the Python given
by --flink-python, which must have PyFlink (`pip install apache-flink`, and a Java runtime):
its job seconds and CPU are the whole process's (the JVM's start included), and Flink's own
net runtime is printed beside them. With --tikv, each run starts a fresh
`minitikv serve` and `oracle serve` from --minitikv and --oracle (default: beside the first
variant's binary) and stops them after. The layouts: `single`, one region at the start that
splits at 8 MiB as data grows; `even1024`, `--regions 1024 --split-prefix photon`, where
every key of photon's namespace starts in the first region, which then splits at 8 MiB like
`single` (the splits divide the two bytes after "photon" evenly, and the namespace's keys all
start "photon\x00\x01"); `spread`, one region split at 128 KiB, so that regions follow the
data (about 800 after 60,000 clicks), as a large TiKV cluster's do. A
`--minitikv-arg=--region-split-size=N` replaces the layout's split size.

Variants run in turn within each round (A B A B ...), so a machine's drift touches all of
them alike; compare only variants of one invocation. Prints one line per run, then per
variant the min / median / max; --json prints every run as one JSON line instead. Only the
standard library."""

import argparse, json, os, shutil, socket, statistics, subprocess, sys, tempfile
import time
import urllib.request


def parse_variant(text):
    label, _, rest = text.partition("=")
    if not rest:
        sys.exit(f"variant {text!r}: expected LABEL=BINARY[,ENV=VALUE...]")
    if rest.startswith("flink:"):
        state = rest[len("flink:"):]
        if state not in ("hashmap", "rocksdb"):
            sys.exit(f"variant {text!r}: flink:hashmap or flink:rocksdb")
        return {"label": label, "flink": state, "env": {}, "clicks": None}
    binary, *assignments = rest.split(",")
    env = {}
    clicks_of = None
    for a in assignments:
        name, eq, value = a.partition("=")
        if not eq:
            sys.exit(f"variant {text!r}: {a!r} is not ENV=VALUE")
        if name == "clicks":
            clicks = value.replace("_", "")
            if not clicks.isdigit():
                sys.exit(f"variant {text!r}: clicks={value!r} is not a number")
            clicks_of = int(clicks)
        else:
            env[name] = value
    if not os.access(binary, os.X_OK):
        sys.exit(f"variant {label}: {binary} is not an executable")
    return {"label": label, "binary": binary, "env": env, "clicks": clicks_of}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, process, what, secs=30):
    deadline = time.time() + secs
    while time.time() < deadline:
        if process.poll() is not None:
            sys.exit(f"{what} exited with {process.returncode} before listening")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"{what} did not listen on {port} within {secs} s")


def rpc_counts(metrics_port):
    """minitikv's requests by method (`percolator_minitikv_requests{method=...}`)."""
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    counts = {}
    with urllib.request.urlopen(url, timeout=10) as reply:
        for line in reply.read().decode().splitlines():
            if line.startswith("percolator_minitikv_requests"):
                name, _, value = line.rpartition(" ")
                method = name.partition('method="')[2].partition('"')[0] or name
                counts[method] = counts.get(method, 0.0) + float(value)
    return counts


def regions(metrics_port):
    """minitikv's region count now (`percolator_minitikv_regions`), if it exports one."""
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as reply:
        for line in reply.read().decode().splitlines():
            if line.startswith("percolator_minitikv_regions"):
                return int(float(line.rpartition(" ")[2]))
    return None


class Tikv:
    """A fresh minitikv and oracle for one run."""

    def __init__(self, args, work):
        self.port, self.metrics, self.oracle_port = free_port(), free_port(), free_port()
        layout = {
            "single": ["--single-region"],
            # Even splits of the two bytes after "photon": every key of the namespace (which
            # starts "photon\x00\x01") lands in the first region, which then splits by size.
            "even1024": ["--regions", "1024", "--split-prefix", "photon"],
            # Regions follow the data: one at the start, split at 128 KiB (60,000 clicks end
            # in about 800 regions over photon's keys).
            "spread": ["--single-region", "--region-split-size", "131072"],
        }[args.tikv]
        if any(a.startswith("--region-split-size") for a in args.minitikv_arg):
            # The caller's split size replaces the layout's (minitikv takes one).
            layout = [a for a in layout if a not in ("--region-split-size", "131072")]
        self.server = self.oracle = None
        try:
            log = open(os.path.join(work, "minitikv.log"), "w")
            self.server = subprocess.Popen(
                [args.minitikv, "serve", "--data", os.path.join(work, "minitikv"),
                 "--listen", f"127.0.0.1:{self.port}",
                 "--metrics-addr", f"127.0.0.1:{self.metrics}", *layout, *args.minitikv_arg],
                stdout=log, stderr=subprocess.STDOUT)
            wait_port(self.port, self.server, "minitikv")
            wait_port(self.metrics, self.server, "minitikv's metrics")
            log = open(os.path.join(work, "oracle.log"), "w")
            self.oracle = subprocess.Popen(
                [args.oracle, "serve", "--store", f"tikv:127.0.0.1:{self.port}",
                 "--listen", f"127.0.0.1:{self.oracle_port}"],
                stdout=log, stderr=subprocess.STDOUT)
            wait_port(self.oracle_port, self.oracle, "oracle")
        except BaseException:
            # A start that failed (or timed out) stops what did start.
            self.stop()
            raise

    def demo_args(self):
        return ["--store", f"tikv:127.0.0.1:{self.port}",
                "--oracle", f"127.0.0.1:{self.oracle_port}"]

    def server_cpu_s(self):
        """minitikv's CPU since it started for this run (user + system), from /proc."""
        with open(f"/proc/{self.server.pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        for p in (self.oracle, self.server):
            if p is None or p.poll() is not None:
                continue
            p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def variant_env(variant):
    """The caller's environment without the project's own settings (an exported
    PERCOLATOR_STORE or MINITIKV_* would redirect or reshape the runs), plus what `variant`
    sets."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PERCOLATOR_", "MINITIKV_"))}
    env.update(variant["env"])
    return env


def run_child(argv, env, work, name, label):
    """Runs `argv` in `work` to its end, its output in `work/NAME.out` and `.err`; returns
    its own rusage (not that of other children: minitikv and the oracle are ones too), its
    wall seconds and its stdout. Exits with the tail of its stderr if it failed; a child
    still running when this is interrupted is killed."""
    out_path, err_path = os.path.join(work, f"{name}.out"), os.path.join(work, f"{name}.err")
    child = None
    try:
        with open(out_path, "w") as out, open(err_path, "w") as err:
            started = time.monotonic()
            child = subprocess.Popen(argv, env=env, cwd=work, stdout=out, stderr=err)
            _, status, usage = os.wait4(child.pid, 0)
            child.returncode = os.waitstatus_to_exitcode(status)
            seconds = time.monotonic() - started
    finally:
        if child is not None and child.returncode is None:
            child.kill()
            child.wait()
    if child.returncode != 0:
        with open(err_path) as err:
            tail = "".join(err.readlines()[-5:])
        sys.exit(f"{label}: {os.path.basename(argv[0])} {name} exited with {child.returncode}:\n{tail}")
    with open(out_path) as out:
        return usage, seconds, out.read()


def last_json(text, what):
    """The last JSON object line of `text` (a `--json` summary)."""
    lines = [l for l in text.splitlines() if l.startswith("{")]
    if not lines:
        sys.exit(f"{what} printed no JSON summary")
    return json.loads(lines[-1])


def run_once(args, variant):
    """One demo run of `variant`: its JSON summary plus CPU, RSS and RPCs."""
    work = tempfile.mkdtemp(prefix="ab-")
    tikv = None
    try:
        extra = []
        before = {}
        if args.tikv:
            tikv = Tikv(args, work)
            extra = tikv.demo_args()
            before = rpc_counts(tikv.metrics)
        clicks = variant["clicks"] if variant["clicks"] is not None else args.clicks
        usage, _, out = run_child(
            [variant["binary"], "demo", "--clicks", str(clicks), "--json", *extra],
            variant_env(variant), work, "demo", variant["label"])
        summary = last_json(out, f"{variant['label']}: the demo")
        cpu = usage.ru_utime + usage.ru_stime
        joined = summary.get("joined") or 0
        run = {
            "label": variant["label"],
            "clicks": clicks,
            "per_sec": summary.get("per_sec"),
            "joined": joined,
            "cpu_s": round(cpu, 2),
            "us_per_joined": round(1e6 * cpu / joined, 1) if joined else None,
            "max_rss_mb": usage.ru_maxrss // 1024,  # KiB on Linux
            "duplicates": summary.get("duplicates"),
            "lost": summary.get("lost"),
            "wasted_ratio": summary.get("wasted_ratio"),
            # Arrival (the later of click and query) to the joined commit.
            "p50_ms": summary.get("p50_ms"),
            "p99_ms": summary.get("p99_ms"),
        }
        if tikv:
            after = rpc_counts(tikv.metrics)
            by_method = {m: (after[m] - before.get(m, 0.0)) / joined
                         for m in after if joined and after[m] > before.get(m, 0.0)}
            run["rpcs_per_joined"] = round(sum(by_method.values()), 2)
            run["minitikv_cpu_s"] = round(tikv.server_cpu_s(), 2)
            run["regions"] = regions(tikv.metrics)
            run["rpcs_by_method"] = {m: round(v, 3) for m, v in sorted(by_method.items())}
        return run
    finally:
        if tikv:
            tikv.stop()
        shutil.rmtree(work, ignore_errors=True)


def run_job(args, variant, logs):
    """One `photon run --until-drained` of `variant` over the generated `logs` on a fresh
    embedded store: the whole job's wall time, CPU and RSS (`--job`)."""
    work = tempfile.mkdtemp(prefix="ab-job-")
    try:
        env = variant_env(variant)
        store = f"embedded:{os.path.join(work, 'store')}"
        usage, seconds, _ = run_child(
            [variant["binary"], "run", "--store", store, "--input", logs, "--until-drained",
             "--pipelines", "1"], env, work, "run", variant["label"])
        # Exactly once, checked after the timed job (not part of its time). Its exit status
        # says whether the report is OK; the report itself is what is kept.
        verify = subprocess.run(
            [variant["binary"], "verify", "--store", store, "--json", logs],
            env=env, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        report = last_json(verify.stdout, f"{variant['label']}: photon verify")
        return {
            "label": variant["label"],
            "job_s": round(seconds, 2),
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
            "max_rss_mb": usage.ru_maxrss // 1024,
            "joined": report.get("joined"),
            "duplicates": report.get("duplicates"),
            "lost": report.get("lost"),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_flink_job(args, variant, logs):
    """One Flink job of `variant` over the generated `logs` (`bench/flink_join.py`): the
    whole process's wall time, CPU and RSS, and what the job wrote."""
    work = tempfile.mkdtemp(prefix="ab-flink-")
    try:
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "flink_join.py")
        usage, seconds, out = run_child(
            [args.flink_python, script, "--logs", logs, "--work", work,
             "--state", variant["flink"]],
            variant_env(variant), work, "flink", variant["label"])
        report = last_json(out, f"{variant['label']}: the Flink job")
        return {
            "label": variant["label"],
            "job_s": round(seconds, 2),
            # The Python driver's own CPU and the JVM's (the driver's child, never waited
            # for, so not in the driver's rusage), and the larger of their peak RSS.
            "cpu_s": round(usage.ru_utime + usage.ru_stime + report["jvm_cpu_s"], 2),
            "max_rss_mb": max(usage.ru_maxrss // 1024, report["jvm_max_rss_mb"]),
            "flink_net_s": report["net_s"],
            "rows": report["rows"],
            "distinct_clicks": report["distinct_clicks"],
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def line(run):
    per_sec = f"{run['per_sec']:>8,.0f}" if run["per_sec"] is not None else "       -"
    text = (f"{run['label']:>12}  {per_sec} joined/s  "
            f"{run['us_per_joined'] or '-':>6} us/joined  {run['max_rss_mb']:>5} MB  "
            f"p50 {run['p50_ms']} p99 {run['p99_ms']} ms  "
            f"dup {run['duplicates']} lost {run['lost']}")
    if "rpcs_per_joined" in run:
        text += (f"  {run['rpcs_per_joined']} RPCs/joined"
                 f"  minitikv {run['minitikv_cpu_s']} CPU-s, {run['regions']} regions")
    return text


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("variants", nargs="+", metavar="LABEL=BINARY[,ENV=VALUE...]")
    parser.add_argument("--clicks", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tikv", choices=["single", "even1024", "spread"])
    parser.add_argument("--minitikv", help="minitikv binary (default: beside the first photon)")
    parser.add_argument("--oracle", help="oracle binary (default: beside the first photon)")
    parser.add_argument("--minitikv-arg", action="append", default=[], metavar="ARG",
                        help="one more argument of `minitikv serve` (repeatable), e.g. "
                        "--minitikv-arg=--region-split-size=131072")
    parser.add_argument("--job", type=int, metavar="QUERIES",
                        help="instead of the demo: `photon gen --queries QUERIES` once (with "
                        "the first variant's binary), then per run `photon run --until-drained "
                        "--pipelines 1` of those logs on a fresh embedded store (the issue's "
                        "Nexmark shape: --job 1333333 is about 2,000,000 events)")
    parser.add_argument("--flink-python", default="python3",
                        help="the Python with PyFlink that runs --job's flink:STATE variants")
    parser.add_argument("--json", action="store_true", help="one JSON line per run")
    args = parser.parse_args()
    variants = [parse_variant(v) for v in args.variants]
    labels = [v["label"] for v in variants]
    if len(set(labels)) != len(labels):
        sys.exit(f"variant labels must differ: {labels}")
    if args.minitikv_arg and not args.tikv:
        sys.exit("--minitikv-arg needs --tikv")
    flink = [v["label"] for v in variants if "flink" in v]
    if flink and args.job is None:
        sys.exit(f"{flink}: Flink variants run in --job mode only")
    if len(flink) == len(variants):
        sys.exit("--job needs a photon variant too (its `photon gen` makes the logs)")
    if args.job is not None:
        if args.tikv:
            sys.exit("--job runs on the embedded store: no --tikv")
        return jobs(args, variants)
    beside = os.path.dirname(os.path.abspath(variants[0]["binary"]))
    args.minitikv = args.minitikv or os.path.join(beside, "minitikv")
    args.oracle = args.oracle or os.path.join(beside, "oracle")
    if args.tikv:
        for tool in (args.minitikv, args.oracle):
            if not os.access(tool, os.X_OK):
                sys.exit(f"--tikv needs {tool} (cargo build --release -p percolator-minitikv "
                         "-p percolator-oracle-server, or --minitikv / --oracle)")
    runs = []
    for _ in range(args.rounds):
        for variant in variants:
            run = run_once(args, variant)
            runs.append(run)
            print(json.dumps(run) if args.json else line(run), flush=True)
    if args.json:
        return
    print(f"\n{args.clicks:,} clicks unless a variant says, {args.rounds} rounds alternated"
          + (f", TiKV ({args.tikv})" if args.tikv else ", embedded") + ": min / median / max")
    for variant in variants:
        mine = [r for r in runs if r["label"] == variant["label"]]
        for key, unit in (("per_sec", "joined/s"), ("us_per_joined", "us/joined")):
            values = [r[key] for r in mine if r[key] is not None]
            if values:
                print(f"{variant['label']:>12}  {unit:>10}  {min(values):>10,.1f} "
                      f"{statistics.median(values):>10,.1f} {max(values):>10,.1f}")


def jobs(args, variants):
    """`--job`: the same generated logs for every variant and round."""
    work = tempfile.mkdtemp(prefix="ab-logs-")
    try:
        logs = os.path.join(work, "logs")
        gen = subprocess.run(
            [next(v["binary"] for v in variants if "binary" in v), "gen", "--out", logs,
             "--queries", str(args.job)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if gen.returncode != 0:
            sys.exit(f"photon gen exited with {gen.returncode}:\n{gen.stderr[-2000:]}")
        print(gen.stdout.strip().splitlines()[-1] if gen.stdout.strip() else "generated",
              flush=True)
        # The logs' 200 MB of dirty pages would otherwise be written back during the first
        # run, which then took 3-15 s longer than the rest (seen on 11-29).
        os.sync()
        runs = []
        for _ in range(args.rounds):
            for variant in variants:
                if "flink" in variant:
                    run = run_flink_job(args, variant, logs)
                    outcome = (f"Flink net {run['flink_net_s']} s  rows {run['rows']} "
                               f"distinct clicks {run['distinct_clicks']}")
                else:
                    run = run_job(args, variant, logs)
                    outcome = (f"joined {run['joined']} dup {run['duplicates']} "
                               f"lost {run['lost']}")
                runs.append(run)
                print(json.dumps(run) if args.json else
                      f"{run['label']:>12}  job {run['job_s']:>7} s  CPU {run['cpu_s']:>7} s  "
                      f"{run['max_rss_mb']:>5} MB  {outcome}", flush=True)
        if not args.json:
            print(f"\nphoton run of {args.job:,} generated queries' logs, {args.rounds} rounds "
                  "alternated: min / median / max")
            for variant in variants:
                mine = [r for r in runs if r["label"] == variant["label"]]
                for key in ("job_s", "cpu_s", "flink_net_s"):
                    values = [r[key] for r in mine if key in r]
                    if not values:
                        continue
                    print(f"{variant['label']:>12}  {key:>10}  {min(values):>10,.2f} "
                          f"{statistics.median(values):>10,.2f} {max(values):>10,.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
