"""Rules that keep users inside their entitlement and inside the scheduler's control."""

from __future__ import annotations

from collections.abc import Iterable

from webhook.engine.model import reach
from webhook.engine.model.context import ClaimContext, Context, Finding, TemplateState
from webhook.engine.model.reach import normal_toleration, toleration_forms
from webhook.engine.rules import claim_entitlement
from webhook.engine.rules.registry import CLAIM, POD, resolution_findings, rule
from webhook.policy.compiled import CompiledPool, Policy
from webhook.quantity import QuantityError, parse_quantity


def _scope(ctx: Context, state: TemplateState) -> str:
    who = f"namespace {ctx.namespace!r}"
    return f"{who} with class {state.class_name!r}" if state.cls is not None else who


def _entitled(ctx: Context, state: TemplateState) -> frozenset[str]:
    """Pools the namespace may use for this template's class (all its classes' pools if unresolved);
    a function of the policy, so remembered there."""
    class_name = state.class_name if state.cls is not None else None
    return ctx.policy.recall(
        ("entitled", ctx.entitlement_key, class_name),
        lambda: frozenset(ctx.policy.entitled_pools(ctx.entitlement, class_name)),
    )


def _carriers(policy: Policy, form: tuple) -> tuple[str, ...]:
    """Pools whose taints a toleration (in normal form) tolerates; remembered per policy."""
    return policy.recall(
        ("carriers", form),
        lambda: tuple(n for n, p in policy.pools.items() if form in toleration_forms(policy, p)),
    )


def _term_targets(term: object, selector: dict[str, str]) -> bool:
    if not isinstance(term, dict):
        return False  # not a term (the apiserver's validation refuses it); its index still counts
    exprs = [e for e in term.get("matchExpressions") or [] if isinstance(e, dict)]
    for key, value in selector.items():
        if not any(
            e.get("key") == key and e.get("operator") == "In" and value in (e.get("values") or []) for e in exprs
        ):
            return False
    return True


@rule(
    "pool-spoofing",
    subjects=(POD, CLAIM),
)
def pool_spoofing(ctx: Context | ClaimContext) -> Iterable[Finding]:
    if isinstance(ctx, ClaimContext):
        yield from claim_entitlement.unserved_findings(ctx)
        return
    yield from resolution_findings(ctx, "pool-spoofing")
    policy = ctx.policy
    for state in ctx.states:
        if state.intent is None and not state.resources.has_gpu:
            continue
        entitled = _entitled(ctx, state)
        flagged: set[str] = set()
        for finding, pool in _targeting(ctx, state, entitled):
            flagged.add(pool)
            yield finding
        reached = ctx.reach(state)
        for name in policy.pools:  # policy order: stable messages
            if name in reached and name not in entitled and name not in flagged:
                yield _reach_finding(ctx, state, policy.pools[name], entitled)


def _targeting(ctx: Context, state: TemplateState, entitled: frozenset[str]) -> Iterable[tuple[Finding, str]]:
    """The user's own fields (as received) that name a pool outside the entitlement: denied even where
    our mutation would neutralise them, since they say where the user meant the pod to go."""
    policy = ctx.policy
    spec = state.tpl.spec
    terms = reach.required_terms(spec) or []
    selected = [name for name in state.targeted_pools if name not in entitled]
    for name, pool in policy.pools.items() if selected or terms else ():
        if name in entitled or not pool.spec.node_selector:
            continue
        selector = pool.spec.node_selector
        if name in selected:
            shown = ", ".join(f"{k}={v}" for k, v in selector.items())
            yield (
                Finding(
                    "pool-spoofing",
                    state.tpl.dotted("spec", "nodeSelector"),
                    f"nodeSelector {shown} targets pool {name}, which {_scope(ctx, state)} is not entitled to; "
                    "remove it and declare a workload class instead",
                    state.class_name,
                ),
                name,
            )
        for i, term in enumerate(terms):
            if _term_targets(term, selector):
                yield (
                    Finding(
                        "pool-spoofing",
                        state.tpl.dotted(*_TERMS, i),
                        f"node affinity targets pool {name}, which {_scope(ctx, state)} is not entitled to",
                        state.class_name,
                    ),
                    name,
                )
    tolerations = reach.tolerations_in(spec)
    own = state.resolution.pool.tolerations if state.resolution is not None else ()
    for i, toleration in enumerate(tolerations):
        if toleration in own:  # the resolved pool's own (entitled) toleration, as our mutation wrote it
            continue
        carriers = _carriers(policy, normal_toleration(toleration))
        if carriers and not any(n in entitled for n in carriers):
            yield (
                Finding(
                    "pool-spoofing",
                    state.tpl.dotted("spec", "tolerations", i),
                    f"toleration {toleration.get('key')} tolerates the taint of pool "
                    f"{', '.join(carriers)}, which {_scope(ctx, state)} is not entitled to",
                    state.class_name,
                ),
                carriers[0],
            )


_TERMS = ("spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")


def _show_toleration(t: dict) -> str:
    if not t.get("key"):
        return "operator Exists with no key (tolerates every taint)"
    effect = t.get("effect") or "any effect"
    value = f"={t.get('value')}" if t.get("value") is not None else ""
    return f"{t.get('key')}{value} {t.get('operator') or 'Equal'} ({effect})"


def _reach_finding(ctx: Context, state: TemplateState, pool: CompiledPool, entitled: frozenset[str]) -> Finding:
    """Name the fields that open the way onto ``pool``, the most specific first, and the fix."""
    view = state.view
    spec = view.spec
    why: list[str] = []
    path = ""
    own = set()
    for p in (state.resolution.pool if state.resolution else None, _pinned(ctx, state)):
        if p is not None:
            own.update(normal_toleration(t) for t in p.tolerations)
    tolerations = reach.tolerations_in(spec)
    for i, t in enumerate(tolerations):
        form = reach.toleration(t)
        if form is None or normal_toleration(t) in own:
            continue
        if any(reach.tolerates(form, *taint) for taint in pool.taints):
            path = path or view.dotted("spec", "tolerations", i)
            why.append(f"toleration {_show_toleration(t)} tolerates its taints")
    terms = reach.required_terms(spec)
    pl = reach.placement(spec, state.judged)
    if pl.node_name:
        path = path or view.dotted("spec", "nodeName")
        why.append(f"spec.nodeName {pl.node_name!r} binds it without the scheduler, past NoSchedule taints")
    elif not pool.taints:
        why.append("it has no taints")
    fixed = ", ".join(f"{k}={v}" for k, v in pool.spec.node_selector.items()) or "no labels"
    if terms:
        for i, term in enumerate(pl.terms or ()):
            single = reach.Placement((), (term,), (), frozenset())
            if reach.labels_admit(pool.spec.node_selector, single):
                path = path or view.dotted(*_TERMS, i)
                why.append(f"required node affinity term {i} can match its nodes ({fixed})")
                break
    elif pl.selector:
        path = path or view.dotted("spec", "nodeSelector")
        why.append(f"nodeSelector does not exclude its nodes ({fixed})")
    else:
        why.append(f"no nodeSelector or required node affinity excludes its nodes ({fixed})")
    if pl.devices:
        why.append(f"it offers {', '.join(sorted(pl.devices))}")
    served = sorted({a[1] for req in pl.claims for a in req if a[0] == "class" and pool.serves_class(*a[1:])})
    if served:
        verb = "may serve (no pool has a dra: block)" if pool.dra_classes is None else "serves"
        why.append(f"it {verb} DeviceClass {', '.join(served)} (the pod's resource claims)")
    options = [
        ctx.policy.pools[n] for n in ctx.policy.pools if n in entitled and ctx.policy.pools[n].spec.node_selector
    ]
    if state.intent is None:
        hint = (
            f"set nodeSelector {', '.join(f'{k}={v}' for k, v in options[0].spec.node_selector.items())} "
            f"(pool {options[0].name}) or declare a workload class ({ctx.policy.keys.workload})"
            if options
            else f"declare a workload class ({ctx.policy.keys.workload}) the namespace is entitled to"
        )
    else:
        hint = "remove the toleration or affinity that opens it; the webhook sets the pool's own"
    return Finding(
        "pool-spoofing",
        path or view.dotted("spec"),
        f"the pod can be scheduled onto pool {pool.name}, which {_scope(ctx, state)} is not entitled to: "
        f"{'; '.join(why)}; {hint}",
        state.class_name,
    )


def _pinned(ctx: Context, state: TemplateState) -> CompiledPool | None:
    return ctx.policy.pools.get(state.pinned) if state.pinned else None


@rule(
    "placement-missing",
)
def placement_missing(ctx: Context) -> Iterable[Finding]:
    if not ctx.stored:
        return
    for state in ctx.states:
        res = state.resolution
        pool = res.pool if res is not None else _pinned(ctx, state)
        if pool is None:
            continue
        what = (
            f"class {state.class_name!r} resolves to pool {pool.name}"
            if res is not None
            else f"raw GPU request is pinned to pool {pool.name} (rawRequests: pin)"
        )
        cause = "the mutating webhook did not run (timeout, failurePolicy Ignore) or a later webhook removed it"
        spec = state.tpl.spec
        want = res.node_selector if res is not None else dict(pool.spec.node_selector)
        have = reach.node_selector_in(spec)
        lacking = [f"{k}={v}" for k, v in want.items() if have.get(k) != v]
        if lacking:
            yield Finding(
                "placement-missing",
                state.tpl.dotted("spec", "nodeSelector"),
                f"nodeSelector lacks {', '.join(lacking)}, but the {what}: {cause}; create it again",
                state.class_name,
            )
        tols = reach.tolerations_in(spec)
        absent: list = []
        if not all(t in tols for t in pool.tolerations):  # usual: each exactly as our mutation wrote it
            forms = {normal_toleration(t) for t in tols}
            absent = [
                t
                for t, form in zip(pool.tolerations, toleration_forms(ctx.policy, pool), strict=True)
                if form not in forms
            ]
        if absent:
            yield Finding(
                "placement-missing",
                state.tpl.dotted("spec", "tolerations"),
                f"tolerations lack {', '.join(_show_toleration(t) for t in absent)}, but the {what}: {cause}; "
                "create it again",
                state.class_name,
            )
        if res is not None and res.claim is not None:
            yield from _claim_missing(state, what, cause)
            continue
        if res is None or not res.resources:
            continue
        target = state.target()
        if target is None:
            continue
        group, index = target
        c = spec[group][index]
        r = c.get("resources") if isinstance(c.get("resources"), dict) else {}
        limits = r.get("limits") if isinstance(r.get("limits"), dict) else {}
        missing = [f"{k}: {v}" for k, v in res.resources.items() if not _same(limits.get(k), v)]
        if missing:
            yield Finding(
                "placement-missing",
                state.tpl.dotted("spec", group, index, "resources", "limits"),
                f"container {c.get('name')!r} lacks {', '.join(missing)}, but the {what}: {cause}; create it again",
                state.class_name,
            )


def _claim_missing(state: TemplateState, what: str, cause: str) -> Iterable[Finding]:
    """A DRA pool's devices are the claim on the platform's template: the pod entry and the GPU
    container's reference must both be stored (without them the pod runs with no GPU at all, or
    with whatever claim took the name)."""
    res = state.resolution
    assert res is not None and res.claim is not None
    spec = state.tpl.spec
    entries = spec.get("resourceClaims") if isinstance(spec.get("resourceClaims"), list) else []
    ours = any(
        isinstance(e, dict) and e.get("name") == res.claim_name and e.get("resourceClaimTemplateName") == res.claim.name
        for e in entries
    )
    if not ours:
        yield Finding(
            "placement-missing",
            state.tpl.dotted("spec", "resourceClaims"),
            f"resourceClaims lacks {{name: {res.claim_name}, resourceClaimTemplateName: {res.claim.name}}}, "
            f"but the {what}: {cause}; create it again",
            state.class_name,
        )
    target = state.target()
    if target is None:
        return
    group, index = target
    c = spec[group][index]
    r = c.get("resources") if isinstance(c.get("resources"), dict) else {}
    used = r.get("claims") if isinstance(r.get("claims"), list) else []
    if not any(isinstance(u, dict) and u.get("name") == res.claim_name for u in used):
        yield Finding(
            "placement-missing",
            state.tpl.dotted("spec", group, index, "resources", "claims"),
            f"container {c.get('name')!r} lacks resources.claims {{name: {res.claim_name}}} (its claim on "
            f"{res.claim.name}), but the {what}: {cause}; create it again",
            state.class_name,
        )


def _same(have: object, want: str) -> bool:
    if have == want:
        return True
    try:
        return have is not None and parse_quantity(have) == parse_quantity(want)
    except QuantityError:
        return False


@rule("node-name-set")
def node_name_set(ctx: Context) -> Iterable[Finding]:
    for state in ctx.states:
        if state.intent is None and not state.resources.has_gpu:
            continue
        if state.tpl.spec.get("nodeName"):
            yield Finding(
                "node-name-set",
                state.tpl.dotted("spec", "nodeName"),
                f"nodeName {state.tpl.spec['nodeName']!r} bypasses the scheduler (no gang, topology or "
                "quota); remove it and let the pool's nodeSelector place the pod",
                state.class_name,
            )
