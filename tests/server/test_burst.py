"""The burst benchmark's replay, small: a real ``serve`` in cluster mode (gunicorn, TLS, the fake
apiserver's namespace list and watch), a few dozen objects of every category, each ``/mutate``d,
patched and ``/validate``d as the apiserver does; every answer must match the engine's verdict and
patch. Only correctness is asserted; ``bench/burst.py`` measures the speed."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path

from bench.burst import expected, run_burst, scenario
from tests.conftest import POLICIES


def test_a_small_burst_is_answered_without_error_and_with_the_engines_verdicts(tmp_path: Path) -> None:
    units = expected(POLICIES, scenario([8, 12], dra=4, replicas=4, completions=3, cpu=3))
    # the control: one object whose expectation is wrong on purpose must be caught as a wrong verdict
    control = copy.deepcopy(units[0].obj)
    control["metadata"]["name"] = "control-expects-a-denial"
    units.append(replace(units[0], name="control-expects-a-denial", obj=control, validate_allowed=False))
    result = run_burst(tmp_path, units, policy_dir=POLICIES, workers=1, threads=4, clients=1, concurrency=4)
    assert len(result["first_errors"]) == 1 and result["first_errors"][0].startswith("control-expects-a-denial: ")
    assert (result["errors"], result["wrong_verdicts"], result["server_error_lines"]) == (0, 1, 0)
    assert result["answered"] == len(units) - 1 == 8 + 12 + 4 + 2 + 4 + 1 + 3 + 3
    assert result["by_kind"] == {
        "cpu-pod": 3, "deployment": 1, "deployment-pod": 4, "dra-pod": 4, "gang-12": 12, "gang-8": 8,
        "job": 1, "job-pod": 3, "replicaset": 1,
    }
