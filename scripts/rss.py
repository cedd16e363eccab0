"""A process's resident set, read from /proc: what the chaos table's
many-clients row and the guard benchmark report as the guard's peak.

Why a module: both scripts sample the guard the same way, and their
figures are compared in the guard's README.
"""

import threading
import time


def rss_mib(pid):
    """The resident set of `pid` in MiB (0 once it has gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class RssSampler:
    """The largest resident set of `pid` (MiB), sampled every 0.1 s while
    running."""

    def __init__(self, pid):
        self.pid, self.peak, self.done = pid, 0.0, False
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.done:
            self.peak = max(self.peak, rss_mib(self.pid))
            time.sleep(0.1)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done = True
        self.thread.join()
