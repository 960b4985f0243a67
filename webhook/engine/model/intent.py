"""Read the intent contract (the keys users write) off a pod template, with the workload's metadata as fallback.

Malformed values are not exceptions: each becomes a finding for ``intent-invalid`` that names the
exact key and a valid example, and the rest of the intent is still read so that one apply shows
every mistake at once.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any, NamedTuple

from webhook.engine.model.workload import Template, dotted
from webhook.policy.compiled import Policy
from webhook.policy.model import Isolation, TopologyLevel
from webhook.quantity import QuantityError, parse_quantity

OPT_OUT = "none"
"""``gpu-admission.io/workload: none`` on a template opts it out of a workload-level class
(e.g. the CPU-only MPI launcher task of a Volcano Job whose Job-level label says ``training``)."""

_DNS_1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class Topology(NamedTuple):
    """A topology intent: the level, and whether it is required (a named tuple: hashed and compared in C,
    as part of the intent's memo key)."""

    level: TopologyLevel
    required: bool


_TOPOLOGIES = {  # every valid value but "none", read with one lookup (and one shared, immutable value)
    f"{level.value}{suffix}": Topology(level, suffix == ":required")
    for level in TopologyLevel
    for suffix in ("", ":", ":required")
}
_ISOLATIONS = {isolation.value: isolation for isolation in Isolation}

MAX_INTEGER_DIGITS = 9
"""Intent integers (``gpus``, ``gang-size``) are ASCII digits, at most this many. ``str.isdigit``
accepts ``"²"`` and Arabic-Indic digits, which ``int`` then refuses, and ``int`` refuses more than 4300 digits:
either way an exception instead of a verdict. Nine digits hold any real GPU or pod count."""
_ECHO = 40


def _shown(value: str) -> str:
    """A user value quoted in a message, cut so that a 5000-character value stays a one-line message."""
    text = repr(value)
    return text if len(text) <= _ECHO else text[: _ECHO - 1] + "…"


def positive_integer(value: str) -> int | None:
    """``value`` as an integer >= 1 if it is 1..9 ASCII digits, else None."""
    if 0 < len(value) <= MAX_INTEGER_DIGITS and value.isascii() and value.isdigit():
        number = int(value)
        return number if number >= 1 else None
    return None


class Intent(NamedTuple):
    """What a pod template asks for, as read from its labels and annotations: a value.

    Immutable and hashable, so that whatever is derived from it (the resolution, remembered per policy)
    is keyed by the intent itself: a field added here is part of every such key without anyone listing
    it. A named tuple rather than a frozen dataclass: one is built per template of every review, and a
    frozen dataclass's ``__init__`` costs a ``object.__setattr__`` per field."""

    class_name: str
    class_path: str  # where the workload label was found
    adopted_from: str | None = None  # pool whose adoptAs made this a class (raw request)
    gpus: int = 1
    gpus_set: bool = False
    gpu_memory: Fraction | None = None
    isolation: Isolation | None = None
    gpu_model: str | None = None
    pool: str | None = None
    rdma: bool | None = None
    gang: str | None = None
    gang_size: int | None = None
    topology: Topology | None = None
    topology_none: bool = False
    container: str | None = None
    errors: tuple[tuple[str, str], ...] = ()  # (path, message)
    conflict: tuple[str, str] | None = None
    """(path, message): the object's own GPU resources contradict this intent (``written_count``). It
    does not resolve, so nothing rewrites what the user wrote and ``/validate`` sees the same conflict."""
    paths: tuple[tuple[str, str], ...] = ()  # (key, field path) in reading order, for messages

    def path_of(self, key: str, default: str) -> str:
        """Where ``key`` was read (``default`` when it was not set): what a message about it names."""
        for name, path in self.paths:
            if name == key:
                return path
        return default

    def has(self, key: str) -> bool:
        return any(name == key for name, _ in self.paths)


def _lookup(
    tpl: Template, obj_meta: dict[str, Any], section: str, key: str, tpl_prefix: tuple, obj_prefix: tuple
) -> tuple[Any, str] | None:
    """Template first, then the workload's own metadata (a Job-level key applies to its template)."""
    values = tpl.metadata.get(section)
    if isinstance(values, dict) and key in values:
        return values[key], dotted((*tpl_prefix, "metadata", section, key))
    if obj_prefix != tpl_prefix:
        values = obj_meta.get(section)
        if isinstance(values, dict) and key in values:
            return values[key], dotted(("metadata", section, key))
    return None


def read_class(policy: Policy, obj: dict[str, Any], tpl: Template) -> tuple[str, str] | None:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    found = _lookup(tpl, meta, "labels", policy.keys.workload, tpl.path, ())  # type: ignore[arg-type]
    if found is None:
        return None
    value, path = found
    return (value if isinstance(value, str) else str(value)), path


def read_intent(
    policy: Policy, obj: dict[str, Any], tpl: Template, class_name: str, class_path: str
) -> Intent:
    keys = policy.keys
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    # the two places a key may be, template first (what _lookup does, inlined: ten keys per template)
    own = tpl.metadata.get("annotations")
    own = own if isinstance(own, dict) else {}
    outer = meta.get("annotations") if tpl.path != () else None
    outer = outer if isinstance(outer, dict) else {}
    present = keys.annotations.intersection(own)  # which keys to read: most templates set two or three
    if outer:
        present |= keys.annotations.intersection(outer)
    if not present:
        return Intent(class_name, class_path)
    fields: dict[str, Any] = {}  # what the keys set, then one Intent built from it
    paths: list[tuple[str, str]] = []
    errors: list[tuple[str, str]] = []

    def get(key: str) -> tuple[str, str] | None:
        if key in own:
            value, path = own[key], dotted((*tpl.path, "metadata", "annotations", key))
        elif key in outer:
            value, path = outer[key], dotted(("metadata", "annotations", key))
        else:
            return None
        paths.append((key, path))
        if not isinstance(value, str):
            value = str(value)
        return value.strip(), path

    def bad(path: str, message: str) -> None:
        errors.append((path, message))

    if keys.gpus in present and (got := get(keys.gpus)) is not None:
        value, path = got
        if (number := positive_integer(value)) is not None:
            fields["gpus"], fields["gpus_set"] = number, True
        else:
            bad(
                path,
                f"{keys.gpus} must be an integer >= 1 of at most {MAX_INTEGER_DIGITS} ASCII digits, "
                f'got {_shown(value)} (example: "8")',
            )
    if keys.gpu_memory in present and (got := get(keys.gpu_memory)) is not None:
        value, path = got
        try:
            amount = parse_quantity(value)
            if amount <= 0:
                raise QuantityError(f"{_shown(value)} must be greater than zero")
            if value.isdigit():
                raise QuantityError(f"{_shown(value)} has no unit; write 4Gi, 4096Mi or 20G")
            fields["gpu_memory"] = amount
        except QuantityError as exc:
            bad(path, f"{keys.gpu_memory}: {exc}")
    if keys.isolation in present and (got := get(keys.isolation)) is not None:
        value, path = got
        if (isolation := _ISOLATIONS.get(value)) is not None:
            fields["isolation"] = isolation
        else:
            bad(path, f"{keys.isolation} must be shared, mig or exclusive, got {_shown(value)}")
    if keys.gpu_model in present and (got := get(keys.gpu_model)) is not None:
        value, path = got
        if value in policy.models:
            fields["gpu_model"] = value
        else:
            bad(path, f"unknown GPU model {_shown(value)}; known: {', '.join(sorted(policy.models))}")
    if keys.pool in present and (got := get(keys.pool)) is not None:
        value, path = got
        if value in policy.pools:
            fields["pool"] = value
        else:
            bad(path, f"unknown pool {_shown(value)}; pools: {', '.join(sorted(policy.pools))}")
    if keys.rdma in present and (got := get(keys.rdma)) is not None:
        value, path = got
        if value.lower() in ("true", "false"):
            fields["rdma"] = value.lower() == "true"
        else:
            bad(path, f'{keys.rdma} must be "true" or "false", got {_shown(value)}')
    if keys.gang in present and (got := get(keys.gang)) is not None:
        value, path = got
        if _DNS_1123.match(value) and len(value) <= 63:
            fields["gang"] = value
        elif len(value) > 63:  # it becomes a label value (and a PodGroup name): 63 characters at most
            bad(path, f"{keys.gang} is {len(value)} characters; the limit is 63 (it is a label value): shorten it")
        else:
            bad(path, f"{keys.gang} must be a DNS-1123 name (lower case, digits, '-', '.'), got {_shown(value)}")
    if keys.gang_size in present and (got := get(keys.gang_size)) is not None:
        value, path = got
        if (number := positive_integer(value)) is not None:
            fields["gang_size"] = number
        else:
            bad(
                path,
                f"{keys.gang_size} must be an integer >= 1 of at most {MAX_INTEGER_DIGITS} ASCII digits, "
                f'got {_shown(value)} (example: "4")',
            )
    if keys.topology in present and (got := get(keys.topology)) is not None:
        value, path = got
        if value in ("none", "none:"):
            fields["topology_none"] = True
        elif (topology := _TOPOLOGIES.get(value)) is not None:
            fields["topology"] = topology
        else:
            bad(
                path,
                f"{keys.topology} must be node, switch, rack, zone or none, optionally ':required', "
                f"got {_shown(value)}",
            )
    if keys.container in present and (got := get(keys.container)) is not None:
        value, path = got
        names = _names(tpl.spec, "containers")
        if value in names:
            fields["container"] = value
        else:
            bad(path, _not_a_gpu_container(tpl, keys.container, value, names))
    return Intent(class_name, class_path, paths=tuple(paths), errors=tuple(errors), **fields)


def _names(spec: dict[str, Any], group: str) -> list[str]:
    items = spec.get(group)
    return [str(c.get("name")) for c in items if isinstance(c, dict)] if isinstance(items, list) else []


def _not_a_gpu_container(tpl: Template, key: str, value: str, names: list[str]) -> str:
    """Why ``value`` cannot be the GPU container. Only ``spec.containers`` are eligible: an init
    container runs before them (and would hand back its devices, or keep them as a native sidecar
    beside a GPU-less pod), an ephemeral container holds no resources at all."""
    eligible = f"name one of {', '.join(repr(n) for n in names)}" if names else "the pod has no containers"
    spec = tpl.spec
    init = spec.get("initContainers")
    for c in init if isinstance(init, list) else ():
        if isinstance(c, dict) and c.get("name") == value:
            sidecar = c.get("restartPolicy") == "Always"
            what = "a native sidecar (restartPolicy Always)" if sidecar else "an init container"
            return (
                f"{key} names {_shown(value)}, {what}; the GPUs go to one of spec.containers, never to an "
                f"init container: {eligible}"
            )
    if value in _names(spec, "ephemeralContainers"):
        return f"{key} names {_shown(value)}, an ephemeral container, which holds no resources: {eligible}"
    return f"no container named {_shown(value)} in spec.containers: {eligible}"
