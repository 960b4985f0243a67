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
  is always possible. With ``availability: in-tree`` (``policy render --availability in-tree``, for
  clusters that install the in-tree policies) it is ``Ignore``: an outage then admits what the
  in-tree ValidatingAdmissionPolicies admit. Both configurations carry the mode as an annotation.
* no ``caBundle``: cert-manager's cainjector or ``gpu-admission certs inject`` fill it, and an apply
  of objects that never set it does not remove it.
* every nested field in CEL is ``has()``-guarded: an absent field is false, never an evaluation error
  (which would make the API server apply the failurePolicy).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Literal

from webhook.engine.model.device_reach import DEVICE_ROOTS
from webhook.policy.compiled import Policy
from webhook.policy.kinds import CompiledKind, Wild
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
    # DRA claims judged on their own (the scheduler's extended-resource-claim marker, device-taint
    # tolerations, capacity requests); never mutated. matchConditions keep the usual claim away.
    Intercepted("resource.k8s.io", "v1", "resourceclaims", validate=CREATE_UPDATE),
    Intercepted("resource.k8s.io", "v1", "resourceclaimtemplates", validate=CREATE_UPDATE),
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


def scale_resources(policy: Policy) -> Iterable[Intercepted]:
    """The ``<resource>/scale`` subresource of every kind whose scale the kind table declares (apps
    controllers, Kubeflow jobs with a Worker scale, LeaderWorkerSet): ``kubectl scale`` and HPAs change
    the pod count the gang rules read without touching the object, so its UPDATE is validated (judged
    as the object it scales; ``webhook.server.scale``)."""
    for kind in policy.kinds.values():
        if kind.spec.scope == "Namespaced" and kind.scale is not None:
            group, _, version = kind.api_version.rpartition("/")
            yield Intercepted(group, version, f"{kind.spec.plural}/scale", validate=("UPDATE",))


# policy -> the resources it needs intercepted; a new kind or subresource is one more function here
RESOURCE_SOURCES: list[Callable[[Policy], Iterable[Intercepted]]] = [
    builtin_resources,
    kind_resources,
    scale_resources,
]


def intercepted(policy: Policy) -> list[Intercepted]:
    """Every intercepted resource, first mention wins (a source repeating a built-in adds nothing).

    A policy with ``exceptions`` also sends every kind with pod templates but Pods to ``/mutate`` at
    CREATE and UPDATE: that is where the webhook writes (and strips) the exception grants their pods
    carry (docs/policy.md "Exceptions"). Without exceptions the configuration is what it always was."""
    seen: dict[tuple[str, str, str], Intercepted] = {}
    for source in RESOURCE_SOURCES:
        for entry in source(policy):
            seen.setdefault((entry.group, entry.version, entry.resource), entry)
    entries = list(seen.values())
    if policy.spec.exceptions:
        entries = [
            replace(e, mutate=CREATE_UPDATE) if e.validate == CREATE_UPDATE and e.resource != "pods" else e
            for e in entries
        ]
    return entries


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
class TemplateBranch:
    """Where one intercepted resource keeps its pod templates: ``templates`` is a CEL list of pod
    templates (objects with ``metadata``/``spec``; a bare Pod is its own template), taken when the
    request is for ``group``/``resource`` (and one of ``versions``, when versions of that resource
    keep their templates in different places).

    The branch is chosen by what the apiserver says the request is for, never by the object's shape:
    a shape test (``has(object.spec.template)``) is true of more kinds than the one it was written
    for (a TrainingRuntime has ``spec.template`` too, a JobSet template, so its pod templates
    further down were never read), and an object of a kind whose schema keeps unknown fields could
    add a field to take another kind's branch."""

    group: str
    resource: str
    versions: tuple[str, ...]
    templates: str

    def when(self) -> str:
        test = (
            f"request.resource.group == {cel_string(self.group)} && "
            f"request.resource.resource == {cel_string(self.resource)}"
        )
        if self.versions:
            test += f" &&\n  request.resource.version in [{', '.join(cel_string(v) for v in self.versions)}]"
        return test


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


def _kind_templates(kind: CompiledKind) -> str | None:
    """A CEL list of every pod template of one kind-table row, or None when CEL can spell none."""
    parts = [_cel_templates(t.path) for t in kind.templates if t.resources is None]
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    return " + ".join(lst if g == "true" else f"({g} ? {lst} : [])" for g, lst in parts)


def template_branches(policy: Policy) -> list[TemplateBranch]:
    """One branch per intercepted resource of the kind table (built-ins and ``workloadKinds``); the
    versions of one resource share a branch unless they keep their templates in different places."""
    by_resource: dict[tuple[str, str], dict[str, list[str]]] = {}
    for kind in policy.kinds.values():
        if kind.spec.scope != "Namespaced":
            continue
        lists = _kind_templates(kind)
        if lists is None:
            continue
        group, _, version = kind.api_version.rpartition("/")
        by_resource.setdefault((group, kind.spec.plural), {}).setdefault(lists, []).append(version)
    out: list[TemplateBranch] = []
    for (group, resource), shapes in by_resource.items():
        for lists, versions in shapes.items():
            out.append(TemplateBranch(group, resource, tuple(versions) if len(shapes) > 1 else (), lists))
    return out


# --- what the CEL reads, and what it forwards unread ----------------------------------------------------
#
# cel-go charges every step of an evaluation (identifiers, each comprehension step, each string test by
# its length), and the apiserver stops an expression at 1,000,000 and a webhook's conditions at
# 2,500,000: past it the evaluation errors and the failurePolicy decides (with `Ignore`, in-tree
# availability, the object would go unjudged). So every list and map the conditions walk is bounded:
# one larger than real workloads write is not read but forwarded (``size()`` costs 1), and the engine
# judges the object. What is forwarded is a superset of what the engine judges, never less.
MANY = {
    "templates": 8,  # pod templates of one object (a JobSet's roles, a Volcano Job's tasks)
    "containers": 24,  # containers + init (+ ephemeral) containers of one template
    "resources": 8,  # keys of one container's limits or requests (cpu, memory, ephemeral-storage, a device...)
    "metadata": 128,  # labels, or annotations, of one metadata
    "tolerations": 64,  # of one template: more may tolerate anything, as far as the CEL reads
    "env": 48,  # env entries of one container (read at UPDATE only, in a template that may reach a pool)
    "capabilities": 8,  # capabilities.add of one container (idem)
    "envFrom": 8,  # (idem)
    "volumes": 128,  # of one template (idem)
}
LONG_KEY = 64
"""A resource name longer than this is forwarded unread: each ``startsWith`` costs the key's length (a
qualified name may have 317 characters), while GPU resource names are short."""


def _bounded(items: str, var: str, what: str, test: str) -> str:
    """``items.exists(var, test)``, or true when ``items`` is longer than :data:`MANY` allows."""
    many = var * 2  # "as" (a capability list) is a reserved word in CEL
    sep = "" if test.startswith("\n") else " "
    return f"[{items}].exists({many}, size({many}) > {MANY[what]} || {many}.exists({var},{sep}{test}))"


def _intent_key_in(meta: str, policy: Policy) -> str:
    """A label or annotation of ``meta`` under the intent prefix: the workload label, an intent key, or a
    typo'd or misplaced one (which the webhook answers with an ``intent-unknown-key`` warning)."""
    key = f"k.startsWith({cel_string(policy.settings.prefix + '/')})"
    return (
        f"(has({meta}) && (\n"
        f"  (has({meta}.labels) && {_bounded(f'{meta}.labels', 'k', 'metadata', key)}) ||\n"
        f"  (has({meta}.annotations) && {_bounded(f'{meta}.annotations', 'k', 'metadata', key)})))"
    )


def _intent_key_on_template(policy: Policy, mapped: frozenset[str]) -> str:
    return _intent_key_in("t.metadata", policy)


def _fraction_in_template(policy: Policy, mapped: frozenset[str]) -> str | None:
    """A GPU-fraction annotation a scheduler the policy knows reads (``settings.gpuFractionAnnotations``,
    KAI's ``gpu-fraction`` and ``gpu-memory``) with a value: a share of one GPU with no resource name,
    a GPU pod to the engine (``webhook.engine.model.devices.inspect_pod``)."""
    keys = policy.fraction_keys
    if not keys:
        return None
    names = ", ".join(cel_string(k) for k in keys)
    return (
        "(has(t.metadata) && has(t.metadata.annotations) &&\n"
        f"  [{names}].exists(k, k in t.metadata.annotations && t.metadata.annotations[k] != ''))"
    )


def _claim_in_template(policy: Policy, mapped: frozenset[str]) -> str:
    """A DRA resource claim (its template or claim may be a GPU; only the engine can resolve it)."""
    return "(has(t.spec) && has(t.spec.resourceClaims) && size(t.spec.resourceClaims) > 0)"


IMPLICIT_EXTENDED = "deviceclass.resource.kubernetes.io/"


def extended_names(policy: Policy, mapped: Iterable[str] = ()) -> list[str]:
    """Extended resources a DeviceClass serves that no GPU prefix covers: the catalogue's and the
    policy's ``extendedResourceName``s, and ``mapped``, those of the cluster's DeviceClass objects
    (``policy render --cluster-objects``)."""
    names = set(policy.dra.extended) | set(mapped)
    return sorted(n for n in names if not policy.is_gpu_resource(n) and not n.startswith(IMPLICIT_EXTENDED))


def device_key(policy: Policy, mapped: Iterable[str] = ()) -> str:
    """CEL test on resource name ``k``: a GPU-family resource (the policy's prefixes) or an extended
    resource a DeviceClass serves (the implicit ``deviceclass.resource.kubernetes.io/`` names,
    :func:`extended_names`)."""
    return " ||\n".join(
        [
            *(f"k.startsWith({cel_string(p)})" for p in policy.gpu_prefixes),
            f"k.startsWith({cel_string(IMPLICIT_EXTENDED)})",
            *(f"k == {cel_string(n)}" for n in extended_names(policy, mapped)),
        ]
    )


def _device_resource_in_template(policy: Policy, mapped: frozenset[str]) -> str:
    """A container or init container asks for a GPU-family resource (in limits or requests) or an
    extended resource a DeviceClass serves (:func:`device_key`). Each key costs a step and one
    ``startsWith`` per name (about 26 on the default policy), so the keys read are bounded (:data:`MANY`):
    a pod may carry 65,536 (the engine's caps: 512 containers, 64 limits and 64 requests each), while
    real containers name a handful (cpu, memory, ephemeral-storage, hugepages, a device or two)."""
    keys = _indent(device_key(policy, mapped), "      ")
    maps = (
        "[has(c.resources.limits) ? c.resources.limits : {},\n"
        "  has(c.resources.requests) ? c.resources.requests : {}].exists(m,\n"
        f"  size(m) > {MANY['resources']} || m.exists(k, size(k) > {LONG_KEY} ||\n      {keys}))"
    )
    containers = (
        "(has(t.spec.containers) ? t.spec.containers : []) +\n"
        "    (has(t.spec.initContainers) ? t.spec.initContainers : [])"
    )
    each = "has(c.resources) &&\n    " + _indent(maps, "    ")
    return f"(has(t.spec) &&\n  {_bounded(containers, 'c', 'containers', each)})"


_DEV_REGEX = "^[/.]*((" + "|".join(re.escape(root.lstrip("/")) for root in DEVICE_ROOTS) + ")(/.*)?)?$"
_DEV_PATH_LONG = 64
_DEV_PATH = (
    # a superset of the host paths that normalise to /dev, /proc or /sys (webhook.engine.model.device_reach.
    # DEVICE_ROOTS), under them or to /: without "..", normalising only drops "." segments and repeated
    # or trailing slashes, so such a path is "/" and "." up to one of those names or the end. `matches`
    # costs the string's length times the regex's, so a path longer than any real one is forwarded
    # unread (the engine judges it) rather than priced by its length.
    f"(size(p) > {_DEV_PATH_LONG} || p.contains('..') || p.matches({cel_string(_DEV_REGEX)}))"
)
_CAPABILITY_LONG = 64
_CAPABILITY = (
    # `matches` costs the string's length times the regex's; no capability name is this long, so a longer
    # one is forwarded unread (the engine judges it) rather than priced by its length
    f"(size(a) > {_CAPABILITY_LONG} || " r"a.matches('(?i)^\\s*(cap_)?(sys_admin|all)\\s*$'))"
)
_VISIBLE, _CAPABILITIES = "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"


def _tolerates_taint(key: str, value: str | None, effect: str | None) -> str:
    """Toleration ``x`` may tolerate the taint, as ``webhook.engine.model.reach.tolerates`` reads it (a ``None``
    value or effect is one the policy leaves open: anything matches it). ``Gt``/``Lt`` (Kubernetes 1.35)
    compare the values as integers: any such toleration counts where the taint's value is open or an
    integer (a superset: CEL's ``int()`` errors on what the apiserver would reject, and the engine
    compares), none where it is fixed and not an integer."""
    from webhook.engine.model.reach import int64

    effect_ok = "" if effect is None else f"(!has(x.effect) || x.effect == '' || x.effect == {cel_string(effect)}) && "
    value_ok = "true" if value is None else f"(has(x.value) ? x.value : '') == {cel_string(value)}"
    compared = " || x.operator == 'Gt' || x.operator == 'Lt'" if value is None or int64(value) is not None else ""
    return (
        f"{effect_ok}((!has(x.key) || x.key == '') ? (has(x.operator) && x.operator == 'Exists') :\n"
        f"  x.key == {cel_string(key)} && ((has(x.operator) && (x.operator == 'Exists'{compared})) ||\n"
        f"    ((!has(x.operator) || x.operator == '' || x.operator == 'Equal') && {value_ok})))"
    )


def _tolerates_a_pool(policy: Policy, names: frozenset[str] | None = None, pod: str = "t") -> str | None:
    """Template ``t`` (or the CEL variable ``pod`` names) gets past the taints of at least one of the pools
    ``names`` (every GPU pool when None): it sets ``spec.nodeName`` (the kubelet admits it past
    ``NoSchedule`` taints, no scheduler asked) or tolerates every filtering taint of such a pool; "true"
    when such a pool has no taint, None when there is no such pool."""
    from webhook.engine.model.reach import FILTERING

    pools = []
    for name, pool in policy.pools.items():
        if names is not None and name not in names:
            continue
        taints = [t for t in pool.taints if t[2] is None or t[2] in FILTERING]
        if not taints:
            return "true"
        each = [f"{pod}.spec.tolerations.exists(x,\n  {_indent(_tolerates_taint(*taint), '  ')})" for taint in taints]
        pools.append(" &&\n".join(each))
    if not pools:
        return None
    alternatives = " ||\n  ".join(f"({_indent(p, '  ')})" for p in dict.fromkeys(pools))
    return (
        f"((has({pod}.spec.nodeName) && {pod}.spec.nodeName != '') ||\n"
        f"  (has({pod}.spec.tolerations) && (size({pod}.spec.tolerations) > {MANY['tolerations']} ||\n"
        f"    {_indent(alternatives, '  ')})))"
    )


def _reaches_a_gpu_pool_in_template(policy: Policy, mapped: frozenset[str]) -> str | None:
    """Templates that may reach a GPU pool (its tolerations, a ``nodeName``); CEL cannot judge the rest of
    reachability (selectors, affinity, which node a name is), so this forwards a superset of what the
    engine's model reaches, read from the pools' taints, and the engine decides.

    * At CREATE, every such template: its containers without a GPU grant get ``NVIDIA_VISIBLE_DEVICES=void``
      from ``/mutate``, and ``/validate`` checks it is there (``privileged-gpu``).
    * At UPDATE (not every UPDATE of a bound pod: every bound pod has a ``nodeName``), one with a
      container of any kind (ephemeral ones included) that writes ``NVIDIA_VISIBLE_DEVICES``, or, where
      the template tolerates a pool of sliced cards (``sliced``; every GPU pool with
      ``privilegedGPUPools: all``), has any way past the device grant: privileged, SYS_ADMIN/ALL, a
      hostPath volume that may reach /dev, ``NVIDIA_DRIVER_CAPABILITIES``, an ``envFrom`` that may set
      either variable.

    Cost (cel-go charges every step): the tolerations are read first and the containers only behind
    them, an env entry's name is compared with the two names (``==`` costs the shorter string, a
    ``startsWith`` screen the longer), and a hostPath volume that may reach /dev is
    looked for once per template (any such volume, mounted or not: a superset), not once per mount."""
    tolerates = _tolerates_a_pool(policy)
    if tolerates is None:
        return None
    from webhook.engine.model.device_reach import exposed_pools

    sliced = _tolerates_a_pool(policy, exposed_pools(policy)) or "false"
    prefix = " || ".join(f"{cel_string(n)}.startsWith(f.prefix)" for n in (_VISIBLE, _CAPABILITIES))
    env = (
        f"has(e.name) && (e.name == {cel_string(_VISIBLE)} || (sliced && e.name == {cel_string(_CAPABILITIES)})) &&\n"
        "  !(has(e.value) && (e.value == 'none' || e.value == 'void'))"
    )
    written = f"has(c.env) && {_bounded('c.env', 'e', 'env', env)}"
    capabilities = _bounded("c.securityContext.capabilities.add", "a", "capabilities", _CAPABILITY)
    env_from = _bounded("c.envFrom", "f", "envFrom", f"!has(f.prefix) || {prefix}")
    way = (
        "(has(c.securityContext) && (\n"
        "  (has(c.securityContext.privileged) && c.securityContext.privileged == true) ||\n"
        "  (has(c.securityContext.capabilities) && has(c.securityContext.capabilities.add) &&\n"
        f"    {capabilities}))) ||\n"
        f"(has(c.envFrom) && {env_from})"
    )
    volume = f"has(v.hostPath) && has(v.hostPath.path) && [v.hostPath.path].exists(p, {_DEV_PATH})"
    containers = (
        "(has(t.spec.containers) ? t.spec.containers : []) +\n"
        "  (has(t.spec.initContainers) ? t.spec.initContainers : []) +\n"
        "  (has(t.spec.ephemeralContainers) ? t.spec.ephemeralContainers : [])"
    )
    each = f"({_indent(written, '  ')}) ||\n  (sliced && ({_indent(way, '    ')}))"
    scan = (
        f"(sliced && has(t.spec.volumes) && {_bounded('t.spec.volumes', 'v', 'volumes', volume)}) ||\n"
        f"{_bounded(containers, 'c', 'containers', chr(10) + '  ' + each)}"
    )
    return (
        f"(has(t.spec) &&\n  {_indent(tolerates, '  ')} &&\n"
        "  (request.operation == 'CREATE' ||\n"
        f"    [{_indent(sliced, '      ')}].exists(sliced,\n"
        f"      {_indent(scan, '      ')})))"
    )


# (policy, the cluster's DeviceClass-mapped names) -> a CEL test on pod template ``t`` (or None); the
# template is GPU-relevant when any holds. Cheapest first: ``||`` stops at the first that holds, and a
# template that holds none pays for all of them (metadata, then resources, then reach).
TEMPLATE_TESTS: list[Callable[[Policy, frozenset[str]], str | None]] = [
    _intent_key_on_template,
    _fraction_in_template,
    _claim_in_template,
    _device_resource_in_template,
    _reaches_a_gpu_pool_in_template,
]


def _object_tests(policy: Policy, mapped: frozenset[str] = frozenset()) -> list[str]:
    tests = []
    if any(k.scale is not None for k in policy.kinds.values()):
        # a Scale carries no template: the webhook reads the object it scales (only a changed count is
        # sent: update-changes-intent-or-template) and the engine judges it
        tests.append("(has(request.subResource) && request.subResource == 'scale')")
    tests += [
        _intent_key_in("object.metadata", policy),
        "(has(object.spec) && has(object.spec.jobTemplate) &&\n  "
        + _intent_key_in("object.spec.jobTemplate.metadata", policy)
        + ")",
    ]
    keys = _indent(device_key(policy, mapped), "      ")
    for kind in policy.kinds.values():  # kinds without a pod template of their own (TrainJob)
        for tpl in kind.templates:
            if tpl.resources is not None and _spellable(tpl.resources):  # resourcesPerNode
                guards, expr = _guarded(tpl.resources)
                tests.append(
                    f"({guards} &&\n  [has({expr}.limits) ? {expr}.limits : {{}},\n"
                    f"    has({expr}.requests) ? {expr}.requests : {{}}].exists(m,\n"
                    f"      size(m) > {MANY['resources']} || m.exists(k, size(k) > {LONG_KEY} || {keys})))"
                )
            if tpl.patches is not None and _spellable(tpl.patches):
                # the runtime patches carry the rest of the pod template (labels, annotations, tolerations,
                # containers' securityContext and env), merged by the controller across every patch: CEL
                # cannot merge them, so any patch is forwarded and the engine judges the merged template
                guards, expr = _guarded(tpl.patches)
                tests.append(f"({guards} && size({expr}) > 0)")
    return list(dict.fromkeys(tests))


def _spellable(path: tuple) -> bool:
    return all(isinstance(p, str) and _IDENT.match(p) for p in path)


def _guarded(path: tuple) -> tuple[str, str]:
    """(``has()`` guards of every step, the CEL path) of a wildcard-free path on ``object``."""
    guards, expr = [], "object"
    for part in path:
        guards.append(f"has({expr}.{part})")
        expr = f"{expr}.{part}"
    return " && ".join(guards), expr


def _indent(text: str, by: str) -> str:
    return text.replace("\n", "\n" + by)


CLAIM_GROUP = "resource.k8s.io"
EXTENDED_RESOURCE_CLAIM = "resource.kubernetes.io/extended-resource-claim"
SCHEDULER = "system:kube-scheduler"
CLAIM_CONTROLLERS = ("system:serviceaccount:kube-system:resourceclaim-controller", "system:kube-controller-manager")
"""Who writes the claims a pod's template entry makes: copies of a template judged when it was created."""


def _claim_marked(obj: str) -> str:
    """The scheduler's marker is on the claim (its metadata) or on what a template copies into its claims."""
    key = cel_string(EXTENDED_RESOURCE_CLAIM)
    return (
        "(request.resource.resource == 'resourceclaimtemplates' ?\n"
        f"  has({obj}.spec) && has({obj}.spec.metadata) && has({obj}.spec.metadata.annotations) &&\n"
        f"    {key} in {obj}.spec.metadata.annotations :\n"
        f"  has({obj}.metadata) && has({obj}.metadata.annotations) && {key} in {obj}.metadata.annotations)"
    )


def claim_relevant(policy: Policy) -> str:
    """A ResourceClaim(Template) reaches ``/validate`` only when there is something to judge: the marker
    written by anyone but the scheduler (the scheduler's own claims never depend on the webhook), or, at
    CREATE, a request with device-taint tolerations or capacity requests, or any request at all from
    anyone but the resourceclaim controller (what a pod that names the object gets: a template may be
    created after its pod, and only the engine can tell a GPU class). On UPDATE (the spec is immutable)
    only a marker the update adds: controllers' finalizer writes never reach it."""
    specs = (
        "(request.resource.resource == 'resourceclaimtemplates' ?\n"
        "    (has(object.spec) && has(object.spec.spec) ? [object.spec.spec] : []) :\n"
        "    (has(object.spec) ? [object.spec] : []))"
    )
    asks = (
        f"{specs}.exists(s,\n"
        "  has(s.devices) && has(s.devices.requests) && s.devices.requests.exists(r,\n"
        "    (has(r.exactly) && (has(r.exactly.tolerations) || has(r.exactly.capacity))) ||\n"
        "    (has(r.firstAvailable) && r.firstAvailable.exists(a, has(a.tolerations) || has(a.capacity)))))"
    )
    controllers = ", ".join(cel_string(c) for c in CLAIM_CONTROLLERS)
    requested = (
        "!(has(request.userInfo) && has(request.userInfo.username) &&\n"
        f"  request.userInfo.username in [{controllers}]) &&\n"
        f"{specs}.exists(s, has(s.devices) && has(s.devices.requests) && size(s.devices.requests) > 0)"
    )
    return (
        "!(has(request.userInfo) && has(request.userInfo.username) &&\n"
        f"  request.userInfo.username == {cel_string(SCHEDULER)}) &&\n"
        "(request.operation == 'UPDATE' ?\n"
        f"  {_indent(_claim_marked('object'), '  ')} &&\n"
        f"  !{_indent(_claim_marked('oldObject'), '  ')} :\n"
        f"  {_indent(_claim_marked('object'), '  ')} ||\n"
        f"  {_indent(asks, '  ')} ||\n"
        f"  ({_indent(requested, '  ')}))"
    )


# what a pod UPDATE may change of where the pod can run: tolerations (any pod), nodeSelector and node
# affinity (a scheduling-gated pod, KEP-3838); nodeName is set by the binding, never by an UPDATE
REACH_FIELDS = ("tolerations", "nodeSelector", "affinity")


def pod_update_changes_reach(policy: Policy) -> str | None:
    """A Pod UPDATE that changes what the pod can reach (:data:`REACH_FIELDS`, or the removal of its last
    scheduling gate, which makes it schedulable) and leaves it able to get past a GPU pool's taints. A
    pod without GPU resources created with no toleration was never GPU-relevant, so its containers never
    got ``NVIDIA_VISIBLE_DEVICES=void``; the engine judges the reach it gains (and says to re-create the
    pod: env cannot change by UPDATE). Other pod UPDATEs (labels, a bound pod's status-like writes) stay
    away, and CREATEs are untouched."""
    tolerates = _tolerates_a_pool(policy, pod="object")
    if tolerates is None:
        return None
    changed = " ||\n".join(
        f"has(object.spec.{f}) != has(oldObject.spec.{f}) ||\n"
        f"  (has(object.spec.{f}) && object.spec.{f} != oldObject.spec.{f})"
        for f in REACH_FIELDS
    )
    ungated = (
        "(has(oldObject.spec.schedulingGates) && size(oldObject.spec.schedulingGates) > 0 &&\n"
        "  !(has(object.spec.schedulingGates) && size(object.spec.schedulingGates) > 0))"
    )
    return (
        "(request.operation == 'UPDATE' && request.resource.resource == 'pods' && request.resource.group == '' &&\n"
        "  !(oldObject == null) && has(object.spec) && has(oldObject.spec) &&\n"
        f"  ({_indent(changed, '    ')} ||\n    {_indent(ungated, '    ')}) &&\n"
        f"  {_indent(tolerates, '  ')})"
    )


def gpu_relevant(policy: Policy, webhook: WebhookName, mapped: frozenset[str] = frozenset()) -> str:
    """Only GPU-relevant objects reach the webhook: a GPU trigger the engine knows (an intent label,
    a GPU-family resource, a claim, a GPU-fraction annotation, a way past the device grant in a
    template that can reach a GPU pool) on the object or in one of the pod templates its kind keeps
    (chosen by the request's resource, :class:`TemplateBranch`); DRA claims on their own by
    :func:`claim_relevant`. ``mapped``: extended resources the cluster's DeviceClasses serve
    (``extendedResourceName``, from ``policy render --cluster-objects``) that the policy does not name."""
    chain = "".join(f"{_indent(b.when(), '  ')} ?\n    {b.templates} :\n  " for b in template_branches(policy))
    templates = f"(!has(object.spec) ? [] :\n  {chain}[]\n)"
    tests = [t for t in (test(policy, mapped) for test in TEMPLATE_TESTS) if t]
    per_template = " ||\n  ".join(_indent(t, "  ") for t in tests)
    reach = pod_update_changes_reach(policy)
    workloads = " ||\n".join(
        [
            *_object_tests(policy, mapped),
            *([reach] if reach else []),
            _bounded(templates, "t", "templates", f"\n  {per_template}"),
        ]
    )
    # the conditional binds loosest: everything after ':' is the workloads' test, unchanged
    claims = _indent(claim_relevant(policy), "  ")
    return f"request.resource.group == {cel_string(CLAIM_GROUP)} ? (\n  {claims}\n) :\n{workloads}"


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
    annotations and GPU-fraction annotations (a Pod's own metadata is its template's), the pod
    template or a larger replica count (apps controllers and their ``/scale``: the gang rules read
    it), the job template (CronJob), the spec (Jobs, Volcano Jobs, operator kinds), so that
    controllers' own writes (revision annotations, status-like metadata, finalizers, scaling an old
    ReplicaSet down) never depend on the webhook. A scale-up does: a StatefulSet created at one
    replica and scaled to eight is a gang of eight. A smaller count makes no gang larger and asks for
    no more GPUs, so it is not sent."""
    if webhook != "validating":
        return None
    prefix = cel_string(policy.settings.prefix + "/")
    judged = f"k.startsWith({prefix})" + "".join(f" || k == {cel_string(key)}" for key in policy.fraction_keys)
    return (
        "request.operation != 'UPDATE' || oldObject == null ||\n"
        f"request.resource.group == {cel_string(CLAIM_GROUP)} ||\n"
        "!has(object.spec) || !has(oldObject.spec) ||\n"
        "(has(object.metadata.labels) ? object.metadata.labels : {}) !=\n"
        "  (has(oldObject.metadata.labels) ? oldObject.metadata.labels : {}) ||\n"
        + _bounded(
            "has(object.metadata.annotations) ? object.metadata.annotations : {}",
            "k",
            "metadata",
            f"\n  ({judged}) &&\n"
            "  !(has(oldObject.metadata.annotations) && k in oldObject.metadata.annotations &&\n"
            "    oldObject.metadata.annotations[k] == object.metadata.annotations[k])",
        )
        + " ||\n"
        + _bounded(
            "has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {}",
            "k",
            "metadata",
            f"\n  ({judged}) &&\n  !(has(object.metadata.annotations) && k in object.metadata.annotations)",
        )
        + " ||\n"
        "(has(request.subResource) && request.subResource == 'scale' ?\n"
        "  (has(object.spec.replicas) ? object.spec.replicas : 0) >\n"
        "    (has(oldObject.spec.replicas) ? oldObject.spec.replicas : 0) :\n"
        "request.resource.group == 'apps' && has(object.spec.template) && has(oldObject.spec.template) ?\n"
        "  object.spec.template != oldObject.spec.template ||\n"
        "    (has(object.spec.replicas) ? object.spec.replicas : 1) >\n"
        "      (has(oldObject.spec.replicas) ? oldObject.spec.replicas : 1) :\n"
        "has(object.spec.jobTemplate) && has(oldObject.spec.jobTemplate) ?\n"
        "  object.spec.jobTemplate != oldObject.spec.jobTemplate :\n"
        "  object.spec != oldObject.spec)"
    )


@dataclass(frozen=True)
class Condition:
    name: str
    build: Callable[[Policy, WebhookName], str | None]
    cluster: bool = False  # build also takes the cluster's DeviceClass-mapped names (``mapped=``)


# named match conditions in order; all must be true for the API server to call the webhook.
# The mutating webhook's conditions are a prefix of the validating webhook's (tests/deploy checks it).
CONDITIONS: list[Condition] = [
    Condition("not-mirror-pod", not_mirror_pod),
    Condition("gpu-relevant", gpu_relevant, cluster=True),
    Condition("update-changes-intent-or-template", update_changes_intent_or_template),
]


def match_conditions(
    policy: Policy, webhook: WebhookName, mapped: Iterable[str] = ()
) -> list[dict[str, str]]:
    """The named conditions of one webhook; ``mapped``: extended resources the cluster's DeviceClass
    objects serve (``policy render --cluster-objects``), forwarded like the policy's own."""
    names = frozenset(mapped)
    out = []
    for cond in CONDITIONS:
        expression = cond.build(policy, webhook, mapped=names) if cond.cluster else cond.build(policy, webhook)
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
        "failurePolicy": "Ignore" if mutating or options.availability == "in-tree" or _observing(policy) else "Fail",
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
        "matchConditions": match_conditions(policy, webhook, options.mapped_resources),
    }
    return hook


AVAILABILITY = "gpu-admission.io/availability"
AVAILABILITY_TEXT = {
    "webhook": "validating webhook fails closed: while it is down, GPU workloads are not admitted",
    "in-tree": "validating webhook fails open: while it is down, the in-tree ValidatingAdmissionPolicies "
    "(gpu-admission.io/in-tree) hold what they can; see policy render --explain",
}


def _metadata(options: RenderOptions, name: str) -> dict[str, Any]:
    """Name, labels, and the availability mode: which failure policies the configurations run with, and
    so what holds while the webhook is down (the mutating webhook always fails open: an unplaced class
    pod is caught by /validate, or by the in-tree placement-missing policy)."""
    return {
        "name": name,
        "labels": {"app.kubernetes.io/name": options.app},
        "annotations": {
            AVAILABILITY: options.availability,
            f"{AVAILABILITY}-detail": AVAILABILITY_TEXT[options.availability],
        },
    }


def _observing(policy: Policy) -> bool:
    """``settings.enforcement: warn|audit``: the webhook never denies, so an outage must not either."""
    return policy.settings.enforcement != "enforce"


def _enforcement(policy: Policy, hook: K8sObject) -> K8sObject:
    """An observe mode is said on the configuration, where the failure policy it changes is read."""
    if _observing(policy):
        hook["metadata"]["annotations"]["gpu-admission.io/enforcement"] = str(policy.settings.enforcement)
    return hook


def render_mutating(policy: Policy, options: RenderOptions) -> list[K8sObject]:
    if policy.settings.mutation == "off":  # /mutate would answer with no patch: not called at all
        return []
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": _metadata(options, options.mutating_name),
            "webhooks": [_webhook(policy, options, "mutating")],
        }
    ]


def render_validating(policy: Policy, options: RenderOptions) -> list[K8sObject]:
    hooks = [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": _metadata(options, options.validating_name),
            "webhooks": [_webhook(policy, options, "validating")],
        }
    ]
    return [_enforcement(policy, hook) for hook in hooks]
