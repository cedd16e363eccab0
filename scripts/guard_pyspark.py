#!/usr/bin/env python3
"""PySpark 4.3 through spark-connect-guard: every shipped scenario of
spark-connect-chaos with the guard between the client and the server, then
a client-to-guard cut (a FaultProxy between PySpark and the guard cuts the
response stream three times; PySpark reattaches by itself, through the
guard). One line per run; exits 1 on any wrong result.

Usage: guard_pyspark.py CHAOS GUARD FAULT_PROXY SCENARIO.toml [...]
"""
import re
import signal
import subprocess
import sys
import time
import tomllib

from pyspark.sql import SparkSession

QUERY = "SELECT id, id*2 AS x FROM range({n})"


def start(args):
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    return proc, re.search(r"(\d+\.\d+\.\d+\.\d+:\d+)", line).group(1)


def stop(*procs):
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        p.communicate(timeout=30)


def run(remote, n):
    spark = SparkSession.builder.remote(f"sc://{remote}").create()
    try:
        t0 = time.monotonic()
        table = spark.sql(QUERY.format(n=n)).toArrow()
        took = time.monotonic() - t0
        ids = table.column("id").to_pylist()
        xs = table.column("x").to_pylist()
        exact = ids == list(range(n)) and xs == [2 * i for i in range(n)]
        return exact, f"{table.num_rows:,} rows, {took:.1f} s"
    except Exception as e:  # the scenario decides whether an error is right
        return None, str(e).splitlines()[0][:200]
    finally:
        spark.stop()


def main():
    chaos_bin, guard_bin, proxy_bin, *scenarios = sys.argv[1:]
    failed = False
    for path in scenarios:
        with open(path, "rb") as f:
            expect = tomllib.load(f).get("expect", {})
        n = expect.get("rows", 2_000_000)
        chaos, ca = start([chaos_bin, "--listen", "127.0.0.1:0", path])
        guard, ga = start([guard_bin, f"sc://{ca}"])
        exact, what = run(ga, n)
        stop(guard, chaos)
        if "error" in expect:
            ok = exact is None and expect["error"] in what
        else:
            ok = bool(exact)
        failed |= not ok
        print(f"{'PASS' if ok else 'FAIL'} {path} through the guard: {what}")
    # A client-to-guard cut: PySpark's own reattach, through the guard.
    chaos, ca = start([chaos_bin, "--listen", "127.0.0.1:0"])
    guard, ga = start([guard_bin, f"sc://{ca}"])
    proxy, pa = start([proxy_bin, "--upstream", ga, "--cuts", "4M,4M,4M"])
    exact, what = run(pa, 2_000_000)
    stop(proxy, guard, chaos)
    failed |= not exact
    print(f"{'PASS' if exact else 'FAIL'} client-to-guard cuts at 4, 8, 12 MiB: {what}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
