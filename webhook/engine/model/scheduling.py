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
