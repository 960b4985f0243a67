"""``pytest -n 2`` shares the suite by work unit (tests/parallel.py): a second worker that took an
end-to-end test would start a second control plane, and one that took half a module would start that
module's servers again."""

from __future__ import annotations

from tests.parallel import SPREAD_MODULES, longest_first, work_unit


def test_each_whole_tier_is_one_unit_whatever_the_module() -> None:
    e2e = {work_unit(n) for n in ("tests/e2e/test_examples.py::test_a", "tests/e2e/test_helm.py::test_b[x]")}
    helm = {work_unit(n) for n in ("tests/helm/test_chart.py::test_a", "tests/helm/test_release.py::test_b")}
    assert len(e2e) == len(helm) == 1 and e2e != helm


def test_a_module_is_one_unit_and_a_spread_module_is_shared_test_by_test() -> None:
    assert work_unit("tests/server/test_app.py::test_a") == work_unit("tests/server/test_app.py::test_b[1]")
    assert work_unit("tests/server/test_app.py::test_a") != work_unit("tests/server/test_review.py::test_a")
    spread = sorted(SPREAD_MODULES)[0]
    assert work_unit(f"{spread}::test_a[1]") != work_unit(f"{spread}::test_a[2]")


def test_a_module_named_like_a_tier_elsewhere_is_not_that_tier() -> None:
    assert work_unit("tests/server/test_e2e.py::test_a") == "tests/server/test_e2e.py"


def test_the_longest_units_are_handed_out_first() -> None:
    """xdist's own order (most tests first) left the minute-long single tests and the e2e tier for last."""
    units = [
        "tests/engine/test_rules.py",
        "tests/intree/test_differential.py::test_shipped_examples[default]",
        "tests/intree/test_differential.py::test_gang_jobs[update]",
        "tier:e2e",
    ]
    assert longest_first(units) == units[:0:-1]
