"""How ``pytest -n 2`` (pytest-xdist) shares the suite between its workers.

A module's tests stay on one worker, so its module-scoped servers and cached renders are built once, not
once per worker. Two tiers go to one worker each, whole: the end-to-end tier (one control plane per
session: a second worker would start a second plane) and the Helm tier (its chart renders are cached per
process). The modules in ``SPREAD_MODULES`` are CPU-bound comparisons with nothing module-scoped worth
sharing; their tests are shared out one by one, so the suite's slowest tests run side by side.

The longest units start first (``LONGEST_FIRST``): xdist orders units by their number of tests, which put
the in-tree differential's single tests of a minute each, and the end-to-end tier's minutes, last, with
one worker idle while the other finished them.

pytest-xdist's own ``--dist loadgroup`` would say the same with ``xdist_group`` marks, but it records the
group by rewriting ``item._nodeid``, which pytest 9.2 no longer reads (node ids are structured now): the
marks were silently ignored. So the grouping is a scheduler of ours: xdist's ``loadscope`` scheduling
with our scope for each test id. Only the default ``load`` mode is replaced; an explicit ``--dist`` other
than ``load`` is left to xdist.
"""

from __future__ import annotations

from typing import Any

import pytest

WHOLE_TIERS = {"e2e": "tier:e2e", "helm": "tier:helm"}
SPREAD_MODULES = frozenset({"tests/intree/test_differential.py", "tests/deploy/test_cel_forwards_every_trigger.py"})
# units measured longest (`pytest -n 2 --durations=0`, summed per unit), by prefix, in the order they are
# handed out first; the many short modules after them fill the gaps, so both workers finish together
LONGEST_FIRST = (
    "tier:e2e",
    "tests/intree/test_differential.py::test_gang_jobs",
    "tier:helm",
    "tests/reliability/test_fuzz.py",
    "tests/deploy/test_match_conditions.py",
    "tests/server/test_unknown_namespace.py",
    "tests/engine/test_corpus.py",
    "tests/oracle/test_properties.py",
    "tests/audit/test_audit_cluster.py",
    "tests/reliability/test_security.py",
    "tests/intree/test_differential.py",
    "tests/deploy/test_cel_forwards_every_trigger.py",
)


def work_unit(nodeid: str) -> str:
    """The unit a test is scheduled with: its tier, its module, or itself (a spread module's test)."""
    module = nodeid.split("::", 1)[0]
    parts = module.split("/")
    if len(parts) > 2 and parts[0] == "tests" and parts[1] in WHOLE_TIERS:
        return WHOLE_TIERS[parts[1]]
    return nodeid if module in SPREAD_MODULES else module


def longest_first(units: list[str]) -> list[str]:
    """The units of ``LONGEST_FIRST``, in its order (each prefix's units in their own order)."""
    out: list[str] = []
    for prefix in LONGEST_FIRST:
        out.extend(u for u in units if u.startswith(prefix) and u not in out)
    return out


def scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's loadscope scheduling over ``work_unit`` (None: an explicit ``--dist`` mode, xdist's own)."""
    if config.getoption("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByWorkUnit(LoadScopeScheduling):
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            if not self.ordered:  # the queue is complete before the first unit is handed out
                for unit in reversed(longest_first(list(self.workqueue))):
                    self.workqueue.move_to_end(unit, last=False)
                self.ordered = True
            super()._assign_work_unit(node)

    return ByWorkUnit(config, log)
