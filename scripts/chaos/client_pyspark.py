#!/usr/bin/env python3
"""The PySpark column of scripts/chaos-table.sh: PySpark 4.3's own Spark
Connect client runs one query and prints one JSON line: the rows it returned,
whether they are exactly range(n) with x = 2 * id in order, and the error it
raised, if any (what the client does under faults is the result under test).

Usage: client_pyspark.py --remote sc://HOST:PORT --query SQL
"""
import argparse
import json
import time

import numpy as np
from pyspark.sql import SparkSession


def wrong_rows(table):
    """None when `table` is range(n) with x = 2 * id, in order; else why not."""
    n = table.num_rows
    ids = table.column(0).to_numpy()
    if not (ids == np.arange(n, dtype=np.int64)).all():
        first = int(np.argmax(ids != np.arange(n, dtype=np.int64)))
        return f"row {first} has id {ids[first]}"
    if table.num_columns > 1 and not (table.column(1).to_numpy() == ids * 2).all():
        return "some x != id * 2"
    return None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--remote", required=True)
    p.add_argument("--query", required=True)
    a = p.parse_args()
    start = time.monotonic()
    rows, wrong, error = 0, None, None
    try:
        spark = SparkSession.builder.remote(a.remote).create()
        try:
            table = spark.sql(a.query).toArrow()
            rows, wrong = table.num_rows, wrong_rows(table)
        finally:
            try:
                spark.stop()
            except Exception:
                pass
    except Exception as e:  # the client's own error is the result
        # On one line: a gRPC error's status and details follow its first line.
        error = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
    seconds = time.monotonic() - start
    print(json.dumps({"client": "pyspark", "rows": rows, "wrong": wrong,
                      "error": error, "seconds": round(seconds, 3)}), flush=True)


if __name__ == "__main__":
    main()
