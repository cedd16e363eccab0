#!/usr/bin/env python3
"""One case of the side-by-side benchmark with PySpark 4.3.0's own Connect
client: the Python half of benches/side_by_side.rs, run once, one JSON line.

Run with the cached venv's python (scripts/spark-install.sh):

    python scripts/side_by_side_pyspark.py --remote sc://127.0.0.1:15010 \
        --case arrow10m|cuts10m|first_batch|wide2m|wide200k [--proxy-cuts N] \
        [--codec none|zstd|lz4] [--batch-rows N]

Like the Rust side, the session is built and one warm-up round trip made
(`spark.version`, an AnalyzePlan) before the timer starts; the timer covers
only the query, from just before `spark.sql(q)` to the last batch
(`toArrow()`) or the first one. The result is verified after the timer.

Cases:
  arrow10m     spark.sql(q).toArrow(): PySpark's fastest full fetch
               (a pyarrow.Table, no per-row Python objects).
  cuts10m      the same through examples/fault_proxy.rs (--remote points at it).
  wide2m       toArrow() of WIDE at 2M rows (id, a seeded random int, a date,
               a 64-character hex string: ~170 MB that compress the way real
               tables do); wide200k the same at 200k rows. Checked: ids 0..,
               no nulls, every hash 64 characters; sum_r printed so the
               driver can check every client read the same values.
  first_batch  the first Arrow batch of the streaming result. PySpark 4.3
               Connect has no public "first batch as Arrow" call; the public
               streaming API is DataFrame.toLocalIterator(), which in Connect
               streams ExecutePlan responses (client.to_table_as_iterator) and
               converts one Arrow batch at a time into Rows. `--first-batch-api
               iterator` (default) times next(iter(df.toLocalIterator())):
               first batch + its conversion to Rows. `--first-batch-api
               arrow` times the first pa.Table of the internal
               client.to_table_as_iterator() (no Row conversion), the lower
               bound of what PySpark can do.
--codec sets spark.sql.execution.arrow.compression.codec with spark.conf.set
before the timer (what this crate's `result_compression=` does at session
start); without it the server's default (none) stays. --batch-rows sets
spark.sql.execution.arrow.maxRecordsPerBatch the same way (what this
crate's `result_batch_rows=` does); without it Spark's 10,000 stays.

Note that spark.sql() in PySpark 4.3 Connect first runs a SqlCommand
(one round trip) and toArrow() asks for the schema (AnalyzePlan) before
ExecutePlan: those round trips are part of PySpark's cost and are timed.
"""

import argparse
import json
import os
import resource
import sys
import time

QUERY = "SELECT id, id*2 AS x FROM range(10000000)"
# " ORDER BY id" against Sail, which returns range's partitions in any order.
QUERY += os.environ.get("SBS_QUERY_SUFFIX", "")
ROWS = 10_000_000
# The same text as WIDE in benches/side_by_side.rs.
WIDE = ("SELECT id, CAST(rand(7) * 2147483647 AS INT) AS r, "
        "date_add(DATE'2000-01-01', CAST(id % 10000 AS INT)) AS d, "
        "sha2(CAST(id AS STRING), 256) AS h FROM range({n})")
WIDE_ROWS = {"wide2m": 2_000_000, "wide200k": 200_000}


def cpu_ms() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return (r.ru_utime + r.ru_stime) * 1e3


def verify(table) -> tuple:
    """Rows and exact sum of x; checks ids run 0.. and x == 2 * id."""
    import pyarrow.compute as pc

    ids = table.column(0)
    xs = table.column(1)
    n = table.num_rows
    if ids.null_count or xs.null_count:
        raise SystemExit("nulls in result")
    if n and not pc.all(pc.equal(xs, pc.multiply(ids, 2))).as_py():
        raise SystemExit("x != 2*id")
    if n and (ids[0].as_py() != 0 or pc.sum(ids).as_py() != n * (n - 1) // 2):
        raise SystemExit("ids are not 0..n-1")
    # pyarrow's int64 sum would not overflow here (~1e14), but stay exact.
    sum_x = int(pc.sum(xs).as_py()) if n else 0
    return n, sum_x


def verify_wide(table) -> tuple:
    """Rows and the sum of r; checks ids run 0.., no nulls, 64-char hashes."""
    import pyarrow.compute as pc

    n = table.num_rows
    if table.num_columns != 4 or any(c.null_count for c in table.columns):
        raise SystemExit(f"want 4 non-null columns: {table.schema}")
    ids = table.column(0)
    if n and (ids[0].as_py() != 0 or pc.sum(ids).as_py() != n * (n - 1) // 2
              or not pc.all(pc.equal(pc.utf8_length(table.column(3)), 64)).as_py()):
        raise SystemExit("ids are not 0..n-1 or a hash is not 64 characters")
    return n, int(pc.sum(table.column(1).cast("int64")).as_py()) if n else 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--remote", default=os.environ.get("SPARK_REMOTE"))
    ap.add_argument("--case", default=os.environ.get("SBS_CASE"),
                    choices=["arrow10m", "cuts10m", "first_batch", "wide2m", "wide200k"])
    ap.add_argument("--codec", choices=["none", "zstd", "lz4"])
    ap.add_argument("--batch-rows", type=int)
    ap.add_argument("--proxy-cuts", type=int, default=0)
    ap.add_argument("--first-batch-api", choices=["iterator", "arrow"], default="iterator")
    a = ap.parse_args()
    if not a.remote or not a.case:
        ap.error("--remote and --case are required")

    import pyarrow as pa
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(a.remote).getOrCreate()
    version = spark.version  # warm-up round trip (AnalyzePlan), untimed
    if a.codec:
        spark.conf.set("spark.sql.execution.arrow.compression.codec", a.codec)
    if a.batch_rows:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(a.batch_rows))
    query = WIDE.format(n=WIDE_ROWS[a.case]) + os.environ.get("SBS_QUERY_SUFFIX", "") \
        if a.case in WIDE_ROWS else QUERY

    c0 = cpu_ms()
    t0 = time.perf_counter()
    if a.case == "first_batch":
        df = spark.sql(query)
        if a.first_batch_api == "iterator":
            it = df.toLocalIterator()
            first = next(it)
            wall = time.perf_counter() - t0
            table = None
        else:
            client = spark.client
            it = client.to_table_as_iterator(df._plan.to_proto(client), df._plan.observations)
            table = next(t for t in it if isinstance(t, pa.Table))
            wall = time.perf_counter() - t0
    else:
        table = spark.sql(query).toArrow()
        wall = time.perf_counter() - t0
    cpu = cpu_ms() - c0

    batches = None
    sum_r = None
    if a.case in WIDE_ROWS:
        batches = len(table.to_batches())
        rows, sum_r = verify_wide(table)
        sum_x = None
        if rows != WIDE_ROWS[a.case]:
            raise SystemExit(f"wrong result: {rows} rows")
    elif a.case == "first_batch":
        # Stop the rest of the query on the server (as the Rust side does),
        # then close the abandoned generator.
        spark.interruptAll()
        it.close()
        if table is None:
            # The iterator path hands out Rows; the first batch is what it
            # had converted: verify the first row only.
            if first.id != 0 or first.x != 0:
                raise SystemExit(f"bad first row {first}")
            rows, sum_x = 1, 0
        else:
            rows, sum_x = verify(table)
    else:
        batches = len(table.to_batches())
        rows, sum_x = verify(table)
        if rows != ROWS or sum_x != ROWS * (ROWS - 1):
            raise SystemExit(f"wrong result: {rows} rows, sum_x {sum_x}")

    print(json.dumps({
        "client": "pyspark",
        "case": a.case,
        "wall_ms": round(wall * 1e3, 1),
        "cpu_ms": round(cpu),
        "rows": rows,
        "sum_x": sum_x,
        "batches": batches,
        "proxy_cuts": a.proxy_cuts,
        "sum_r": sum_r,
        "codec": a.codec,
        "batch_rows": a.batch_rows,
        "first_batch_api": a.first_batch_api if a.case == "first_batch" else None,
        "server": version,
    }), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
