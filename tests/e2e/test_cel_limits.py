"""Objects at the size bounds the docs promise pass every matchCondition and admission policy without a CEL error.

The apiserver meters CEL at run time (1,000,000 per expression, 2,500,000 for one webhook's
matchConditions, 10,000,000 per policy binding). Past a limit the expression errors and
``failurePolicy`` decides: the validating webhook and the in-tree policies fail closed, so an object
that is merely large would be denied without anyone judging it. Each object here is at the per-instance bounds
docs/policy.md promises, past the joint ones (a Pod of 16 containers, 8 init containers, 64 env entries
and 32 mounts each, 32 volumes, 16 tolerations, 32 labels and annotations of 1 KiB; a Volcano Job and a
JobSet of 8 roles of such pods; a 1 MiB pod). Each goes through both webhooks' matchConditions and every
in-tree policy on the real apiserver; the verdict must be the engine's and the apiserver's
match-condition and admission-policy error counters must not move.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest

from tests.conftest import CRDS
from tests.e2e import install, objects
from tests.e2e.conftest import Product
from tests.e2e.plane.controlplane import Plane

KEY = "gpu-admission.io/workload"
ERROR_METRICS = (
    "apiserver_admission_match_condition_evaluation_errors_total",
    "apiserver_validating_admission_policy_check_total",  # error_type label
    "apiserver_cel_evaluation_errors",
)
JOBSET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "jobsets.jobset.x-k8s.io"},
    "spec": {"group": "jobset.x-k8s.io", "scope": "Namespaced",
             "names": {"plural": "jobsets", "singular": "jobset", "kind": "JobSet", "listKind": "JobSetList"},
             "versions": [{"name": "v1alpha2", "served": True, "storage": True,
                           "schema": {"openAPIV3Schema": {"type": "object",
                                                          "x-kubernetes-preserve-unknown-fields": True}}}]},
}  # fmt: skip
# a stand-in: the webhooks' rules match jobsets.jobset.x-k8s.io; the JobSet controller is not needed


def big_pod_spec(value: int = 1024) -> dict[str, Any]:
    env = [{"name": f"E{i}", "value": "v" * 64} for i in range(64)]
    mounts = [{"name": f"v{i}", "mountPath": f"/m/{i}"} for i in range(32)]

    def c(name: str) -> dict[str, Any]:
        return {"name": name, "image": "registry.example/app:1", "env": copy.deepcopy(env),
                "volumeMounts": copy.deepcopy(mounts),
                "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}  # fmt: skip

    return {
        "containers": [c(f"c{i}") for i in range(16)],
        "initContainers": [c(f"i{i}") for i in range(8)],
        "volumes": [{"name": f"v{i}", "emptyDir": {}} for i in range(32)],
        "tolerations": [{"key": f"example.com/t{i}", "operator": "Exists", "effect": "NoSchedule"} for i in range(16)],
    }


def big_meta(cls: str | None) -> dict[str, Any]:
    labels = {f"example.com/l{i}": "x" * 63 for i in range(31)}
    annotations = {f"example.com/a{i}": "y" * 1024 for i in range(32)}
    if cls:
        labels[KEY] = cls
    return {"labels": labels, "annotations": annotations}


def big_pod(cls: str | None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "big-", **big_meta(cls)},
            "spec": big_pod_spec()}  # fmt: skip


def megabyte_pod(cls: str | None) -> dict[str, Any]:
    pod = big_pod(cls)
    pod["spec"]["containers"][0]["env"] = [{"name": f"M{i}", "value": "z" * 4000} for i in range(240)]
    assert 900_000 < len(json.dumps(pod)) < 1_200_000
    return pod


def volcano_job(cls: str | None) -> dict[str, Any]:
    tpl = {"metadata": big_meta(cls), "spec": big_pod_spec()}
    tpl["spec"]["restartPolicy"] = "Never"
    tasks = [{"name": f"role{i}", "replicas": 1, "template": copy.deepcopy(tpl)} for i in range(8)]
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"generateName": "big-"},
            "spec": {"minAvailable": 8, "schedulerName": "volcano", "tasks": tasks}}  # fmt: skip


def jobset(cls: str | None) -> dict[str, Any]:
    tpl = {"metadata": big_meta(cls), "spec": big_pod_spec()}
    tpl["spec"]["restartPolicy"] = "Never"
    roles = [{"name": f"role{i}", "replicas": 1,
              "template": {"spec": {"parallelism": 1, "completions": 1, "template": copy.deepcopy(tpl)}}}
             for i in range(8)]  # fmt: skip
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"generateName": "big-"},
            "spec": {"replicatedJobs": roles}}  # fmt: skip


def error_counters(plane: Plane) -> dict[str, float]:
    """Sum of every error-counting series of the apiserver's admission CEL metrics."""
    out: dict[str, float] = {}
    for line in plane.metrics().splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r"([a-z_]+)(\{[^}]*\})?\s+([0-9.e+-]+)$", line)
        if not m or not m.group(1).startswith(ERROR_METRICS):
            continue
        labels = m.group(2) or ""
        if m.group(1).startswith("apiserver_validating_admission_policy_check_total") and (
            'error_type="no_error"' in labels or "error_type" not in labels
        ):
            continue
        out[m.group(1) + labels] = float(m.group(3))
    return out


@pytest.fixture(scope="module")
def crds(product: Product) -> None:
    plane = product.plane
    install.apply(plane, [JOBSET_CRD])
    if (CRDS / "batch.volcano.sh_jobs.yaml").exists():
        plane.kubectl("apply", "--server-side", "-f", str(CRDS / "batch.volcano.sh_jobs.yaml"))
    install.wait_for(lambda: plane.kubectl("get", "jobsets", "-A", check=False).returncode == 0, "JobSets served")


SHAPES = {"pod": big_pod, "1MiB-pod": megabyte_pod, "volcano-job": volcano_job, "jobset": jobset}


@pytest.mark.slow
@pytest.mark.parametrize("cls", [None, "training", "inference"], ids=["no-class", "training", "inference"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_objects_at_the_size_bounds_meet_no_cel_error(product: Product, in_tree: list[dict], crds: None,
                                                      shape: str, cls: str | None) -> None:  # fmt: skip
    plane = product.plane
    doc = SHAPES[shape](cls)
    if doc["apiVersion"].startswith("batch.volcano.sh") and not (CRDS / "batch.volcano.sh_jobs.yaml").exists():
        pytest.skip(f"{CRDS / 'batch.volcano.sh_jobs.yaml'} is not available (the Volcano Job CRD)")
    ns = install.namespace(plane)
    before = error_counters(plane)
    result = objects.check(doc, ns)
    code, _, err = objects.create(plane, doc, ns, dry_run=True)
    after = error_counters(plane)
    moved = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    assert not moved, f"CEL evaluation errors on the real apiserver: {moved}; kubectl said: {err[-600:]}"
    assert "cost" not in err.lower() and "evaluation" not in err.lower(), err[-600:]
    allowed = result.get("allowed", True)  # a skipped object (nothing GPU-relevant) is not the webhook's
    assert (code == 0) == allowed, f"engine allowed={allowed} ({result.get('status')}), apiserver: {err[-600:]}"
