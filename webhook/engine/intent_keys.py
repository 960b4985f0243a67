"""Keys under the intent prefix that are not intent keys, or that sit on the wrong side.

``gpu-admission.io/gpu-mem: 4Gi`` is read by nothing, so the class default applies without a word;
``gpu-admission.io/workload`` written as an annotation opts nothing in, so the pod runs without a GPU.
Each such key is an ``intent-unknown-key`` finding (default warn) that names the key probably meant:
a typo is never silently ignored. Pure and cheap: one prefix test per label and annotation.
"""

from __future__ import annotations

from collections.abc import Sequence
from difflib import get_close_matches
from typing import Any

from webhook.engine.model.context import Finding, TemplateState
from webhook.engine.model.grants import GRANT_NAME
from webhook.engine.model.workload import dotted
from webhook.policy.compiled import Policy

RULE = "intent-unknown-key"


def _names(policy: Policy) -> tuple[dict[str, str], dict[str, str]]:
    """(label names, annotation names): the part after the prefix -> the full key."""
    cut = len(policy.settings.prefix) + 1
    keys = policy.keys
    return {keys.workload[cut:]: keys.workload}, {k[cut:]: k for k in sorted(keys.annotations)}


def _finding(policy: Policy, side: str, key: str, at: str, class_name: str | None) -> Finding | None:
    """The finding for ``key`` in ``at.<side>`` (``at``: the metadata's field path), None for an intent key."""
    path = f"{at}.{side}[{key}]"
    labels, annotations = _names(policy)
    here, there = (labels, annotations) if side == "labels" else (annotations, labels)
    name = key[len(policy.settings.prefix) + 1 :]
    if name in here or (side == "annotations" and name == GRANT_NAME):  # the grant: the webhook's own key
        return None
    other = "annotations" if side == "labels" else "labels"
    kind = side[:-1]
    if name in there:
        return Finding(
            RULE, path, f"{kind} {key} is ignored (it is read from {other}); move {key} to {at}.{other}", class_name
        )
    close = get_close_matches(name, list(here), n=1, cutoff=0.6) or get_close_matches(name, list(there), 1, 0.6)
    if close:
        meant = close[0]
        side_meant = side if meant in here else other
        fix = f"did you mean {(here if meant in here else there)[meant]}" + (
            "" if side_meant == side else f" (in {at}.{side_meant})"
        )
        return Finding(RULE, path, f"{kind} {key} is not an intent key and is ignored; {fix}?", class_name)
    known = ", ".join([*(f"{n} (label)" for n in labels), *annotations])
    return Finding(
        RULE,
        path,
        f"{kind} {key} is not an intent key and is ignored; intent keys under {policy.settings.prefix}/: {known}",
        class_name,
    )


def _scan(
    policy: Policy, meta: Any, at: tuple[str | int, ...], class_name: str | None, out: list[Finding], seen: set[str]
) -> None:
    """Every review passes here, GPU or not: one prefix test per key, and the slow path only for a key
    under the prefix that is not an intent key on its side (intent keys are a set lookup)."""
    if type(meta) is not dict:
        return
    keys = policy.keys
    prefix = keys.workload[: len(keys.workload) - len("workload")]  # "<prefix>/"
    for side, known in (("labels", keys.label_set), ("annotations", keys.annotations)):
        values = meta.get(side)
        if type(values) is not dict:
            continue
        for key in values:
            if type(key) is str and key.startswith(prefix) and key not in known:
                found = _finding(policy, side, key, dotted(at), class_name)
                if found is not None and found.path not in seen:
                    seen.add(found.path)
                    out.append(found)


def unknown_keys(policy: Policy, obj: dict[str, Any], states: Sequence[TemplateState]) -> tuple[Finding, ...]:
    """Findings for every stray key on the object's own metadata and on each pod template's."""
    out: list[Finding] = []
    seen: set[str] = set()
    _scan(policy, obj.get("metadata"), ("metadata",), states[0].class_name if states else None, out, seen)
    for state in states:
        tpl = state.tpl
        if tpl.path != () and not tpl.virtual:
            _scan(policy, tpl.metadata, tpl.meta_path, state.class_name, out, seen)
    return tuple(out) if out else ()
