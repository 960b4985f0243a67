"""Rules that keep GPU pods honest: no privileged slices, declared intent, Guaranteed inference."""

from __future__ import annotations

from collections.abc import Iterable

from webhook.engine.context import Context, Finding
from webhook.engine.decision import Action
from webhook.engine.pool_stack import cards_shared, families_on
from webhook.engine.resources import SLICED
from webhook.engine.rules.registry import rule
from webhook.engine.rules.resources import judged_pool
from webhook.policy.model import QoS
from webhook.quantity import QuantityError, parse_quantity


@rule(
    "privileged-gpu", Action.DENY, "a privileged container in a pod with MIG/shared GPUs (it sees every GPU)"
)
def privileged_gpu(ctx: Context) -> Iterable[Finding]:
    for state in ctx.states:
        pod = state.judged
        # the pool's stack decides what a device is: nvidia.com/gpu on a HAMi pool is a slice
        pool = judged_pool(ctx, state) if pod.gpu_families else None
        shared_pool = pool is not None and cards_shared(pool)
        if not (families_on(pool, pod.gpu_families) & SLICED or shared_pool):
            continue  # an unresolved claim may be a slice: judged as one (it is in SLICED)
        where = f"on pool {pool.name}, whose cards are shared" if shared_pool and pool else "with a GPU slice"
        for c in pod.containers:
            if c.privileged:
                yield Finding(
                    "privileged-gpu",
                    state.view.dotted("spec", c.group, c.index, "securityContext", "privileged"),
                    f"container {c.name!r} is privileged in a pod {where}: it would see every GPU "
                    "on the node; drop privileged (add only the capabilities it needs)",
                    state.class_name,
                )


@rule("raw-gpu-request", Action.WARN, "GPU resources with no workload label")
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


@rule("inference-not-guaranteed", Action.WARN, "inference class pod not in Guaranteed QoS")
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
