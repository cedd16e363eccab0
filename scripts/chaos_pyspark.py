#!/usr/bin/env python3
"""Runs fault scenarios against spark-connect-chaos with PySpark's own
Spark Connect client and checks that it returns exactly what the scenario's
[expect] table says a correct client returns.

Usage: chaos_pyspark.py BINARY SCENARIO.toml [SCENARIO.toml ...]

For each scenario: start the binary on a free port, wait for its
`listening on HOST:PORT` line, run the query in a new PySpark session, stop
the binary with SIGTERM, and print one line: PASS or FAIL, the scenario, and
what happened (rows or error, faults fired, graceful ends, seconds). Exits 1
if any scenario fails. The server's event log of each scenario is kept in
$CHAOS_LOG_DIR (default: a temporary folder), named after the scenario.
"""
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import tomllib

import numpy as np
from pyspark.sql import SparkSession

QUERY_TIMEOUT_S = 120


class TimedOut(Exception):
    pass


def on_alarm(_signum, _frame):
    raise TimedOut(f"no result after {QUERY_TIMEOUT_S} s")


def check_rows(table, n):
    """None when `table` is exactly range(n) with x = 2 * id, else why not."""
    if table.num_rows != n:
        return f"{table.num_rows} rows, expected {n}"
    ids = table.column("id").to_numpy()
    if not (ids == np.arange(n, dtype=np.int64)).all():
        first = int(np.argmax(ids != np.arange(n, dtype=np.int64)))
        return f"row {first} has id {ids[first]}"
    if "x" in table.column_names and not (table.column("x").to_numpy() == ids * 2).all():
        return "some x != id * 2"
    return None


def run(binary, path, log_dir):
    name = os.path.splitext(os.path.basename(path))[0]
    with open(path, "rb") as f:
        expect = tomllib.load(f)["expect"]
    log_path = os.path.join(log_dir, f"{name}.log")
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [binary, "--listen", "127.0.0.1:0", path],
        stdout=subprocess.PIPE, stderr=log, text=True,
    )
    try:
        line = proc.stdout.readline()
        m = re.match(r"listening on (\S+)", line)
        if not m:
            return False, f"the server did not start ({line.strip()!r}; see {log_path})"
        spark = SparkSession.builder.remote(f"sc://{m.group(1)}").create()
        start = time.monotonic()
        signal.alarm(QUERY_TIMEOUT_S)
        try:
            table, error = spark.sql(expect["query"]).toArrow(), None
        except TimedOut as e:
            table, error = None, e
        except Exception as e:  # what the client raised is the result under test
            table, error = None, e
        finally:
            signal.alarm(0)
        elapsed = time.monotonic() - start
        try:
            spark.stop()
        except Exception:
            pass
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
    events = open(log_path).read()
    fired = events.count("fault fired")
    ends = events.count("graceful stream end")
    seen = (f"{table.num_rows} rows" if table is not None
            else f"error {type(error).__name__}: {str(error).splitlines()[0][:160]}")
    what = f"{seen}; {fired} fault(s) fired, {ends} graceful end(s), {elapsed:.2f} s"
    if proc.returncode != 0:
        return False, f"{what}; the server exited with {proc.returncode}, not 0"
    if "error" in expect:
        if table is not None:
            return False, f"{what}; expected an error naming {expect['error']}"
        if expect["error"] not in str(error):
            return False, f"{what}; expected an error naming {expect['error']}"
    else:
        if table is None:
            return False, what
        wrong = check_rows(table, expect["rows"])
        if wrong:
            return False, f"{what}; {wrong}"
    if elapsed < expect.get("min_seconds", 0):
        return False, f"{what}; sooner than the {expect['min_seconds']} s the server asked to wait"
    return True, what


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    binary, scenarios = sys.argv[1], sys.argv[2:]
    log_dir = os.environ.get("CHAOS_LOG_DIR") or tempfile.mkdtemp(prefix="chaos-pyspark-")
    os.makedirs(log_dir, exist_ok=True)
    signal.signal(signal.SIGALRM, on_alarm)
    import pyspark
    print(f"PySpark {pyspark.__version__} against {binary}; server logs in {log_dir}")
    failed = 0
    for path in scenarios:
        ok, what = run(binary, path, log_dir)
        name = os.path.splitext(os.path.basename(path))[0]
        print(f"{'PASS' if ok else 'FAIL'} {name}: {what}", flush=True)
        failed += not ok
    print(f"{len(scenarios) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
