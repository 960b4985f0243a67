"""``class-not-allowed`` and the raw-request part of ``pool-spoofing`` in-tree.

Entitlement is the first namespace rule whose selector matches the namespace's labels
(``namespaceObject``), rendered as an index chain; the classes and pools it grants are literals.

``pool-spoofing`` here is three exact parts of the engine's rule and one conservative one:

- a nodeSelector carrying every label of a pool the namespace may not use (the engine denies it as
  written, even where the mutation would neutralise it);
- a toleration spelled exactly like one of a pool's own tolerations, where no pool carrying that
  spelling is one the namespace may use;
- a raw GPU request (no class) that can reach such a pool, judged with the scheduler's rules on the
  fields CEL can bound: it tolerates every filtering taint of the pool (a blanket ``Exists``
  toleration tolerates all), its nodeSelector does not contradict the pool's labels and names only
  labels some pool fixes (one naming a node, such as a hostname, is judged node by node by a webhook
  that knows the Nodes), and it asks only for devices the pool offers. Where the engine's reach model
  reads more (required node affinity, ``nodeName``, DRA claims, GPU fractions, a selector that
  adopts it into a class) the check stays silent and the webhook judges it.

"May use" is every pool of every class the namespace is entitled to: the engine narrows it to the
template's class once that class resolves, so the wider set can only deny less.
"""

from __future__ import annotations

from webhook.engine.model.reach import FILTERING
from webhook.engine.model.reach import normal_toleration as _normal
from webhook.policy.compiled import CompiledPool, Policy
from webhook.render.intree.cel import cel_list, class_of, containers, key_is
from webhook.render.intree.checks import check
from webhook.render.intree.devices import _env as _toolkit_value
from webhook.render.webhooks import cel_string

ENTITLED_CLASSES = "variables.entitledClasses"
ENTITLED_POOLS = "variables.entitledPools"


@check(
    "class-not-allowed",
    "class-not-entitled",
    "the namespace is not entitled to this workload class (namespace labels decide; ask the platform team)",
    over="classed",
    exact=True,
)
def class_not_entitled(policy: Policy, t: str) -> str:
    classes = "[" + ", ".join(cel_string(c) for c in sorted(policy.classes)) + "]"
    cls = class_of(policy, t)
    return f"({cls} in {classes} && !({cls} in {ENTITLED_CLASSES}))"


def _selects(pool: CompiledPool, t: str) -> str:
    """Template ``t``'s nodeSelector carries every label of ``pool``."""
    labels = pool.spec.node_selector
    return f"has({t}.spec.nodeSelector) && " + " && ".join(
        f"{cel_string(k)} in {t}.spec.nodeSelector && {t}.spec.nodeSelector[{cel_string(k)}] == {cel_string(v)}"
        for k, v in labels.items()
    )


@check(
    "pool-spoofing",
    "selects-foreign-pool",
    "the nodeSelector carries every label of a GPU pool the namespace is not entitled to; remove it and "
    "declare a workload class",
    exact=True,
)
def selects_foreign_pool(policy: Policy, t: str) -> str | None:
    tests = [
        f"(!({cel_string(name)} in {ENTITLED_POOLS}) && {_selects(pool, t)})"
        for name, pool in policy.pools.items()
        if pool.spec.node_selector
    ]
    if not tests:
        return None
    return f"(has({t}.spec) && (\n  " + " ||\n  ".join(tests) + "))"


def _spelled(form: tuple) -> str:
    """Toleration ``x`` has exactly the normal form ``form`` (key, operator, value, effect)."""
    key, op, value, effect = form
    parts = ["!has(x.key)" if key is None else f"has(x.key) && x.key == {cel_string(key)}"]
    if op == "Equal":
        parts.append("(!has(x.operator) || x.operator == '' || x.operator == 'Equal')")
    else:
        parts.append(f"has(x.operator) && x.operator == {cel_string(op)}")
    parts.append("!has(x.value)" if value is None else f"has(x.value) && x.value == {cel_string(value)}")
    parts.append("!has(x.effect)" if effect is None else f"has(x.effect) && x.effect == {cel_string(effect)}")
    return "(" + " && ".join(parts) + ")"


@check(
    "pool-spoofing",
    "tolerates-foreign-pool",
    "a toleration is the taint toleration of GPU pools the namespace is not entitled to; remove it",
    exact=True,
)
def tolerates_foreign_pool(policy: Policy, t: str) -> str | None:
    carriers: dict[tuple, list[str]] = {}
    for name, pool in policy.pools.items():
        for tol in pool.tolerations:
            form = _normal(tol)
            if name not in carriers.setdefault(form, []):
                carriers[form].append(name)
    tests = []
    for form, pools in carriers.items():
        if any(type(v) not in (str, type(None)) for v in form):
            continue
        foreign = " && ".join(f"!({cel_string(p)} in {ENTITLED_POOLS})" for p in pools)
        tests.append(f"({foreign} && {t}.spec.tolerations.exists(x, {_spelled(form)}))")
    if not tests:
        return None
    return f"(has({t}.spec) && has({t}.spec.tolerations) && (\n  " + " ||\n  ".join(tests) + "))"


def _tolerated(key: str, value: str | None, effect: str | None) -> str:
    """Some toleration of ``t`` certainly tolerates the taint (Kubernetes matching; a value or effect the
    policy leaves open is one any toleration matches, as the engine reads it). ``Gt``/``Lt`` are left to
    the webhook."""
    effect_ok = "" if effect is None else f"(!has(x.effect) || x.effect == '' || x.effect == {cel_string(effect)}) && "
    value_ok = "true" if value is None else f"(has(x.value) ? x.value : '') == {cel_string(value)}"
    return (
        f"{effect_ok}((!has(x.key) || x.key == '') ? (has(x.operator) && x.operator == 'Exists') :\n"
        f"  x.key == {cel_string(key)} && ((has(x.operator) && x.operator == 'Exists') ||\n"
        f"    ((!has(x.operator) || x.operator == '' || x.operator == 'Equal') && {value_ok})))"
    )


def _reaches(policy: Policy, pool: CompiledPool, t: str) -> str:
    parts = []
    for key, value, effect in pool.taints:
        if effect is None or effect in FILTERING:
            parts.append(
                f"(has({t}.spec.tolerations) && {t}.spec.tolerations.exists(x,\n    {_tolerated(key, value, effect)}))"
            )
    for k, v in pool.spec.node_selector.items():
        key = cel_string(k)
        parts.append(
            f"(!has({t}.spec.nodeSelector) || !({key} in {t}.spec.nodeSelector) || "
            f"{t}.spec.nodeSelector[{key}] == {cel_string(v)})"
        )
    parts.append(_devices_offered(policy, pool, t))
    return "(" + " &&\n  ".join(parts) + ")"


def _devices_offered(policy: Policy, pool: CompiledPool, t: str) -> str:
    """Every GPU or RDMA resource the template's containers and init containers name (``ks``: one list of
    names per container, read once for all pools) is one the pool offers: a superset of the engine's
    demand, which counts positive amounts only."""
    offers = "[" + ", ".join(cel_string(o) for o in sorted(pool.offers)) + "]"
    return f"ks.all(l, l.all(k, k in {offers}))"


def _device_keys(policy: Policy, t: str) -> str:
    prefixes = " || ".join(f"k.startsWith({cel_string(p)})" for p in (*policy.gpu_prefixes, "rdma/"))
    rdma = sorted(policy.rdma_resources - {"rdma/"})
    device = f"({prefixes}" + (f" || k in [{', '.join(cel_string(r) for r in rdma)}]" if rdma else "") + ")"
    parts = " +\n    ".join(
        f"(has(c.resources) && has(c.resources.{m}) ? c.resources.{m}.filter(k, {key_is(device, long=True)}) : [])"
        for m in ("limits", "requests")
    )
    return f"({containers(t, 'containers', 'initContainers')}).map(c,\n    {parts})"


def _only_plain_devices(policy: Policy, t: str) -> str:
    """Nothing in the template the reach model reads beyond taints, labels and device names."""
    fractions = " || ".join(f"{cel_string(k)} in {t}.metadata.annotations" for k in policy.fraction_keys)
    mapped = sorted(n for n in policy.dra.extended if not policy.is_gpu_resource(n))  # GPU names: offers decide
    mapped_test = "k.startsWith('deviceclass.resource.kubernetes.io/')" + "".join(
        f" || k == {cel_string(n)}" for n in mapped
    )
    node_affinity = (
        f"has({t}.spec.affinity) && has({t}.spec.affinity.nodeAffinity) &&\n"
        f"    has({t}.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution)"
    )
    fixed = sorted({k for p in policy.pools.values() for k in p.spec.node_selector})
    return (
        f"(!has({t}.spec.nodeSelector) || {t}.spec.nodeSelector.all(k, k in {cel_list(fixed)})) &&\n"
        f"  !(has({t}.spec.nodeName) && {t}.spec.nodeName != '') &&\n"
        f"  !({node_affinity}) &&\n"
        f"  !(has({t}.spec.resourceClaims) && size({t}.spec.resourceClaims) > 0) &&\n"
        f"  !(has({t}.metadata) && has({t}.metadata.annotations) && ({fractions or 'false'})) &&\n"
        f"  !({containers(t, 'containers', 'initContainers')}).exists(c, has(c.resources) && (\n"
        f"    (has(c.resources.limits) && c.resources.limits.exists(k, {key_is(mapped_test, long=True)})) ||\n"
        f"    (has(c.resources.requests) && c.resources.requests.exists(k, {key_is(mapped_test, long=True)}))))"
    )


def _adopted(policy: Policy, t: str) -> str:
    """The raw request's nodeSelector selects a pool with ``adoptAs``: the engine judges it as that class."""
    tests = [_selects(pool, t) for pool in policy.pools.values() if pool.spec.adopt_as and pool.spec.node_selector]
    return "(" + " || ".join(f"({x})" for x in tests) + ")" if tests else "false"


@check(
    "pool-spoofing",
    "raw-request-reaches-foreign-pool",
    "a raw GPU request (no workload label) that the scheduler could place on a GPU pool the namespace is not "
    "entitled to (its tolerations and nodeSelector admit that pool's nodes); declare a workload class or "
    "select an entitled pool",
    over="raw",
    scope="stored",
)
def raw_reach(policy: Policy, t: str) -> str | None:
    foreign = [(name, pool) for name, pool in policy.pools.items()]
    if not foreign:
        return None
    tests = " ||\n  ".join(
        f"(!({cel_string(n)} in {ENTITLED_POOLS}) &&\n  {_reaches(policy, p, t)})" for n, p in foreign
    )
    return (
        f"(has({t}.spec) && !{_adopted(policy, t)} &&\n  {_only_plain_devices(policy, t)} &&\n"
        f"  [{_device_keys(policy, t)}].exists(ks,\n  {tests}))"
    )


def _may_tolerate(key: str, effect: str | None) -> str:
    """Some toleration of the old pod could tolerate the taint: any key-less toleration or one of its key,
    of any operator and value, with a compatible effect (wider than Kubernetes' matching)."""
    effect_ok = "" if effect is None else f" && (!has(x.effect) || x.effect == '' || x.effect == {cel_string(effect)})"
    return (
        f"(has(oldObject.spec.tolerations) && oldObject.spec.tolerations.exists(x,\n"
        f"    (!has(x.key) || x.key == '' || x.key == {cel_string(key)}){effect_ok}))"
    )


def _old_may_reach(pool: CompiledPool) -> str:
    """The old pod may have reached ``pool`` (a bound, or a pool without filtering taints, always may):
    only a pool the old pod certainly could not reach is one the update can gain."""
    parts = [_may_tolerate(key, effect) for key, _, effect in pool.taints if effect is None or effect in FILTERING]
    if not parts:
        return "true"
    bound = "(has(oldObject.spec.nodeName) && oldObject.spec.nodeName != '')"
    return f"(!has(oldObject.spec) || {bound} ||\n  " + " &&\n  ".join(parts) + ")"


def _void_missing(policy: Policy, t: str) -> str:
    """A container or init container with no GPU resource and no claim, and either no ``NVIDIA_VISIBLE_DEVICES``
    entry (the engine's "device env missing": the image's own value would reach the node's GPUs) or a last
    one set to a literal other than none/void (its toolkit-env finding); a pod with a GPU-fraction
    annotation is left to the webhook."""
    prefixes = " || ".join(f"k.startsWith({cel_string(p)})" for p in (*policy.gpu_prefixes, "rdma/"))
    fractions = " || ".join(f"{cel_string(k)} in {t}.metadata.annotations" for k in policy.fraction_keys) or "false"
    return (
        f"!(has({t}.metadata) && has({t}.metadata.annotations) && ({fractions})) &&\n"
        f"  ({containers(t, 'containers', 'initContainers')}).exists(c,\n"
        "    (!(has(c.env) && c.env.exists(e, has(e.name) && e.name == 'NVIDIA_VISIBLE_DEVICES')) ||\n"
        f"      (has(c.env) && {_toolkit_value('NVIDIA_VISIBLE_DEVICES')})) &&\n"
        "    !(has(c.resources) && ((has(c.resources.claims) && size(c.resources.claims) > 0) ||\n"
        f"      (has(c.resources.limits) && c.resources.limits.exists(k, {key_is(prefixes, long=True)})) ||\n"
        f"      (has(c.resources.requests) && c.resources.requests.exists(k, {key_is(prefixes, long=True)})))))"
    )


@check(
    "privileged-gpu",
    "update-gains-foreign-pool",
    "the pod update adds tolerations, a nodeSelector or affinity that let the scheduler place it on a GPU pool "
    "the namespace is not entitled to, with containers whose image would see that node's GPUs (no "
    "NVIDIA_VISIBLE_DEVICES); a pod's env cannot change by update: delete it and re-create it",
    over="templates",
    scope="pod-update",
    waived=lambda policy, t: "false",
)
def update_gains_reach(policy: Policy, t: str) -> str | None:
    """The engine's UPDATE-reach finding, in part: a Pod UPDATE (tolerations on any pod; nodeSelector or
    affinity while scheduling-gated, KEP-3838) after which the pod certainly reaches a pool the namespace
    may not use (the raw request's test, on the fields CEL can bound) while the old pod certainly reached
    no GPU pool at all (it tolerated none of some filtering taint of every pool), with a container the
    engine finds without its device void. A policy with a pool without filtering taints is left to the
    webhook (every pod may reach that pool already)."""
    tainted = [p for p in policy.pools.values() if any(e is None or e in FILTERING for _, _, e in p.taints)]
    if not tainted or len(tainted) < len(policy.pools):
        return None
    old_reached_none = " &&\n  ".join(f"!{_old_may_reach(p)}" for p in tainted)
    tests = [
        f"(!({cel_string(n)} in {ENTITLED_POOLS}) &&\n  {_reaches(policy, p, t)})" for n, p in policy.pools.items()
    ]
    return (
        f"(has({t}.spec) && {_only_plain_devices(policy, t)} &&\n  {old_reached_none} &&\n"
        f"  {_void_missing(policy, t)} &&\n"
        f"  [{_device_keys(policy, t)}].exists(ks,\n  " + " ||\n  ".join(tests) + "))"
    )
