#!/usr/bin/env python3
"""The chaos table: every client, every fault scenario, alone and through the
guard, as a Markdown table. Run by scripts/chaos-table.sh, which builds what
it needs and passes it here.

Rows: each scenario of spark-connect-chaos (crates/spark-connect-testkit/
scenarios/*.toml), served fresh for each cell, and, with --spark REMOTE, real
Spark behind the test kit's fault proxy (examples/fault_proxy.rs), which cuts
the first connections after a number of bytes (--spark-cuts).

Columns: each client (--client NAME=COMMAND, run as COMMAND --remote sc://...
--query SQL; it prints one JSON line: rows, wrong, error, seconds), alone,
and through spark-connect-guard when --guard BINARY is given.

Each cell is one of:
  exact            every row of the scenario's [expect], once, in order (and
                   no sooner than its min_seconds);
  clear error      the error [expect] names (the restart scenario);
  finding          not exact, but a known limitation of that client alone
                   (KNOWN below): recorded, not a failure;
  FAIL             anything else: the table exits 1.

Usage: chaos_table.py --chaos BINARY --client NAME=CMD ... [--guard BINARY]
         [--spark sc://HOST:PORT --proxy BINARY] [--out FILE.md] SCENARIO.toml ...
"""
import argparse
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
import urllib.request

CELL_TIMEOUT_S = 240

# Rows the table reads with another query than the scenario's own: the
# official client's graceful-end finding is best seen on a long result.
QUERY_ROWS = {"graceful-ends": 10_000_000}

# The real-Spark row: a result long enough to be cut several times.
SPARK_ROWS = 2_000_000

# The names a client may give the restart's error: PySpark raises
# INVALID_HANDLE.SESSION_NOT_FOUND; the JVM client an IllegalStateException
# naming OPERATION_NOT_FOUND/SESSION_NOT_FOUND.
ERROR_ALIASES = {"INVALID_HANDLE": ["INVALID_HANDLE", "SESSION_NOT_FOUND", "OPERATION_NOT_FOUND"]}

# (client, via, row) -> why a cell that is not exact is a known limitation
# of that client, not a failure. Only clients alone: through the guard every
# cell must be exact (or the clear error of the restart).
KNOWN = {
    ("official", "alone", "graceful-ends"):
        "takes a clean stream end without ResultComplete for the end of the result",
    ("official", "alone", "demo"):
        "does not send again an ExecutePlan lost to a reset connection",
    ("official", "alone", "retry-info"):
        "does not retry RESOURCE_EXHAUSTED, RetryInfo or not",
    ("official", "alone", "restart"):
        "stops at the reset with a transport error: no reattach, so it never learns the session is gone",
    # A guard that goes away cuts the client's own stream: only a client
    # that reattaches by itself continues through the next guard.
    ("official", "guard", "guard-drained"):
        "does not reattach by itself: the drained guard's UNAVAILABLE ends its stream",
    ("official", "guard", "guard-killed"):
        "does not reattach by itself: the killed guard's reset ends its stream",
    ("official", "alone", "spark-cuts"):
        "stops at the first cut with a transport error: no reattach after a reset connection",
}


def start(cmd, log_path):
    """Starts a program that prints `listening on HOST:PORT` (or, for the
    fault proxy, `HOST:PORT`) as its first line; returns (process, address)."""
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True,
                            start_new_session=True)
    line = proc.stdout.readline()
    m = re.match(r"(?:listening on )?(\S+:\d+)\s*$", line)
    if not m:
        stop(proc)
        raise RuntimeError(f"{cmd[0]} did not start ({line.strip()!r}; see {log_path})")
    return proc, m.group(1)


def stop(proc):
    """SIGTERM, then SIGKILL after 15 s; returns what it printed after its
    first line (the fault proxy's summary)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        rest, _ = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        rest, _ = proc.communicate()
    return rest or ""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port):
    """The guard's metrics as {name: value} (unlabelled lines only)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and not line.startswith("#") and "{" not in parts[0]:
            out[parts[0]] = float(parts[1])
    return out


def wait_for_stream(metrics_port, reader, limit_s=120):
    """Until the guard has an open stream that has sent bytes (the client
    is mid-result), or the reader ends, or `limit_s` passes."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and reader.is_alive():
        m = scrape(metrics_port)
        if m.get("spark_connect_guard_open_streams", 0) >= 1 and \
                m.get("spark_connect_guard_sent_bytes_total", 0) > 0:
            return True
        time.sleep(0.1)
    return False


def start_retrying(cmd, log_path, limit_s=30):
    """`start`, again until the port is free (a drained guard frees it at
    once; a killed one as soon as the kernel has closed its socket)."""
    deadline = time.monotonic() + limit_s
    while True:
        try:
            return start(cmd, log_path)
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def proxy_cuts(summary):
    """The cuts the fault proxy made, from its JSON summary line."""
    for line in summary.splitlines():
        if line.startswith("{"):
            return json.loads(line).get("cuts")
    return None


def run_client(cmd, remote, query, err_path):
    """Runs one client; returns its JSON result (or a timeout / crash as one)."""
    argv = cmd + ["--remote", remote, "--query", query]
    with open(err_path, "w") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True,
                                start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=CELL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return {"rows": 0, "wrong": None, "seconds": CELL_TIMEOUT_S,
                    "error": f"no result after {CELL_TIMEOUT_S} s (killed)"}
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"rows": 0, "wrong": None, "seconds": None,
            "error": f"the client exited {proc.returncode} without a result (see {err_path})"}


def judge(expect, r):
    """(ok, text): whether result `r` is what `expect` asks, and the cell."""
    secs = f"{r['seconds']:.1f} s" if r.get("seconds") is not None else "?"
    if "error" in expect:
        names = ERROR_ALIASES.get(expect["error"], [expect["error"]])
        if r["error"] and any(n in r["error"] for n in names):
            return True, f"clear error ({short(r['error'])})"
        if r["error"]:
            return False, f"error: {short(r['error'])}"
        return False, f"{r['rows']:,} rows and no error"
    n = expect["rows"]
    if r["error"]:
        return False, f"{r['rows']:,} of {n:,}, error: {short(r['error'])}"
    if r["rows"] != n:
        return False, f"{r['rows']:,} of {n:,}, no error"
    if r["wrong"]:
        return False, f"{n:,} rows, wrong: {r['wrong']}"
    floor = expect.get("min_seconds", 0)
    if r["seconds"] is not None and r["seconds"] < floor:
        return False, f"{n:,} rows in {secs}, sooner than the {floor} s RetryInfo asked"
    return True, f"exact ({secs})"


def short(error):
    return error if len(error) <= 100 else error[:97] + "..."


class Table:
    def __init__(self, args, log_dir):
        self.args, self.log_dir = args, log_dir
        self.clients = [c.split("=", 1) for c in args.client]
        self.vias = ["alone"] + (["guard"] if args.guard else [])
        self.failed = 0
        self.rows = []

    def cell(self, row, client, cmd, via, upstream_start, expect):
        """Runs one cell: a fresh upstream, the guard when asked, the client."""
        tag = f"{row}-{client}-{via}"
        procs, cuts = [], None
        try:
            upstream = upstream_start(tag)
            procs.append(upstream[0])
            remote = f"sc://{upstream[1]}"
            if via == "guard":
                guard = start([self.args.guard, "--listen", "127.0.0.1:0", remote],
                              os.path.join(self.log_dir, f"{tag}.guard.log"))
                procs.append(guard[0])
                remote = f"sc://{guard[1]}"
            r = run_client(shlex.split(cmd), remote, expect["query"],
                           os.path.join(self.log_dir, f"{tag}.client.log"))
        except RuntimeError as e:
            r = {"rows": 0, "wrong": None, "seconds": None, "error": str(e)}
        finally:
            for p in reversed(procs):
                rest = stop(p)
                if p is procs[0]:
                    cuts = proxy_cuts(rest)
        ok, text = judge(expect, r)
        if cuts is not None:
            text += f" [{cuts} cuts]"
        if ok:
            if (client, via, row) in KNOWN:
                text += " (a known finding no longer seen)"
            return text
        why = KNOWN.get((client, via, row))
        if why:
            return f"finding: {text} ({why})"
        self.failed += 1
        return f"**FAIL**: {text}"

    def run_row(self, row, upstream_start, expect, what):
        cells = []
        for client, cmd in self.clients:
            for via in self.vias:
                text = self.cell(row, client, cmd, via, upstream_start, expect)
                print(f"{row} / {client} {via}: {text}", file=sys.stderr, flush=True)
                cells.append(text)
        self.rows.append((row, what, cells))

    def handover(self, how, scenario, expect):
        """A row of guard hand-overs: each client reads through guard A
        (`--drain-timeout 1`), which is drained (`how` = "drained") or
        killed ("killed") once its stream is under way; guard B starts on
        the same port, and the client's own reattach must be exact."""
        row = f"guard-{how}"
        cells = []
        for client, cmd in self.clients:
            tag = f"{row}-{client}"
            cells.append("—")  # alone: no guard to hand over
            text = self.handover_cell(row, client, tag, how, cmd, scenario, expect)
            print(f"{row} / {client} guard: {text}", file=sys.stderr, flush=True)
            cells.append(text)
        self.rows.append((row, f"{expect['rows']:,} rows, guard {how} mid-stream, a new one on its port", cells))

    def handover_cell(self, row, client, tag, how, cmd, scenario, expect):
        log = lambda what: os.path.join(self.log_dir, f"{tag}.{what}.log")
        procs, result = [], {}
        try:
            chaos = start([self.args.chaos, "--listen", "127.0.0.1:0", scenario], log("server"))
            procs.append(chaos[0])
            port, metrics = free_port(), free_port()
            guard_args = [self.args.guard, "--listen", f"127.0.0.1:{port}", "--drain-timeout", "1"]
            a = start(guard_args + ["--metrics-listen", f"127.0.0.1:{metrics}", f"sc://{chaos[1]}"],
                      log("guard-a"))
            procs.append(a[0])
            reader = threading.Thread(target=lambda: result.update(run_client(
                shlex.split(cmd), f"sc://127.0.0.1:{port}", expect["query"], log("client"))))
            reader.start()
            if not wait_for_stream(metrics, reader):
                raise RuntimeError("no stream under way through guard A")
            if how == "drained":
                a[0].send_signal(signal.SIGTERM)
            else:
                os.killpg(a[0].pid, signal.SIGKILL)
            b = start_retrying(guard_args + [f"sc://{chaos[1]}"], log("guard-b"))
            procs.append(b[0])
            reader.join(CELL_TIMEOUT_S)
        except RuntimeError as e:
            result = {"rows": 0, "wrong": None, "seconds": None, "error": str(e)}
        finally:
            for p in reversed(procs):
                stop(p)
        ok, text = judge(expect, result or {"rows": 0, "wrong": None, "seconds": None,
                                            "error": "the client did not finish"})
        if ok:
            if (client, "guard", row) in KNOWN:
                text += " (a known finding no longer seen)"
            return text
        why = KNOWN.get((client, "guard", row))
        if why:
            return f"finding: {text} ({why})"
        self.failed += 1
        return f"**FAIL**: {text}"

    def markdown(self):
        head = ["row", "expected"] + [f"{c} {v}" for c, _ in self.clients for v in self.vias]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for row, what, cells in self.rows:
            lines.append("| " + " | ".join([row, what] + cells) + " |")
        return "\n".join(lines)


def chaos_upstream(binary, path, log_dir):
    def start_it(tag):
        return start([binary, "--listen", "127.0.0.1:0", path],
                     os.path.join(log_dir, f"{tag}.server.log"))
    return start_it


def proxy_upstream(binary, spark, cuts, log_dir):
    upstream = spark.removeprefix("sc://").split("/")[0]

    def start_it(tag):
        return start([binary, "--upstream", upstream, "--listen", "127.0.0.1:0", "--cuts", cuts],
                     os.path.join(log_dir, f"{tag}.proxy.log"))
    return start_it


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--chaos", required=True)
    p.add_argument("--client", action="append", required=True, help="NAME=COMMAND")
    p.add_argument("--guard")
    p.add_argument("--spark", help="real Spark's sc:// address, for the fault-proxy row")
    p.add_argument("--proxy", help="the fault proxy program (examples/fault_proxy.rs)")
    p.add_argument("--spark-cuts", default="4M,8M,8M")
    p.add_argument("--handover", help="the scenario of the guard hand-over rows (needs --guard)")
    p.add_argument("--out")
    p.add_argument("scenarios", nargs="*")
    args = p.parse_args()
    log_dir = os.environ.get("CHAOS_LOG_DIR") or tempfile.mkdtemp(prefix="chaos-table-")
    os.makedirs(log_dir, exist_ok=True)
    print(f"chaos table: logs in {log_dir}", file=sys.stderr)
    t0 = time.monotonic()
    table = Table(args, log_dir)
    for path in args.scenarios:
        name = os.path.splitext(os.path.basename(path))[0]
        with open(path, "rb") as f:
            expect = dict(tomllib.load(f)["expect"])
        if name in QUERY_ROWS:
            n = QUERY_ROWS[name]
            expect["query"] = re.sub(r"range\(\d+\)", f"range({n})", expect["query"])
            expect["rows"] = n
        what = (f"error naming {expect['error']}" if "error" in expect
                else f"{expect['rows']:,} rows")
        table.run_row(name, chaos_upstream(args.chaos, path, log_dir), expect, what)
    if args.handover and args.guard:
        with open(args.handover, "rb") as f:
            expect = dict(tomllib.load(f)["expect"])
        for how in ("drained", "killed"):
            table.handover(how, args.handover, expect)
    if args.spark:
        if not args.proxy:
            sys.exit("--spark needs --proxy")
        expect = {"query": f"SELECT id, id*2 AS x FROM range({SPARK_ROWS})", "rows": SPARK_ROWS}
        table.run_row("spark-cuts", proxy_upstream(args.proxy, args.spark, args.spark_cuts, log_dir),
                      expect, f"{SPARK_ROWS:,} rows (real Spark, cuts {args.spark_cuts})")
    md = table.markdown()
    print(md)
    print(f"\n{table.failed} failed cell(s); {time.monotonic() - t0:.0f} s")
    if args.out:
        with open(args.out, "w") as f:
            f.write(md + "\n")
    sys.exit(1 if table.failed else 0)


if __name__ == "__main__":
    main()
