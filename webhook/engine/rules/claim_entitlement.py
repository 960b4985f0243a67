"""The pod rules' findings on a claim object judged on its own (``gpu-count-exceeded``, ``privileged-gpu``,
``pool-spoofing``): what a pod that names it would be judged for, where the object is written.

A template created after its pod, or a claim re-created under a name a pending pod waits for, is never
read with the pod again; these checks make the object answer for what it gives any pod of its namespace
(:mod:`webhook.engine.model.claim_limits`). The registered rules call these for a
:class:`~webhook.engine.model.context.ClaimContext`; the action is the rule's, per namespace, as for pods
(a namespace exempt from ``privileged-gpu`` may still write ``adminAccess``).
"""

from __future__ import annotations

from collections.abc import Iterable

from webhook.engine.model.claim_limits import ClaimLimits, gpu_requests, limits, platform_own
from webhook.engine.model.claims import ClaimResolver
from webhook.engine.model.context import ClaimContext, Finding
from webhook.engine.model.decision import Action
from webhook.engine.rules.registry import effective_action


def _limits(ctx: ClaimContext) -> ClaimLimits | None:
    raw = effective_action(ctx.policy, "raw-gpu-request", ctx.namespace_labels, None)
    return limits(ctx.policy, ctx.entitlement, raw_allowed=raw is not Action.DENY)


def _where(ctx: ClaimContext) -> str:
    return f"{ctx.claim.spec_at}.devices.requests"


def _what(ctx: ClaimContext) -> str:
    return f"{ctx.claim.kind} {ctx.claim.name}"


def count_findings(ctx: ClaimContext) -> Iterable[Finding]:
    """More GPUs than any class the namespace is entitled to allows a pod, or a node's every GPU."""
    bounds = _limits(ctx)
    requests = gpu_requests(ctx.claim.requests)
    if bounds is None or not requests:
        return
    resolver = ClaimResolver(ctx.policy, ctx.cluster, ctx.namespace)
    if platform_own(ctx.policy, resolver, ctx.claim.kind, ctx.claim.name, ctx.claim.requests):
        return
    most = bounds.most_gpus
    total = sum(r.count for r in requests if not r.all)
    if most is not None and total > most[0]:
        yield Finding(
            "gpu-count-exceeded",
            _where(ctx),
            f"{_what(ctx)} asks for {total} GPUs, more than any class namespace {ctx.namespace} is entitled to "
            f"allows a pod (at most {most[0]}, class {most[1]!r}); ask for at most {most[0]}",
        )
    for r in requests:
        if r.all and not bounds.all_fits(r):
            serving = bounds.serving(r)
            nodes = max((p.spec.gpus_per_node for p in serving), default=0)
            on = f" ({nodes} on pool {next(p.name for p in serving if p.spec.gpus_per_node == nodes)})" if nodes else ""
            yield Finding(
                "gpu-count-exceeded",
                _where(ctx),
                f"{_what(ctx)} request {r.name!r} has allocationMode All, which takes every GPU of a node{on}, "
                f"more than any class namespace {ctx.namespace} is entitled to allows a pod; use allocationMode "
                "ExactCount with a count",
            )


def admin_findings(ctx: ClaimContext) -> Iterable[Finding]:
    """``adminAccess`` on a request that may be a GPU: every pod holding it would be ``privileged-gpu``."""
    for r in ctx.claim.requests:
        if r.admin:
            subs = f" (alternative {', '.join(map(repr, r.admin_subrequests))})" if r.admin_subrequests else ""
            yield Finding(
                "privileged-gpu",
                _where(ctx),
                f"{_what(ctx)} request {r.name!r}{subs} has adminAccess on a GPU: a pod holding it gets devices other "
                "pods hold, past its grant; drop adminAccess (or exempt the namespace from privileged-gpu, as for "
                "node monitoring agents)",
            )


def unserved_findings(ctx: ClaimContext) -> Iterable[Finding]:
    """A GPU request only pools the namespace is not entitled to serve."""
    bounds = _limits(ctx)
    if bounds is None:
        return
    for r in gpu_requests(ctx.claim.requests):
        if r.offered_by is not None and not bounds.serving(r):
            entitled = ", ".join(p.name for p in bounds.pools) or "none"
            yield Finding(
                "pool-spoofing",
                _where(ctx),
                f"{_what(ctx)} request {r.name!r} uses DeviceClass {', '.join(sorted(r.classes))}, which no pool "
                f"namespace {ctx.namespace} is entitled to serves (entitled: {entitled}); use a class of an "
                "entitled pool",
            )
