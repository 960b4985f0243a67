"""An emulation of the API server's webhook matching, with cel-python standing in for cel-go.

What is emulated (k8s.io/apiserver admission/plugin/webhook, KEP-3716):

* ``rules``: group / resource / operation of the request (scope Namespaced; versions are covered by
  ``matchPolicy: Equivalent``, so the version is not compared).
* ``matchConditions``: every condition is evaluated with ``object``, ``oldObject`` (null on CREATE)
  and ``request`` (the AdmissionRequest as unstructured JSON: ``subResource`` is absent, not empty,
  for the object itself); any ``false`` -> the webhook is skipped; otherwise, if any evaluation errored,
  ``failurePolicy`` decides (``Fail`` -> the request is rejected without calling the webhook,
  ``Ignore`` -> skipped); all ``true`` -> the webhook is called.
* Objects are passed as the API server would: built-in kinds are decoded into typed structs and
  re-encoded, so JSON ``null`` fields vanish; ``prune_nulls`` does the same here.

What is not: cel-go's static type check and cost estimate (no API server here), and cel-python is
*more lenient* than cel-go for ``has(a.b.c)`` when ``a.b`` is absent (it answers false where cel-go
errors). ``unguarded_has`` closes that gap statically: every nested ``has()`` must be preceded by a
``has()`` of its parent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import celpy

from tests.cel_casts import free_casts
from tests.cel_evaluator import environment

free_casts()  # cel-python's per-step typing work, skipped (tests/cel_casts.py): same results, faster

CALL, SKIP, REJECT = "call", "skip", "reject"

# request.resource for each matched kind: (apiVersion, kind) -> (group, version, resource)
RESOURCES = {
    ("v1", "Pod"): ("", "v1", "pods"),
    ("batch/v1", "Job"): ("batch", "v1", "jobs"),
    ("batch.volcano.sh/v1alpha1", "Job"): ("batch.volcano.sh", "v1alpha1", "jobs"),
    ("batch/v1", "CronJob"): ("batch", "v1", "cronjobs"),
    ("apps/v1", "Deployment"): ("apps", "v1", "deployments"),
    ("apps/v1", "StatefulSet"): ("apps", "v1", "statefulsets"),
    ("apps/v1", "ReplicaSet"): ("apps", "v1", "replicasets"),
    ("apps/v1", "DaemonSet"): ("apps", "v1", "daemonsets"),
    # the operator CRDs of the kind table (their plural resource names, as their CRDs declare them)
    ("kubeflow.org/v1", "PyTorchJob"): ("kubeflow.org", "v1", "pytorchjobs"),
    ("kubeflow.org/v1", "TFJob"): ("kubeflow.org", "v1", "tfjobs"),
    ("kubeflow.org/v1", "PaddleJob"): ("kubeflow.org", "v1", "paddlejobs"),
    ("kubeflow.org/v1", "XGBoostJob"): ("kubeflow.org", "v1", "xgboostjobs"),
    ("kubeflow.org/v1", "JAXJob"): ("kubeflow.org", "v1", "jaxjobs"),
    ("kubeflow.org/v1", "MPIJob"): ("kubeflow.org", "v1", "mpijobs"),  # the training-operator's
    ("kubeflow.org/v2beta1", "MPIJob"): ("kubeflow.org", "v2beta1", "mpijobs"),  # mpi-operator's
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): ("jobset.x-k8s.io", "v1alpha2", "jobsets"),
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets"),
    ("ray.io/v1", "RayCluster"): ("ray.io", "v1", "rayclusters"),
    ("ray.io/v1", "RayJob"): ("ray.io", "v1", "rayjobs"),
    ("ray.io/v1", "RayService"): ("ray.io", "v1", "rayservices"),
    ("batch.volcano.sh/v1alpha1", "CronJob"): ("batch.volcano.sh", "v1alpha1", "cronjobs"),
    ("trainer.kubeflow.org/v1alpha1", "TrainingRuntime"): ("trainer.kubeflow.org", "v1alpha1", "trainingruntimes"),
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): ("trainer.kubeflow.org", "v1alpha1", "trainjobs"),
    ("resource.k8s.io/v1", "ResourceClaim"): ("resource.k8s.io", "v1", "resourceclaims"),
    ("resource.k8s.io/v1", "ResourceClaimTemplate"): ("resource.k8s.io", "v1", "resourceclaimtemplates"),
}


def prune_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: prune_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [prune_nulls(v) for v in value if v is not None]
    return value


def resource_of(obj: dict[str, Any]) -> tuple[str, str, str] | None:
    return RESOURCES.get((obj.get("apiVersion"), obj.get("kind")))  # type: ignore[arg-type]


@dataclass
class Outcome:
    decision: str
    results: dict[str, Any]  # condition name -> True / False / error text

    @property
    def errors(self) -> dict[str, str]:
        return {k: v for k, v in self.results.items() if isinstance(v, str)}


class Webhook:
    """One webhook of a rendered configuration, able to say what the API server would do."""

    _env = environment()

    def __init__(self, hook: dict[str, Any]) -> None:
        self.hook = hook
        self.name = hook["name"]
        self.failure_policy = hook.get("failurePolicy", "Fail")
        self.conditions = [
            (c["name"], c["expression"], self._env.program(self._env.compile(c["expression"])))
            for c in hook.get("matchConditions", [])
        ]

    def matches_rules(self, group: str, resource: str, operation: str) -> bool:
        return any(
            group in r["apiGroups"] and resource in r["resources"] and operation in r["operations"]
            for r in self.hook["rules"]
        )

    def evaluate(
        self,
        obj: dict[str, Any],
        *,
        operation: str = "CREATE",
        old: dict[str, Any] | None = None,
        resource: tuple[str, str, str] | None = None,
        user_info: dict[str, Any] | None = None,
        sub_resource: str = "",
    ) -> Outcome:
        group, version, res = resource or resource_of(obj) or ("", "", "")
        request = {
            "operation": operation,
            "resource": {"group": group, "version": version, "resource": res},
            "kind": {"group": group, "version": version, "kind": obj.get("kind", "")},
            "namespace": (obj.get("metadata") or {}).get("namespace", "default"),
            "name": (obj.get("metadata") or {}).get("name", ""),
        }
        if user_info is not None:
            request["userInfo"] = user_info
        if sub_resource:  # omitempty in AdmissionRequest: absent (not "") for the object itself
            request["subResource"] = sub_resource
        activation = {
            "object": celpy.json_to_cel(prune_nulls(obj)),
            "oldObject": celpy.json_to_cel(prune_nulls(old) if old is not None else None),
            "request": celpy.json_to_cel(request),
        }
        results: dict[str, Any] = {}
        for name, _expr, program in self.conditions:
            try:
                value = program.evaluate(activation)
            except celpy.CELEvalError as exc:
                value = exc
            if isinstance(value, celpy.CELEvalError):
                results[name] = f"error: {value.args[0] if value.args else value}"
            elif isinstance(value, celpy.celtypes.BoolType):
                results[name] = bool(value)
            else:
                results[name] = f"error: non-boolean result {value!r}"
        if any(v is False for v in results.values()):
            return Outcome(SKIP, results)
        if any(isinstance(v, str) for v in results.values()):
            return Outcome(REJECT if self.failure_policy == "Fail" else SKIP, results)
        return Outcome(CALL, results)

    def decide(self, obj: dict[str, Any], **kw: Any) -> str:
        return self.evaluate(obj, **kw).decision


_HAS = re.compile(r"has\(\s*([A-Za-z_][\w.]*)\s*\)")
ALWAYS_PRESENT = {"object.metadata", "oldObject.metadata"}  # every API object has metadata


def unguarded_has(expression: str) -> list[str]:
    """``has(a.b.c)`` whose parent ``a.b`` was not has()-checked before it (cel-go would error)."""
    bad: list[str] = []
    seen: set[str] = set()
    for match in _HAS.finditer(expression):
        path = match.group(1)
        parent = path.rsplit(".", 1)[0]
        if parent.count(".") >= 1 and parent not in ALWAYS_PRESENT and parent not in seen:
            bad.append(path)
        seen.add(path)
    return bad
