"""GPU memory as each stack's device plugin counts it (the unit is the stack's entry in
``sharing_stacks.yaml``): the unit a request is written in and the most
one device of a pool can give.

A request the plugin rounds up past what a node advertises is admitted and then Pending forever, so
the engine judges sizes in the plugin's own arithmetic, from the memory nodes report per card (the
catalog's ``usableMemory``, GFD's ``nvidia.com/gpu.memory``) rather than the size in the product name:

- Alibaba gpushare / cGPU (``aliyun.com/gpu-mem``): GiB; each card advertises floor(MiB / 1024) GiB
  (AliyunContainerService/gpushare-device-plugin ``pkg/gpu/nvidia/nvidia.go`` ``setGPUMemory``:
  ``v = raw / 1024`` of NVML's MiB under ``--memory-unit=GiB``, at 45fb8b8), a request is whole GiB;
- Tencent qGPU (``tke.cloud.tencent.com/qgpu-memory``): whole GiB, 1 GiB granularity (TKE's qGPU doc);
  how a card's capacity is rounded is not documented, so it is counted as gpushare counts (floor);
- HAMi (``nvidia.com/gpumem``) and Volcano vGPU (``volcano.sh/vgpu-memory``, HAMi-based): MiB of the
  card's NVML total (Project-HAMi/HAMi ``register.go``: ``registeredmem = memoryTotal / 1024 / 1024``
  times ``deviceMemoryScaling``, default 1, at 4707fb0);
- time-slicing and whole cards: the card's memory (time-slicing enforces none of it);
- MIG: the profile's usable memory (``nvidia-smi mig -lgip``), see ``CompiledModel.geometry``.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from webhook.policy.dra import memory_quantity
from webhook.policy.model import Isolation, Pool
from webhook.policy.stacks import stack
from webhook.quantity import MIB, ceil_div


@dataclass(frozen=True, slots=True)
class Capacity:
    """The largest per-device request a pool's stack can ever satisfy, and how to say it."""

    bytes: int
    text: str  # "22Gi (aliyun.com/gpu-mem: 22 per card)"

def unit_of(pool: Pool) -> tuple[int, str] | None:
    """(bytes per unit, resource name) of the pool's shared-memory resource, if it has one."""
    if pool.sharing is None:
        return None
    return stack(pool.sharing.provider).memory_unit

def units(pool: Pool, memory: Fraction | int) -> int:
    """``memory`` in the stack's unit, rounded up as the request must be written (at least 1)."""
    found = unit_of(pool)
    unit = found[0] if found is not None else MIB
    return max(1, ceil_div(Fraction(memory), unit))

def capacity(pool: Pool, card: int, isolation: Isolation) -> Capacity:
    """Per device: what one card of the pool gives a pod of ``isolation`` (MIG is sized by profiles)."""

    found = unit_of(pool) if isolation is Isolation.SHARED else None
    if found is None:
        return Capacity(card, memory_quantity(card))
    unit, resource = found
    count = card // unit
    return Capacity(count * unit, f"{memory_quantity(count * unit)} ({resource}: {count} per card)")
