"""The Mutating and Validating webhook configurations, their ``rules`` and ``matchConditions`` from the policy.

Hand-written configurations hard-coded the default prefix and GPU resource prefixes, so changing
``settings.prefix`` or ``gpuResourcePrefixes`` silently stopped interception. Here both come from the
policy, through two tables others extend:

* :data:`RESOURCE_SOURCES` — functions policy -> :class:`Intercepted` entries (apiGroup, version,
  resource, operations at /mutate and at /validate). The built-in kinds are :data:`BUILTIN_RESOURCES`;
  a policy's own workload kinds or subresources are one more source.
* :data:`CONDITIONS` — named CEL match conditions, each a function (policy, webhook) -> expression or
  None (not on this webhook). ``gpu-relevant`` is itself assembled from :data:`TEMPLATE_SHAPES` (where a
  kind keeps its pod templates) and :data:`TEMPLATE_TESTS` (what makes a pod template GPU-relevant).

Fixed choices, the same for every policy:

* mutating: ``failurePolicy: Ignore`` (fail open) and ``reinvocationPolicy: IfNeeded`` (re-run after
  Kueue/Volcano mutate; the output is idempotent). Mutating webhooks run in sequence, so a stuck one
  would add its timeout to every GPU pod; the fail-closed validating webhook checks the final object.
* validating: ``failurePolicy: Fail``, safe because only GPU workloads (matchConditions) in namespaces
  other than ``kube-system`` and the webhook's own (namespaceSelector), and only namespaced workload
  kinds (rules) ever reach it; webhook configurations are never sent to webhooks, so deleting them
  is always possible.
* no ``caBundle``: cert-manager's cainjector or ``gpu-admission certs inject`` fill it, and an apply
  of objects that never set it does not remove it.
* every nested field in CEL is ``has()``-guarded: an absent field is false, never an evaluation error
  (which would make the API server apply the failurePolicy).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from webhook.policy.compiled import Policy
from webhook.policy.kinds import Wild
from webhook.render.core import K8sObject, RenderOptions

WebhookName = Literal["mutating", "validating"]
CREATE: tuple[str, ...] = ("CREATE",)
CREATE_UPDATE: tuple[str, ...] = ("CREATE", "UPDATE")


# --- rules ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Intercepted:
    """One resource the webhooks intercept, and at which operations each of them sees it."""

    group: str
    version: str
    resource: str
    mutate: tuple[str, ...] = ()  # operations sent to /mutate; () = never mutated
    validate: tuple[str, ...] = ()  # operations sent to /validate

    def operations(self, webhook: WebhookName) -> tuple[str, ...]:
        return self.mutate if webhook == "mutating" else self.validate


# Pods, batch Jobs and Volcano Jobs are mutated at CREATE (UPDATEs are validated, never re-mutated);
# pod controllers are validated at CREATE and UPDATE against their pod template, so `kubectl apply`
# shows a denial at once instead of a ReplicaSet silently failing to create pods.
# Pod UPDATEs are validated too (a gated pod's new nodeSelector/affinity, any pod's new tolerations or
# labels), and so is `kubectl debug`'s route, the pods/ephemeralcontainers subresource: its review
# carries the whole Pod with the new ephemeral container, judged as stored.
BUILTIN_RESOURCES: tuple[Intercepted, ...] = (
    Intercepted("", "v1", "pods", mutate=CREATE, validate=CREATE_UPDATE),
    Intercepted("", "v1", "pods/ephemeralcontainers", validate=("UPDATE",)),
    Intercepted("batch", "v1", "jobs", mutate=CREATE, validate=CREATE_UPDATE),
    Intercepted("batch", "v1", "cronjobs", validate=CREATE_UPDATE),
    Intercepted("batch.volcano.sh", "v1alpha1", "jobs", mutate=CREATE, validate=CREATE_UPDATE),
    Intercepted("apps", "v1", "deployments", validate=CREATE_UPDATE),
    Intercepted("apps", "v1", "statefulsets", validate=CREATE_UPDATE),
    Intercepted("apps", "v1", "replicasets", validate=CREATE_UPDATE),
    Intercepted("apps", "v1", "daemonsets", validate=CREATE_UPDATE),
)


def builtin_resources(policy: Policy) -> Iterable[Intercepted]:
    return BUILTIN_RESOURCES


def kind_resources(policy: Policy) -> Iterable[Intercepted]:
    """Every kind of the policy's kind table (the built-in operator CRDs and ``workloadKinds``): mutated
    kinds at CREATE, every kind validated at CREATE and UPDATE."""
    for kind in policy.kinds.values():
        if kind.spec.scope != "Namespaced":
            continue
        group, _, version = kind.api_version.rpartition("/")
        yield Intercepted(
            group,
            version,
            kind.spec.plural,
            mutate=CREATE if kind.mutate else (),
            validate=CREATE_UPDATE,
        )


# policy -> the resources it needs intercepted; a new kind or subresource is one more function here
RESOURCE_SOURCES: list[Callable[[Policy], Iterable[Intercepted]]] = [builtin_resources, kind_resources]


def intercepted(policy: Policy) -> list[Intercepted]:
    """Every intercepted resource, first mention wins (a source repeating a built-in adds nothing)."""
    seen: dict[tuple[str, str, str], Intercepted] = {}
    for source in RESOURCE_SOURCES:
        for entry in source(policy):
            seen.setdefault((entry.group, entry.version, entry.resource), entry)
    return list(seen.values())


def rules(policy: Policy, webhook: WebhookName) -> list[dict[str, Any]]:
    """``rules`` of one webhook: entries with the same group, version and operations share a rule."""
    grouped: dict[tuple[str, str, tuple[str, ...]], list[str]] = {}
    for entry in intercepted(policy):
        ops = entry.operations(webhook)
        if ops:
            grouped.setdefault((entry.group, entry.version, ops), []).append(entry.resource)
    return [
        {
            "apiGroups": [group],
            "apiVersions": [version],
            "resources": resources,
            "operations": list(ops),
            "scope": "Namespaced",
        }
        for (group, version, ops), resources in grouped.items()
    ]


# --- matchConditions --------------------------------------------------------------------------------


def cel_string(value: str) -> str:
    """A CEL single-quoted string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


@dataclass(frozen=True)
class TemplateShape:
    """Where one shape of object keeps its pod templates: tested in order, the first that holds wins.

    ``when`` is a CEL test on ``object.spec`` (known to exist), ``templates`` a CEL list of pod templates
    (objects with ``metadata``/``spec``); a bare Pod is its own template.
    """

    name: str
    when: str
    templates: str


TEMPLATE_SHAPES: list[TemplateShape] = [
    TemplateShape("pod", "has(object.spec.containers)", "[object]"),
    TemplateShape("job, apps controllers", "has(object.spec.template)", "[object.spec.template]"),
    TemplateShape(
        "volcano job", "has(object.spec.tasks)", "object.spec.tasks.filter(x, has(x.template)).map(x, x.template)"
    ),
    TemplateShape(
        "cronjob",
        "has(object.spec.jobTemplate) && has(object.spec.jobTemplate.spec) &&\n"
        "  has(object.spec.jobTemplate.spec.template)",
        "[object.spec.jobTemplate.spec.template]",
    ),
]


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _cel_templates(path: tuple) -> tuple[str, str] | None:
    """(guard, CEL list of the pod templates at ``path``) for a kind-table path with at most one
    wildcard, every step ``has()``-guarded; None when CEL cannot spell it (keys that are not identifiers,
    nested wildcards: such a kind is still intercepted through its object-level intent label)."""
    wild = [i for i, p in enumerate(path) if isinstance(p, Wild)]
    if len(wild) > 1 or not all(isinstance(p, Wild) or (isinstance(p, str) and _IDENT.match(p)) for p in path):
        return None
    cut = wild[0] if wild else len(path)
    guards, expr = [], "object"
    for part in path[:cut]:
        guards.append(f"has({expr}.{part})")
        expr = f"{expr}.{part}"
    if not wild:
        return " && ".join(guards) or "true", f"[{expr}]"
    items = expr if path[cut] is Wild.LIST else f"{expr}.map(k, {expr}[k])"
    inner, sub = [], "x"
    for part in path[cut + 1 :]:
        inner.append(f"has({sub}.{part})")
        sub = f"{sub}.{part}"
    if inner:
        items = f"{items}.filter(x, {' && '.join(inner)}).map(x, {sub})"
    return " && ".join(guards), items


def kind_shapes(policy: Policy) -> list[TemplateShape]:
    """Template shapes of the kind table's kinds whose templates the built-in shapes do not reach."""
    out: list[TemplateShape] = []
    for kind in policy.kinds.values():
        if kind.api_version in ("v1", "batch/v1", "apps/v1") or (kind.builtin and kind.name == "VolcanoJob"):
            continue  # TEMPLATE_SHAPES covers them
        parts = [_cel_templates(t.path) for t in kind.templates if t.resources is None and t.path]
        parts = [p for p in parts if p is not None]
        if not parts:
            continue
        when = " ||\n  ".join(f"({g})" for g, _ in parts)
        lists = " + ".join(f"({g} ? {lst} : [])" for g, lst in parts)
        out.append(TemplateShape(kind.name, f"({when})", lists))
    return out


def _intent_key_in(meta: str, policy: Policy) -> str:
    """A label or annotation of ``meta`` under the intent prefix: the workload label, an intent key, or a
    typo'd or misplaced one (which the webhook answers with an ``intent-unknown-key`` warning)."""
    prefix = cel_string(policy.settings.prefix + "/")
    return (
        f"(has({meta}) && (\n  (has({meta}.labels) && {meta}.labels.exists(k, k.startsWith({prefix}))) ||\n"
        f"  (has({meta}.annotations) && {meta}.annotations.exists(k, k.startsWith({prefix})))))"
    )


def _intent_key_on_template(policy: Policy) -> str:
    return _intent_key_in("t.metadata", policy)


def _gpu_resource_in_template(policy: Policy) -> str | None:
    if not policy.gpu_prefixes:
        return None
    prefixes = " ||\n      ".join(f"k.startsWith({cel_string(p)})" for p in policy.gpu_prefixes)
    return (
        "(has(t.spec) &&\n"
        "  ((has(t.spec.containers) ? t.spec.containers : []) +\n"
        "    (has(t.spec.initContainers) ? t.spec.initContainers : [])).exists(c,\n"
        "    has(c.resources) &&\n"
        "    [has(c.resources.limits) ? c.resources.limits : {},\n"
        "      has(c.resources.requests) ? c.resources.requests : {}].exists(m,\n"
        "      m.exists(k,\n"
        f"      {prefixes}))))"
    )


def _dra_in_template(policy: Policy) -> str:
    """DRA: a resource claim (its template or claim may be a GPU; only the engine can resolve it), or an
    extended resource a DeviceClass serves (the implicit ``deviceclass.resource.kubernetes.io/`` names
    and the catalogue's ``extendedResourceName``s)."""
    names = sorted(n for n in policy.dra.extended if not policy.is_gpu_resource(n))
    mapped = "".join(f" || k == {cel_string(n)}" for n in names)
    return (
        "(has(t.spec) && (\n"
        "  (has(t.spec.resourceClaims) && size(t.spec.resourceClaims) > 0) ||\n"
        "  ((has(t.spec.containers) ? t.spec.containers : []) +\n"
        "    (has(t.spec.initContainers) ? t.spec.initContainers : [])).exists(c,\n"
        "    has(c.resources) && has(c.resources.limits) && c.resources.limits.exists(k,\n"
        f"      k.startsWith('deviceclass.resource.kubernetes.io/'){mapped}))))"
    )


_DEV_PATH = (
    # a superset of the host paths that normalise to /dev, under it or to /: without "..", normalising only
    # drops "." segments and repeated or trailing slashes, so such a path is "/" and "." up to "dev" or the end
    "(p.contains('..') || p.matches('^[/.]*(dev(/.*)?)?$'))"
)
_CAPABILITY = r"a.matches('(?i)^\\s*(cap_)?(sys_admin|all)\\s*$')"


def _tolerates_taint(key: str, value: str | None, effect: str | None) -> str:
    """Toleration ``x`` may tolerate the taint, as ``webhook.engine.reach.tolerates`` reads it (a ``None``
    value or effect is one the policy leaves open: anything matches it). ``Gt``/``Lt`` (Kubernetes 1.35)
    compare the values as integers: any such toleration counts where the taint's value is open or an
    integer (a superset: CEL's ``int()`` errors on what the apiserver would reject, and the engine
    compares), none where it is fixed and not an integer."""
    from webhook.engine.reach import int64

    effect_ok = "" if effect is None else f"(!has(x.effect) || x.effect == '' || x.effect == {cel_string(effect)}) && "
    value_ok = "true" if value is None else f"(has(x.value) ? x.value : '') == {cel_string(value)}"
    compared = " || x.operator == 'Gt' || x.operator == 'Lt'" if value is None or int64(value) is not None else ""
    return (
        f"{effect_ok}((!has(x.key) || x.key == '') ? (has(x.operator) && x.operator == 'Exists') :\n"
        f"  x.key == {cel_string(key)} && ((has(x.operator) && (x.operator == 'Exists'{compared})) ||\n"
        f"    ((!has(x.operator) || x.operator == '' || x.operator == 'Equal') && {value_ok})))"
    )


def _tolerates_an_exposed_pool(policy: Policy) -> str | None:
    """Template ``t`` gets past the taints of at least one pool ``privileged-gpu`` guards for CPU-only
    pods: it sets ``spec.nodeName`` (the kubelet admits it past ``NoSchedule`` taints, no scheduler
    asked) or tolerates every filtering taint of such a pool; "true" when such a pool has no taint, None
    when there is no such pool."""
    from webhook.engine.device_reach import exposed_pools
    from webhook.engine.reach import FILTERING

    exposed = exposed_pools(policy)
    pools = []
    for name, pool in policy.pools.items():
        if name not in exposed:
            continue
        taints = [t for t in pool.taints if t[2] is None or t[2] in FILTERING]
        if not taints:
            return "true"
        each = [f"t.spec.tolerations.exists(x,\n  {_indent(_tolerates_taint(*taint), '  ')})" for taint in taints]
        pools.append(" &&\n".join(each))
    if not pools:
        return None
    alternatives = " ||\n  ".join(f"({_indent(p, '  ')})" for p in dict.fromkeys(pools))
    return (
        "((has(t.spec.nodeName) && t.spec.nodeName != '') ||\n"
        f"  (has(t.spec.tolerations) && (\n    {_indent(alternatives, '  ')})))"
    )


def _device_trigger_in_template(policy: Policy) -> str | None:
    """``privileged-gpu`` on pods without GPUs: a container of any kind (ephemeral ones included) with a
    way past the device grant (privileged, SYS_ADMIN/ALL, a hostPath volume that may reach /dev, the
    NVIDIA toolkit's environment, an envFrom that may set it) in a template that sets ``nodeName`` or
    tolerates the taints of a pool of sliced cards (every GPU pool with ``privilegedGPUPools: all``).
    CEL cannot judge the rest of reachability (selectors, affinity, which node a name is): this
    forwards a superset of what the engine's model reaches, read from the pools' taints, and the
    engine decides."""
    tolerates = _tolerates_an_exposed_pool(policy)
    if tolerates is None:
        return None
    names = ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES")
    env_name = " || ".join(f"e.name == {cel_string(n)}" for n in names)
    prefix = " || ".join(f"{cel_string(n)}.startsWith(f.prefix)" for n in names)
    trigger = (
        "((has(t.spec.containers) ? t.spec.containers : []) +\n"
        "  (has(t.spec.initContainers) ? t.spec.initContainers : []) +\n"
        "  (has(t.spec.ephemeralContainers) ? t.spec.ephemeralContainers : [])).exists(c,\n"
        "  (has(c.securityContext) && (\n"
        "    (has(c.securityContext.privileged) && c.securityContext.privileged == true) ||\n"
        "    (has(c.securityContext.capabilities) && has(c.securityContext.capabilities.add) &&\n"
        f"      c.securityContext.capabilities.add.exists(a, {_CAPABILITY})))) ||\n"
        f"  (has(c.env) && c.env.exists(e, has(e.name) && ({env_name}) &&\n"
        "    !(has(e.value) && (e.value == 'none' || e.value == 'void')))) ||\n"
        f"  (has(c.envFrom) && c.envFrom.exists(f, !has(f.prefix) || {prefix})) ||\n"
        "  (has(t.spec.volumes) &&\n"
        "    ((has(c.volumeMounts) ? c.volumeMounts : []) + (has(c.volumeDevices) ? c.volumeDevices : [])).exists(m,\n"
        "      has(m.name) && t.spec.volumes.exists(v, has(v.name) && v.name == m.name && has(v.hostPath) &&\n"
        f"        has(v.hostPath.path) && [v.hostPath.path].exists(p, {_DEV_PATH})))))"
    )
    return f"(has(t.spec) &&\n  {_indent(trigger, '  ')} &&\n  {_indent(tolerates, '  ')})"


# policy -> a CEL test on pod template ``t`` (or None); the template is GPU-relevant when any holds
TEMPLATE_TESTS: list[Callable[[Policy], str | None]] = [
    _intent_key_on_template,
    _gpu_resource_in_template,
    _dra_in_template,
    _device_trigger_in_template,
]


def _object_tests(policy: Policy) -> list[str]:
    tests = [
        _intent_key_in("object.metadata", policy),
        "(has(object.spec) && has(object.spec.jobTemplate) &&\n  "
        + _intent_key_in("object.spec.jobTemplate.metadata", policy)
        + ")",
    ]
    for kind in policy.kinds.values():  # resources outside a pod template (TrainJob's resourcesPerNode)
        for tpl in kind.templates:
            if tpl.resources is not None and all(isinstance(p, str) and _IDENT.match(p) for p in tpl.resources):
                guards, expr = [], "object"
                for part in tpl.resources:
                    guards.append(f"has({expr}.{part})")
                    expr = f"{expr}.{part}"
                prefixes = " || ".join(f"k.startsWith({cel_string(p)})" for p in policy.gpu_prefixes) or "false"
                tests.append(
                    f"({' && '.join(guards)} &&\n  [has({expr}.limits) ? {expr}.limits : {{}},\n"
                    f"    has({expr}.requests) ? {expr}.requests : {{}}].exists(m, m.exists(k, {prefixes})))"
                )
    return list(dict.fromkeys(tests))


def _indent(text: str, by: str) -> str:
    return text.replace("\n", "\n" + by)


def gpu_relevant(policy: Policy, webhook: WebhookName) -> str:
    """Only GPU-relevant objects reach the webhook: the intent label on the object, its CronJob
    jobTemplate or a pod template, or a GPU-family resource in any (init) container of a pod template."""
    shapes = [*TEMPLATE_SHAPES, *kind_shapes(policy)]
    chain = "".join(f"{_indent(s.when, '  ')} ? {s.templates} :\n  " for s in shapes)
    templates = f"(!has(object.spec) ? [] :\n  {chain}[]\n)"
    tests = [t for t in (test(policy) for test in TEMPLATE_TESTS) if t]
    per_template = " ||\n  ".join(_indent(t, "  ") for t in tests)
    return " ||\n".join([*_object_tests(policy), f"{templates}.exists(t,\n  {per_template})"])


def not_mirror_pod(policy: Policy, webhook: WebhookName) -> str:
    """Static pods' mirror objects are written by the kubelet; they cannot be changed or stopped here.

    Only a Pod can be a mirror pod: on any other kind the annotation is just a string anyone may
    write, and reading it there would let a Job or a Volcano Job hide from both webhooks."""
    return (
        "request.resource.resource != 'pods' ||\n"
        "!has(object.metadata) || !has(object.metadata.annotations) ||\n"
        "!('kubernetes.io/config.mirror' in object.metadata.annotations)"
    )


def update_changes_intent_or_template(policy: Policy, webhook: WebhookName) -> str | None:
    """UPDATEs are validated only when something the verdict depends on changed: labels, intent
    annotations, or the pod template (apps controllers, CronJob) / spec (Jobs, Volcano Jobs), so
    controllers' own writes (revision annotations, scaling, finalizers) never depend on the webhook."""
    if webhook != "validating":
        return None
    prefix = cel_string(policy.settings.prefix + "/")
    return (
        "request.operation != 'UPDATE' || oldObject == null ||\n"
        "!has(object.spec) || !has(oldObject.spec) ||\n"
        "(has(object.metadata.labels) ? object.metadata.labels : {}) !=\n"
        "  (has(oldObject.metadata.labels) ? oldObject.metadata.labels : {}) ||\n"
        "(has(object.metadata.annotations) ? object.metadata.annotations : {}).exists(k,\n"
        f"  k.startsWith({prefix}) &&\n"
        "  !(has(oldObject.metadata.annotations) && k in oldObject.metadata.annotations &&\n"
        "    oldObject.metadata.annotations[k] == object.metadata.annotations[k])) ||\n"
        "(has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {}).exists(k,\n"
        f"  k.startsWith({prefix}) &&\n"
        "  !(has(object.metadata.annotations) && k in object.metadata.annotations)) ||\n"
        "(request.resource.group == 'apps' && has(object.spec.template) && has(oldObject.spec.template) ?\n"
        "  object.spec.template != oldObject.spec.template :\n"
        "has(object.spec.jobTemplate) && has(oldObject.spec.jobTemplate) ?\n"
        "  object.spec.jobTemplate != oldObject.spec.jobTemplate :\n"
        "  object.spec != oldObject.spec)"
    )


@dataclass(frozen=True)
class Condition:
    name: str
    build: Callable[[Policy, WebhookName], str | None]


# named match conditions in order; all must be true for the API server to call the webhook.
# The mutating webhook's conditions are a prefix of the validating webhook's (tests/deploy checks it).
CONDITIONS: list[Condition] = [
    Condition("not-mirror-pod", not_mirror_pod),
    Condition("gpu-relevant", gpu_relevant),
    Condition("update-changes-intent-or-template", update_changes_intent_or_template),
]


def match_conditions(policy: Policy, webhook: WebhookName) -> list[dict[str, str]]:
    out = []
    for cond in CONDITIONS:
        expression = cond.build(policy, webhook)
        if expression:
            out.append({"name": cond.name, "expression": expression})
    return out


# --- the configurations -----------------------------------------------------------------------------


def _webhook(policy: Policy, options: RenderOptions, webhook: WebhookName) -> dict[str, Any]:
    mutating = webhook == "mutating"
    hook: dict[str, Any] = {
        "name": f"{'mutate' if mutating else 'validate'}.gpu-admission.io",
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "timeoutSeconds": 3 if mutating else 5,
        "failurePolicy": "Ignore" if mutating else "Fail",
    }
    if mutating:
        hook["reinvocationPolicy"] = "IfNeeded"
    hook |= {
        "matchPolicy": "Equivalent",
        "clientConfig": {
            "service": {
                "name": options.service,
                "namespace": options.namespace,
                "path": "/mutate" if mutating else "/validate",
                "port": 443,
            }
        },
        "namespaceSelector": {
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "NotIn",
                    "values": list(dict.fromkeys(("kube-system", options.namespace))),
                }
            ]
        },
        "rules": rules(policy, webhook),
        "matchConditions": match_conditions(policy, webhook),
    }
    return hook


def render_mutating(policy: Policy, options: RenderOptions) -> list[K8sObject]:
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": options.mutating_name, "labels": {"app.kubernetes.io/name": options.app}},
            "webhooks": [_webhook(policy, options, "mutating")],
        }
    ]


def render_validating(policy: Policy, options: RenderOptions) -> list[K8sObject]:
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": options.validating_name, "labels": {"app.kubernetes.io/name": options.app}},
            "webhooks": [_webhook(policy, options, "validating")],
        }
    ]
