#!/usr/bin/env python3
"""The cost of spark-connect-guard: PySpark reading 10M rows
(`SELECT id, id*2 AS x FROM range(10000000)`, toArrow) on loopback from
spark-connect-chaos directly and through the guard, runs interleaved
(direct, guard, direct, ...) so both arms share the machine's load; prints
every run, the medians and their ratio. Then the guard's memory while a
client reads slowly (toLocalIterator, pausing every 200,000 rows): its
resident set sampled every 0.1 s, against the same read at full speed.

Then many clients at once: CLIENTS PySpark sessions (default 64), each
reading 1M rows in a thread of its own, directly and through the guard,
interleaved; the wall time of the whole round, the CPU time the server and
the guard spent in it, and the guard's peak resident set.

Usage: guard_bench.py CHAOS_BINARY GUARD_BINARY [RUNS] [CLIENTS]
"""
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time

from pyspark.sql import SparkSession

from rss import RssSampler, rss_mib

QUERY = "SELECT id, id*2 AS x FROM range(10000000)"
ROWS = 10_000_000


def start(args):
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    return proc, re.match(r"listening on (\S+)", line).group(1)


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)


def read_fast(spark):
    t0 = time.monotonic()
    table = spark.sql(QUERY).toArrow()
    elapsed = time.monotonic() - t0
    assert table.num_rows == ROWS, table.num_rows
    ids = table.column("id")
    assert ids[0].as_py() == 0 and ids[ROWS - 1].as_py() == ROWS - 1
    return elapsed


def cpu_s(pid):
    """User + system CPU seconds of `pid` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def many(sessions, rows):
    """Every session reads `rows` rows at once; the round's wall time."""
    errors = []

    def one(spark):
        try:
            table = spark.sql(f"SELECT id, id*2 AS x FROM range({rows})").toArrow()
            ids = table.column("id")
            assert table.num_rows == rows and ids[0].as_py() == 0 \
                and ids[rows - 1].as_py() == rows - 1, table.num_rows
        except Exception as e:  # any failure fails the benchmark
            errors.append(e)

    threads = [threading.Thread(target=one, args=(s,)) for s in sessions]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    if errors:
        raise errors[0]
    return elapsed


def read_slow(spark, rows):
    n = 0
    for row in spark.sql(f"SELECT id, id*2 AS x FROM range({rows})").toLocalIterator():
        assert row.id == n
        n += 1
        if n % 200_000 == 0:
            time.sleep(0.5)
    assert n == rows, n


def main():
    chaos_bin, guard_bin = sys.argv[1], sys.argv[2]
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    chaos, chaos_addr = start([chaos_bin, "--listen", "127.0.0.1:0"])
    guard, guard_addr = start([guard_bin, "--listen", "127.0.0.1:0", f"sc://{chaos_addr}"])
    try:
        direct = SparkSession.builder.remote(f"sc://{chaos_addr}").create()
        guarded = SparkSession.builder.remote(f"sc://{guard_addr}").create()
        for s in (direct, guarded):
            read_fast(s)  # warm up both paths
        times = {"direct": [], "guard": []}
        for _ in range(runs):
            times["direct"].append(read_fast(direct))
            times["guard"].append(read_fast(guarded))
        for arm, ts in times.items():
            print(f"{arm:6} 10M rows (s):", " ".join(f"{t:.2f}" for t in ts),
                  f"median {statistics.median(ts):.2f}")
        ratio = statistics.median(times["guard"]) / statistics.median(times["direct"])
        print(f"guard / direct (medians): {ratio:.3f}")

        base = rss_mib(guard.pid)
        with RssSampler(guard.pid) as fast:
            read_fast(guarded)
        slow_rows = 4_000_000
        t0 = time.monotonic()
        with RssSampler(guard.pid) as slow:
            read_slow(guarded, slow_rows)
        print(f"guard RSS (MiB): idle after the runs {base:.1f}; peak reading 10M rows "
              f"at full speed {fast.peak:.1f}; peak reading {slow_rows:,} rows slowly "
              f"({time.monotonic() - t0:.0f} s, paused 0.5 s every 200,000 rows) {slow.peak:.1f}")
        direct.stop()
        guarded.stop()

        clients = int(sys.argv[4]) if len(sys.argv) > 4 else 64
        rows = 1_000_000
        arms = {
            "direct": [SparkSession.builder.remote(f"sc://{chaos_addr}").create()
                       for _ in range(clients)],
            "guard": [SparkSession.builder.remote(f"sc://{guard_addr}").create()
                      for _ in range(clients)],
        }
        walls = {"direct": [], "guard": []}
        server_cpu = {"direct": [], "guard": []}
        guard_cpu = []
        with RssSampler(guard.pid) as crowd:
            for _ in range(2):
                for arm, sessions in arms.items():
                    s0, g0 = cpu_s(chaos.pid), cpu_s(guard.pid)
                    walls[arm].append(many(sessions, rows))
                    server_cpu[arm].append(cpu_s(chaos.pid) - s0)
                    if arm == "guard":
                        guard_cpu.append(cpu_s(guard.pid) - g0)
        for arm in arms:
            print(f"{clients} clients x {rows:,} rows, {arm:6}: wall (s)",
                  " ".join(f"{t:.2f}" for t in walls[arm]),
                  "; server CPU (s)", " ".join(f"{t:.2f}" for t in server_cpu[arm]))
        print(f"{clients} clients: guard / direct wall (best of 2): "
              f"{min(walls['guard']) / min(walls['direct']):.3f}; guard CPU (s): "
              + " ".join(f"{t:.2f}" for t in guard_cpu)
              + f"; guard peak RSS {crowd.peak:.1f} MiB")
        for sessions in arms.values():
            for s in sessions:
                s.stop()
    finally:
        stop(guard)
        stop(chaos)


if __name__ == "__main__":
    main()
