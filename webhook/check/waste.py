"""GPU memory asked for versus what the device the engine chose really holds: per object and in total.

The number the platform team acts on is idle memory: a 4Gi model on a 5Gi MIG slice wastes 1Gi,
the same model on a whole 40Gi card wastes 36Gi on every device of every pod. The engine reports
the device (``Decision.waste``); this module turns it into sentences and totals for every writer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from webhook.check.runner import CheckResult
from webhook.engine.model.decision import WasteReport
from webhook.policy.dra import memory_quantity
from webhook.quantity import format_bytes


def used_percent(requested: int, device: int) -> int:
    """Whole percent, rounded down so that a device with idle memory never shows 100%."""
    return 100 * requested // device if device else 0


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def describe(w: WasteReport) -> str:
    """``4Gi requested on a MIG 1g.5gb of A100-40GB (5Gi): 80% used, 1Gi idle`` (and the multiplier)."""
    device = f"a {w.device} ({memory_quantity(w.device_bytes)})"  # exact: 4864Mi, not a rounded 4.8Gi
    scale = w.devices * w.pods
    if w.shared:  # the card is shared by every replica on it: nothing of it is this object's to waste
        asked = f"{format_bytes(w.requested_bytes)} declared, not enforced; " if w.requested_bytes is not None else ""
        return f"{asked}{_plural(w.pods, 'pod')} time-sharing {device}: memory is not isolated"
    if w.requested_bytes is None:
        allocated = w.device_bytes * scale
        return (
            f"no gpu-memory declared: {_plural(w.devices, 'device')} per pod x {_plural(w.pods, 'pod')} on {device}, "
            f"{format_bytes(allocated)} allocated"
        )
    idle = max(0, w.device_bytes - w.requested_bytes)
    text = (
        f"{format_bytes(w.requested_bytes)} requested on {device}: "
        f"{used_percent(w.requested_bytes, w.device_bytes)}% used, {format_bytes(idle)} idle"
    )
    if scale > 1 and idle:
        text += (
            f" per device x {_plural(w.devices, 'device')} x {_plural(w.pods, 'pod')} = "
            f"{format_bytes(idle * scale)} idle"
        )
    return text


def as_dict(w: WasteReport) -> dict[str, Any]:
    scale = w.devices * w.pods
    out: dict[str, Any] = {
        "device": w.device,
        "requestedBytes": w.requested_bytes,
        "deviceBytes": w.device_bytes,
        "devices": w.devices,
        "pods": w.pods,
        "allocatedBytes": 0 if w.shared else w.device_bytes * scale,
    }
    if w.shared:
        out["shared"] = True
        return out
    if w.requested_bytes is not None:
        out["usedPercent"] = used_percent(w.requested_bytes, w.device_bytes)
        out["idleBytesPerDevice"] = max(0, w.device_bytes - w.requested_bytes)
        out["idleBytes"] = w.wasted_bytes
    return out


@dataclass(slots=True)
class WasteTotals:
    """Across every checked object: declared memory vs the devices it occupies (devices x pods)."""

    objects: int = 0  # objects that declare gpu-memory
    requested_bytes: int = 0
    allocated_bytes: int = 0  # device memory those objects occupy
    undeclared_objects: int = 0  # placed objects with no gpu-memory (whole cards, time-slicing, …)
    undeclared_bytes: int = 0
    shared_objects: int = 0  # on time-sliced cards: counted once, as cards shared, never as idle memory

    @property
    def idle_bytes(self) -> int:
        return max(0, self.allocated_bytes - self.requested_bytes)

    def add(self, w: WasteReport) -> None:
        if w.shared:
            self.shared_objects += 1
            return
        allocated = w.device_bytes * w.devices * w.pods
        if w.requested_bytes is None:
            self.undeclared_objects += 1
            self.undeclared_bytes += allocated
            return
        self.objects += 1
        self.requested_bytes += w.requested_bytes * w.devices * w.pods
        self.allocated_bytes += allocated

    def line(self) -> str | None:
        if not self.objects and not self.undeclared_objects and not self.shared_objects:
            return None
        parts = []
        if self.objects:
            parts.append(
                f"GPU memory: {format_bytes(self.requested_bytes)} requested of {format_bytes(self.allocated_bytes)} "
                f"allocated ({used_percent(self.requested_bytes, self.allocated_bytes)}% used, "
                f"{format_bytes(self.idle_bytes)} idle) across {_plural(self.objects, 'object')}"
            )
        if self.undeclared_objects:
            parts.append(
                f"{format_bytes(self.undeclared_bytes)} allocated to {_plural(self.undeclared_objects, 'object')} "
                "without gpu-memory"
            )
        if self.shared_objects:
            parts.append(f"{_plural(self.shared_objects, 'object')} on time-sliced cards (memory not isolated)")
        return "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "objects": self.objects,
            "requestedBytes": self.requested_bytes,
            "allocatedBytes": self.allocated_bytes,
            "idleBytes": self.idle_bytes,
            "usedPercent": used_percent(self.requested_bytes, self.allocated_bytes) if self.allocated_bytes else None,
            "undeclaredObjects": self.undeclared_objects,
            "undeclaredBytes": self.undeclared_bytes,
            "sharedObjects": self.shared_objects,
        }


def totals(results: Iterable[CheckResult]) -> WasteTotals:
    out = WasteTotals()
    for r in results:
        waste = r.decision.waste if r.decision is not None else None
        if waste is not None:
            out.add(waste)
    return out
