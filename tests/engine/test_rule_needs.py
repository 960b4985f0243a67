"""Rules skipped for lack of a fact they need (``Rule.needs``) would have found nothing.

``--explain`` runs every rule (it reports each one), so evaluating with and without it must give the
same violations: on generated objects and on every real-world manifest, with and without intent."""

from __future__ import annotations

import copy

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import CORPUS, TRAINING_NS, need_shared
from tests.engine.test_properties import intent_objects
from webhook.engine import Request, Stage, explain, report
from webhook.engine.rules import RULES
from webhook.engine.rules.registry import FACTS, rule


def _same_verdict(policy, obj, labels, **kwargs) -> None:
    skipping = report(policy, Request(copy.deepcopy(obj), namespace="ns", namespace_labels=labels, **kwargs))
    everything = explain(policy, Request(copy.deepcopy(obj), namespace="ns", namespace_labels=labels, **kwargs))
    assert skipping.violations == everything.violations


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=intent_objects(), training=st.booleans(), received=st.booleans())
def test_skipping_rules_never_changes_a_verdict(policy, obj, training, received):
    _same_verdict(policy, obj, TRAINING_NS if training else None, stage=Stage.STORED if received else Stage.MANIFEST)


def test_skipping_rules_never_changes_a_verdict_on_real_manifests(policy):
    checked = 0
    for path in sorted(need_shared(CORPUS).rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not isinstance(doc, dict) or "kind" not in doc:
                continue
            for labels in (None, TRAINING_NS):
                _same_verdict(policy, doc, labels)
                checked += 1
    assert checked > 100


def test_rules_that_skip_name_known_facts():
    assert {n for r in RULES.values() for n in r.needs} <= FACTS
    assert any(r.needs for r in RULES.values())
    with pytest.raises(ValueError, match="unknown facts"):
        rule("x-test", needs=("no-such-fact",))
