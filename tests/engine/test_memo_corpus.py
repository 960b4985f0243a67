"""The policy's memo never changes an answer: the whole corpus, judged through one warm memo and with none.

The compiled policy remembers what depends on the policy and a key only (``Policy.recall``: reach tables
by placement, the intent a template's annotations spell, the pool a placement pins, ...), shared by
every request the policy judges until a reload. A key that missed something the result reads would
carry one object's answer to another. So every object of the corpus — the shipped examples and the
policy test suites' objects, the real-world manifests, the raw-request attacks, the scheduler oracle's
generated workloads, the gang Jobs and the gangs policy's own kind — is judged twice per policy: in
order through one policy whose memo every earlier object filled (what a server does), and through a
policy that remembers nothing; decisions, patches, messages, placements and waste must be the same.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings

from tests.conftest import CORPUS, need_shared
from tests.engine.test_reach_attacks import RAW_ATTACKS
from tests.intree.conftest import policy_named
from tests.intree.test_differential import ORACLE, _examples, _gang_jobs, _labels, _objects, _sweeps
from tests.oracle.cluster import read_policy
from tests.oracle.controllers import pods_of
from tests.oracle.workloads import scenarios
from webhook import engine
from webhook.engine.model.cluster import EMPTY_CLUSTER, Cluster
from webhook.policy.compiled import Policy

pytestmark = pytest.mark.slow

NAMESPACE = "team-a"
Item = tuple[str, dict[str, Any], dict[str, str], Cluster]


class Forgetting(dict):
    """A memo that keeps nothing: every question the policy is asked is computed afresh."""

    def get(self, key, default=None):  # type: ignore[no-untyped-def, override]
        return default

    def __setitem__(self, key, value) -> None:  # type: ignore[no-untyped-def]
        pass


def forgetful(policy: Policy) -> Policy:
    return dataclasses.replace(policy, memo=Forgetting())


def answer(decision: engine.Decision) -> tuple[Any, ...]:
    """Everything an edge reads from a decision (the mutated object follows from the patch)."""
    return (
        decision.kind, decision.name, decision.operation, decision.patch,
        tuple(repr(v) for v in decision.violations), decision.explanation, decision.relevant,
        decision.namespace_unknown, repr(decision.waste), repr(decision.placements), repr(decision.carried_grants),
    )  # fmt: skip


def _oracle_items(name: str) -> list[Item]:
    facts = read_policy(yaml.safe_load(ORACLE[name].read_text()))
    out: list[Item] = []

    @settings(max_examples=40, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck), print_blob=False)  # fmt: skip
    @given(scenarios(facts))
    def collect(scenario) -> None:
        cluster = Cluster()
        if scenario.known is not None:
            cluster = Cluster(nodes=tuple(n.as_k8s() for n in scenario.nodes if n.name in scenario.known))
        out.append(("oracle", copy.deepcopy(scenario.obj), dict(scenario.namespace_labels), cluster))
        for pod in pods_of(scenario.obj, scenario.nodes):
            out.append(("oracle pod", pod, dict(scenario.namespace_labels), cluster))

    collect()
    return out


def corpus(name: str) -> Iterator[Item]:
    for labels in _labels(name):
        for source, obj in _examples():
            yield source, obj, labels, EMPTY_CLUSTER
    if CORPUS.is_dir():
        for f in sorted(CORPUS.rglob("*.yaml")):
            for obj in _objects(f):
                yield f.name, obj, {}, EMPTY_CLUSTER
    for attack, spec in sorted(RAW_ATTACKS.items()):
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "raw"},
               "spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
                        **copy.deepcopy(spec)}}  # fmt: skip
        for labels in _labels(name):
            yield f"attack: {attack}", pod, labels, EMPTY_CLUSTER
    if name in ORACLE:
        yield from _oracle_items(name)
    if name == "gangs":
        for job in _gang_jobs() + _sweeps():
            yield "gang job", job, {}, EMPTY_CLUSTER


@pytest.mark.parametrize("name", ["default", "providers", "dra-example", "gangs", "variant"])
def test_the_memo_never_changes_an_answer(name):
    warm = policy_named(name)
    cold = forgetful(policy_named(name))
    assert cold.recall(("probe",), lambda: 1) == 1 and not cold.memo
    items = list(corpus(name))
    # twice through the warm policy, so every object also meets a memo its own first judgement filled
    judged = 0
    for source, obj, labels, cluster in itertools.chain(items, items):
        full = {"kubernetes.io/metadata.name": NAMESPACE, **labels}
        request = engine.Request(copy.deepcopy(obj), namespace=NAMESPACE, namespace_labels=full, cluster=cluster)
        got = answer(engine.report(warm, request))
        want = answer(engine.report(cold, engine.Request(copy.deepcopy(obj), namespace=NAMESPACE,
                                                          namespace_labels=full, cluster=cluster)))  # fmt: skip
        assert got == want, f"{name}: {source}: the memo changed the answer"
        judged += 1
    assert warm.memo, "nothing was remembered: the test would compare nothing"
    assert judged >= 2 * 40
    if name == "default":
        need_shared(CORPUS)  # the corpus part ran (a plain clone skips here, having checked the rest)
