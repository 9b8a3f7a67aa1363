#!/usr/bin/env python3
"""A worker in its own process beside `photon load --follow` in another, through minitikv:
the latency from a loader's commit to the worker's run at a fixed offered rate, alternated
between variants (issue 42: separate processes drain without scanning bursts).

Each run starts a fresh `minitikv serve --single-region` and `oracle serve`, then `photon work`
(with `--metrics-addr`) and `photon load --follow LIVE`, and appends the lines of logs made
once by `photon gen` to LIVE's files in event-time order at --rate lines/s. Once every line is
appended, `photon verify --wait` waits for the join; then the worker's metrics are read: the
histogram `percolator_observer_commit_to_run_seconds` of the click observer (the share of runs
within each bucket bound, and the p50 / p99 bucket bounds), notify keys scanned and hinted per
click run, the coefficient of variation of click runs per 250 ms while the lines are fed
(bursts), minitikv's RPCs per click run (of every process, the verification's included) and
the processes' CPU.

Usage:
  python3 bench/follow.py [--queries 20000] [--rate 2000] [--rounds 2] VARIANT...

VARIANT is `LABEL=PHOTON_BINARY[,load:ARG][,work:ARG][,ENV=VALUE]...`: extra arguments for
`photon load` or `photon work`, and environment variables for both, e.g.
`relay=target/release/photon scan=target/release/photon,load:--no-hint-relay`. minitikv and
oracle are taken from --minitikv and --oracle (default: beside the first variant's binary).
Variants run in turn within each round. Only the standard library."""

import argparse, json, os, re, shutil, signal, statistics, subprocess, sys, tempfile, threading, time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ab import Tikv, free_port, rpc_counts, wait_port  # noqa: E402


def parse_variant(text):
    label, _, rest = text.partition("=")
    binary, *items = rest.split(",")
    if not binary or not os.access(binary, os.X_OK):
        sys.exit(f"variant {text!r}: expected LABEL=PHOTON_BINARY[,load:ARG][,work:ARG][,ENV=V]")
    variant = {"label": label, "binary": binary, "load": [], "work": [], "env": {}}
    for item in items:
        if item.startswith("load:"):
            variant["load"].append(item[5:])
        elif item.startswith("work:"):
            variant["work"].append(item[5:])
        elif "=" in item:
            name, _, value = item.partition("=")
            variant["env"][name] = value
        else:
            sys.exit(f"variant {text!r}: {item!r} is neither load:ARG, work:ARG nor ENV=VALUE")
    return variant


def event_lines(logs):
    """Every line of the logs as (event time, file name, line), in event-time order (a line
    without one keeps the time of the line before it in its file)."""
    lines = []
    for name in sorted(os.listdir(logs)):
        if not name.endswith(".jsonl"):
            continue
        at = 0
        with open(os.path.join(logs, name), "rb") as f:
            for line in f:
                m = re.search(rb'"event_time":\s*(\d+)', line)
                if m:
                    at = int(m.group(1))
                lines.append((at, name, line))
    lines.sort(key=lambda x: x[0])
    return lines


def feed(lines, live, rate):
    """Appends `lines` to the files of `live` at `rate` lines/s; returns the seconds taken."""
    files = {}
    start = time.time()
    done = 0
    while done < len(lines):
        due = min(len(lines), int((time.time() - start) * rate) + 1)
        touched = set()
        for _, name, line in lines[done:due]:
            if name not in files:
                files[name] = open(os.path.join(live, name), "ab")
            files[name].write(line)
            touched.add(name)
        for name in touched:
            files[name].flush()
        done = due
        time.sleep(0.01)
    for f in files.values():
        f.close()
    return time.time() - start


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        return reply.read().decode().splitlines()


def click_latency(lines):
    """Cumulative counts by bucket bound (s) of the click observer's commit-to-run
    histogram, summed over its series."""
    buckets = {}
    for line in lines:
        if not line.startswith("percolator_observer_commit_to_run_seconds_bucket"):
            continue
        labels = line.partition("{")[2].partition("}")[0]
        if "click" not in labels:
            continue
        bound = re.search(r'le="([^"]+)"', labels).group(1)
        value = float(line.rpartition(" ")[2])
        key = float("inf") if bound == "+Inf" else float(bound)
        buckets[key] = buckets.get(key, 0.0) + value
    return sorted(buckets.items())


def counter(lines, name):
    total = 0.0
    for line in lines:
        if line.startswith(name) and not line.startswith(name + "_created"):
            total += float(line.rpartition(" ")[2])
    return total


def click_runs(port):
    """The click observer's runs so far (`percolator_observer_runs_total`)."""
    total = 0.0
    for line in scrape(port):
        if line.startswith("percolator_observer_runs_total") and "click" in line:
            total += float(line.rpartition(" ")[2])
    return total


class Sampler(threading.Thread):
    """Click runs per 250 ms while the lines are fed: bursts show as a high coefficient of
    variation of these counts."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port, self.counts, self.stop = port, [], threading.Event()

    def run(self):
        last = click_runs(self.port)
        next_at = time.time() + 0.25
        while not self.stop.is_set():
            time.sleep(max(0.0, next_at - time.time()))
            next_at += 0.25
            now = click_runs(self.port)
            self.counts.append(now - last)
            last = now

    def cv(self):
        # The first and last second are the feed's ramp: left out.
        counts = self.counts[4:-4]
        if len(counts) < 2 or statistics.mean(counts) == 0:
            return None
        return round(statistics.pstdev(counts) / statistics.mean(counts), 2)


def process_cpu_s(pid):
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_once(args, variant, logs, lines):
    work = tempfile.mkdtemp(prefix="follow-")
    tikv = worker = loader = None
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PERCOLATOR_", "MINITIKV_"))}
    env.update(variant["env"])
    try:
        tikv = Tikv(args, work)
        store = tikv.demo_args()
        rpcs_before = rpc_counts(tikv.metrics)
        metrics = free_port()
        worker = subprocess.Popen(
            [variant["binary"], "work", *store, "--metrics-addr", f"127.0.0.1:{metrics}",
             "--gc-every-secs", "0", *variant["work"]],
            env=env, stdout=open(os.path.join(work, "work.out"), "w"),
            stderr=open(os.path.join(work, "work.err"), "w"))
        wait_port(metrics, worker, "photon work's metrics")
        live = os.path.join(work, "live")
        os.mkdir(live)
        loader = subprocess.Popen(
            [variant["binary"], "load", live, "--follow", *store,
             "--rejects", os.path.join(work, "rejects.txt"), *variant["load"]],
            env=env, stdout=open(os.path.join(work, "load.out"), "w"),
            stderr=open(os.path.join(work, "load.err"), "w"))
        # The loader and the worker find each other (the relay reads the registry each second).
        time.sleep(2)
        sampler = Sampler(metrics)
        sampler.start()
        fed_s = feed(lines, live, args.rate)
        sampler.stop.set()
        sampler.join()
        verify = subprocess.run(
            [variant["binary"], "verify", *store, "--wait", "120", "--json", logs],
            env=env, capture_output=True, text=True)
        report = {}
        for line in verify.stdout.splitlines():
            if line.startswith("{"):
                report = json.loads(line)
        rpcs_after = rpc_counts(tikv.metrics)
        rpcs = sum(rpcs_after.values()) - sum(rpcs_before.values())
        scraped = scrape(metrics)
        buckets = click_latency(scraped)
        runs = buckets[-1][1] if buckets else 0
        def share(bound):
            return round(max((c for b, c in buckets if b <= bound + 1e-9), default=0) / runs, 3) if runs else None
        def quantile(q):
            for bound, count in buckets:
                if count >= q * runs:
                    return bound
            return None
        scanned = counter(scraped, "percolator_worker_notify_keys_scanned_total")
        hinted = counter(scraped, "percolator_worker_notifications_hinted_total")
        run = {
            "label": variant["label"],
            "fed_s": round(fed_s, 1),
            "verify_exit": verify.returncode,
            "joined": report.get("joined"),
            "duplicates": report.get("duplicates"),
            "lost": report.get("lost"),
            "click_runs": int(runs),
            "within_ms": {str(int(b * 1000)): share(b) for b in
                          (0.004, 0.016, 0.064, 0.256, 0.512, 1.024, 2.048)},
            "p50_ms_at_most": None if quantile(0.5) is None else int(quantile(0.5) * 1000),
            "p99_ms_at_most": None if quantile(0.99) is None else int(quantile(0.99) * 1000),
            "scanned_per_click_run": round(scanned / runs, 2) if runs else None,
            "hinted": int(hinted),
            # Every process's RPCs (worker, loader, verification, oracle) per click run.
            "rpcs_per_click_run": round(rpcs / runs, 2) if runs else None,
            # Coefficient of variation of click runs per 250 ms while fed (bursts: high).
            "runs_per_250ms_cv": sampler.cv(),
            "worker_cpu_s": round(process_cpu_s(worker.pid), 2),
            "loader_cpu_s": round(process_cpu_s(loader.pid), 2),
            "minitikv_cpu_s": round(tikv.server_cpu_s(), 2),
        }
        return run
    finally:
        for p in (loader, worker):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGINT)
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        if tikv:
            tikv.stop()
        shutil.rmtree(work, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=20000)
    parser.add_argument("--rate", type=float, default=2000, help="lines appended per second")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--minitikv")
    parser.add_argument("--oracle")
    parser.add_argument("--json", action="store_true", help="one JSON line per run")
    parser.add_argument("variants", nargs="+")
    args = parser.parse_args()
    variants = [parse_variant(v) for v in args.variants]
    here = os.path.dirname(variants[0]["binary"])
    args.minitikv = args.minitikv or os.path.join(here, "minitikv")
    args.oracle = args.oracle or os.path.join(here, "oracle")
    args.tikv, args.minitikv_arg = "single", []
    logs = tempfile.mkdtemp(prefix="follow-logs-")
    try:
        subprocess.run([variants[0]["binary"], "gen", "--out", logs, "--queries",
                        str(args.queries)], check=True, capture_output=True)
        lines = event_lines(logs)
        for _ in range(args.rounds):
            for variant in variants:
                run = run_once(args, variant, logs, lines)
                if args.json:
                    print(json.dumps(run), flush=True)
                else:
                    w = run["within_ms"]
                    print(f"{run['label']:>8}: within 16 / 64 / 256 / 1024 ms "
                          f"{w['16']} / {w['64']} / {w['256']} / {w['1024']}, p50 <= "
                          f"{run['p50_ms_at_most']} ms, p99 <= {run['p99_ms_at_most']} ms; "
                          f"scanned {run['scanned_per_click_run']} keys per click run, "
                          f"hinted {run['hinted']}, {run['rpcs_per_click_run']} RPCs per click run, click runs per 250 ms CV {run['runs_per_250ms_cv']}; CPU worker {run['worker_cpu_s']} s, "
                          f"loader {run['loader_cpu_s']} s, minitikv {run['minitikv_cpu_s']} s; "
                          f"joined {run['joined']}, duplicates {run['duplicates']}, "
                          f"lost {run['lost']}", flush=True)
    finally:
        shutil.rmtree(logs, ignore_errors=True)


if __name__ == "__main__":
    main()
