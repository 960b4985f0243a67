"""MutatingAdmissionPolicies that place the common class pod while the webhook is down (Kubernetes 1.36+).

MutatingAdmissionPolicy is GA in 1.36 (``admissionregistration.k8s.io/v1``) and runs in the apiserver
before the mutating webhooks. One policy per class whose placement needs no lookup: what the webhook
writes for a Pod of that class with no intent annotations is the same in every namespace entitled to
it and touches only the pool's nodeSelector and tolerations, the GPU container's limits, and the
class's priorityClassName / schedulerName. The renderer asks the engine itself what that is (its
``/mutate`` patch for such a pod, as the apiserver stores it), so the policy writes exactly what the
webhook would, and the webhook's own mutation of the result is empty: idempotent in both orders
(``tests/intree/test_mutating.py``).

JSONPatch, not ApplyConfiguration: tolerations are an atomic list, which an apply configuration may
not merge into; each operation is guarded so it never fails on a pod that already has the field (an
error would hit ``failurePolicy``). The policies match only Pod CREATEs of the class with no intent
annotation, no GPU, RDMA or DRA resource of their own, no required node affinity, no nodeName and no
nodeSelector value that conflicts with the pool's, in a namespace whose entitlement grants the class;
every other pod is left to the webhook (or denied in-tree by ``placement-missing`` while it is down).
"""

from __future__ import annotations

from typing import Any

from webhook.policy.compiled import Policy
from webhook.render.core import K8sObject, RenderOptions
from webhook.render.intree.cel import cel_list, first_match, key_is, selector
from webhook.render.webhooks import cel_string, not_mirror_pod

SERVED_FROM = (1, 36)
NAME = "gpu-admission-in-tree-place"
ALLOWED = (
    "/spec/nodeSelector",
    "/spec/tolerations",
    "/spec/containers/0/resources",
    "/spec/priorityClassName",
    "/spec/schedulerName",
    "/spec/priority",
    "/spec/preemptionPolicy",
)
_NS = (
    "(namespaceObject == null || !has(namespaceObject.metadata) || !has(namespaceObject.metadata.labels) ?\n"
    "  {} : namespaceObject.metadata.labels)"
)


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _literal(value: Any) -> str:
    if isinstance(value, str):
        return cel_string(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{cel_string(k)}: {_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    raise TypeError(value)


def _patch(op: str, path: str, value: Any = None) -> str:
    tail = "" if value is None else f", value: {_literal(value)}"
    return f"JSONPatch{{op: {cel_string(op)}, path: {cel_string(path)}{tail}}}"


def _canonical(policy: Policy, cls: str, labels: dict[str, str]) -> list[dict[str, Any]] | None:
    """The webhook's patch for a Pod of ``cls`` with no intent annotations, stored as the apiserver
    stores it, in a namespace with ``labels``; None when it is not a placement a policy can copy."""
    from webhook.engine import Request, validate

    pod = stored_pod(policy, cls)
    full = {"kubernetes.io/metadata.name": "in-tree-probe", **labels}
    decision = validate(policy, Request(pod, namespace="in-tree-probe", namespace_labels=full))
    if not decision.allowed or decision.would_deny or not decision.patch:  # what enforce admits, whatever the mode
        return None
    if not all(op["path"].startswith(ALLOWED) for op in decision.patch):
        return None
    return [dict(op) for op in decision.patch]


def stored_pod(policy: Policy, cls: str) -> dict[str, Any]:
    """A Pod of ``cls`` with no intent annotations as the apiserver hands it to the mutating chain: its
    defaults and the ServiceAccount, DefaultTolerationSeconds and Priority plugins have run."""
    token = "/var/run/secrets/kubernetes.io/serviceaccount"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "in-tree-probe", "namespace": "in-tree-probe", "labels": {policy.keys.workload: cls}},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/app:1",
                    "imagePullPolicy": "IfNotPresent",
                    "resources": {},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "volumeMounts": [{"name": "kube-api-access", "mountPath": token, "readOnly": True}],
                }
            ],
            "dnsPolicy": "ClusterFirst",
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
            "priority": 0,
            "restartPolicy": "Always",
            "schedulerName": "default-scheduler",
            "securityContext": {},
            "serviceAccountName": "default",
            "terminationGracePeriodSeconds": 30,
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
            "volumes": [
                {"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}
            ],
        },
    }


def _probe_labels(policy: Policy, index: int) -> dict[str, str] | None:
    """Labels of a namespace whose first matching entitlement is ``index`` (None: none can be built)."""
    ent = policy.namespaces[index]
    if ent.selector.match_expressions:
        return None
    labels = dict(ent.selector.match_labels)
    full = {"kubernetes.io/metadata.name": "in-tree-probe", **labels}
    return labels if policy.entitlement(full) is ent else None


def placement(policy: Policy, cls: str) -> tuple[list[int], list[dict[str, Any]]] | None:
    """(entitlement indices, the patch) where every entitlement granting ``cls`` gets the same patch."""
    found: list[tuple[int, list[dict[str, Any]]]] = []
    for i, ent in enumerate(policy.namespaces):
        if cls not in ent.classes:
            continue
        labels = _probe_labels(policy, i)
        patch = _canonical(policy, cls, labels) if labels is not None else None
        if patch is None:
            return None
        found.append((i, patch))
    if not found or any(p != found[0][1] for _, p in found):
        return None
    return [i for i, _ in found], found[0][1]


def _mutation(patch: list[dict[str, Any]]) -> str:
    """The patch as CEL that holds on any matching pod: each part guarded by what the pod already has."""
    parts: list[str] = []
    limits: dict[str, str] = {}
    for op in patch:
        path, value = op["path"], op.get("value")
        if path == "/spec/nodeSelector":
            keys = [
                f"(!({cel_string(k)} in object.spec.nodeSelector) ?\n"
                f"    [{_patch('add', f'{path}/{_escape(k)}', v)}] : [])"
                for k, v in value.items()
            ]
            parts.append(f"(has(object.spec.nodeSelector) ?\n  {' + '.join(keys)} :\n  [{_patch('add', path, value)}])")
        elif path.startswith("/spec/tolerations"):
            tol = value
            same = " && ".join(
                (f"has(x.{f}) && x.{f} == {_literal(tol[f])}" if f in tol else f"!has(x.{f})")
                for f in ("key", "value", "effect")
            )
            op_test = (
                "(!has(x.operator) || x.operator == '' || x.operator == 'Equal')"
                if tol.get("operator", "Equal") == "Equal"
                else f"has(x.operator) && x.operator == {_literal(tol['operator'])}"
            )
            parts.append(
                f"(!has(object.spec.tolerations) ? [{_patch('add', '/spec/tolerations', [tol])}] :\n"
                f"  object.spec.tolerations.exists(x, {same} && {op_test}) ? [] :\n"
                f"  [{_patch('add', '/spec/tolerations/-', tol)}])"
            )
        elif path.startswith("/spec/containers/0/resources"):
            limits.update(_limits(path, value))
        elif path == "/spec/priorityClassName":
            parts.append(
                f"(has(object.spec.priorityClassName) && object.spec.priorityClassName != '' ? [] :\n"
                f"  [{_patch('add', path, value)}] +\n"
                f"  (has(object.spec.priority) ? [{_patch('remove', '/spec/priority')}] : []) +\n"
                f"  (has(object.spec.preemptionPolicy) ? [{_patch('remove', '/spec/preemptionPolicy')}] : []))"
            )
        elif path == "/spec/schedulerName":
            parts.append(
                f"(has(object.spec.schedulerName) && !(object.spec.schedulerName in ['', 'default-scheduler']) ?"
                f" [] :\n  [{_patch('add', path, value)}])"
            )
        elif path in ("/spec/priority", "/spec/preemptionPolicy"):
            continue  # removed with the priorityClassName they go with
        else:
            raise ValueError(path)
    if limits:
        res = "/spec/containers/0/resources"
        keys = " + ".join(f"[{_patch('add', f'{res}/limits/{_escape(k)}', v)}]" for k, v in limits.items())
        parts.append(
            f"(!has(object.spec.containers[0].resources) ? [{_patch('add', res, {'limits': limits})}] :\n"
            f"  !has(object.spec.containers[0].resources.limits) ? [{_patch('add', res + '/limits', limits)}] :\n"
            f"  {keys})"
        )
    return "!has(object.spec) ? [] :\n" + " +\n".join(parts)


def _limits(path: str, value: Any) -> dict[str, str]:
    """The GPU container's limits an operation on ``/spec/containers/0/resources...`` writes."""
    rest = path.removeprefix("/spec/containers/0/resources")
    if rest == "":
        return dict(value.get("limits") or {})
    if rest == "/limits":
        return dict(value)
    if rest.startswith("/limits/"):
        return {rest.removeprefix("/limits/").replace("~1", "/").replace("~0", "~"): value}
    raise ValueError(path)


def _conditions(policy: Policy, cls: str, indices: list[int], patch: list[dict[str, Any]]) -> list[dict[str, str]]:
    key = cel_string(policy.keys.workload)
    intent = sorted(policy.keys.annotations | set(policy.fraction_keys))
    prefixes = " || ".join(
        f"k.startsWith({cel_string(p)})" for p in (*policy.gpu_prefixes, "rdma/", "deviceclass.resource.kubernetes.io/")
    )
    mapped = sorted(policy.dra.extended)
    devices = f"({prefixes}" + "".join(f" || k == {cel_string(n)}" for n in mapped) + ")"
    selector_keys = next((op["value"] for op in patch if op["path"] == "/spec/nodeSelector"), {})
    conflicts = (
        " || ".join(
            f"({cel_string(k)} in object.spec.nodeSelector &&\n"
            f"    object.spec.nodeSelector[{cel_string(k)}] != {cel_string(v)})"
            for k, v in selector_keys.items()
        )
        or "false"
    )
    entitlement = first_match([(selector(e.selector, _NS), str(i)) for i, e in enumerate(policy.namespaces)], "-1")
    containers = (
        "(has(object.spec.containers) ? object.spec.containers : []) +\n"
        "  (has(object.spec.initContainers) ? object.spec.initContainers : [])"
    )
    return [
        {"name": "not-mirror-pod", "expression": not_mirror_pod(policy, "mutating")},
        {
            "name": "class",
            "expression": f"has(object.metadata.labels) && {key} in object.metadata.labels &&\n"
            f"  object.metadata.labels[{key}] == {cel_string(cls)}",
        },
        {
            "name": "no-intent-annotations",
            "expression": "!has(object.metadata.annotations) ||\n"
            f"  !object.metadata.annotations.exists(k, k in {cel_list(intent)})",
        },
        {
            "name": "no-devices-of-its-own",
            "expression": f"has(object.spec) && has(object.spec.containers) && size(object.spec.containers) > 0 &&\n"
            f"  !(has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0) &&\n"
            f"  !({containers}).exists(c, has(c.resources) && (\n"
            f"    (has(c.resources.limits) && c.resources.limits.exists(k, {key_is(devices, long=True)})) ||\n"
            f"    (has(c.resources.requests) && c.resources.requests.exists(k, {key_is(devices, long=True)}))))",
        },
        {
            "name": "scheduler-free",
            "expression": "has(object.spec) && !(has(object.spec.nodeName) && object.spec.nodeName != '') &&\n"
            "  !(has(object.spec.affinity) && has(object.spec.affinity.nodeAffinity) &&\n"
            "    has(object.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution)) &&\n"
            f"  !(has(object.spec.nodeSelector) && ({conflicts}))",
        },
        {
            # every other container would need NVIDIA_VISIBLE_DEVICES=void, which the webhook writes per
            # container; a pod of more than its GPU container is left to the webhook (and denied in-tree,
            # placement-missing, while it is down)
            "name": "one-container",
            "expression": "has(object.spec) && has(object.spec.containers) && size(object.spec.containers) == 1 &&\n"
            "  !(has(object.spec.initContainers) && size(object.spec.initContainers) > 0) &&\n"
            "  !(has(object.spec.ephemeralContainers) && size(object.spec.ephemeralContainers) > 0)",
        },
        {"name": "entitled", "expression": f"({entitlement}) in [{', '.join(map(str, indices))}]"},
    ]


def render(policy: Policy, options: RenderOptions) -> list[K8sObject]:
    from webhook.render.intree.vap import labels as in_tree_labels

    out: list[K8sObject] = []
    namespaces = list(dict.fromkeys(("kube-system", options.namespace)))
    for cls in policy.classes:
        found = placement(policy, cls)
        if found is None:
            continue
        indices, patch = found
        name = f"{NAME}-{cls}"
        out.append(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingAdmissionPolicy",
                "metadata": {"name": name, "labels": in_tree_labels(options)},
                "spec": {
                    "failurePolicy": "Fail",
                    "reinvocationPolicy": "IfNeeded",
                    "matchConstraints": {
                        "matchPolicy": "Equivalent",
                        "namespaceSelector": {
                            "matchExpressions": [
                                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": namespaces}
                            ]
                        },
                        # the class's own pods only, by label, before any CEL runs: the apiserver evaluates
                        # a policy's matchConditions on every pod it matches (the pod converted for CEL
                        # each time), so without it every pod create paid for every class's policy
                        "objectSelector": {"matchLabels": {policy.keys.workload: cls}},
                        "resourceRules": [
                            {
                                "apiGroups": [""],
                                "apiVersions": ["v1"],
                                "operations": ["CREATE"],
                                "resources": ["pods"],
                                "scope": "Namespaced",
                            }
                        ],
                    },
                    "matchConditions": _conditions(policy, cls, indices, patch),
                    "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": _mutation(patch)}}],
                },
            }
        )
        out.append(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingAdmissionPolicyBinding",
                "metadata": {"name": name, "labels": in_tree_labels(options)},
                "spec": {"policyName": name},
            }
        )
    return out
