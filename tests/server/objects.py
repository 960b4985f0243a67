"""Realistic objects as the apiserver hands them to admission webhooks (defaulted fields omitted)."""

from __future__ import annotations

import copy
from typing import Any

TRAINING_NS = "research"  # labelled gpu-admission.io/tier: training in the namespaces file
SERVING_NS = "serving"
OTHER_NS = "sandbox"  # not in the file: only kubernetes.io/metadata.name is known

NAMESPACES_YAML = f"""\
{TRAINING_NS}:
  gpu-admission.io/tier: training
  team: llm
{SERVING_NS}:
  gpu-admission.io/tier: serving
"""


def inference_pod() -> dict[str, Any]:
    """A pod a ReplicaSet creates: generateName, no metadata.namespace (it comes in request.namespace)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "llm-server-7d9c5b-",
            "labels": {"app": "llm-server", "gpu-admission.io/workload": "inference"},
            "annotations": {"gpu-admission.io/gpu-memory": "4Gi"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "llm-server-7d9c5b",
                    "uid": "1f0e",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "server",
                    "image": "nvcr.io/nim/meta/llama-3.1-8b-instruct:1.3.3",
                    "env": [{"name": "NGC_API_KEY", "value": "s3cr3t-do-not-log"}],
                    "resources": {
                        "limits": {"cpu": "4", "memory": "16Gi"},
                        "requests": {"cpu": "4", "memory": "16Gi"},
                    },
                }
            ],
            "restartPolicy": "Always",
            "serviceAccountName": "default",
        },
    }


def training_vcjob(name: str = "train-llm") -> dict[str, Any]:
    """A Volcano Job of class training asking 8 GPUs per worker, 4 workers, all-or-nothing."""
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {
            "name": name,
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
                            "containers": [{"name": "torch", "image": "registry.example.com/torch:2.4-roce"}],
                        }
                    },
                }
            ],
        },
    }


def qwen_job(min_available: int) -> dict[str, Any]:
    """The chapter's own Volcano Job ``train-qwen`` (seed text), with ``minAvailable`` instead of the
    PodGroup field ``minMember`` it wrote."""
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "train-qwen"},
        "spec": {
            "minAvailable": min_available,
            "schedulerName": "volcano",
            "tasks": [
                {
                    "replicas": 8,
                    "name": "worker",
                    "template": {
                        "spec": {
                            "nodeSelector": {"workload": "gpu-train"},
                            "containers": [
                                {
                                    "name": "torch",
                                    "image": "registry/shop/torch:2.4-roce",
                                    "resources": {"limits": {"nvidia.com/gpu": 1}},
                                }
                            ],
                        }
                    },
                }
            ],
        },
    }


def raw_gpu_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "cuda-smoke"},
        "spec": {
            "containers": [
                {"name": "cuda", "image": "nvidia/cuda:12.4.1-base", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ]
        },
    }


def node_name_pod() -> dict[str, Any]:
    pod = raw_gpu_pod()
    pod["metadata"]["name"] = "pinned"
    pod["spec"]["nodeName"] = "gpu-node-17"
    return pod


def plain_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "nginx"},
        "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]},
    }


def copy_of(obj: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(obj)
