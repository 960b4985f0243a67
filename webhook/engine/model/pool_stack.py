"""What a resource name means on a pool, decided by the pool's sharing stack, not by the name.

``nvidia.com/gpu: 1`` is a whole card on a plain pool, but on a HAMi pool it is a vGPU (a slice whose
memory and cores HAMi meters), and on a time-slicing pool that does not rename its resource it is one
of several replicas of a card. Rules that care whether a pod's devices are shared (a privileged
container there sees every card, including its neighbours'), and the adoption of raw requests,
read the pool's stack through these functions.
"""

from __future__ import annotations

from webhook.engine.model.devices import SHARED, WHOLE
from webhook.policy.compiled import CompiledPool
from webhook.policy.model import Isolation
from webhook.policy.stacks import stack, stacks


def whole_name_is_slice(pool: CompiledPool) -> bool:
    """The pool's device plugin hands out slices under the whole-GPU name (``nvidia.com/gpu``)."""
    sharing = pool.spec.sharing
    return sharing is not None and stack(sharing.provider).whole_name_is_slice(sharing.renamed)


def cards_shared(pool: CompiledPool) -> bool:
    """The pool's cards are shared between pods (any sharing stack): a container that reaches the
    devices directly sees slices other pods hold."""
    return pool.spec.sharing is not None


def cards_sliced(pool: CompiledPool) -> bool:
    """The pool's cards may be split between pods: MIG partitions, a sharing stack, or DRA classes
    for MIG or shared devices. A container that reaches the node's devices directly there sees
    slices other pods hold (``privileged-gpu`` judges CPU-only pods that can reach such a pool)."""
    if cards_shared(pool) or {Isolation.MIG, Isolation.SHARED} & set(pool.spec.isolation):
        return True
    sliced = stacks().slice_resources
    return any(r.startswith("nvidia.com/mig-") or r in sliced for r in pool.spec.offers)


def families_on(pool: CompiledPool | None, families: frozenset[str]) -> frozenset[str]:
    """``families`` as the pool's stack reads them: a whole GPU there is a shared slice on a pool
    whose plugin slices under the whole-GPU name."""
    if pool is not None and WHOLE in families and whole_name_is_slice(pool):
        return (families - {WHOLE}) | {SHARED}
    return families
