"""After CREATE, through the real apiserver: UPDATEs, ``kubectl scale``, ephemeral containers.

What the apiserver sends for these (the real ``request.subResource``, the real Scale object, the
old object as stored) is what the unit tier emulates; here it is the apiserver's own:

- ``kubectl scale`` of a training StatefulSet from one pod to eight: the webhook reads the parent
  with the shipped ServiceAccount's RBAC and denies it ``gang-required``;
- ``kubectl debug``-style ephemeral containers on a GPU pod: a privileged one is denied;
- a pod of a CUDA image created with no toleration (scheduling-gated) that gains the training pool's
  toleration and nodeSelector by UPDATE in a namespace that may not train: denied, with the advice to
  re-create the pod (its env cannot change by UPDATE); a pod created with ``NVIDIA_VISIBLE_DEVICES=void``
  (what ``/mutate`` gives a CPU pod that can reach a GPU pool at CREATE) may gain the same tolerations.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e import install, objects
from tests.e2e.conftest import Product

SERVING = {"gpu-admission.io/tier": "serving"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
TRAIN_TOLERATION = {"key": "workload", "operator": "Equal", "value": "gpu-train", "effect": "NoSchedule"}
TRAIN_REACH = [GPU_TOLERATION, TRAIN_TOLERATION]  # the training pool's nodes carry both taints


def statefulset(replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "train"},
        "spec": {"replicas": replicas, "serviceName": "train", "selector": {"matchLabels": {"app": "train"}},
                 "template": {"metadata": {"labels": {"app": "train", "gpu-admission.io/workload": "training"}},
                              "spec": {"containers": [{"name": "c", "image": "registry.example/train:1"}]}}},
    }  # fmt: skip


def test_kubectl_scale_of_a_training_statefulset_is_judged_at_its_new_size(product: Product) -> None:
    plane = product.plane
    ns = install.namespace(plane)
    code, _, err = objects.create(plane, statefulset(1), ns)
    assert code == 0, err
    proc = plane.kubectl("scale", "statefulset", "train", "-n", ns, "--replicas=8", check=False)
    assert proc.returncode != 0, "scaled a gang-required class to 8 pods with no gang"
    assert "[gang-required]" in proc.stderr, proc.stderr
    assert install.get(plane, "statefulset", "train", ns)["spec"]["replicas"] == 1


def cuda_pod(gated: bool, env: str | None = None) -> dict[str, Any]:
    """A CPU pod of a CUDA image: the image's own NVIDIA_VISIBLE_DEVICES=all opens every GPU of its node.

    Not gated, it selects the training pool's label and stays Pending on the pool's taints (a pod the
    scheduler already bound to a CPU node reaches nothing new by gaining tolerations)."""
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"}]}
    if not gated:
        spec["nodeSelector"] = {"workload": "gpu-train"}
    if env is not None:
        spec["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": env}]
    if gated:
        spec["schedulingGates"] = [{"name": "example.com/wait"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "cuda"}, "spec": spec}


def patch(product: Product, ns: str, body: dict[str, Any]) -> tuple[int, str]:
    proc = product.plane.kubectl("patch", "pod", "cuda", "-n", ns, "--type=merge", "-p", json.dumps(body), check=False)
    return proc.returncode, proc.stderr


@pytest.mark.parametrize("gated", [True, False], ids=["gated", "pending"])
def test_a_cpu_pod_may_not_gain_a_gpu_pools_reach_by_update(product: Product, gated: bool) -> None:
    plane = product.plane
    ns = install.namespace(plane, SERVING)  # serving teams may not use the training pool
    code, _, err = objects.create(plane, cuda_pod(gated), ns)
    assert code == 0, f"a CPU pod without tolerations is no GPU pod: it must be admitted at CREATE ({err})"
    assert not install.get(plane, "pod", "cuda", ns)["spec"].get("nodeName"), "the scheduler bound it: no attack"
    body: dict[str, Any] = {"spec": {"tolerations": TRAIN_REACH}}
    if gated:
        body["spec"]["nodeSelector"] = {"workload": "gpu-train"}
    code, err = patch(product, ns, body)
    assert code != 0, "the pod gained the training pool's toleration in a serving-only namespace"
    assert "re-create" in err or "recreate" in err, err
    assert TRAIN_TOLERATION not in (install.get(plane, "pod", "cuda", ns)["spec"].get("tolerations") or [])


def test_a_pod_created_with_the_void_may_gain_the_tolerations(product: Product) -> None:
    plane = product.plane
    ns = install.namespace(plane)
    code, _, err = objects.create(plane, cuda_pod(False, env="void"), ns)
    assert code == 0, err
    code, err = patch(product, ns, {"spec": {"tolerations": TRAIN_REACH}})
    assert code == 0, err


def test_a_privileged_ephemeral_container_on_a_gpu_pod_is_denied(product: Product) -> None:
    plane = product.plane
    ns = install.namespace(plane)
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "chat", "labels": {"gpu-admission.io/workload": "inference"}},
           "spec": {"containers": [{"name": "c", "image": "registry.example/app:1"}]}}  # fmt: skip
    code, _, err = objects.create(plane, pod, ns)
    assert code == 0, err
    privileged = {"privileged": True}
    debug = {"spec": {"ephemeralContainers": [{"name": "dbg", "image": "busybox", "securityContext": privileged,
                                               "targetContainerName": "c"}]}}  # fmt: skip
    proc = plane.kubectl("patch", "pod", "chat", "-n", ns, "--subresource=ephemeralcontainers", "--type=strategic",
                         "-p", json.dumps(debug), check=False)  # fmt: skip
    assert proc.returncode != 0 and "[privileged-gpu]" in proc.stderr, proc.stderr
    ok = {"spec": {"ephemeralContainers": [{"name": "dbg2", "image": "busybox", "targetContainerName": "c"}]}}
    proc = plane.kubectl("patch", "pod", "chat", "-n", ns, "--subresource=ephemeralcontainers", "--type=strategic",
                         "-p", json.dumps(ok), check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
