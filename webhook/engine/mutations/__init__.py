"""Mutation steps, in the order they run. Each is a small function of the resolved intent.

Template steps run once per pod template that resolved to a pool; workload steps once per object;
the device-env step once per pod template of any kind (CPU-only ones included), last, since it reads
which containers the earlier steps gave GPUs. Order matters only where a later step reads what an
earlier one wrote (gang before topology: the topology terms select the gang's pods).
"""

from __future__ import annotations

from collections.abc import Callable

from webhook.engine.model.context import Context, TemplateState
from webhook.engine.mutations import device_env, dra, gang, pool, projection, rdma, resources, scheduling, topology
from webhook.engine.patch import PatchBuilder

TemplateStep = Callable[[Context, TemplateState, PatchBuilder], None]
WorkloadStep = Callable[[Context, PatchBuilder], None]

TEMPLATE_STEPS: tuple[tuple[str, TemplateStep], ...] = (
    ("resources", resources.apply),
    ("dra", dra.apply),
    ("pool", pool.apply),
    ("scheduling", scheduling.apply),
    ("rdma", rdma.apply),
)
WORKLOAD_STEPS: tuple[tuple[str, WorkloadStep], ...] = (("gang", gang.apply),)
TOPOLOGY_STEP: TemplateStep = topology.apply
DEVICE_ENV_STEP: TemplateStep = device_env.apply


def check(ctx: Context) -> None:
    """The findings the steps would report, without mutating (an object judged as received)."""
    for state in ctx.states:
        if state.resolution is not None and state.tpl.virtual:
            projection.check(ctx, state)
        elif state.resolution is not None:
            rdma.check(ctx, state)
            dra.check(ctx, state)
        elif state.intent is None:
            pool.pin(ctx, state, None)


def mutate(ctx: Context, patch: PatchBuilder) -> None:
    for state in ctx.states:
        if state.resolution is None or state.tpl.virtual:
            if state.resolution is None and state.intent is None and not state.tpl.virtual:
                pool.pin(ctx, state, patch)  # a raw GPU request: placement only
            continue
        for _, step in TEMPLATE_STEPS:
            step(ctx, state, patch)
    for _, workload_step in WORKLOAD_STEPS:
        workload_step(ctx, patch)
    for state in ctx.states:
        if state.resolution is None:
            continue
        if state.tpl.virtual:  # after the gang: the projected template's topology selects the gang's pods
            projection.apply(ctx, state, patch)
        else:
            TOPOLOGY_STEP(ctx, state, patch)
    for state in ctx.states:
        DEVICE_ENV_STEP(ctx, state, patch)


def device_env_only(ctx: Context, patch: PatchBuilder) -> None:
    """A CPU-only object that can reach a GPU pool: only the device-env step applies."""
    for state in ctx.states:
        DEVICE_ENV_STEP(ctx, state, patch)
