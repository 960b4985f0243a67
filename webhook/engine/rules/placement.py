"""Rules that keep users inside their entitlement and inside the scheduler's control."""

from __future__ import annotations

from collections.abc import Iterable

from webhook.engine.context import Context, Finding, TemplateState
from webhook.engine.decision import Action
from webhook.engine.mutations.pool import _normal, toleration_forms
from webhook.engine.rules.registry import resolution_findings, rule
from webhook.policy.compiled import Policy


def _scope(ctx: Context, state: TemplateState) -> str:
    who = f"namespace {ctx.namespace!r}"
    return f"{who} with class {state.class_name!r}" if state.cls is not None else who


def _entitled(ctx: Context, state: TemplateState) -> frozenset[str]:
    """Pools the namespace may use for this template's class (all its classes' pools if unresolved);
    a function of the policy, so remembered there."""
    class_name = state.class_name if state.cls is not None else None
    return ctx.policy.recall(
        ("entitled", id(ctx.entitlement), class_name),
        lambda: frozenset(ctx.policy.entitled_pools(ctx.entitlement, class_name)),
    )


def _carriers(policy: Policy, form: tuple) -> tuple[str, ...]:
    """Pools whose taints a toleration (in normal form) tolerates; remembered per policy."""
    return policy.recall(
        ("carriers", form),
        lambda: tuple(n for n, p in policy.pools.items() if form in toleration_forms(policy, p)),
    )


def _affinity_terms(spec: dict) -> list[dict]:
    node = spec.get("affinity")
    node = node.get("nodeAffinity") if isinstance(node, dict) else None
    node = node.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(node, dict) else None
    terms = node.get("nodeSelectorTerms") if isinstance(node, dict) else None
    return [t for t in terms or [] if isinstance(t, dict)]


def _term_targets(term: dict, selector: dict[str, str]) -> bool:
    exprs = [e for e in term.get("matchExpressions") or [] if isinstance(e, dict)]
    for key, value in selector.items():
        if not any(
            e.get("key") == key and e.get("operator") == "In" and value in (e.get("values") or [])
            for e in exprs
        ):
            return False
    return True


@rule(
    "pool-spoofing",
    Action.DENY,
    "user-set nodeSelector / node affinity / toleration targeting a pool not entitled",
)
def pool_spoofing(ctx: Context) -> Iterable[Finding]:
    yield from resolution_findings(ctx, "pool-spoofing")
    policy = ctx.policy
    for state in ctx.states:
        if state.intent is None and not state.resources.has_gpu:
            continue
        entitled = _entitled(ctx, state)
        spec = state.tpl.spec
        terms = _affinity_terms(spec)
        # pools the user's own nodeSelector selects (read with the template), outside the entitlement
        selected = [name for name in state.targeted_pools if name not in entitled]
        for name, pool in policy.pools.items() if selected or terms else ():
            if name in entitled or not pool.spec.node_selector:
                continue
            selector = pool.spec.node_selector
            if name in selected:
                shown = ", ".join(f"{k}={v}" for k, v in selector.items())
                yield Finding(
                    "pool-spoofing",
                    state.tpl.dotted("spec", "nodeSelector"),
                    f"nodeSelector {shown} targets pool {name}, which {_scope(ctx, state)} is not entitled to; "
                    "remove it and declare a workload class instead",
                    state.class_name,
                )
            for i, term in enumerate(terms):
                if _term_targets(term, selector):
                    yield Finding(
                        "pool-spoofing",
                        state.tpl.dotted(
                            "spec",
                            "affinity",
                            "nodeAffinity",
                            "requiredDuringSchedulingIgnoredDuringExecution",
                            "nodeSelectorTerms",
                            i,
                        ),
                        f"node affinity targets pool {name}, which {_scope(ctx, state)} is not entitled to",
                        state.class_name,
                    )
        tolerations = spec.get("tolerations") if isinstance(spec.get("tolerations"), list) else []
        own = state.resolution.pool.tolerations if state.resolution is not None else ()
        for i, toleration in enumerate(tolerations):
            if toleration in own:  # the resolved pool's own (entitled) toleration, as our mutation wrote it
                continue
            carriers = _carriers(policy, _normal(toleration))
            if carriers and not any(n in entitled for n in carriers):
                yield Finding(
                    "pool-spoofing",
                    state.tpl.dotted("spec", "tolerations", i),
                    f"toleration {toleration.get('key')} tolerates the taint of pool "
                    f"{', '.join(carriers)}, which {_scope(ctx, state)} is not entitled to",
                    state.class_name,
                )


@rule("node-name-set", Action.DENY, "spec.nodeName on a GPU pod (bypasses the scheduler, gang and topology)")
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
