"""The AdmissionReview bodies the server benchmark sends: a realistic day's mix, built once, on disk.

What the apiserver sends a GPU webhook (the webhook configurations' ``matchConditions`` keep most
non-GPU objects away, so they are a minority): inference pods from ReplicaSets, 8-GPU training pods,
Volcano Jobs and a few non-GPU pods, each to ``/mutate`` and then to ``/validate``. A ``/validate``
body carries the object *after* our own mutation (the engine's patch applied), as the apiserver
would send it after the mutating phase, so validation sees what it sees in a cluster.

Every body has its own uid. The same files feed wrk (``rotate.lua``) and the open-loop client.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonpatch
import orjson

from bench.workloads import INFERENCE_POD, TRAINING_JOB_POD, TRAINING_NAMESPACE
from tests.server.support import review
from webhook.engine import Request, mutate
from webhook.policy import load_policy

SERVING_NAMESPACE = {"gpu-admission.io/tier": "serving"}
NAMESPACES_YAML = "serving: {gpu-admission.io/tier: serving}\nllm: {gpu-admission.io/tier: training}\n"
"""The ``--namespace-labels`` file both the engine (here) and the server read: same labels, same decisions."""

VOLCANO_JOB: dict[str, Any] = {
    "apiVersion": "batch.volcano.sh/v1alpha1",
    "kind": "Job",
    "metadata": {
        "name": "train-qwen",
        "labels": {"gpu-admission.io/workload": "training"},
        "annotations": {"gpu-admission.io/gpus": "8"},
    },
    "spec": {
        "minAvailable": 4,
        "queue": "default",
        "tasks": [
            {
                "name": "worker",
                "replicas": 4,
                "template": {
                    "spec": {
                        "restartPolicy": "OnFailure",
                        "containers": [
                            {
                                "name": "torch",
                                "image": "registry.example.com/torch:2.4-roce",
                                "command": ["torchrun", "train.py"],
                                "resources": {"limits": {"cpu": "32", "memory": "256Gi"}},
                            }
                        ],
                    }
                },
            }
        ],
    },
}

PLAIN_POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"generateName": "web-6c9f7-", "labels": {"app": "web", "pod-template-hash": "6c9f7"}},
    "spec": {
        "containers": [
            {
                "name": "nginx",
                "image": "nginx:1.27",
                "ports": [{"containerPort": 80}],
                "resources": {
                    "limits": {"cpu": "500m", "memory": "256Mi"},
                    "requests": {"cpu": "250m", "memory": "128Mi"},
                },
            }
        ]
    },
}

# (name, object, namespace, namespace labels, weight): weight = reviews per round, on each endpoint
MIX: tuple[tuple[str, dict[str, Any], str, dict[str, str] | None, int], ...] = (
    ("inference-pod", INFERENCE_POD, "serving", SERVING_NAMESPACE, 3),
    ("training-pod", TRAINING_JOB_POD, "llm", TRAINING_NAMESPACE, 3),
    ("volcano-job", VOLCANO_JOB, "llm", TRAINING_NAMESPACE, 2),
    ("plain-pod", PLAIN_POD, "default", None, 2),
)


@dataclass(frozen=True)
class Body:
    name: str
    path: str  # "/mutate?timeout=10s" or "/validate?timeout=10s", as the apiserver calls it
    file: Path
    data: bytes


def _final_object(policy: Any, obj: dict[str, Any], namespace: str, labels: dict[str, str] | None) -> dict[str, Any]:
    """The object as ``/validate`` receives it: our own mutation applied."""
    decision = mutate(policy, Request(copy.deepcopy(obj), namespace=namespace, namespace_labels=labels))
    return jsonpatch.apply_patch(copy.deepcopy(obj), list(decision.patch)) if decision.patch else copy.deepcopy(obj)


def build(out: Path, policy_dir: str | Path = "policies", rounds: int = 4) -> list[Body]:
    """Write the bodies under ``out`` plus ``manifest.txt`` (``PATH FILE`` per line, in send order)."""
    out.mkdir(parents=True, exist_ok=True)
    policy = load_policy(policy_dir)
    (out / "namespaces.yaml").write_text(NAMESPACES_YAML)
    bodies: list[Body] = []
    for r in range(rounds):
        for name, obj, ns, labels, weight in MIX:
            final = _final_object(policy, obj, ns, labels)
            for w in range(weight):
                for endpoint, sent in (("mutate", obj), ("validate", final)):
                    uid = f"bench-{name}-{endpoint}-{r}-{w}-0000-0000-000000000000"
                    data = orjson.dumps(review(copy.deepcopy(sent), namespace=ns, uid=uid))
                    file = out / f"{len(bodies):03d}-{endpoint}-{name}.json"
                    file.write_bytes(data)
                    bodies.append(Body(name, f"/{endpoint}?timeout=10s", file, data))
    # interleave so that consecutive requests differ in kind and endpoint
    order = sorted(range(len(bodies)), key=lambda i: (i % 7, i))
    bodies = [bodies[i] for i in order]
    (out / "manifest.txt").write_text("".join(f"{b.path} {b.file}\n" for b in bodies))
    return bodies
