"""Webhook up, in-tree policies installed: the real apiserver never denies what the engine admits.

A sample of the unit tier's differential corpus (``tests/intree/test_differential.py``: the shipped
policy's test-suite objects, the examples, the raw-request attacks, and the real-world corpus where
``../shared`` is present) is sent with ``--dry-run=server`` to namespaces matching each entitlement of the
shipped policy. Per object, ``check`` (the engine) and the apiserver (our webhooks, then the in-tree
policies, evaluated by cel-go) must agree on admit or deny. This is the emulated differential's
property checked where the apiserver itself evaluates the CEL.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from tests.conftest import CORPUS, POLICIES, ROOT
from tests.e2e import install, objects
from tests.e2e.conftest import Product
from tests.engine.test_reach_attacks import RAW_ATTACKS

NATIVE = {"Pod", "Job", "CronJob", "Deployment", "StatefulSet", "ReplicaSet", "DaemonSet"}
LABELS = ({}, {"gpu-admission.io/tier": "serving"}, {"gpu-admission.io/tier": "sandbox"})
IN_TREE_DENIAL = "ValidatingAdmissionPolicy 'gpu-admission-in-tree"


def _objects(path) -> list[dict[str, Any]]:
    out = []
    for doc in yaml.safe_load_all(path.read_text()):
        workload = isinstance(doc, dict) and doc.get("kind") in NATIVE and isinstance(doc.get("metadata"), dict)
        if workload and not str(doc.get("apiVersion", "")).startswith("gpu-admission.io/"):
            out.append(doc)
    return out


def sample() -> list[tuple[str, dict[str, Any]]]:
    files = sorted((POLICIES / "tests" / "objects").glob("*.yaml")) + sorted((ROOT / "examples").rglob("*.yaml"))
    if CORPUS.exists():
        files += sorted(CORPUS.rglob("*.yaml"))[:40]
    out = [(str(f), o) for f in files for o in _objects(f)]
    for attack, spec in sorted(RAW_ATTACKS.items()):
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "raw"},
               "spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
                        **copy.deepcopy(spec)}}  # fmt: skip
        out.append((f"attack: {attack}", pod))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("labels", LABELS, ids=["unlabelled", "serving", "sandbox"])
def test_engine_and_real_apiserver_agree(product: Product, in_tree: list[dict], labels: dict[str, str]) -> None:
    plane = product.plane
    ns = install.namespace(plane, labels)
    cases = sample()
    docs = [copy.deepcopy(o) for _, o in cases]
    results = objects.check_many(docs, ns, labels)
    compared, disagreements, refused_valid = 0, [], []
    for (source, _), doc, result in zip(cases, docs, results, strict=True):
        if result.get("status") in ("missing", "skipped", "invalid", "unreadable"):
            continue
        doc = {**doc, "metadata": {k: v for k, v in doc["metadata"].items() if k not in ("namespace", "name")}}
        doc["metadata"]["generateName"] = "diff-"
        proc = plane.kubectl("create", "--dry-run=server", "-n", ns, "-f", "-", input=json.dumps(doc), check=False)
        compared += 1
        admitted = proc.returncode == 0
        if result["allowed"] and not admitted:
            if IN_TREE_DENIAL in proc.stderr or "denied the request" in proc.stderr:
                disagreements.append(f"{source}: engine admits, the apiserver denied: {proc.stderr.strip()[:400]}")
            else:
                refused_valid.append(f"{source}: {proc.stderr.strip()[:300]}")
        elif not result["allowed"] and admitted:
            disagreements.append(f"{source}: engine denies {objects.denial_message(result)[:200]}, apiserver admitted")
    print(f"\n{compared} objects through the real apiserver; refused by its own validation: {len(refused_valid)}")
    for line in refused_valid[:10]:
        print("  ", line)
    assert compared >= 10
    assert not disagreements, "\n".join(disagreements[:5])
