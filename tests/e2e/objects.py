"""What the end-to-end tests compare: ``check``'s prediction against what the real apiserver stored.

``check -o json`` says, per object, the patch, the warnings and the violations. The apiserver then adds
its own defaults (requests from limits, ``priority`` from the PriorityClass, the not-ready tolerations,
``dnsPolicy`` …). To compare without modelling those defaults, the predicted object is itself sent to the
same apiserver with ``--dry-run=server`` in a namespace our webhooks never intercept (``kube-system``):
what comes back is "check's prediction, defaulted by Kubernetes". Stored and predicted must then be
equal, metadata bookkeeping aside.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonpatch
import yaml

from tests.conftest import DEFAULT_POLICY_DIR, ROOT
from tests.e2e.plane.controlplane import Plane

UNINTERCEPTED = "kube-system"  # both webhook configurations' namespaceSelector leave it out
VOLATILE_METADATA = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation", "namespace",
                     "selfLink", "generateName", "name")  # fmt: skip


def check(doc: dict[str, Any], namespace: str, labels: dict[str, str] | None = None,
          policy: Path = DEFAULT_POLICY_DIR, extra: tuple[str, ...] = ()) -> dict[str, Any]:  # fmt: skip
    """``gpu-admission check - -o json`` of one object in ``namespace`` with those labels: its one result."""
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": labels or {}}}
    doc = {**doc, "metadata": {**doc.get("metadata", {}), "namespace": namespace}}
    text = yaml.safe_dump_all([ns, doc])
    proc = subprocess.run(
        [sys.executable, "-m", "webhook", "check", "-", "--policy", str(policy), "-o", "json", *extra],
        input=text, capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr
    results = [r for r in json.loads(proc.stdout)["results"] if r.get("kind") == doc["kind"]]
    assert len(results) == 1, proc.stdout
    return results[0]


def predicted(doc: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    return jsonpatch.apply_patch(copy.deepcopy(doc), result.get("patch") or [])


def denial_message(result: dict[str, Any]) -> str:
    """The ``status.message`` /validate sends for a denied result: ``[rule] message (path); …``."""
    return "; ".join(
        f"[{v['rule']}] {v['message']} ({v['path']})" if v.get("path") else f"[{v['rule']}] {v['message']}"
        for v in result["violations"]
        if v["action"] == "deny"
    )


def create(plane: Plane, doc: dict[str, Any], namespace: str, *, dry_run: bool = False,
           kubeconfig: Path | None = None) -> tuple[int, dict[str, Any] | None, str]:  # fmt: skip
    """``kubectl create`` as a user does: (exit code, the stored object, stderr with the warnings)."""
    args = ["create", "-n", namespace, "-o", "json", "-f", "-"]
    if dry_run:
        args.insert(1, "--dry-run=server")
    proc = plane.kubectl(*args, input=json.dumps(doc), check=False, kubeconfig=kubeconfig)
    stored = json.loads(proc.stdout) if proc.returncode == 0 and proc.stdout.strip() else None
    return proc.returncode, stored, proc.stderr


def warnings(stderr: str) -> list[str]:
    return [line.removeprefix("Warning: ") for line in stderr.splitlines() if line.startswith("Warning: ")]


def defaulted(plane: Plane, doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` as the apiserver would store it with no webhook of ours on the way."""
    doc = copy.deepcopy(doc)
    doc["metadata"].pop("namespace", None)
    code, stored, err = create(plane, doc, UNINTERCEPTED, dry_run=True)
    assert code == 0, f"the apiserver refused check's prediction: {err}"
    assert stored is not None
    return stored


def comparable(obj: dict[str, Any]) -> dict[str, Any]:
    """Metadata bookkeeping and status dropped; tolerations in a fixed order.

    Toleration order means nothing to the scheduler, and it differs for a reason outside the product:
    the apiserver's DefaultTolerationSeconds plugin runs before the mutating webhooks, so on the real
    path its ``not-ready``/``unreachable`` tolerations come first and the pool's toleration the webhook
    adds after them, while check's prediction, defaulted afterwards, has them the other way round."""
    out = copy.deepcopy(obj)
    for key in VOLATILE_METADATA:
        out["metadata"].pop(key, None)
    out.pop("status", None)
    _drop_uid_labels(out)
    for spec in _pod_specs(out):
        if isinstance(spec.get("tolerations"), list):
            spec["tolerations"].sort(key=lambda t: json.dumps(t, sort_keys=True))
    return out


UID_LABELS = ("controller-uid", "batch.kubernetes.io/controller-uid")
"""The labels the apiserver's Job defaulting derives from the object's own uid (selector and template)."""


def _drop_uid_labels(node: Any) -> None:
    if isinstance(node, dict):
        for key in ("labels", "matchLabels"):
            if isinstance(node.get(key), dict):
                for label in UID_LABELS:
                    node[key].pop(label, None)
        for value in node.values():
            _drop_uid_labels(value)
    elif isinstance(node, list):
        for value in node:
            _drop_uid_labels(value)


def _pod_specs(obj: Any) -> list[dict[str, Any]]:
    """Every pod spec in an object: its own (a Pod) and every template's, wherever a kind keeps them."""
    found: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("containers"), list):
                found.append(node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(obj.get("spec"))
    return found


def check_many(docs: list[dict[str, Any]], namespace: str, labels: dict[str, str] | None = None,
               policy: Path = DEFAULT_POLICY_DIR) -> list[dict[str, Any]]:  # fmt: skip
    """One ``check`` run over many objects (each named uniquely), its results in the objects' order."""
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": labels or {}}}
    named = []
    for i, doc in enumerate(docs):
        meta = {k: v for k, v in doc.get("metadata", {}).items() if k != "generateName"}
        named.append({**doc, "metadata": {**meta, "name": f"d{i}", "namespace": namespace}})
    proc = subprocess.run(
        [sys.executable, "-m", "webhook", "check", "-", "--policy", str(policy), "-o", "json"],
        input=yaml.safe_dump_all([ns, *named]), capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr
    by_name = {r.get("name"): r for r in json.loads(proc.stdout)["results"] if r.get("kind") != "Namespace"}
    return [by_name.get(f"d{i}", {"status": "missing"}) for i in range(len(docs))]


def differences(got: Any, want: Any, path: str = "") -> list[str]:
    """The paths where two objects differ, with both values: what a failed comparison says."""
    if isinstance(got, dict) and isinstance(want, dict):
        out = []
        for key in sorted(set(got) | set(want), key=str):
            out += differences(got.get(key, "<absent>"), want.get(key, "<absent>"), f"{path}.{key}")
        return out
    if isinstance(got, list) and isinstance(want, list) and len(got) == len(want):
        return [d for i, (g, w) in enumerate(zip(got, want, strict=True)) for d in differences(g, w, f"{path}[{i}]")]
    return [] if got == want else [f"{path}: stored {got!r}, predicted {want!r}"]
