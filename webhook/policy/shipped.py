"""Reading the data files shipped inside the package (GPU models, workload kinds, sharing stacks, rules).

Every command reads them at start-up, so they go through libyaml (``CSafeLoader``): the pure-Python
``yaml.safe_load`` spent about 100 ms of a 0.35 s ``gpu-admission check`` parsing them. The data is the
same either way; the pure-Python loader remains the fallback where PyYAML was built without libyaml.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml

_LOADER: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str) -> Any:
    """``yaml.safe_load`` through libyaml when PyYAML has it (same tags, same values)."""
    return yaml.load(text, Loader=_LOADER)


def shipped_text(name: str) -> str:
    """The text of a data file shipped in ``webhook/policy``."""
    return resources.files("webhook.policy").joinpath(name).read_text(encoding="utf-8")


def load_shipped(name: str) -> Any:
    """A shipped data file, parsed."""
    return load_yaml(shipped_text(name))
