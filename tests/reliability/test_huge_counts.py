"""Counts from the object never size an allocation: a Volcano task with ``replicas: 6156070752`` used
to build one list entry per pod for the gang bin-packing check (``gang-unschedulable``) and raise
MemoryError (or, under a pod memory limit, get the worker OOM-killed). Found by
``tests/engine/test_robustness.py``; the packing now works on runs of identical pods and nodes.
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import TRAINING_NS
from tests.server import objects
from webhook.engine import Request, report
from webhook.engine.rules.gang import first_fit_decreasing_bins

pytestmark = pytest.mark.reliability


def _pod_by_pod(pods: dict[int, int], per_node: int) -> int:
    """The reference: first-fit decreasing, one pod at a time (what the rule used to do)."""
    bins: list[int] = []
    for need in sorted((d for d, c in pods.items() for _ in range(c)), reverse=True):
        for i, free in enumerate(bins):
            if free >= need:
                bins[i] -= need
                break
        else:
            bins.append(per_node - need)
    return len(bins)


@settings(max_examples=3000, deadline=None, derandomize=True, database=None)
@given(
    pods=st.dictionaries(st.integers(min_value=-3, max_value=12), st.integers(min_value=1, max_value=40), max_size=4),
    per_node=st.integers(min_value=0, max_value=10),
)
def test_run_length_packing_equals_pod_by_pod(pods: dict[int, int], per_node: int):
    assert first_fit_decreasing_bins(pods, per_node) == _pod_by_pod(pods, per_node)


def test_billions_of_replicas_are_judged_without_allocating_per_pod(policy):
    job = objects.qwen_job(8)
    job["metadata"]["labels"] = {"gpu-admission.io/workload": "training"}
    job["spec"]["tasks"][0]["replicas"] = 6_156_070_752
    decision = report(policy, Request(copy.deepcopy(job), namespace="research", namespace_labels=TRAINING_NS))
    unschedulable = [v for v in decision.violations if v.rule == "gang-unschedulable"]
    # 1 GPU per pod, 8 per node: ceil(6156070752 / 8) nodes
    assert unschedulable and "6156070752 GPUs on 769508844 nodes" in unschedulable[0].message
    assert decision.allowed is False
