"""The GPU sharing stacks, as shipped data (``sharing_stacks.yaml``) read through one table.

A stack decides what a resource name means on a pool (``nvidia.com/gpu: 1`` is a HAMi vGPU there), in
which unit memory is written, how a pod gets shares of several cards and which scheduler binds it.
Those facts used to be spread over an enum, constant tables and if/elif chains in the engine; here
they are one validated entry per stack, so a new stack is an entry in the file, and every reader
(the engine's device families and translation, the reachability model, lint, the schema) asks the
same table. This module sits below ``webhook.policy.model``: the policy's ``sharing.provider`` values
are this table's ids.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property, lru_cache
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from webhook.quantity import GIB, MIB

WHOLE_GPU = "nvidia.com/gpu"
"""The whole-GPU name of NVIDIA's device plugin, which some stacks reuse for their slices."""

TABLE_ENV = "GPU_ADMISSION_SHARING_STACKS"
"""A table file to read instead of the shipped one, for the process's whole life: how a platform tries
an entry for a stack the product does not ship yet (``policy lint``/``check`` with it set) before
proposing it. Every process that judges (webhook, ``check``, ``audit``) must see the same value."""


class StackTableError(ValueError):
    """The sharing-stack table cannot be read or is wrong: the message names the file, entry and field."""


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class MemorySpec(_Spec):
    resource: str
    unit: Literal["MiB", "GiB"]
    per_device: bool = Field(alias="perDevice")


class CountSpec(_Spec):
    resource: str
    per_card: int = Field(1, alias="perCard", ge=1)


class WebhookSpec(_Spec):
    """What the stack's own mutating webhook writes onto a Pod before ``/validate`` sees it: the
    webhook judges the pod as stored after it, so it admits exactly these writes (and no others)."""

    name: str  # the webhook's name in its MutatingWebhookConfiguration, for messages and docs
    scheduler: str | None = None  # set on pods holding one of the stack's resources whose scheduler is the default
    resources: dict[str, str] = Field(default_factory=dict)  # limits it may add to a container holding the stack's
    env: tuple[str, ...] = ()  # env variables it injects
    runtime_class: bool = Field(False, alias="runtimeClassName")  # it may set spec.runtimeClassName


class StackSpec(_Spec):
    title: str
    resources: tuple[str, ...] = Field(min_length=1)
    renamed: str | None = None
    whole: tuple[str, ...] = ()
    count: CountSpec | None = None
    memory: MemorySpec | None = None
    memory_percent: str | None = Field(None, alias="memoryPercent")
    cores: str | None = None
    several_cards: Literal["count", "podLabel"] | None = Field(None, alias="severalCards")
    pod_label: str | None = Field(None, alias="podLabel")
    one_card: str | None = Field(None, alias="oneCard")
    scheduler: str | None = None
    sets_scheduler: bool = Field(False, alias="setsScheduler")
    webhook: WebhookSpec | None = None

    @model_validator(mode="after")
    def _consistent(self) -> StackSpec:
        named = set(self.resources)
        for field, value in (
            ("whole", self.whole),
            ("count", (self.count.resource,) if self.count else ()),
            ("memory", (self.memory.resource,) if self.memory else ()),
            ("memoryPercent", (self.memory_percent,) if self.memory_percent else ()),
            ("cores", (self.cores,) if self.cores else ()),
            ("webhook.resources", tuple(self.webhook.resources) if self.webhook else ()),
        ):
            missing = [v for v in value if v not in named]
            if missing:
                raise ValueError(f"{field} names {missing[0]!r}, which is not among the stack's resources")
        if self.several_cards == "count" and self.count is None:
            raise ValueError("severalCards: count needs a count resource")
        if self.several_cards == "podLabel" and not self.pod_label:
            raise ValueError("severalCards: podLabel needs podLabel")
        if self.sets_scheduler and not self.scheduler:
            raise ValueError("setsScheduler needs scheduler")
        if self.webhook is not None and self.webhook.scheduler and self.sets_scheduler:
            raise ValueError("webhook.scheduler and setsScheduler: one writer of the stack's scheduler, not two")
        return self


class StacksFile(_Spec):
    stacks: dict[str, StackSpec] = Field(min_length=1)


@dataclass(frozen=True, slots=True)
class Stack:
    """One sharing stack, with the facts the engine derives from its entry."""

    id: str
    spec: StackSpec

    @property
    def title(self) -> str:
        return self.spec.title

    @property
    def scheduler(self) -> str | None:
        return self.spec.scheduler

    @property
    def memory_unit(self) -> tuple[int, str] | None:
        """(bytes per unit, resource) of the memory that sizes a slice; None: memory is not isolated."""
        memory = self.spec.memory
        if memory is None:
            return None
        return (MIB if memory.unit == "MiB" else GIB), memory.resource

    @property
    def isolates_memory(self) -> bool:
        return self.spec.memory is not None

    def offers(self, renamed: bool) -> frozenset[str]:
        """What the stack's device plugin advertises on a node of the pool."""
        out = frozenset(self.spec.resources)
        if renamed and self.spec.renamed:
            out = (out - {WHOLE_GPU}) | {self.spec.renamed}
        return out

    def whole_name_is_slice(self, renamed: bool) -> bool:
        """``nvidia.com/gpu`` on the pool is a slice (HAMi's vGPU, a time-sliced replica)."""
        return WHOLE_GPU in self.offers(renamed)

    def several_cards_refused(self) -> str | None:
        """Why one pod cannot get shares of several cards (None: the stack can give them)."""
        if self.spec.several_cards is not None:
            return None
        return self.spec.one_card or (
            f"{self.id} gives a pod a share of one card; ask for 1, or use isolation exclusive for several whole GPUs"
        )


@dataclass(frozen=True)
class StackTable:
    """Every stack by id, and the per-resource facts the device model reads on every container."""

    by_id: dict[str, Stack]

    def __getitem__(self, stack_id: str) -> Stack:
        return self.by_id[stack_id]

    def ids(self) -> tuple[str, ...]:
        return tuple(self.by_id)

    @cached_property
    def resources(self) -> frozenset[str]:
        """Every resource some stack advertises (renamed spellings included)."""
        out: set[str] = set()
        for s in self.by_id.values():
            out.update(s.spec.resources)
            if s.spec.renamed:
                out.add(s.spec.renamed)
        return frozenset(out)

    @cached_property
    def whole(self) -> frozenset[str]:
        """Resources that count whole cards."""
        return frozenset({WHOLE_GPU, *(r for s in self.by_id.values() for r in s.spec.whole)})

    @cached_property
    def slice_resources(self) -> frozenset[str]:
        """Resources that always stand for a slice of a card, whatever the pool."""
        return self.resources - self.whole

    @cached_property
    def metered_under_whole(self) -> frozenset[str]:
        """Resources that go with a whole-GPU count to make a slice (HAMi's gpumem/gpucores beside
        ``nvidia.com/gpu``): a container holding them holds slices, not cards."""
        out: set[str] = set()
        for s in self.by_id.values():
            if s.spec.count is not None and s.spec.count.resource in self.whole:
                out.update(r for r in s.spec.resources if r not in self.whole)
        return frozenset(out)

    @cached_property
    def memory_units(self) -> dict[str, int]:
        """Shared-memory resource -> bytes one unit stands for."""
        return {unit[1]: unit[0] for s in self.by_id.values() if (unit := s.memory_unit) is not None}

    @cached_property
    def memory_percent(self) -> frozenset[str]:
        return frozenset(s.spec.memory_percent for s in self.by_id.values() if s.spec.memory_percent)

    @cached_property
    def percentages(self) -> frozenset[str]:
        """Resources that are a percentage of one card (memory or cores): above 100 no card holds them."""
        cores = {s.spec.cores for s in self.by_id.values() if s.spec.cores}
        return self.memory_percent | frozenset(cores)

    @cached_property
    def per_device(self) -> dict[str, str]:
        """Memory resources that are per device -> the resource that counts the devices."""
        out: dict[str, str] = {}
        for s in self.by_id.values():
            if s.spec.count is None:
                continue
            if s.spec.memory is not None and s.spec.memory.per_device:
                out[s.spec.memory.resource] = s.spec.count.resource
            if s.spec.memory_percent:
                out[s.spec.memory_percent] = s.spec.count.resource
        return out

    @cached_property
    def slice_counts(self) -> dict[str, int]:
        """How a stack spells "several slices" outside the whole-GPU name: resource -> units per card."""
        out: dict[str, int] = {}
        for s in self.by_id.values():
            if s.spec.count is not None and s.spec.count.resource not in self.whole:
                out[s.spec.count.resource] = s.spec.count.per_card
            if s.spec.renamed:
                out[s.spec.renamed] = 1
        return out

    @cached_property
    def placed_only_by(self) -> dict[str, str]:
        """Resource -> the one scheduler that accounts for it, for stacks the webhook schedules itself
        (only that scheduler can bind a pod that asks for them)."""
        return {
            r: s.spec.scheduler
            for s in self.by_id.values()
            if s.spec.sets_scheduler and s.spec.scheduler
            for r in s.spec.resources
            if r not in self.whole
        }


def webhook_schedulers(provider_ids: frozenset[str]) -> dict[str, str]:
    """Resource -> the scheduler a stack's own webhook writes on pods holding it, for the stacks among
    ``provider_ids`` (those a policy's pools use, so their webhooks run in the cluster). HAMi's webhook
    reacts to every pod of the cluster holding its resources, ``nvidia.com/gpu`` included, not only to
    pods of its own pools."""
    out: dict[str, str] = {}
    for sid in sorted(provider_ids):
        own = stacks().by_id.get(sid)
        hook = own.spec.webhook if own is not None else None
        if hook is not None and hook.scheduler:
            for r in own.spec.resources:  # type: ignore[union-attr]
                out.setdefault(r, hook.scheduler)
    return out


def load_table(text: str, where: str = "sharing_stacks.yaml") -> StackTable:
    """Parse and validate a stack table (a StackTableError names the file and the entry that is wrong)."""
    import yaml
    from pydantic import ValidationError

    from webhook.policy.shipped import load_yaml

    try:
        parsed = StacksFile.model_validate(load_yaml(text))
    except ValidationError as err:
        first = err.errors()[0]
        at = ".".join(str(p) for p in first["loc"])
        raise StackTableError(f"{where}: {at}: {first['msg']}") from None
    except yaml.YAMLError as err:
        raise StackTableError(f"{where}: not YAML: {err}") from None
    return StackTable({sid: Stack(sid, spec) for sid, spec in parsed.stacks.items()})


@lru_cache(maxsize=1)
def stacks() -> StackTable:
    """The shipped table (or the file ``GPU_ADMISSION_SHARING_STACKS`` names), read once per process."""
    override = os.environ.get(TABLE_ENV)
    if override:
        try:
            text = Path(override).read_text(encoding="utf-8")
        except OSError as err:
            message = f"{TABLE_ENV}={override}: cannot read the sharing-stack table: {err.strerror}"
            raise StackTableError(message) from None
        return load_table(text, override)
    text = resources.files("webhook.policy").joinpath("sharing_stacks.yaml").read_text(encoding="utf-8")
    return load_table(text)


def stack(stack_id: str) -> Stack:
    """The stack a pool's ``sharing.provider`` names (validated against the table when the policy loads)."""
    return stacks()[str(stack_id)]
