#!/usr/bin/env python3
"""Runs a command and reports how many cores it kept busy: its CPU use per 250 ms window
(user + system, from /proc, Linux only), then its wall and CPU seconds. For a whole job,
e.g. whether `photon run` fills the machine's cores or waits on something:

    python3 bench/utilization.py photon run --store embedded:/tmp/s --input LOGS \\
        --until-drained --pipelines 1

The command's own output goes to `utilization.out` in the current directory. Only the
standard library."""

import os, subprocess, sys, time

WINDOW_S = 0.25


def proc_stat(pid):
    """(parent pid, CPU seconds: user + system of every thread) of a running process, from
    /proc/PID/stat (`bench/flink_join.py` uses it too)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    with open("utilization.out", "w") as out:
        started = time.monotonic()
        child = subprocess.Popen(sys.argv[1:], stdout=out, stderr=subprocess.STDOUT)
        windows, last = [], (started, 0.0)
        while True:
            time.sleep(WINDOW_S)
            # Read before reaping: once reaped, the child's /proc entry is gone.
            try:
                cpu = proc_stat(child.pid)[1]
            except (OSError, IndexError, ValueError):
                cpu = None
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid != 0:
                break
            if cpu is not None:
                now = time.monotonic()
                windows.append((cpu - last[1]) / (now - last[0]))
                last = (now, cpu)
        wall = time.monotonic() - started
    total = usage.ru_utime + usage.ru_stime
    print("cores busy per %.2f s: %s" % (WINDOW_S, " ".join(f"{c:.1f}" for c in windows)))
    print(f"wall {wall:.2f} s, CPU {total:.2f} s, {total / wall:.2f} cores on average, "
          f"exit {os.waitstatus_to_exitcode(status)}")


if __name__ == "__main__":
    main()
