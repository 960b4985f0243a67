"""Rules that keep GPU pods honest: no reach past the device grant, declared intent, Guaranteed inference."""

from __future__ import annotations

from collections.abc import Iterable

from webhook.engine.model.context import ClaimContext, Context, Finding, TemplateState
from webhook.engine.model.device_reach import (
    ADMIN_FIX,
    VISIBLE_DEVICES,
    VOID,
    admin_access,
    exposed_pools,
    triggers,
    visible_devices_trigger,
    without_visible_devices,
)
from webhook.engine.model.pool_stack import cards_shared, cards_sliced
from webhook.engine.rules import claim_entitlement
from webhook.engine.rules.registry import CLAIM, POD, rule
from webhook.engine.rules.resources import judged_pool
from webhook.policy.model import QoS
from webhook.quantity import QuantityError, parse_quantity


@rule(
    "privileged-gpu",
    subjects=(POD, CLAIM),
)
def privileged_gpu(ctx: Context | ClaimContext) -> Iterable[Finding]:
    if isinstance(ctx, ClaimContext):
        yield from claim_entitlement.admin_findings(ctx)
        return
    for state in ctx.states:
        yield from _reach_findings(ctx, state)
        if (ctx.stored or ctx.env_fixed) and state.device_env and not state.tpl.virtual:
            yield from _device_env_missing(ctx, state)


def _reach_findings(ctx: Context, state: TemplateState) -> Iterable[Finding]:
    """The triggers and adminAccess requests of one template, where device reach matters."""
    found = list(triggers(state.view.spec))
    admin = list(admin_access(state.judged)) if state.view.spec.get("resourceClaims") else ()
    if not found and not admin:
        return  # the usual case: no reachability computed
    where = _device_scope(ctx, state)
    if where is None:
        # off a sliced pool only a written NVIDIA_VISIBLE_DEVICES is judged: on any GPU pool it takes
        # back the void the webhook gives every container without a grant
        found = [t for t in found if visible_devices_trigger(state.view.spec, t)]
        where = _gpu_pool_scope(ctx, state) if found else None
        if where is None:
            return
        admin = ()
    for t in found:
        yield Finding(
            "privileged-gpu",
            state.view.dotted("spec", t.group, t.index, *t.path),
            f"{t.role} {t.name!r} {t.what} {where}: it would see every GPU on the node, not only the pod's "
            f"grant; {t.fix}",
            state.class_name,
        )
    for a in admin:
        yield Finding(
            "privileged-gpu",
            state.view.dotted("spec", "resourceClaims", a.claim_index),
            f"{a.what} {where}: it would get devices other pods hold, not only the pod's grant; {ADMIN_FIX}",
            state.class_name,
        )


def _device_scope(ctx: Context, state: TemplateState) -> str | None:
    """Why device reach matters for this template, or None when it does not: the pod holds GPU devices
    (device plugin, DRA claims, an unresolved claim, a workload class), or it can be scheduled onto a
    pool of shared or sliced cards (every GPU pool with ``settings.privilegedGPUPools: all``)."""
    if state.intent is not None or state.judged.has_gpu:
        pool = judged_pool(ctx, state)
        if pool is None:
            return "in a pod holding GPUs"
        cards = ", whose cards are shared" if cards_shared(pool) else ""
        cards = cards or (", whose cards are sliced" if cards_sliced(pool) else "")
        return f"in a pod holding GPUs on pool {pool.name}{cards}"
    exposed = exposed_pools(ctx.policy)
    if not exposed:
        return None
    reached = ctx.reach(state) & exposed
    if not reached:
        return None
    first = next(n for n in ctx.policy.pools if n in reached)  # policy order: stable messages
    kind = "a GPU pool" if ctx.policy.settings.privileged_gpu_pools == "all" else "a pool of sliced cards"
    node_name = state.view.spec.get("nodeName")
    if node_name:
        return (
            f"in a pod whose spec.nodeName {node_name!r} can bind it onto {kind} ({first}) without the scheduler, "
            "so the pool's NoSchedule taints do not keep it out"
        )
    return f"in a pod that can be scheduled onto {kind} ({first})"


def _gpu_pool_scope(ctx: Context, state: TemplateState) -> str | None:
    """Where the template can reach a GPU pool of any kind, or None."""
    if not ctx.reaches_gpu_pool(state):
        return None
    reached = ctx.reach(state)
    first = next((n for n in ctx.policy.pools if n in reached), None)
    if state.view.spec.get("nodeName"):
        return f"in a pod whose spec.nodeName {state.view.spec['nodeName']!r} can bind it onto a GPU pool" + (
            f" ({first})" if first else ""
        )
    return "in a pod that can be scheduled onto a GPU pool" + (f" ({first})" if first else "")


def _device_env_missing(ctx: Context, state: TemplateState) -> Iterable[Finding]:
    """``/validate`` of a CREATE we mutate: a container without a grant still has no
    ``NVIDIA_VISIBLE_DEVICES`` (our mutation failed open, or a later webhook removed it). A Pod's
    UPDATE that lets it reach a GPU pool (tolerations, a gated pod's nodeSelector or affinity) finds
    the same containers, and only a new pod can fix them."""
    spec = state.view.spec
    missing = list(without_visible_devices(ctx.policy, spec, fraction=bool(state.judged.fractions)))
    target = state.target() if state.resolution is not None else None
    missing = [m for m in missing if (m[0], m[1]) != target]
    if not missing:
        return
    where = _gpu_pool_scope(ctx, state)
    if where is None:
        return
    if ctx.env_fixed:  # a Pod's UPDATE: env cannot change any more, and nothing re-mutates it
        fix = (
            f"a pod's env cannot change by UPDATE: re-create the pod (the mutating webhook sets {VISIBLE_DEVICES}="
            f"{VOID} on a new pod that can reach a GPU pool), or leave its tolerations, nodeSelector and "
            "affinity as they were"
        )
    else:
        fix = f"set {VISIBLE_DEVICES}={VOID} (the mutating webhook does this: retry if it was unavailable)"
    for group, index, c in missing:
        role = "init container" if group == "initContainers" else "container"
        if group == "initContainers" and c.get("restartPolicy") == "Always":
            role = "sidecar container"
        yield Finding(
            "privileged-gpu",
            state.view.dotted("spec", group, index, "env"),
            f"{role} {c.get('name')!r} holds no GPU and does not set {VISIBLE_DEVICES} {where}: the image's own "
            f"value (CUDA images set all) would open every GPU on the node; {fix}",
            state.class_name,
        )


@rule("raw-gpu-request")
def raw_gpu_request(ctx: Context) -> Iterable[Finding]:
    label = ctx.policy.keys.workload
    for state in ctx.states:
        if state.intent is None and state.resources.has_gpu:
            yield Finding(
                "raw-gpu-request",
                state.tpl.dotted("metadata", "labels"),
                f"GPUs requested without a workload class; add label {label}: <class> "
                f"({', '.join(sorted(ctx.policy.classes))})",
                None,
            )


def _guaranteed(spec: dict) -> str | None:
    for group in ("initContainers", "containers"):
        for c in spec.get(group) or []:
            if not isinstance(c, dict):
                continue
            res = c.get("resources") if isinstance(c.get("resources"), dict) else {}
            limits = res.get("limits") if isinstance(res.get("limits"), dict) else {}
            requests = res.get("requests") if isinstance(res.get("requests"), dict) else {}
            for key in ("cpu", "memory"):
                if key not in limits:
                    return f"container {c.get('name')!r} has no {key} limit"
                if key in requests and requests[key] != limits[key]:
                    try:
                        if parse_quantity(requests[key]) != parse_quantity(limits[key]):
                            return f"container {c.get('name')!r} {key} request != limit"
                    except QuantityError:
                        return f"container {c.get('name')!r} has a malformed {key} quantity"
    return None


@rule("inference-not-guaranteed")
def inference_not_guaranteed(ctx: Context) -> Iterable[Finding]:
    for state in ctx.states:
        cls = state.cls
        if cls is None or cls.qos is not QoS.GUARANTEED:
            continue
        why = _guaranteed(state.view.spec)
        if why is not None:
            yield Finding(
                "inference-not-guaranteed",
                state.view.dotted("spec", "containers"),
                f"class {state.class_name!r} should run in Guaranteed QoS but {why}; "
                "set cpu/memory limits equal to requests",
                state.class_name,
            )
