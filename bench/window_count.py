#!/usr/bin/env python3
"""Measures the window_count example (issue 41): throughput at saturation on bounded input,
then, with --follow at a fixed offered rate below it, the emission latency (window end to
its line in FILE; a window not out by 3 s after the last line is `missing`, and counted at
that moment, so the percentiles are lower bounds then) and the watermark's lag behind the
newest event time.

Usage: python3 bench/window_count.py BINARY [--clicks 200000] [--rate R] [--secs 30]
BINARY: target/release/examples/window_count (cargo build --release -p percolator-app
--example window_count). Without --rate, half of the measured saturation is offered.
Prints one JSON line. Only the standard library."""

import argparse, json, os, random, subprocess, sys, tempfile, threading, time


def now_ms():
    return int(time.time() * 1000)


def saturation(binary, clicks, work):
    inp = os.path.join(work, "sat-in")
    os.makedirs(inp)
    base = now_ms() - 3_600_000
    rng = random.Random(1)
    files = [open(os.path.join(inp, f"clicks-{i}.jsonl"), "w") for i in range(2)]
    for i in range(clicks):
        t = base + i * 5 + rng.randint(-1000, 1000)
        files[i % 2].write(json.dumps({"click_id": f"c{i}", "event_time": t, "query_id": f"q{i % 50}"}) + "\n")
    for f in files:
        f.close()
    out = os.path.join(work, "sat-out.jsonl")
    start = time.time()
    subprocess.run([binary, "--input", inp, "--out", out, "--store", "embedded:" + os.path.join(work, "sat-store"),
                    "--window-secs", "10", "--out-of-orderness-secs", "2", "--lateness-secs", "1"],
                   check=True, stdout=subprocess.DEVNULL)
    secs = time.time() - start
    counted = sum(json.loads(l)["count"] for l in open(out))
    assert counted == clicks, (counted, clicks)
    return clicks / secs, secs


def latency(binary, rate, secs, work):
    inp = os.path.join(work, "live-in")
    os.makedirs(inp)
    out = os.path.join(work, "live-out.jsonl")
    proc = subprocess.Popen([binary, "--input", inp, "--out", out, "--follow", "--poll-ms", "20",
                             "--store", "embedded:" + os.path.join(work, "live-store"),
                             "--window-secs", "1", "--out-of-orderness-secs", "0", "--lateness-secs", "0"],
                            stdout=subprocess.DEVNULL)
    seen = {}  # line -> wall ms it appeared
    stop = threading.Event()

    def watch():
        pos = 0
        while not stop.is_set():
            try:
                with open(out, "rb") as f:
                    f.seek(pos)
                    data = f.read()
            except FileNotFoundError:
                data = b""
            t = now_ms()
            if data:
                complete = data[: data.rfind(b"\n") + 1]
                pos += len(complete)
                for line in complete.splitlines():
                    seen[line] = t
            time.sleep(0.002)

    watcher = threading.Thread(target=watch)
    watcher.start()
    files = [open(os.path.join(inp, f"clicks-{i}.jsonl"), "a", buffering=1) for i in range(2)]
    sent, start = 0, time.time()
    while time.time() - start < secs:
        due = int((time.time() - start) * rate)
        while sent < due:
            files[sent % 2].write(json.dumps({"click_id": f"l{sent}", "event_time": now_ms(), "query_id": f"q{sent % 20}"}) + "\n")
            sent += 1
        time.sleep(0.005)
    time.sleep(3)
    stop.set()
    watcher.join()
    proc.kill()
    proc.wait()
    # The windows measured: every key's 1 s windows wholly inside the run, less its first
    # 2 s and its last 1 s (the first and last windows are partial). Every key has clicks in
    # each of them, so each must come out; one that has not by the end of the watch (3 s
    # after the last line) counts as missing, and its latency as at least the watch's end.
    first = (int(start * 1000) + 2000 + 999) // 1000 * 1000
    last_end = int((start + secs) * 1000) - 1000
    keys = min(20, sent)
    expected = {(f"q{k}", w) for k in range(keys) for w in range(first, last_end - 999, 1000)}
    watch_end = int((start + secs + 3) * 1000)
    lat, lag, got = [], [], set()
    for line, t in seen.items():
        v = json.loads(line)
        if (v["key"], v["window_start_ms"]) not in expected:
            continue
        got.add((v["key"], v["window_start_ms"]))
        lat.append(t - (v["window_start_ms"] + 1000))
        if v["watermark_ms"] is not None and v["watermark_ms"] < 2**63:
            lag.append(v["emitted_at_ms"] - v["watermark_ms"])
    missing = expected - got
    lat.extend(watch_end - (w + 1000) for _, w in missing)
    lat.sort(); lag.sort()
    pct = lambda xs, p: xs[min(len(xs) - 1, int(p * len(xs)))] if xs else None
    return {"offered_per_s": rate, "sent": sent, "windows": len(expected), "missing": len(missing),
            "emit_latency_ms": {"p50": pct(lat, 0.5), "p95": pct(lat, 0.95), "p99": pct(lat, 0.99), "max": lat[-1] if lat else None},
            "watermark_lag_ms": {"p50": pct(lag, 0.5), "p95": pct(lag, 0.95)}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--clicks", type=int, default=200_000)
    ap.add_argument("--rate", type=float)
    ap.add_argument("--secs", type=int, default=30)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        per_s, took = saturation(a.binary, a.clicks, work)
        rate = a.rate or per_s / 2
        res = latency(a.binary, rate, a.secs, work)
        res.update({"saturation_per_s": round(per_s), "saturation_secs": round(took, 1), "clicks": a.clicks})
        print(json.dumps(res))


if __name__ == "__main__":
    main()
