"""Lint warnings about GPU memory and MIG geometry: sizes no node can give, and pools that do not say
(or, with Node objects, do not match) what their nodes advertise.

They are separate from :mod:`webhook.lint.checks` because they read the hardware model (the catalog's
usable memory, the stacks' units, mig-parted layouts) and, with ``policy lint --cluster-objects``, the nodes
themselves; the generic lint module only knows the policy's own structure.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from webhook.policy import sizes
from webhook.policy.compiled import Policy
from webhook.policy.dra import memory_quantity
from webhook.policy.geometry import pool_mismatches
from webhook.policy.model import Isolation
from webhook.policy.stacks import stack, stacks
from webhook.quantity import parse_quantity

CODES: dict[str, str] = {
    "mig-geometry-unstated": "a MIG pool states no geometry (`mig.layout` or `mig.profiles`): translation may "
    "pick profiles its nodes do not advertise",
    "memory-above-card": "a class's `maxGPUMemory`, or a DRA memory size, is above what every device of its pools "
    "really holds (the memory nodes report, in the stack's unit)",
    "memory-not-enforced": "a class sizes GPU memory (`defaultGPUMemory`/`maxGPUMemory`) on a pool "
    "whose sharing stack does not enforce memory (time-slicing)",
    "pool-nodes-disagree": "with `--cluster-objects`: the pool's nodes advertise other MIG devices or another "
    "`nvidia.com/mig.config` than the pool states",
}


def _device_max(policy: Policy, pool_name: str, isolation: Isolation) -> int | None:
    pool = policy.pools.get(pool_name)
    if pool is None or isolation not in pool.isolation:
        return None
    if isolation is Isolation.MIG:
        return pool.largest_slice
    return sizes.capacity(pool.spec, pool.gpu.memory, isolation).bytes


def warnings(policy: Policy, nodes: Sequence[Mapping[str, Any]] = ()) -> Iterator[tuple[str, tuple, str, str]]:
    """(code, policy path, message, hint) for each finding, in a stable order."""
    for name, pool in policy.pools.items():
        mig = pool.spec.mig
        if mig is not None and Isolation.MIG in pool.isolation and mig.layout is None and mig.profiles is None:
            layouts = sorted(pool.gpu.layouts)
            yield (
                "mig-geometry-unstated",
                ("pools", name, "mig"),
                f"pool {name!r} does not say how its {pool.spec.gpu_model} cards are partitioned: every profile of "
                "the model is offered, and pods get devices the nodes may never advertise (they stay Pending)",
                "set mig.layout to the nodes' nvidia.com/mig.config"
                + (f" ({', '.join(layouts[:4])}, ...)" if layouts else "")
                + " or mig.profiles with counts",
            )
        dra = pool.spec.dra
        if dra is not None and dra.memory_sizes is not None:
            card = pool.gpu.memory
            for i, size in enumerate(dra.memory_sizes):
                if parse_quantity(size) > card:
                    yield (
                        "memory-above-card",
                        ("pools", name, "dra", "memorySizes", i),
                        f"DRA memory size {size} of pool {name!r} is above the {memory_quantity(card)} a "
                        f"{pool.spec.gpu_model} reports: no device can ever satisfy its template",
                        f"use at most {memory_quantity(card)}",
                    )
    for name, cls in policy.classes.items():
        if cls.max_gpu_memory is not None:
            limit = parse_quantity(cls.max_gpu_memory)
            held = [
                size
                for p in cls.pools
                for iso in cls.isolation.permitted
                if (size := _device_max(policy, p, iso)) is not None
            ]
            if held and limit > max(held):
                yield (
                    "memory-above-card",
                    ("classes", name, "maxGPUMemory"),
                    f"maxGPUMemory {cls.max_gpu_memory} of class {name!r} is above what any device of its pools "
                    f"holds ({memory_quantity(max(held))}, as the nodes report it): requests between the two are "
                    "admitted by the class and denied by the hardware",
                    f"lower maxGPUMemory to {memory_quantity(max(held))}",
                )
        if cls.max_gpu_memory is None and cls.default_gpu_memory is None:
            continue
        for p in cls.pools:
            pool = policy.pools.get(p)
            sharing = pool.spec.sharing if pool is not None else None
            own = stack(sharing.provider) if sharing is not None else None
            if own is not None and not own.isolates_memory and Isolation.SHARED in cls.isolation.permitted:
                field = "maxGPUMemory" if cls.max_gpu_memory is not None else "defaultGPUMemory"
                isolating = ", ".join(s.title for s in stacks().by_id.values() if s.isolates_memory)
                yield (
                    "memory-not-enforced",
                    ("classes", name, field),
                    f"class {name!r} sizes GPU memory ({field}) but its pool {p!r} is served by {own.title}, "
                    "which does not enforce memory: every pod sees the whole card",
                    f"use a memory-isolating stack (MIG, {isolating}) or drop the memory sizes",
                )
    for name, message, hint in pool_mismatches(policy, nodes):
        yield ("pool-nodes-disagree", ("pools", name, "mig"), message, hint)
