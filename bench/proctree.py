"""The memory of a process and the workers it forks, sampled while it runs (for the CLI benchmarks).

``ru_maxrss`` of a child is its own peak, not its workers'; a pod's memory limit charges them all.
Two measures: the sum of each process's RSS (``VmRSS``: pages shared after the fork counted once per
process, so it over-counts), and the sum of PSS (``/proc/PID/smaps_rollup``: each shared page split
between its sharers, as close to what the cgroup charges as /proc gives)."""

from __future__ import annotations

import contextlib
import os
import threading


def _descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (gone ones are skipped)."""
    found, stack = [], [pid]
    while stack:
        p = stack.pop()
        found.append(p)
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    stack += [int(c) for c in f.read().split()]
    return found


def tree_kib(pid: int, *, pss: bool = False) -> int:
    """RSS (or PSS) of ``pid`` and all its descendants, in KiB (0 for a process that is gone)."""
    path, key = ("smaps_rollup", "Pss:") if pss else ("status", "VmRSS:")
    total = 0
    for p in _descendants(pid):
        with contextlib.suppress(OSError), open(f"/proc/{p}/{path}") as f:
            total += next((int(ln.split()[1]) for ln in f if ln.startswith(key)), 0)
    return total


class PeakSampler:
    """The highest :func:`tree_kib` of ``pid`` seen every ``interval`` seconds until :meth:`stop`."""

    def __init__(self, pid: int, *, interval: float, pss: bool = False) -> None:
        self.peak_kib = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(pid, interval, pss), daemon=True)
        self._thread.start()

    def _run(self, pid: int, interval: float, pss: bool) -> None:
        while not self._done.wait(interval):
            self.peak_kib = max(self.peak_kib, tree_kib(pid, pss=pss))

    def stop(self) -> int:
        self._done.set()
        self._thread.join()
        return self.peak_kib
