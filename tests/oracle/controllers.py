"""The pods Kubernetes' controllers create from a stored workload, as those controllers build them.

- Job, Deployment/ReplicaSet, StatefulSet (kube-controller-manager), Kubeflow PyTorchJob
  (training-operator) and Volcano Job (vc-controller-manager) copy a pod template's metadata (labels,
  annotations) and spec into each pod; the fields they add (owner references, controller-uid or
  job-name labels, a schedulerName) do not change what the scheduler's filters read.
- DaemonSet (``pkg/controller/daemon``): for every node the template can run on (``NodeShouldRunDaemonPod``:
  the node-affinity and taint predicates, ``NoSchedule``/``NoExecute`` only), one pod whose required
  node affinity is replaced by ``matchFields metadata.name In [node]`` (``ReplaceDaemonSetPodNodeNameNodeAffinity``,
  ``pkg/controller/daemon/util``) and which gets the DaemonSet tolerations (``AddOrUpdateDaemonPodTolerations``:
  ``node.kubernetes.io/{not-ready,unreachable}`` NoExecute, ``disk-pressure``, ``memory-pressure``,
  ``pid-pressure``, ``unschedulable`` NoSchedule; ``network-unavailable`` for hostNetwork pods).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from tests.oracle.scheduler import Node, required_node_affinity_matches, untolerated_taints

DAEMONSET_TOLERATIONS = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
)


def pod_from_template(template: dict[str, Any], name: str) -> dict[str, Any]:
    meta = template.get("metadata") or {}
    metadata: dict[str, Any] = {"name": name}
    for key in ("labels", "annotations"):
        if meta.get(key):
            metadata[key] = copy.deepcopy(meta[key])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": copy.deepcopy(template.get("spec") or {})}


def templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    api, kind, spec = obj.get("apiVersion"), obj.get("kind"), obj.get("spec") or {}
    if (api, kind) in (
        ("batch/v1", "Job"),
        ("apps/v1", "Deployment"),
        ("apps/v1", "StatefulSet"),
        ("apps/v1", "ReplicaSet"),
        ("apps/v1", "DaemonSet"),
    ):
        return [spec["template"]]
    if (api, kind) == ("batch.volcano.sh/v1alpha1", "Job"):
        return [t["template"] for t in spec.get("tasks") or []]
    if (api, kind) == ("kubeflow.org/v1", "PyTorchJob"):
        return [r["template"] for r in (spec.get("pytorchReplicaSpecs") or {}).values()]
    raise KeyError(f"no controller model for {api} {kind}")


def daemon_pod(template: dict[str, Any], node: Node, name: str, owner: str = "ds") -> dict[str, Any]:
    pod = pod_from_template(template, name)
    pod["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "name": owner,
            "uid": "0d5e7d4e-0000-4000-8000-000000000001",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    spec = pod["spec"]
    affinity = spec.setdefault("affinity", {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node.name]}]}]
    }
    tolerations = spec.setdefault("tolerations", [])
    wanted = list(DAEMONSET_TOLERATIONS)
    if spec.get("hostNetwork"):
        wanted.append({"key": "node.kubernetes.io/network-unavailable", "operator": "Exists", "effect": "NoSchedule"})
    for t in wanted:
        if t not in tolerations:
            tolerations.append(dict(t))
    return pod


def should_run_daemon_pod(template: dict[str, Any], node: Node) -> bool:
    spec = template.get("spec") or {}
    return required_node_affinity_matches(spec, node) and not untolerated_taints(spec, node)


def pods_of(obj: dict[str, Any], nodes: Iterable[Node]) -> list[dict[str, Any]]:
    """The pods the object's controller creates (a Pod is its own)."""
    if obj.get("kind") == "Pod":
        return [obj]
    name = (obj.get("metadata") or {}).get("name", "w")
    if obj.get("kind") == "DaemonSet":
        tpl = obj["spec"]["template"]
        return [daemon_pod(tpl, n, f"{name}-{n.name}", name) for n in nodes if should_run_daemon_pod(tpl, n)]
    return [pod_from_template(tpl, f"{name}-{i}") for i, tpl in enumerate(templates(obj))]
