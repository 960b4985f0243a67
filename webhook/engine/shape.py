"""Type gate for the fields the engine reads and writes.

The apiserver decodes objects against their schema before admission, so a webhook never sees
``nodeSelector: [a, b]``. Offline (``check``) it can: manifests come from files. Rather than make every
mutation step and rule defensive, the engine checks the shape of exactly the fields it touches once,
up front, and reports a malformed object with the path and the expected type — the same thing
``kubectl apply`` would tell the user, only earlier.

The same gate caps the size of the lists and maps the engine walks (:data:`CAPS`): a Pod with a
million empty containers or a container with ten thousand resource keys is no real workload, and
judging it would cost memory and time the webhook's ``timeoutSeconds`` does not have. Such an object
is ``malformed-object`` with the field path, decided by one ``len`` before anything iterates it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from webhook.engine.model.workload import dotted
from webhook.policy.kinds import CompiledKind, GangValue, Wild

STR_MAP = "map of strings"
MAP, LIST, STR, INT, BOOL = "map", "list", "string", "integer", "boolean"

CAPS: dict[str, int] = {
    # field name -> most items (list) or keys (map) accepted wherever the engine reads that field.
    # Generous: each is far above what a real workload writes, and far below what makes a review slow.
    "containers": 256,
    "initContainers": 256,
    "limits": 64,  # resource names per container (cpu, memory, hugepages-*, a few devices)
    "requests": 64,
    "env": 4096,
    "volumeMounts": 1024,
    "volumes": 1024,
    "tolerations": 256,
    "nodeSelector": 128,
    "nodeSelectorTerms": 64,
    "matchExpressions": 128,
    "requiredDuringSchedulingIgnoredDuringExecution": 128,
    "preferredDuringSchedulingIgnoredDuringExecution": 128,
    "add": 64,  # capabilities
    "labels": 512,
    "annotations": 1024,
    "tasks": 512,  # Volcano Job tasks
}
"""Size caps by field name (see the module docstring); docs/policy.md lists them."""

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
    "ephemeralContainers": [_CONTAINER],
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



def _put(tree: dict[str, Any], path: tuple, leaf: Any) -> None:
    """Add ``leaf`` (a type or a shape) at ``path`` of the shape ``tree``; ``*`` keys stand for every map value."""
    node: Any = tree
    for i, part in enumerate(path):
        last = i == len(path) - 1
        if part is Wild.LIST:
            if not isinstance(node, list):
                return
            if last:
                node[:] = [_merge(node[0] if node else None, leaf)]
                return
            if not node or isinstance(node[0], str):
                node[:] = [[] if path[i + 1] is Wild.LIST else {}]
            node = node[0]
            continue
        key = "*" if part is Wild.MAP else part
        if not isinstance(node, dict) or isinstance(key, int):
            return
        if last:
            node[key] = _merge(node.get(key), leaf)
            return
        nxt = path[i + 1]
        child = node.get(key)
        if child is None or isinstance(child, str):
            child = node[key] = [] if nxt is Wild.LIST else {}
        node = child


def _merge(old: Any, new: Any) -> Any:
    if old is None or (isinstance(old, str) and not isinstance(new, str)):
        return copy.deepcopy(new)
    if isinstance(old, dict) and isinstance(new, dict):
        out = dict(old)
        for key, value in new.items():
            out[key] = _merge(out.get(key), value)
        return out
    return old


def shape_of(kind: CompiledKind) -> dict[str, Any]:
    """The fields of ``kind`` the engine reads or writes, with their types: templates, counts, gang keys."""
    tree: dict[str, Any] = {"metadata": dict(_META)}
    for tpl in kind.templates:
        if tpl.resources is not None:
            _put(tree, tpl.resources, {"limits": MAP, "requests": MAP})
        elif tpl.path == ():
            tree = _merge(tree, _TEMPLATE)
        else:
            _put(tree, tpl.path, _TEMPLATE)
        for count in tpl.replicas:
            for field in (*count.fields, count.at_most):
                if field is not None:
                    _put(tree, field, INT)
        if tpl.role is not None:
            _put(tree, tpl.role, STR)
    for keys in kind.backends.values():
        for key in keys:
            if key.template:
                continue
            if key.as_string:
                _put(tree, key.path[:-1], STR_MAP)
            elif key.value in (GangValue.SIZE, GangValue.REPLICAS):
                _put(tree, key.path, INT)
            else:
                _put(tree, key.path, STR)
    if kind.network_topology is not None:
        _put(tree, kind.network_topology, MAP)
    return tree


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


def shape_errors(obj: dict[str, Any], kind: CompiledKind) -> list[tuple[str, str]]:
    """(field path, message) for every touched field whose type is wrong. Null counts as absent."""
    errors: list[tuple[str, str]] = []
    shape, check = checker(kind)
    if not check(obj):  # fast pass: a well-formed object (the usual case) needs nothing more
        _walk(obj, shape, (), errors)
    return errors


def _too_many(value: Any, path: tuple[str | int, ...], errors: list[tuple[str, str]]) -> bool:
    """Report (and say True) when the list or map at ``path`` is over its cap."""
    cap = CAPS.get(path[-1]) if path and isinstance(path[-1], str) else None
    if cap is None or not isinstance(value, list | dict) or len(value) <= cap:
        return False
    what = "items" if isinstance(value, list) else "keys"
    where = dotted(path)
    errors.append(
        (where, f"{where} has {len(value)} {what}; at most {cap} are accepted (no real workload needs more): split it")
    )
    return True


def _walk(value: Any, shape: Any, path: tuple[str | int, ...], errors: list[tuple[str, str]]) -> None:
    """The reporting walk: every wrong field with its path and what was expected."""
    if value is None:
        return
    if isinstance(shape, str):
        if not _type_ok(value, shape):
            errors.append((dotted(path), f"{dotted(path)} must be a {shape}, got {_describe(value)}"))
        elif shape in (MAP, STR_MAP):
            _too_many(value, path, errors)
        return
    if isinstance(shape, list):
        if not isinstance(value, list):
            errors.append((dotted(path), f"{dotted(path)} must be a list, got {_describe(value)}"))
            return
        if _too_many(value, path, errors):
            return  # its items are not walked: there are too many of them
        for i, item in enumerate(value):
            _walk(item, shape[0], (*path, i), errors)
        return
    if not isinstance(value, dict):
        errors.append(
            (dotted(path) or "object", f"{dotted(path) or 'the object'} must be a map, got {_describe(value)}")
        )
        return
    if _too_many(value, path, errors):
        return
    for key, sub in shape.items():
        if key == "*":
            for name, item in value.items():
                _walk(item, sub, (*path, name), errors)
        elif key in value:
            _walk(value[key], sub, (*path, key), errors)


Check = Callable[[Any], bool]


def _emit(shape: Any, var: str, indent: str, lines: list[str], names: list[int], cap: int | None = None) -> None:
    """Append statements that ``return False`` when ``var`` (never None here) breaks ``shape``, or has
    more than ``cap`` items or keys."""
    too_many = f"{indent}if len({var}) > {cap}: return False" if cap is not None else None

    def fresh() -> str:
        names[0] += 1
        return f"v{names[0]}"

    if isinstance(shape, str):
        test = {
            MAP: f"type({var}) is not dict and not isinstance({var}, dict)",
            STR: f"type({var}) is not str and not isinstance({var}, str)",
            INT: f"not isinstance({var}, int) or isinstance({var}, bool)",
            BOOL: f"not isinstance({var}, bool)",
            STR_MAP: f"not isinstance({var}, dict)",
        }[shape]
        lines.append(f"{indent}if {test}: return False")
        if too_many and shape in (MAP, STR_MAP):
            lines.append(too_many)
        if shape == STR_MAP:
            k, v = fresh(), fresh()
            lines.append(f"{indent}for {k}, {v} in {var}.items():")
            lines.append(f"{indent}    if not isinstance({k}, str) or not isinstance({v}, str): return False")
        return
    if isinstance(shape, list):
        lines.append(f"{indent}if type({var}) is not list and not isinstance({var}, list): return False")
        if too_many:
            lines.append(too_many)
        item = fresh()
        lines.append(f"{indent}for {item} in {var}:")
        lines.append(f"{indent}    if {item} is None: continue")
        _emit(shape[0], item, indent + "    ", lines, names)
        return
    lines.append(f"{indent}if type({var}) is not dict and not isinstance({var}, dict): return False")
    if too_many:
        lines.append(too_many)
    for key, sub in shape.items():
        child = fresh()
        if key == "*":
            lines.append(f"{indent}for {child} in {var}.values():")
            lines.append(f"{indent}    if {child} is not None:")
            _emit(sub, child, indent + "        ", lines, names)
            continue
        lines.append(f"{indent}{child} = {var}.get({key!r})")
        lines.append(f"{indent}if {child} is not None:")
        _emit(sub, child, indent + "    ", lines, names, CAPS.get(key) if isinstance(key, str) else None)


def _compile(shape: Any, name: str) -> Check:
    """A yes/no checker for ``shape``: True exactly when :func:`_walk` would report nothing.

    Generated once per kind at import, as straight-line Python: one function with a nested ``if`` per
    field and a ``for`` per list, no calls and no reading of the shape description. This runs on
    every review (a few dozen fields), and as a tree of closures it cost a call per field. Only an
    object that fails it is walked again by :func:`_walk` to say what is wrong and where.
    ``tests/engine/test_shape.py`` holds the two to the same answers on generated objects.
    """
    lines = [f"def {name}(v0):", "    if v0 is None: return True"]
    _emit(shape, "v0", "    ", lines, [0])
    lines.append("    return True")
    namespace: dict[str, Any] = {}
    exec(compile("\n".join(lines), f"<shape check {name}>", "exec"), namespace)  # our own text, from SHAPES
    return namespace[name]  # type: ignore[no-any-return]


@lru_cache(maxsize=256)
def checker(kind: CompiledKind) -> tuple[dict[str, Any], Check]:
    """The kind's shape and its compiled yes/no check, built once per kind (table rows compare by identity)."""
    shape = shape_of(kind)
    return shape, _compile(shape, "shape_" + "".join(c if c.isalnum() else "_" for c in kind.name.lower()))
