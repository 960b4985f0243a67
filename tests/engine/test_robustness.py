"""Hostile input never crashes the engine: wrong types anywhere, nulls, unicode, huge values.

The server turns an engine exception into the policy's failure mode, but that is a last resort: the
engine itself must treat any JSON as data and answer with findings.
"""

from __future__ import annotations

import copy

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.engine.helpers import container, intent, job, pod, vcjob
from webhook.engine import Request, report

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=8,
)

SEEDS = [
    pod(intent("training", gpus=8, gang="g", gang_size=3), [container(limits={"nvidia.com/gpu": "1"})]),
    pod(intent("inference", gpu_memory="4Gi"), nodeSelector={"workload": "gpu-train"}),
    job(intent("training", gpus=8), parallelism=4),
    vcjob(intent("training")),
]


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            yield from _paths(value, (*prefix, i))


def _replace(obj, path, value):
    if not path:
        return value
    obj = copy.deepcopy(obj)
    node = obj
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return obj


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.sampled_from(SEEDS), data=st.data(), value=json_values,
       operation=st.sampled_from(["CREATE", "UPDATE"]), training=st.booleans())
def test_any_field_replaced_by_any_json_value_is_handled(policy, seed, data, value, operation, training):
    paths = list(_paths(seed))
    path = data.draw(st.sampled_from(paths))
    obj = _replace(seed, path, value)
    labels = {"gpu-admission.io/tier": "training"} if training else None
    decision = report(policy, Request(obj, operation=operation, namespace="ns", namespace_labels=labels))
    assert isinstance(decision.allowed, bool)
    for v in decision.violations:
        assert v.rule and v.message


@given(value=json_values)
def test_any_top_level_value(policy, value):
    decision = report(policy, Request(value))
    assert decision.relevant is False or isinstance(value, dict)
