"""ComputeDomains (NVIDIA's DRA driver, multi-node NVLink): a gang whose pods claim a ComputeDomain's IMEX
channel is one fabric unit. The mistakes users meet only at pod start are judged at admission:

- ``compute-domain-invalid`` (deny): the gang's GPU pods name different domains' channel templates, or
  some name none; one object makes several gangs that would share a domain (a LeaderWorkerSet with
  ``replicas`` > 1); another workload the edge knows claims the same domain; the gang needs more nodes
  than one NVLink domain of its pool spans (``nvlinkDomainNodes``);
- ``compute-domain-num-nodes`` (warn): the domain's ``numNodes`` (deprecated upstream; it gates pod start
  only with a non-default driver setting) outside what the gang spans.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from webhook.engine.model.context import Context, Finding, TemplateState
from webhook.engine.model.workload import gangs
from webhook.engine.rules.registry import rule
from webhook.policy.compiled import CompiledPool


@dataclass(frozen=True, slots=True)
class _Member:
    state: TemplateState
    domain: str | None  # the ComputeDomain whose channel it claims
    template: str | None  # that channel template
    index: int | None  # its spec.resourceClaims index


def _members(ctx: Context) -> list[_Member]:
    """The templates that hold GPUs or claim a channel, each with the domain it names (first found)."""
    out = []
    for state in ctx.states:
        judged = state.judged
        found = next((c for c in judged.claims if c.compute_domain), None)
        if found is None and not judged.has_gpu:
            continue
        out.append(
            _Member(
                state,
                found.compute_domain if found else None,
                found.template if found else None,
                found.index if found else None,
            )
        )
    return out


def _pods(members: list[_Member], ctx: Context | None = None) -> int:
    """Pods of the gang holding GPUs; a bare pod of a gang stands for the whole gang (its gang-size)."""
    if ctx is not None and ctx.gang is not None and ctx.workload.root_template:
        return ctx.gang.size
    return sum(max(0, m.state.tpl.replicas) for m in members)


def _pool(ctx: Context, state: TemplateState) -> CompiledPool | None:
    if state.resolution is not None:
        return state.resolution.pool
    if state.pinned is not None:
        return ctx.policy.pools.get(state.pinned)
    if len(state.targeted_pools) == 1:
        return ctx.policy.pools[state.targeted_pools[0]]
    return None


def _nodes(ctx: Context, members: list[_Member]) -> tuple[int, CompiledPool | None]:
    """The fewest nodes the gang's GPU pods can share (their GPUs over the pool's GPUs per node)."""
    pool = next((p for p in (_pool(ctx, m.state) for m in members) if p is not None), None)
    if pool is None:
        return 1, None
    gpus = sum(max(0, m.state.tpl.replicas) * m.state.judged.effective_devices() for m in members)
    return max(1, math.ceil(gpus / pool.spec.gpus_per_node)), pool


def _where(m: _Member) -> str:
    if m.index is not None:
        return m.state.view.dotted("spec", "resourceClaims", m.index)
    return m.state.view.dotted("spec", "resourceClaims")


def _label(m: _Member) -> str:
    return f"template {m.state.tpl.dotted() or 'pod'}" if m.state.tpl.dotted() else "the pod"


@rule(
    "compute-domain-invalid",
    needs=("claims",),
)
def compute_domain_invalid(ctx: Context) -> Iterable[Finding]:
    members = _members(ctx)
    named = [m for m in members if m.domain is not None]
    if not named:
        return
    first = named[0]
    domain, channel = first.domain, first.template
    pods = _pods(members, ctx)
    for m in members:
        if m.domain is None and pods > 1:
            yield Finding(
                "compute-domain-invalid",
                _where(m),
                f"claim ComputeDomain {domain}'s channel ({channel}) in every pod of the gang: {_label(m)} holds "
                f"GPUs but no channel, so its pods are outside the gang's NVLink domain",
                m.state.class_name,
            )
        elif m.domain is not None and m.domain != domain:
            yield Finding(
                "compute-domain-invalid",
                _where(m),
                f"use ComputeDomain {domain}'s channel template ({channel}) in every pod of the gang: {_label(m)} "
                f"claims {m.domain}'s ({m.template}), and one gang's pods must share one IMEX domain",
                m.state.class_name,
            )
    count = gangs(ctx.obj, ctx.workload)
    if count > 1:
        yield Finding(
            "compute-domain-invalid",
            _where(first),
            f"give each gang its own ComputeDomain (one {ctx.kind} per domain, or one domain per group): the "
            f"{ctx.kind} makes {count} gangs, and all would share ComputeDomain {domain}",
            first.state.class_name,
        )
    me = f"{ctx.obj.get('kind')}/{ctx.name}"
    others = ctx.cluster.domain_users.get((ctx.namespace, str(domain)), frozenset()) - {me}
    if others:
        yield Finding(
            "compute-domain-invalid",
            _where(first),
            f"give this gang its own ComputeDomain: {domain} is also claimed by {', '.join(sorted(others))}, "
            "and two gangs on one IMEX domain interfere",
            first.state.class_name,
        )
    nodes, pool = _nodes(ctx, members)
    limit = pool.spec.nvlink_domain_nodes if pool is not None else None
    if pool is not None and limit is not None and nodes > limit:
        yield Finding(
            "compute-domain-invalid",
            _where(first),
            f"ask for at most {limit * pool.spec.gpus_per_node} GPUs in the gang: it needs {nodes} nodes of pool "
            f"{pool.name} ({pool.spec.gpus_per_node} GPUs each) but one NVLink domain spans {limit} "
            f"(nvlinkDomainNodes), and ComputeDomain {domain} cannot cross it",
            first.state.class_name,
        )


@rule(
    "compute-domain-num-nodes",
    needs=("claims",),
)
def compute_domain_num_nodes(ctx: Context) -> Iterable[Finding]:
    """``numNodes`` is deprecated upstream and holds pods only with a non-default driver setting, so a
    mismatch warns: more nodes than the gang has pods leaves them waiting for IMEX daemons that never
    join; fewer than its GPUs need starts them before the domain is complete."""
    members = _members(ctx)
    first = next((m for m in members if m.domain is not None), None)
    if first is None:
        return
    obj: Any = ctx.cluster.compute_domains.get((ctx.namespace, str(first.domain)))
    spec = obj.get("spec") if isinstance(obj, dict) and isinstance(obj.get("spec"), dict) else {}
    wanted = spec.get("numNodes")
    if not isinstance(wanted, int) or isinstance(wanted, bool) or wanted <= 0:
        return
    pods = _pods([m for m in members if m.domain == first.domain], ctx)
    low, _ = _nodes(ctx, [m for m in members if m.domain == first.domain])
    if low <= wanted <= pods:
        return
    span = f"{pods} node(s)" if low == pods else f"{low} to {pods} nodes"
    yield Finding(
        "compute-domain-num-nodes",
        _where(first),
        f"set numNodes of ComputeDomain {first.domain} to {pods if wanted > pods else low} (or 0): it says "
        f"{wanted}, the gang's {pods} pod(s) span {span}",
        first.state.class_name,
    )
