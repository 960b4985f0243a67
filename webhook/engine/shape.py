"""Type gate for the fields the engine reads and writes.

The apiserver decodes objects against their schema before admission, so a webhook never sees
``nodeSelector: [a, b]``. Offline (``check``) it can: manifests come from files. Rather than make every
mutation step and rule defensive, the engine checks the shape of exactly the fields it touches once,
up front, and reports a malformed object with the path and the expected type — the same thing
``kubectl apply`` would tell the user, only earlier.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from webhook.engine.workload import Kind, dotted

STR_MAP = "map of strings"
MAP, LIST, STR, INT, BOOL = "map", "list", "string", "integer", "boolean"

_CONTAINER: dict[str, Any] = {
    "name": STR,
    "resources": {"limits": MAP, "requests": MAP},
    "env": [{"name": STR}],
    "volumeMounts": [{"name": STR, "mountPath": STR}],
    "securityContext": {"privileged": BOOL, "capabilities": {"add": [STR]}},
}
_POD_SPEC: dict[str, Any] = {
    "containers": [_CONTAINER],
    "initContainers": [_CONTAINER],
    "nodeSelector": STR_MAP,
    "nodeName": STR,
    "schedulerName": STR,
    "priorityClassName": STR,
    "tolerations": [{"key": STR, "operator": STR, "value": STR, "effect": STR}],
    "volumes": [{"name": STR}],
    "affinity": {
        "podAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"podAffinityTerm": MAP}],
            "requiredDuringSchedulingIgnoredDuringExecution": [MAP],
        },
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [MAP]}]}
        },
    },
}
_META: dict[str, Any] = {"name": STR, "namespace": STR, "generateName": STR, "labels": STR_MAP, "annotations": STR_MAP}
_TEMPLATE: dict[str, Any] = {"metadata": _META, "spec": _POD_SPEC}
_JOB_SPEC: dict[str, Any] = {"parallelism": INT, "completions": INT, "template": _TEMPLATE}

SHAPES: dict[Kind, dict[str, Any]] = {
    Kind.POD: {"metadata": _META, "spec": _POD_SPEC},
    Kind.JOB: {"metadata": _META, "spec": _JOB_SPEC},
    Kind.CRONJOB: {"metadata": _META, "spec": {"jobTemplate": {"metadata": _META, "spec": _JOB_SPEC}}},
    Kind.VOLCANO_JOB: {
        "metadata": _META,
        "spec": {
            "schedulerName": STR,
            "minAvailable": INT,
            "networkTopology": MAP,
            "tasks": [{"name": STR, "replicas": INT, "minAvailable": INT, "template": _TEMPLATE}],
        },
    },
}
for _kind in (Kind.DEPLOYMENT, Kind.STATEFULSET, Kind.REPLICASET, Kind.DAEMONSET):
    SHAPES[_kind] = {"metadata": _META, "spec": {"replicas": INT, "template": _TEMPLATE}}


def _type_ok(value: Any, expected: str) -> bool:
    if expected == MAP:
        return isinstance(value, dict)
    if expected == STR_MAP:
        return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
    if expected == STR:
        return isinstance(value, str)
    if expected == INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if expected == BOOL:
        return isinstance(value, bool)
    return True


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    return {
        dict: "a map",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a number",
    }.get(type(value), type(value).__name__)


def shape_errors(obj: dict[str, Any], kind: Kind) -> list[tuple[str, str]]:
    """(field path, message) for every touched field whose type is wrong. Null counts as absent."""
    errors: list[tuple[str, str]] = []
    if not _CHECKS[kind](obj):  # fast pass: a well-formed object (the usual case) needs nothing more
        _walk(obj, SHAPES[kind], (), errors)
    return errors


def _walk(value: Any, shape: Any, path: tuple[str | int, ...], errors: list[tuple[str, str]]) -> None:
    """The reporting walk: every wrong field with its path and what was expected."""
    if value is None:
        return
    if isinstance(shape, str):
        if not _type_ok(value, shape):
            errors.append((dotted(path), f"{dotted(path)} must be a {shape}, got {_describe(value)}"))
        return
    if isinstance(shape, list):
        if not isinstance(value, list):
            errors.append((dotted(path), f"{dotted(path)} must be a list, got {_describe(value)}"))
            return
        for i, item in enumerate(value):
            _walk(item, shape[0], (*path, i), errors)
        return
    if not isinstance(value, dict):
        errors.append(
            (dotted(path) or "object", f"{dotted(path) or 'the object'} must be a map, got {_describe(value)}")
        )
        return
    for key, sub in shape.items():
        if key in value:
            _walk(value[key], sub, (*path, key), errors)


Check = Callable[[Any], bool]


def _compile(shape: Any) -> Check:
    """A yes/no checker for ``shape``: True exactly when :func:`_walk` would report nothing.

    Built once per shape at import. It answers without paths, messages or recursion through the
    shape description, which is what the admission hot path pays for on every review; only an
    object that fails it is walked again by :func:`_walk` to say what is wrong and where.
    """
    if isinstance(shape, str):
        kind = shape

        def leaf(value: Any) -> bool:
            return value is None or _type_ok(value, kind)

        if kind == STR:
            return lambda value: value is None or isinstance(value, str)
        if kind == MAP:
            return lambda value: value is None or isinstance(value, dict)
        return leaf
    if isinstance(shape, list):
        item = _compile(shape[0])

        def items(value: Any) -> bool:
            if value is None:
                return True
            if not isinstance(value, list):
                return False
            return all(item(v) for v in value)

        return items
    fields = tuple((key, _compile(sub)) for key, sub in shape.items())

    def fields_ok(value: Any) -> bool:
        if value is None:
            return True
        if not isinstance(value, dict):
            return False
        for key, check in fields:
            child = value.get(key)
            if child is not None and not check(child):
                return False
        return True

    return fields_ok


_CHECKS: dict[Kind, Check] = {kind: _compile(shape) for kind, shape in SHAPES.items()}
