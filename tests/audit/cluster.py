"""A small GPU cluster as the apiserver stores it: admitted, violating, CPU-only and controller-owned objects.

Admitted objects are made the way the cluster made them: the user's manifest through the real
engine's mutation (what ``/mutate`` answered), then what the system adds after admission (the
scheduler's ``nodeName``, defaulted tolerations, ``status``, ``managedFields``, ``uid``).
"""

from __future__ import annotations

import copy
from typing import Any

from webhook.engine import Request, report

WORKLOAD = "gpu-admission.io/workload"
CPU_PODS = 23  # enough for several pages at --page-size 7


def _resources(extra: dict[str, str] | None = None) -> dict[str, Any]:
    limits = {"cpu": "1", "memory": "1Gi", **(extra or {})}
    return {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": limits}


def namespace(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, **(labels or {})}},
        "status": {"phase": "Active"},
    }


def pod(name: str, ns: str, *, cls: str | None = None, gpus: int = 0, owner: tuple[str, str] | None = None) -> dict:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "labels": {"app": name}}
    if cls:
        meta["labels"][WORKLOAD] = cls
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1], "uid": f"uid-{owner[1]}", "controller": True}
        ]
    extra = {"nvidia.com/gpu": str(gpus)} if gpus else None
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [{"name": "main", "image": "registry.example/app:1", "resources": _resources(extra)}]},
    }


def mutated(policy: Any, obj: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
    """What ``/mutate`` made of ``obj``: the real engine's patch applied."""
    decision = report(policy, Request(obj, namespace_labels=labels))
    assert decision.allowed, decision.message
    return copy.deepcopy(decision.mutated)


def stored(obj: dict[str, Any], *, node: str | None = "gpu-node-1", user_node: bool = False) -> dict[str, Any]:
    """``obj`` as the apiserver returns it after scheduling: system-set fields added."""
    out = copy.deepcopy(obj)
    meta = out["metadata"]
    meta["creationTimestamp"] = "2026-12-01T10:00:00Z"
    manager_spec: dict[str, Any] = {"f:containers": {}}
    if user_node:
        manager_spec["f:nodeName"] = {}
    meta["managedFields"] = [
        {
            "manager": "kubectl-client-side-apply" if user_node else "kube-controller-manager",
            "operation": "Update",
            "apiVersion": "v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {}}, "f:spec": manager_spec},
        },
        {
            "manager": "kubelet",
            "operation": "Update",
            "apiVersion": "v1",
            "subresource": "status",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:status": {"f:phase": {}}},
        },
    ]
    if out["kind"] == "Pod":
        spec = out["spec"]
        if node:
            spec["nodeName"] = node
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("serviceAccountName", "default")
        spec.setdefault("tolerations", []).extend(
            [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 300},
            ]
        )
        out["status"] = {
            "phase": "Running",
            "conditions": [{"type": "PodScheduled", "status": "True"}],
            "hostIP": "10.0.0.5",
        }
    else:
        out["status"] = {"replicas": 1}
    return out


def deployment(name: str, ns: str, cls: str) -> dict[str, Any]:
    template = pod(name, ns, cls=cls)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": dict(template["metadata"]["labels"])}, "spec": template["spec"]},
        },
    }


def replicaset(name: str, ns: str, deploy: dict[str, Any]) -> dict[str, Any]:
    rs = copy.deepcopy(deploy)
    rs["kind"] = "ReplicaSet"
    rs["metadata"] = {
        "name": name,
        "namespace": ns,
        "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": deploy["metadata"]["name"], "uid": "uid-d",
             "controller": True}
        ],
    }
    return rs


def cluster_objects(policy: Any) -> list[dict[str, Any]]:
    """Every object of the test cluster, in no particular order."""
    serving = {"gpu-admission.io/tier": "serving"}
    operator = {"gpu-admission.io/raw-gpus": "allowed"}
    objs: list[dict[str, Any]] = [
        namespace("team-a"),
        namespace("serving", serving),
        namespace("gpu-operator", operator),
        namespace("kube-system"),
        namespace("gpu-admission"),
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "gpu-node-1", "labels": {"workload": "gpu-infer"}},
            "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"nvidia.com/mig-1g.5gb": "7"}, "images": [{"names": ["x"] * 50}]},
        },
    ]
    # admitted: mutated at CREATE, then scheduled (nodeName, defaulted tolerations, status)
    objs.append(stored(mutated(policy, pod("infer-ok", "team-a", cls="inference"))))
    objs.append(stored(mutated(policy, pod("serve-ok", "serving", cls="inference"), serving)))
    # created while the webhook was down: a class pod that was never mutated
    objs.append(stored(pod("infer-unmutated", "team-a", cls="inference"), node=None))
    # a user pinned this GPU pod to a node (managedFields record the user writing spec.nodeName)
    objs.append(stored(mutated(policy, pod("pinned", "team-a", cls="inference")), user_node=True))
    # raw GPU request with no class: warned
    objs.append(stored(mutated(policy, pod("raw-gpu", "team-a", gpus=1))))
    # the GPU operator's raw GPU DaemonSet, in a namespace exempt from raw-gpu-request
    ds = deployment("dcgm", "gpu-operator", "inference")
    ds["kind"] = "DaemonSet"
    ds["spec"].pop("replicas")
    ds["spec"]["template"]["metadata"]["labels"].pop(WORKLOAD)
    ds["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1"
    objs.append(stored(ds))
    # kube-system is never intercepted
    objs.append(stored(pod("system-gpu", "kube-system", gpus=1)))
    # a Deployment, its ReplicaSet and pods: one mutated, one created while the webhook was down
    deploy = deployment("web", "team-a", "inference")
    objs.append(stored(deploy))
    objs.append(stored(replicaset("web-5d8f", "team-a", deploy)))
    rs = ("ReplicaSet", "web-5d8f")
    objs.append(stored(mutated(policy, pod("web-5d8f-aaaaa", "team-a", cls="inference", owner=rs))))
    objs.append(stored(pod("web-5d8f-bbbbb", "team-a", cls="inference", owner=rs), node=None))
    # CPU-only pods, scheduled: never judged
    for i in range(CPU_PODS):
        objs.append(stored(pod(f"cpu-{i:02d}", "team-a"), node="cpu-node-1"))
    return objs


EXPECTED = {
    # (namespace, kind, name) -> status
    ("team-a", "Pod", "infer-ok"): "admitted",
    ("serving", "Pod", "serve-ok"): "admitted",
    ("team-a", "Pod", "infer-unmutated"): "denied",
    ("team-a", "Pod", "pinned"): "denied",
    ("team-a", "Pod", "raw-gpu"): "warned",
    ("gpu-operator", "DaemonSet", "dcgm"): "admitted",
    ("team-a", "Deployment", "web"): "admitted",
    ("team-a", "ReplicaSet", "web-5d8f"): "admitted",
    ("team-a", "Pod", "web-5d8f-aaaaa"): "admitted",
    ("team-a", "Pod", "web-5d8f-bbbbb"): "denied",
}
