"""What counts as "no scheduler chosen": ``default-scheduler`` is what the apiserver defaults before
admission, so a webhook never sees an empty schedulerName on a Pod."""

from __future__ import annotations

from typing import Protocol

DEFAULT_SCHEDULER = "default-scheduler"


class _Writable(Protocol):
    def get(self, path: tuple) -> object: ...
    def set(self, path: tuple, value: object, *, overwrite: bool = False) -> bool: ...


def unset_scheduler(value: object) -> bool:
    return value in (None, "", DEFAULT_SCHEDULER)


def set_scheduler(patch: _Writable, spec_path: tuple, name: str) -> bool:
    """Set ``schedulerName`` under ``spec_path`` unless the user chose one (the gang and class steps)."""
    path = (*spec_path, "schedulerName")
    if unset_scheduler(patch.get(path)):
        return patch.set(path, name, overwrite=True)
    return False


def _gates(obj: object) -> list[object]:
    spec = obj.get("spec") if isinstance(obj, dict) else None
    gates = spec.get("schedulingGates") if isinstance(spec, dict) else None
    return gates if isinstance(gates, list) else []


def ungates(obj: object, old: object) -> bool:
    """The UPDATE removes a pod's last scheduling gate: the pod becomes schedulable now. What it can
    reach was set while it was gated (KEP-3838 lets nodeSelector and affinity be added then, tolerations
    at any time), perhaps while nothing judged it; so the gated old object excuses nothing."""
    return bool(_gates(old)) and not _gates(obj)
