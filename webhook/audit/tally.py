"""Counts for the audit's summary and exit code, and the few examples text output lists.

Gathered as results stream past: per (namespace, rule, action) a count and at most ``max_listed``
example lines, per ``--baseline`` verdict a count and examples. Nothing else is kept, so 100,000
violating pods cost a few counters, not 100,000 records.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from webhook.audit.baseline import NEWLY_DENIED, UNCHANGED, VERDICTS
from webhook.audit.judge import Judged
from webhook.check.runner import Status

EXIT_OK, EXIT_DENIED, EXIT_BAD_INPUT = 0, 1, 2


def tap(add: Callable[[Judged], None], judged: Iterable[Judged]) -> Iterator[Judged]:
    """Pass each record on unchanged after ``add`` has seen it: how the counters and the reports
    gather while a writer consumes the stream."""
    for j in judged:
        add(j)
        yield j


class AuditTally:
    def __init__(self, max_listed: int = 20) -> None:
        self.max_listed = max_listed  # 0: every one
        self.status: Counter[str] = Counter()
        self.skipped: Counter[str] = Counter()  # why: not-gpu, not-intercepted, mirror-pod
        self.groups: Counter[tuple[str, str, str]] = Counter()  # (namespace, rule, action)
        self.examples: dict[tuple[str, str, str], list[str]] = {}
        self.errors: list[str] = []
        self.verdicts: Counter[str] = Counter()
        self.changed: dict[str, list[Judged]] = {}
        self.mutated = 0
        self.mutated_examples: list[Judged] = []
        self.baseline = False

    def _room(self, listed: list[Any]) -> bool:
        return not self.max_listed or len(listed) < self.max_listed

    def observe(self, judged: Iterable[Judged]) -> Iterator[Judged]:
        return tap(self.add, judged)

    def add(self, j: Judged) -> None:
        if j.status is Status.SKIPPED:
            self.skipped[j.skip] += 1
            return
        self.status[j.status.value] += 1
        if j.status is Status.ENGINE_ERROR and self._room(self.errors):
            self.errors.append(f"{j.where}: {j.message}")
        owner = f" (owner {j.owner})" if j.owner else ""
        for v in j.violations:
            key = (j.namespace, v.rule, v.action.value)
            self.groups[key] += 1
            listed = self.examples.setdefault(key, [])
            if self._room(listed):
                listed.append(f"{j.label}{owner}: {v.message}" + (f" ({v.path})" if v.path else ""))
        change = j.change
        if change is not None:
            self.baseline = True
            self.verdicts[change.verdict] += 1
            listed = self.changed.setdefault(change.verdict, [])
            if change.verdict != UNCHANGED and self._room(listed):
                listed.append(j)
            if change.mutated_differently:
                self.mutated += 1
                if self._room(self.mutated_examples):
                    self.mutated_examples.append(j)

    @property
    def judged(self) -> int:
        return sum(self.status.values())

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "judged": self.judged,
            "admitted": self.status[Status.ADMITTED.value],
            "warned": self.status[Status.WARNED.value],
            "denied": self.status[Status.DENIED.value],
            "engineErrors": self.status[Status.ENGINE_ERROR.value],
            "notGPURelevant": self.skipped["not-gpu"],
            "notIntercepted": self.skipped["not-intercepted"],
            "mirrorPods": self.skipped["mirror-pod"],
            "findings": [
                {"namespace": ns, "rule": rule, "action": action, "count": n}
                for (ns, rule, action), n in sorted(self.groups.items())
            ],
        }
        if self.baseline:
            out["baseline"] = {v: self.verdicts[v] for v in VERDICTS} | {"mutatedDifferently": self.mutated}
        return out

    def exit_code(self) -> int:
        """2 an object could not be judged, 1 denials (with --baseline: new denials), else 0."""
        if self.status[Status.ENGINE_ERROR.value]:
            return EXIT_BAD_INPUT
        if self.baseline:
            return EXIT_DENIED if self.verdicts[NEWLY_DENIED] else EXIT_OK
        return EXIT_DENIED if self.status[Status.DENIED.value] else EXIT_OK
