#!/usr/bin/env python3
"""A short benchmark of spark-connect-chaos: the time from start to its
`listening on` line, and the time PySpark takes to read a 10M-row query
(`SELECT id, id*2 AS x FROM range(10000000)`, toArrow) from it with no
fault injected. A few runs each; prints every run and the median.

Usage: chaos_bench.py BINARY [RUNS]
"""
import re
import signal
import statistics
import subprocess
import sys
import time

from pyspark.sql import SparkSession

QUERY = "SELECT id, id*2 AS x FROM range(10000000)"


def start(binary):
    t0 = time.monotonic()
    proc = subprocess.Popen([binary, "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    ready = time.monotonic() - t0
    return proc, re.match(r"listening on (\S+)", line).group(1), ready


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=15)


def main():
    binary = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    readies = []
    for _ in range(5):
        proc, _, ready = start(binary)
        readies.append(ready * 1000)
        stop(proc)
    print("start to ready (ms):", " ".join(f"{r:.1f}" for r in readies),
          f"median {statistics.median(readies):.1f}")
    proc, addr, _ = start(binary)
    spark = SparkSession.builder.remote(f"sc://{addr}").create()
    spark.sql("SELECT 1").toArrow()  # connect and warm up
    times = []
    for _ in range(runs):
        t0 = time.monotonic()
        table = spark.sql(QUERY).toArrow()
        times.append(time.monotonic() - t0)
        assert table.num_rows == 10_000_000, table.num_rows
    spark.stop()
    stop(proc)
    med = statistics.median(times)
    print("10M rows to PySpark (s):", " ".join(f"{t:.2f}" for t in times),
          f"median {med:.2f} ({10_000_000 / med / 1e6:.1f} M rows/s, "
          f"{10_000_000 * 16 / med / 2**20:.0f} MiB/s of Int64 data)")


if __name__ == "__main__":
    main()
