#!/usr/bin/env python3
"""The chaos table: every client, every fault scenario, alone and through the
guard, as a Markdown table. Run by scripts/chaos-table.sh, which builds what
it needs and passes it here.

Rows: each scenario of spark-connect-chaos (crates/spark-connect-testkit/
scenarios/*.toml), served fresh for each cell, and, with --spark REMOTE, real
Spark behind the test kit's fault proxy (examples/fault_proxy.rs), which cuts
the first connections after a number of bytes (--spark-cuts).

With --many N and the guard, one more row: N clients, cycling over the
table's clients, read one query at once through ONE guard whose upstream,
the fault proxy in front of real Spark (--spark) or of the chaos server
serving --many-scenario, is cut on --many-cuts. Every client must be exact
and every cut made; the row also prints the guard's peak resident set
(sampled from /proc every 0.1 s), the most streams it had open at once
(from its metrics) and the row's wall time.

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
         [--spark sc://HOST:PORT --proxy BINARY] [--handover SCENARIO.toml]
         [--many N --proxy BINARY [--many-scenario SCENARIO.toml] [--many-cuts 8M,16M]]
         [--out FILE.md] SCENARIO.toml ...
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

from rss import RssSampler

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


def save_metrics(port, path):
    """The guard's metrics as they are now, into `path` (for the logs);
    returns its reattaches by cause, {cause: count}."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError as e:
        text = f"no metrics: {e}\n"
    with open(path, "w") as f:
        f.write(text)
    return {m.group(1): int(float(m.group(2))) for m in re.finditer(
        r'^spark_connect_guard_reattaches_total\{cause="(\w+)"\} (\S+)$', text, re.M)}


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


def proxy_summary(summary):
    """The fault proxy's JSON summary line (cuts, connections, bytes) as a
    dict; empty when it printed none."""
    for line in summary.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    return {}


def proxy_cuts(summary):
    """The cuts the fault proxy made, from its JSON summary line."""
    return proxy_summary(summary).get("cuts")


def run_client(cmd, remote, query, err_path, timeout_s=CELL_TIMEOUT_S):
    """Runs one client; returns its JSON result (or a timeout / crash as one)."""
    argv = cmd + ["--remote", remote, "--query", query]
    with open(err_path, "w") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True,
                                start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return {"rows": 0, "wrong": None, "seconds": timeout_s,
                    "error": f"no result after {timeout_s} s (killed)"}
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
        self.summary = []

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

    def many(self, n, upstream_start, expect, what):
        """The many-clients row: `n` clients, cycling over the table's
        clients, read `expect`'s query at once through ONE guard whose
        upstream (`upstream_start`: the fault proxy, in front of the chaos
        server or real Spark) is cut on its schedule. Every client must be
        exact, and the proxy must have cut at least once (a row that saw no
        cut proved nothing about cuts)."""
        row = f"many-{n}"
        log = lambda what: os.path.join(self.log_dir, f"{row}.{what}.log")
        kinds = [self.clients[i % len(self.clients)] for i in range(n)]
        timeout_s = max(CELL_TIMEOUT_S, 5 * n)
        procs, results, ends, summary = [], [None] * n, [None] * n, ""
        sampler, wall, resumed, reattaches = None, None, None, {}
        try:
            upstream = upstream_start(row)
            procs.extend(upstream[0])
            metrics = free_port()
            guard = start([self.args.guard, "--listen", "127.0.0.1:0",
                           "--metrics-listen", f"127.0.0.1:{metrics}",
                           *shlex.split(self.args.many_guard_args), f"sc://{upstream[1]}"],
                          log("guard"))
            procs.append(guard[0])
            remote = f"sc://{guard[1]}"

            def one(i, name, cmd):
                results[i] = run_client(shlex.split(cmd), remote, expect["query"],
                                        log(f"client-{i:03}-{name}"), timeout_s)
                ends[i] = time.monotonic()

            readers = [threading.Thread(target=one, args=(i, name, cmd))
                       for i, (name, cmd) in enumerate(kinds)]
            sampler = RssSampler(guard[0].pid)
            t0 = time.monotonic()
            with sampler:
                for r in readers:
                    r.start()
                for r in readers:
                    r.join()
            wall = time.monotonic() - t0
            resumed = scrape(metrics).get("spark_connect_guard_resumed_streams_total")
            reattaches = save_metrics(metrics, log("guard-metrics"))
        except RuntimeError as e:
            results = [r or {"rows": 0, "wrong": None, "seconds": None, "error": str(e)}
                       for r in results]
        finally:
            for p in reversed(procs):
                rest = stop(p)
                if p is procs[0]:
                    summary = rest
        made = proxy_summary(summary)
        cuts = made.get("cuts")
        verdict = many_verdict(expect, [name for name, _ in kinds], results,
                               cuts, self.args.many_cuts)
        with open(log("proxy-summary"), "w") as f:
            f.write(summary)
        cells = []
        for name, _ in self.clients:
            cells += ["—", verdict["cells"].get(name, "—")]
        self.failed += verdict["failed"]
        for line in verdict["details"]:
            print(f"{row} / {line}", file=sys.stderr, flush=True)
        facts = [verdict["text"],
                 f"guard peak RSS {sampler.peak:.1f} MiB" if sampler else "guard peak RSS ?",
                 f"{cuts if cuts is not None else '?'} of {verdict['scheduled']} cuts"
                 + (f" ({made['connections']} upstream connections)" if "connections" in made else "")]
        if resumed is not None:
            facts.append(f"{resumed:.0f} guard streams resumed")
        if reattaches:
            facts.append("guard reattaches " + ", ".join(f"{n} {cause}"
                                                         for cause, n in sorted(reattaches.items())))
        facts.append(f"at most {most_at_once(results, ends)} of {n} reading at once")
        if wall is not None:
            facts.append(f"wall {wall:.1f} s")
        self.summary.append(f"{row}: " + ", ".join(facts))
        print(self.summary[-1], file=sys.stderr, flush=True)
        self.summary.extend(f"- {line}" for line in verdict["details"])
        self.rows.append((row, what, cells))

    def markdown(self):
        head = ["row", "expected"] + [f"{c} {v}" for c, _ in self.clients for v in self.vias]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for row, what, cells in self.rows:
            lines.append("| " + " | ".join([row, what] + cells) + " |")
        if self.summary:
            lines.append("")
            lines.extend(self.summary)
        return "\n".join(lines)


def most_at_once(results, ends):
    """How many clients were reading at the same moment, at most: each
    client's read is the `seconds` it reports, ending when it exited
    (slightly late: its exit follows its last row)."""
    events = []
    for r, end in zip(results, ends):
        if r and r.get("seconds") is not None and end is not None:
            events += [(end - r["seconds"], 1), (end, -1)]
    most = now = 0
    for _, step in sorted(events):
        now += step
        most = max(most, now)
    return most


def many_verdict(expect, names, results, cuts, schedule):
    """The many row's judgement of `results` (one per client, `names[i]`
    its kind): per kind, a cell `k/m exact (p50 s, max s)`; overall,
    `N/N exact (p50, max)` and how many clients failed. Every client must
    be exact (no finding is known through the guard), and the fault proxy
    must have cut at least once: the schedule's i-th entry is for the
    guard's i-th upstream connection, and a guard that dials a fresh
    connection for a stream it found silent (its idle timeout, under heavy
    load) spends an entry on a connection that may end before its cut."""
    by_kind, details, failed, secs = {}, [], 0, []
    for i, (name, r) in enumerate(zip(names, results)):
        r = r or {"rows": 0, "wrong": None, "seconds": None, "error": "the client did not finish"}
        ok, text = judge(expect, r)
        good, times = by_kind.setdefault(name, ([], []))
        good.append(ok)
        if r.get("seconds") is not None:
            times.append(r["seconds"])
            secs.append(r["seconds"])
        if not ok:
            failed += 1
            details.append(f"client {i} ({name}): {text}")

    def spread(ts):
        if not ts:
            return ""
        ts = sorted(ts)
        return f" (p50 {ts[(len(ts) - 1) // 2]:.1f} s, max {ts[-1]:.1f} s)"

    cells = {}
    for name, (good, times) in by_kind.items():
        text = f"{sum(good)}/{len(good)} exact{spread(times)}"
        cells[name] = text if all(good) else f"**FAIL**: {text}"
    exact = len(names) - failed
    text = f"{exact}/{len(names)} exact{spread(secs)}"
    scheduled = len([c for c in schedule.split(",") if c.strip()])
    if not cuts:
        failed += 1
        details.append(f"the fault proxy made no cut (schedule {schedule})")
        text = f"**FAIL** (no cut): {text}"
    elif failed:
        text = f"**FAIL**: {text}"
    return {"cells": cells, "text": text, "failed": failed, "details": details,
            "scheduled": scheduled}


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


def proxied_chaos_upstream(chaos, path, proxy, cuts, log_dir):
    """The chaos server serving `path`, behind the fault proxy: returns
    ([proxy, server], the proxy's address); the proxy first, so its
    summary (the cuts) is what the caller reads when it stops it."""
    def start_it(tag):
        server = start([chaos, "--listen", "127.0.0.1:0", path],
                       os.path.join(log_dir, f"{tag}.server.log"))
        try:
            fault = start([proxy, "--upstream", server[1], "--listen", "127.0.0.1:0",
                           "--cuts", cuts], os.path.join(log_dir, f"{tag}.proxy.log"))
        except RuntimeError:
            stop(server[0])
            raise
        return [fault[0], server[0]], fault[1]
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
    p.add_argument("--many", type=int, default=0,
                   help="N: the many-clients row, N clients at once through one guard (needs --guard, --proxy)")
    p.add_argument("--many-scenario", help="the chaos server's scenario behind the many row's proxy "
                   "(without --spark)")
    p.add_argument("--many-cuts", default="8M,16M,16M,16M",
                   help="the cut schedule of the many row's upstream")
    p.add_argument("--many-only", action="store_true",
                   help="only the many-clients row: no scenario, hand-over or real-Spark cuts row")
    p.add_argument("--many-guard-args", default="",
                   help="more arguments for the many row's guard, e.g. '--idle-timeout-ms 60000'")
    p.add_argument("--out")
    p.add_argument("scenarios", nargs="*")
    args = p.parse_args()
    if args.many_only:
        if not args.many:
            sys.exit("--many-only needs --many N")
        args.scenarios, args.handover = [], None
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
    if args.spark and not args.many_only:
        if not args.proxy:
            sys.exit("--spark needs --proxy")
        expect = {"query": f"SELECT id, id*2 AS x FROM range({SPARK_ROWS})", "rows": SPARK_ROWS}
        table.run_row("spark-cuts", proxy_upstream(args.proxy, args.spark, args.spark_cuts, log_dir),
                      expect, f"{SPARK_ROWS:,} rows (real Spark, cuts {args.spark_cuts})")
    if args.many:
        if not (args.guard and args.proxy):
            sys.exit("--many needs --guard and --proxy")
        if args.spark:
            upstream = args.spark.removeprefix("sc://").split("/")[0]

            def start_it(tag):
                proxy = start([args.proxy, "--upstream", upstream, "--listen", "127.0.0.1:0",
                               "--cuts", args.many_cuts], os.path.join(log_dir, f"{tag}.proxy.log"))
                return [proxy[0]], proxy[1]
            expect = {"query": f"SELECT id, id*2 AS x FROM range({SPARK_ROWS})", "rows": SPARK_ROWS}
            source = "real Spark"
        else:
            if not args.many_scenario:
                sys.exit("--many needs --spark or --many-scenario")
            with open(args.many_scenario, "rb") as f:
                expect = dict(tomllib.load(f)["expect"])
            if "rows" not in expect:
                sys.exit(f"{args.many_scenario}: the many row needs a scenario that expects rows")
            start_it = proxied_chaos_upstream(args.chaos, args.many_scenario, args.proxy,
                                              args.many_cuts, log_dir)
            source = f"the chaos server ({os.path.splitext(os.path.basename(args.many_scenario))[0]})"
        mix = ", ".join(f"{sum(1 for i in range(args.many) if i % len(table.clients) == k)} {c}"
                        for k, (c, _) in enumerate(table.clients))
        table.many(args.many, start_it, expect,
                   f"{expect['rows']:,} rows to each of {args.many} clients at once ({mix}) "
                   f"through one guard; {source} behind it, cut at {args.many_cuts}")
    md = table.markdown()
    print(md)
    print(f"\n{table.failed} failed cell(s); {time.monotonic() - t0:.0f} s")
    if args.out:
        with open(args.out, "w") as f:
            f.write(md + "\n")
    sys.exit(1 if table.failed else 0)


if __name__ == "__main__":
    main()
