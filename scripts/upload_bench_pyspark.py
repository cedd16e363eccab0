#!/usr/bin/env python3
"""One run of the upload benchmark with PySpark 4.3.0's own Connect client:
the Python half of benches/upload.rs, one JSON line on stdout.

    python scripts/upload_bench_pyspark.py --remote sc://127.0.0.1:15032 --file table.arrow
    python scripts/upload_bench_pyspark.py --make table.arrow --rows N

`--make` writes the table both sides read: `id` (0..N) and `x = 2 * id`,
two non-null int64 columns, in batches of 100 000 rows.

Like the Rust side, the file is read and the session warmed up
(`spark.version`) before the timer; the timer covers
`spark.createDataFrame(table)` alone (config read, chunking, hashing,
ArtifactStatus and AddArtifacts). Each run is a new process and session,
so the server holds none of the artifacts. The data is read back and
checked after the timer.
"""

import argparse
import json
import sys
import time


def make(path: str, rows: int) -> None:
    import pyarrow as pa

    schema = pa.schema([pa.field("id", pa.int64(), False), pa.field("x", pa.int64(), False)])
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, schema) as w:
        for start in range(0, rows, 100_000):
            ids = pa.array(range(start, min(start + 100_000, rows)), pa.int64())
            w.write_batch(pa.record_batch([ids, pa.compute.multiply(ids, 2)], schema=schema))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--remote")
    ap.add_argument("--file")
    ap.add_argument("--make")
    ap.add_argument("--rows", type=int)
    a = ap.parse_args()
    if a.make:
        make(a.make, a.rows)
        return 0
    if not a.remote or not a.file:
        ap.error("--remote and --file are required")

    import pyarrow as pa
    import pyarrow.compute as pc
    from pyspark.sql import SparkSession

    table = pa.ipc.open_file(a.file).read_all()
    spark = SparkSession.builder.remote(a.remote).getOrCreate()
    version = spark.version  # warm-up round trip, untimed

    t0 = time.perf_counter()
    df = spark.createDataFrame(table)
    wall = time.perf_counter() - t0

    back = df.toArrow()
    n = back.num_rows
    ids, xs = back.column(0), back.column(1)
    if n != table.num_rows or not pc.all(pc.equal(xs, pc.multiply(ids, 2))).as_py() \
            or pc.sum(ids).as_py() != n * (n - 1) // 2:
        raise SystemExit(f"wrong result: {n} rows")
    print(json.dumps({
        "client": "pyspark",
        "case": "upload100m",
        "wall_ms": round(wall * 1e3, 1),
        "rows": n,
        "table_bytes": table.nbytes,
        "mib_per_s": round(table.nbytes / (1 << 20) / wall, 1),
        "server": version,
    }), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
