"""The model's values are values: what is remembered per policy is keyed by them, never by hand-listed
fields or by ``id()`` (an address reused after a value dies would share a wrong answer between
requests), and the rule catalogue the policy reads is the registry the engine runs."""

from __future__ import annotations

import ast
from fractions import Fraction
from pathlib import Path

import pytest

from webhook.engine import Request, report
from webhook.engine.model.intent import Intent
from webhook.engine.rules import RULES
from webhook.policy import load_policy_texts
from webhook.policy.rule_catalog import catalog

ROOT = Path(__file__).resolve().parents[2] / "webhook"


def test_an_intent_is_frozen_and_its_own_key():
    one = Intent("inference", "metadata.labels[x]", gpu_memory=Fraction(4 << 30), paths=(("gpu-memory", "a"),))
    same = Intent("inference", "metadata.labels[x]", gpu_memory=Fraction(4 << 30), paths=(("gpu-memory", "a"),))
    other = one._replace(container="sidecar")  # a field the old hand-written key did not list
    assert hash(one) == hash(same) and one == same
    assert one != other and len({one, same, other}) == 2
    with pytest.raises(AttributeError):
        one.gpus = 2  # type: ignore[misc]
    assert one.path_of("gpu-memory", "-") == "a" and one.path_of("gpus", "-") == "-" and one.has("gpu-memory")


def _recall_keys() -> list[tuple[str, int, ast.AST]]:
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "recall":
                out.append((str(path.relative_to(ROOT.parent)), node.lineno, node.args[0] if node.args else node))
    return out


def test_no_memo_key_is_an_address():
    keys = _recall_keys()
    assert len(keys) > 10, "the scan must see the memo's callers"
    by_address = [
        f"{where}:{line}"
        for where, line, key in keys
        if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "id" for n in ast.walk(key))
    ]
    assert not by_address, f"memo keys built from id(): {by_address}"


def test_the_catalogue_is_the_registry():
    entries = catalog()
    assert set(entries) == set(RULES), "a rule in rules.yaml without a check, or a check without an entry"
    for rule_id, rule in RULES.items():
        assert (rule.default, rule.catches) == (entries[rule_id].default, entries[rule_id].catches)


POLICY = """
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
metadata: {name: t}
spec:
  pools:
    a100: {gpuModel: A100-80GB, gpusPerNode: 8, isolation: [exclusive], nodeSelector: {pool: a100}, nodes: 4}
  classes:
    training: {pools: [a100], isolation: {default: exclusive}}
  namespaces:
    - {name: ml, selector: {matchLabels: {team: ml}}, classes: [training]}
    - {name: rest, selector: {}, classes: []}
"""


def test_two_entitlements_never_share_a_remembered_answer():
    """The same intent in an entitled and an unentitled namespace, alternately: each keeps its own verdict."""
    policy = load_policy_texts([("p.yaml", POLICY)])
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {"gpu-admission.io/workload": "training"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
    for _ in range(3):
        entitled = report(policy, Request(pod, namespace="ml", namespace_labels={"team": "ml"}))
        refused = report(policy, Request(pod, namespace="web", namespace_labels={"team": "web"}))
        assert entitled.allowed, entitled.message
        assert not refused.allowed and "class-not-allowed" in {v.rule for v in refused.violations}
