"""How ``pytest -n 2`` (pytest-xdist) shares the suite between its workers.

A module's tests stay on one worker, so its module-scoped servers and cached renders are built once, not
once per worker. Two tiers go to one worker each, whole: the end-to-end tier (one control plane per
session: a second worker would start a second plane) and the Helm tier (its chart renders are cached per
process). The modules in ``SPREAD_MODULES`` are CPU-bound comparisons with nothing module-scoped worth
sharing; their tests are shared out one by one, so the suite's slowest tests run side by side.

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
SPREAD_MODULES = frozenset({"tests/intree/test_differential.py"})


def work_unit(nodeid: str) -> str:
    """The unit a test is scheduled with: its tier, its module, or itself (a spread module's test)."""
    module = nodeid.split("::", 1)[0]
    parts = module.split("/")
    if len(parts) > 2 and parts[0] == "tests" and parts[1] in WHOLE_TIERS:
        return WHOLE_TIERS[parts[1]]
    return nodeid if module in SPREAD_MODULES else module


def scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's loadscope scheduling over ``work_unit`` (None: an explicit ``--dist`` mode, xdist's own)."""
    if config.getoption("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByWorkUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return ByWorkUnit(config, log)
