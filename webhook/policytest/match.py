"""Deep subset matching of objects, and the expected-vs-actual diff shown when it fails.

A test names only what it cares about (``spec.containers[0].resources.limits``), so the mutated object
must *contain* the expectation: maps match key by key, lists element by element — each expected
element must match a distinct actual element, the one at the same index first, else any — and
``null`` means "absent". The diff shows the actual object cut down to the expectation's shape, so
a failure reads like a three-line patch instead of a 200-line dump.
"""

from __future__ import annotations

import difflib
from typing import Any

import yaml


def _key(path: str, key: Any) -> str:
    text = str(key)
    if "." in text or "/" in text or not text:
        return f"{path}[{text}]"
    return f"{path}.{text}" if path else text


def _same(expected: Any, actual: Any) -> bool:
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(expected) is type(actual) and expected == actual
    return expected == actual


def matches(expected: Any, actual: Any) -> bool:
    return not mismatches(expected, actual)


def mismatches(expected: Any, actual: Any, path: str = "") -> list[str]:
    """Every place where ``actual`` does not contain ``expected``, as ``path: what`` lines."""
    if expected is None:
        return [] if actual is None else [f"{path or '(object)'}: expected absent or null, got {_short(actual)}"]
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{path or '(object)'}: expected a map, got {_short(actual)}"]
        out: list[str] = []
        for key, value in expected.items():
            where = _key(path, key)
            if key not in actual:
                if value is not None:
                    out.append(f"{where}: missing")
                continue
            out.extend(mismatches(value, actual[key], where))
        return out
    if isinstance(expected, list):
        if not isinstance(actual, list):
            return [f"{path or '(object)'}: expected a list, got {_short(actual)}"]
        pairing = _pair(expected, actual)
        out = []
        for i, item in enumerate(expected):
            if pairing[i] is not None:
                continue
            if i < len(actual):
                detail = "; ".join(mismatches(item, actual[i], f"{path}[{i}]")[:3])
                out.append(f"{path}[{i}]: no element of the list matches ({detail})")
            else:
                out.append(f"{path}[{i}]: no element of the {len(actual)}-element list matches {_short(item)}")
        return out
    if not _same(expected, actual):
        return [f"{path or '(object)'}: expected {_short(expected)}, got {_short(actual)}"]
    return []


def _pair(expected: list[Any], actual: list[Any]) -> list[int | None]:
    """Index of the actual element each expected element matches (same index first), or None."""
    used: set[int] = set()
    pairing: list[int | None] = [None] * len(expected)
    for i, item in enumerate(expected):
        if i < len(actual) and matches(item, actual[i]):
            pairing[i] = i
            used.add(i)
    for i, item in enumerate(expected):
        if pairing[i] is not None:
            continue
        for j, candidate in enumerate(actual):
            if j not in used and matches(item, candidate):
                pairing[i] = j
                used.add(j)
                break
    return pairing


_ABSENT = object()


def project(expected: Any, actual: Any) -> Any:
    """``actual`` cut to the shape of ``expected`` (for the diff).

    Where an expected key is missing, the whole map at that level is shown instead, so the diff says
    what *is* there (``nvidia.com/mig-3g.20gb``) rather than just what is not.
    """
    if isinstance(expected, dict) and isinstance(actual, dict):
        if any(k not in actual and v is not None for k, v in expected.items()):
            return {k: project(expected[k], v) if k in expected else v for k, v in actual.items()}
        return {k: project(v, actual[k]) for k, v in expected.items() if k in actual}
    if isinstance(expected, list) and isinstance(actual, list):
        pairing = _pair(expected, actual)
        out = []
        for i, item in enumerate(expected):
            j = pairing[i] if pairing[i] is not None else (i if i < len(actual) else None)
            if j is not None:
                out.append(project(item, actual[j]))
        return out
    return actual


def _dump(value: Any) -> list[str]:
    text = yaml.safe_dump(value, sort_keys=False, default_flow_style=False, allow_unicode=True, width=100)
    return text.splitlines()


def diff(expected: Any, actual: Any, *, expected_label: str = "expected", actual_label: str = "actual") -> list[str]:
    """Unified diff of two values dumped as YAML (``-`` expected, ``+`` actual)."""
    return list(
        difflib.unified_diff(
            _dump(expected), _dump(actual), fromfile=expected_label, tofile=actual_label, lineterm="", n=3
        )
    )


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
