"""``--baseline OLD_POLICY``: what a policy change means for each object already in the cluster.

Every object is judged under both policies; the verdicts are compared in words a reviewer reads in
a pull request: "newly denied", "newly warned", "newly admitted", "no longer warned" or "unchanged".
An object the old policy did not judge at all (not GPU-relevant to it) counts as admitted by it.
Separately, objects the mutating webhook would now change differently (another pool, other
resource names, a different patch) are named with what differs, since a policy change that denies
nothing can still move every new pod of a Deployment to another pool.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson

from webhook.check.runner import Status
from webhook.engine import Violation

if TYPE_CHECKING:
    from webhook.audit.judge import Judged

NEWLY_DENIED = "newly denied"
NEWLY_WARNED = "newly warned"
NEWLY_ADMITTED = "newly admitted"
NO_LONGER_WARNED = "no longer warned"
UNCHANGED = "unchanged"
ENGINE_ERROR = "engine error"
VERDICTS = (NEWLY_DENIED, NEWLY_WARNED, NEWLY_ADMITTED, NO_LONGER_WARNED, ENGINE_ERROR, UNCHANGED)


@dataclass(slots=True)
class Change:
    verdict: str
    old_status: Status
    old_violations: tuple[Violation, ...]
    mutation: tuple[str, ...] = ()  # what the webhook would now change differently, in words

    @property
    def mutated_differently(self) -> bool:
        return bool(self.mutation)


def _level(status: Status) -> Status:
    return Status.ADMITTED if status is Status.SKIPPED else status


def compare(old: Judged, new: Judged) -> Change:
    """The change from ``old`` to ``new`` (two :class:`~webhook.audit.judge.Judged` of one object)."""
    before, after = _level(old.status), _level(new.status)
    if Status.ENGINE_ERROR in (before, after):
        verdict = ENGINE_ERROR
    elif after is Status.DENIED and before is not Status.DENIED:
        verdict = NEWLY_DENIED
    elif before is Status.DENIED and after is not Status.DENIED:
        verdict = NEWLY_ADMITTED
    elif after is Status.WARNED and before is Status.ADMITTED:
        verdict = NEWLY_WARNED
    elif before is Status.WARNED and after is Status.ADMITTED:
        verdict = NO_LONGER_WARNED
    else:
        verdict = UNCHANGED
    return Change(verdict, old.status, old.violations, mutation_changes(old, new))


def mutation_changes(old: Judged, new: Judged) -> tuple[str, ...]:
    """Placements and patch operations that differ, in words (empty: mutated the same way)."""
    words: list[str] = []
    before, after = old.placements, new.placements
    if before != after:
        gone = [p for p in before if p not in after]
        came = [p for p in after if p not in before]
        for p in gone:
            words.append(f"no longer placed as {p}")
        for p in came:
            words.append(f"now placed as {p}")
    old_patch, new_patch = old.patch or (), new.patch or ()
    if old_patch != new_patch:
        for op in new_patch:
            if op not in old_patch:
                words.append(f"the patch now does {describe_op(op)}")
        for op in old_patch:
            if op not in new_patch:
                words.append(f"the patch no longer does {describe_op(op)}")
    return tuple(words)


def describe_op(op: str) -> str:
    """``replace /spec/schedulerName = "volcano"`` from a compact JSON Patch operation."""
    data = orjson.loads(op)
    text = f"{data.get('op')} {data.get('path')}"
    if "value" in data:
        value = orjson.dumps(data["value"]).decode()
        text += f" = {value if len(value) <= 120 else value[:117] + '...'}"
    return text
