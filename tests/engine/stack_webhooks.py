"""Stand-ins for the mutating webhooks other GPU stacks install, written from their sources (not from
``sharing_stacks.yaml``), so a test can judge a pod the way the apiserver stores it after them.

HAMi (``vgpu.hami.io``, Pod CREATE, ``pkg/scheduler/webhook.go`` and ``pkg/device/nvidia/device.go``):
for every container and init container, a container holding only ``nvidia.com/gpumem``,
``gpumem-percentage`` or ``gpucores`` gets ``nvidia.com/gpu: 1``; a container asking for the whole
card's memory (``gpumem-percentage: 100``) and no cores gets ``nvidia.com/gpucores: 100``; GPU
containers get ``CUDA_TASK_PRIORITY`` / ``GPU_CORE_UTILIZATION_POLICY`` env, containers without a
GPU ``NVIDIA_VISIBLE_DEVICES=none``; a configured ``runtimeClassName`` is set; and if any container
held a HAMi resource, a pod whose scheduler is unset or ``default-scheduler`` is given
``hami-scheduler`` (``forceOverwriteDefaultScheduler``, the chart default). A pod naming another
scheduler is left alone.
"""

from __future__ import annotations

import copy
from typing import Any

HAMI_RESOURCES = ("nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores")


def hami_webhook(pod: dict[str, Any], runtime_class: str | None = "hami-runtime") -> dict[str, Any]:
    """The pod as HAMi's mutating webhook leaves it (a copy)."""
    out = copy.deepcopy(pod)
    spec = out["spec"]
    found = False
    for group in ("initContainers", "containers"):
        for c in spec.get(group) or []:
            limits = c.setdefault("resources", {}).setdefault("limits", {})
            held = [k for k in HAMI_RESOURCES if k in limits]
            env = c.setdefault("env", [])
            if not held:
                env.append({"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"})
                if not c["resources"]["limits"]:
                    del c["resources"]["limits"]
                if not c["resources"]:
                    del c["resources"]
                continue
            found = True
            if "nvidia.com/gpu" not in limits:
                limits["nvidia.com/gpu"] = "1"
            if limits.get("nvidia.com/gpumem-percentage") == "100" and "nvidia.com/gpucores" not in limits:
                limits["nvidia.com/gpucores"] = "100"
            env.append({"name": "CUDA_TASK_PRIORITY", "value": "1"})
            env.append({"name": "GPU_CORE_UTILIZATION_POLICY", "value": "default"})
    if found:
        if runtime_class:
            spec["runtimeClassName"] = runtime_class
        if spec.get("schedulerName") in (None, "", "default-scheduler"):
            spec["schedulerName"] = "hami-scheduler"
    return out


def kueue_pod_webhook(pod: dict[str, Any]) -> dict[str, Any]:
    """Kueue's Pod webhook on a pod with a queue label (``pkg/controller/jobs/pod``): the managed label and
    the admission scheduling gate, removed when the Workload is admitted."""
    out = copy.deepcopy(pod)
    labels = out["metadata"].setdefault("labels", {})
    if "kueue.x-k8s.io/queue-name" in labels:
        labels["kueue.x-k8s.io/managed"] = "true"
        out["spec"].setdefault("schedulingGates", []).append({"name": "kueue.x-k8s.io/admission"})
    return out


def volcano_job_webhook(job: dict[str, Any]) -> dict[str, Any]:
    """Volcano's Job mutating webhook at CREATE (``jobs/mutate/mutate_job.go``): queue ``default``, the
    first configured scheduler, ``maxRetry`` 3, each task's ``minAvailable`` (its replicas) and
    ``maxRetry``, and the Job's ``minAvailable`` as their sum when unset."""
    out = copy.deepcopy(job)
    spec = out["spec"]
    spec.setdefault("queue", "default")
    spec.setdefault("schedulerName", "volcano")
    spec.setdefault("maxRetry", 3)
    for task in spec.get("tasks") or []:
        task.setdefault("minAvailable", task.get("replicas", 0))
        task.setdefault("maxRetry", 3)
    if not spec.get("minAvailable"):
        spec["minAvailable"] = sum(t["minAvailable"] for t in spec.get("tasks") or [])
    return out
