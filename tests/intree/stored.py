"""What kube-apiserver stores: its defaulting and its built-in mutating admission plugins, emulated.

An in-tree policy judges the object the apiserver is about to store, never the one the user wrote,
and so does the validating webhook. Rules written against the user's shape ("no tolerations but the
pool's", "no schedulerName") would break on the real object, so the differential test feeds both
judges this object. Emulated from the documented behaviour (k8s.io/kubernetes ``pkg/apis/core/v1/
defaults.go``, ``pkg/apis/batch/v1/defaults.go``, ``pkg/apis/apps/v1/defaults.go`` and the admission
plugins ServiceAccount, DefaultTolerationSeconds and Priority), written independently of the engine:

* pod specs, in Pods and in the pod templates of built-in kinds: ``schedulerName: default-scheduler``,
  ``dnsPolicy``, ``restartPolicy`` (pods), ``terminationGracePeriodSeconds``, ``securityContext: {}``,
  ``enableServiceLinks``, and per container ``terminationMessagePath``/``Policy``, ``imagePullPolicy``;
* Pods only (not templates): requests copied from limits where a container sets none for that resource;
* Pod CREATE only (admission plugins): ``serviceAccountName: default`` and the projected token volume
  mounted in every container (unless ``automountServiceAccountToken: false``), the
  ``node.kubernetes.io/not-ready`` / ``unreachable`` ``NoExecute`` tolerations for 300 s unless
  tolerated already, ``priority`` from the PriorityClass (0 without one);
* workload defaults: a Job's ``parallelism``/``completions`` 1, a Deployment's/StatefulSet's/
  ReplicaSet's ``replicas`` 1;
* the typed round trip: resource quantities are strings, JSON nulls are gone.

CRDs (Volcano, Kubeflow, ...) get no nested pod-template defaults: their schemas declare none.

Not modelled, and found by the real apiserver (``tests/e2e``): after the webhooks mutate, reinvocation
runs the Priority plugin again, and it refuses a spec whose ``priority`` or ``preemptionPolicy`` (written
by its first run) differs from what the class's PriorityClass computes; ``setdefault`` here keeps the
stale value silently. ``tests/engine/test_priority_reinvocation.py`` holds that contract offline.
"""

from __future__ import annotations

import copy
from typing import Any

from webhook.policy.compiled import Policy

SYSTEM_PRIORITIES = {"system-node-critical": 2000001000, "system-cluster-critical": 2000000000}
TOKEN_VOLUME = "kube-api-access-x7k2p"
TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
NODE_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
_TEMPLATE_KINDS = {"Job", "Deployment", "StatefulSet", "ReplicaSet", "DaemonSet"}


def _quantities(resources: Any) -> None:
    if not isinstance(resources, dict):
        return
    for part in ("limits", "requests"):
        values = resources.get(part)
        if isinstance(values, dict):
            for k, v in list(values.items()):
                if isinstance(v, bool) or v is None:
                    continue
                if isinstance(v, int | float):
                    values[k] = str(v)


def _containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for group in ("initContainers", "containers", "ephemeralContainers"):
        items = spec.get(group)
        if isinstance(items, list):
            out.extend(c for c in items if isinstance(c, dict))
    return out


def _pull_policy(image: Any) -> str:
    if not isinstance(image, str) or "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    return "Always" if ":" not in last or last.endswith(":latest") else "IfNotPresent"


def default_pod_spec(spec: dict[str, Any], *, pod: bool) -> None:
    spec.setdefault("dnsPolicy", "ClusterFirst")
    if pod:
        spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    for c in _containers(spec):
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
        c.setdefault("imagePullPolicy", _pull_policy(c.get("image")))
        _quantities(c.get("resources"))
        if pod and isinstance(c.get("resources"), dict):
            r = c["resources"]
            limits = r.get("limits")
            if isinstance(limits, dict) and limits:
                requests = r.setdefault("requests", {})
                if isinstance(requests, dict):
                    for k, v in limits.items():
                        requests.setdefault(k, v)


def _tolerated(tolerations: list[Any], key: str) -> bool:
    for t in tolerations:
        if not isinstance(t, dict):
            continue
        effect_ok = t.get("effect") in (None, "", "NoExecute")
        if effect_ok and (t.get("key") == key or (not t.get("key") and t.get("operator") == "Exists")):
            return True
    return False


def admission_plugins(pod: dict[str, Any], policy: Policy) -> None:
    """ServiceAccount, DefaultTolerationSeconds and Priority, on a Pod CREATE."""
    spec = pod.setdefault("spec", {})
    spec.setdefault("serviceAccountName", "default")
    if spec.get("automountServiceAccountToken") is not False:
        volumes = spec.setdefault("volumes", [])
        if isinstance(volumes, list) and not any(
            isinstance(v, dict) and v.get("name") == TOKEN_VOLUME for v in volumes
        ):
            volumes.append(
                {
                    "name": TOKEN_VOLUME,
                    "projected": {
                        "defaultMode": 420,
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        ],
                    },
                }
            )
            for group in ("initContainers", "containers"):
                for c in spec.get(group) or []:
                    if isinstance(c, dict):
                        mounts = c.setdefault("volumeMounts", [])
                        if isinstance(mounts, list):
                            mounts.append({"name": TOKEN_VOLUME, "mountPath": TOKEN_PATH, "readOnly": True})
    tolerations = spec.get("tolerations")
    if tolerations is None:
        tolerations = spec["tolerations"] = []
    if isinstance(tolerations, list):
        for key in NODE_TAINTS:
            if not _tolerated(tolerations, key):
                tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})
        if not tolerations:
            del spec["tolerations"]
    name = spec.get("priorityClassName")
    classes = {n: (c.value, c.preemption_policy) for n, c in policy.spec.priority_classes.items()}
    if isinstance(name, str) and name in SYSTEM_PRIORITIES:
        spec.setdefault("priority", SYSTEM_PRIORITIES[name])
    elif isinstance(name, str) and name in classes:
        spec.setdefault("priority", classes[name][0])
        spec.setdefault("preemptionPolicy", classes[name][1])
    else:
        spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")


def _prune(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _prune(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_prune(v) for v in value if v is not None]
    return value


def defaulted(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    """The object after decoding and defaulting (what every admission step sees)."""
    out = _prune(copy.deepcopy(obj))
    meta = out.setdefault("metadata", {})
    meta["namespace"] = namespace
    if not meta.get("name") and meta.get("generateName"):
        meta["name"] = str(meta["generateName"]) + "x7k2p"
    kind, spec = out.get("kind"), out.get("spec")
    if not isinstance(spec, dict):
        return out
    if out.get("apiVersion") == "v1" and kind == "Pod":
        default_pod_spec(spec, pod=True)
    elif out.get("apiVersion") in ("batch/v1", "apps/v1") and kind in _TEMPLATE_KINDS | {"CronJob"}:
        tpl = spec
        if kind == "CronJob":
            tpl = ((spec.get("jobTemplate") or {}).get("spec")) or {}
        if kind == "Job" or kind == "CronJob":
            tpl.setdefault("parallelism", 1) if isinstance(tpl, dict) else None
        if kind in ("Deployment", "StatefulSet", "ReplicaSet"):
            spec.setdefault("replicas", 1)
        template = tpl.get("template") if isinstance(tpl, dict) else None
        if isinstance(template, dict) and isinstance(template.get("spec"), dict):
            default_pod_spec(template["spec"], pod=False)
    return out


def stored(obj: dict[str, Any], namespace: str, policy: Policy, *, create: bool = True) -> dict[str, Any]:
    """The object as the apiserver hands it to the mutating admission chain (defaults, built-in plugins)."""
    out = defaulted(obj, namespace)
    if create and out.get("apiVersion") == "v1" and out.get("kind") == "Pod" and isinstance(out.get("spec"), dict):
        admission_plugins(out, policy)
    return out
