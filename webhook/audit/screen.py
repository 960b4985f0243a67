"""A text screen that says, before any YAML is parsed, that a snapshot item cannot be GPU-relevant;
and of an object read from the API, written as JSON, that it need not be judged or sent to a worker.

Most of a cluster's pods hold no GPU, and parsing a stored pod (managedFields, status) costs ~100
times judging it; the engine would return "not relevant" for each. The screen's markers are derived
from what the engine reads to call an object relevant, computed from the policy (and the cluster's
Nodes and DeviceClasses), never a hand list:

- the intent prefix (``gpu-admission.io/``: the workload label, every intent key);
- a GPU resource prefix of the policy, ``nvidia.com/``, a GPU-fraction annotation, the implicit
  DRA extended resource prefix, an extended resource name a DeviceClass of the cluster or the
  policy maps, ``resourceClaims`` (claim objects are judged with the context, never screened);
- the roads onto a GPU pool (a CPU-only pod that can be scheduled there is judged for its device
  env): the key of every taint of every pool and of every Node of a pool (a toleration must name it);
  a toleration with no key and ``operator: Exists`` (it names no word, so the item's ``tolerations``
  are read: :func:`blanket_toleration`); ``nodeName`` where a pool or a pool's Node keeps no pod bound
  by name out (for a stored Pod, only a nodeName its own writer set: ``f:nodeName`` in managedFields,
  as :mod:`webhook.audit.stored` decides); and every item where a pool or Node keeps nobody out;
- where some pool's cards are shared or sliced (``privileged-gpu`` judges CPU-only pods that could
  reach them): every word a trigger is spelled with (``privileged``, ``capabilities``, ``envFrom``,
  ``hostPath``, the container toolkit's variables).

The screen only ever lets more through (a word in a comment, in ``managedFields``, a tolerations block
it cannot read): it may cost a parse, never a judgement. ``tests/audit/test_audit_screen.py`` checks it
against the engine on generated objects.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from webhook.engine.model.claims import IMPLICIT_PREFIX
from webhook.engine.model.cluster import Cluster
from webhook.engine.model.device_reach import TOOLKIT_ENV, exposed_pools
from webhook.engine.model.reach import FILTERING, KUBELET_FILTERING, node_pools, toleration, untolerated
from webhook.policy.compiled import Policy

TRIGGER_WORDS = ("privileged", "capabilities", "envFrom", "hostPath", *TOOLKIT_ENV)

Taints = Iterable[tuple[str, str | None, str | None]]


@dataclass(frozen=True, slots=True)
class Markers:
    """What makes an item worth parsing: plain ``words``, and the roads no word spells."""

    words: tuple[str, ...]
    blanket: bool = False  # a toleration with no key reaches a GPU pool
    node_name: bool = False  # a nodeName reaches a GPU pool (past NoSchedule taints)
    everything: bool = False  # a GPU pool or Node keeps no pod out: every item may reach it

    def __or__(self, other: Markers) -> Markers:
        """The markers of two policies (``--baseline``): an item either may find relevant."""
        return Markers(
            tuple(dict.fromkeys(self.words + other.words)),
            self.blanket or other.blanket,
            self.node_name or other.node_name,
            self.everything or other.everything,
        )


def markers(policy: Policy, cluster: Cluster) -> Markers:
    words: list[str] = [f"{policy.settings.prefix}/", "nvidia.com/", "resourceClaims", IMPLICIT_PREFIX]
    words += policy.gpu_prefixes
    words += policy.fraction_keys
    words += policy.dra.extended
    for device_class in cluster.device_classes.values():
        spec = device_class.get("spec") if isinstance(device_class.get("spec"), dict) else {}
        if isinstance(spec.get("extendedResourceName"), str):
            words.append(spec["extendedResourceName"])
    if exposed_pools(policy):
        words += TRIGGER_WORDS
    taint_sets: list[list[tuple[str, str | None, str | None]]] = [list(p.taints) for p in policy.pools.values()]
    taint_sets += [_node_taints(n) for n in cluster.nodes if isinstance(n, Mapping) and node_pools(policy, n)]
    for taints in taint_sets:
        words += [key for key, _, _ in taints]
    return Markers(
        tuple(dict.fromkeys(w for w in words if w)),
        blanket=bool(taint_sets),
        # what keeps a pod with no toleration out: the scheduler's filters, or (bound by name) the kubelet's
        node_name=any(not untolerated(t, (), KUBELET_FILTERING) for t in taint_sets),
        everything=any(not untolerated(t, (), FILTERING) for t in taint_sets),
    )


def _node_taints(node: Mapping[str, Any]) -> list[tuple[str, str | None, str | None]]:
    """A Node's taints as the reach model reads them (``reach.node_admits``)."""
    spec = node.get("spec") if isinstance(node.get("spec"), dict) else {}
    taints = spec.get("taints") if isinstance(spec.get("taints"), list) else []
    return [
        (str(t.get("key") or ""), None if t.get("value") is None else str(t.get("value")), str(t.get("effect") or ""))
        for t in taints
        if isinstance(t, dict)
    ]


class Screen:
    """``screen(text)``: False only when the text can name no road to relevance (see the module doc)."""

    def __init__(self, found: Markers | Iterable[str]) -> None:
        self.markers = found if isinstance(found, Markers) else Markers(tuple(found))
        self.words = self.markers.words

    def __call__(self, text: str) -> bool:
        m = self.markers
        if m.everything or any(w in text for w in self.words):
            return True
        if m.node_name and "nodeName" in text and ("f:nodeName" in text or not _is_pod(text)):
            return True
        return m.blanket and "Exists" in text and blanket_toleration(text)


_JSON_POD_HEAD = '{"apiVersion":"v1","kind":"Pod",'
_JSON_POD_TAIL = '"kind":"Pod"}'  # the API's list items get their kind appended (webhook.audit.kube)


def _is_pod(text: str) -> bool:
    """Certainly a Pod (whose nodeName the judge drops unless its writer set it); False when unsure."""
    if text.startswith("{"):
        return text.startswith(_JSON_POD_HEAD) or text.rstrip().endswith(_JSON_POD_TAIL)
    lines = "\n" + text  # an item's text is dedented: its top-level keys start a line
    if '\n"kind"' in lines or "\n'kind'" in lines or "\nkind " in lines or "\nkind\t" in lines:
        return False
    kinds = lines.split("\nkind:")[1:]
    return len(kinds) == 1 and kinds[0].split("\n", 1)[0].strip(" \t\r") in ("Pod", '"Pod"', "'Pod'")


_JSON_TOLERATIONS = re.compile(r'"tolerations"\s*:\s*')
_YAML_TOLERATIONS = re.compile(r"""([ \t]*(?:-[ \t]+)*)["']?tolerations["']?[ \t]*:[ \t]*([^\n]*)""")
_YAML_NONE = ("", "[]", "null", "~", "Null", "NULL")


def blanket_toleration(text: str) -> bool:
    """Whether some ``tolerations`` list in ``text`` may hold a toleration with no key and ``Exists``
    (it tolerates every taint). Each list is read alone (a few lines, not the object); any list this
    cannot read for certain counts as holding one."""
    if text.lstrip().startswith("{"):
        return any(_json_list_blanket(text, m.end()) for m in _JSON_TOLERATIONS.finditer(text))
    found = text.find("tolerations")
    while found >= 0:
        match = _YAML_TOLERATIONS.match(text, text.rfind("\n", 0, found) + 1)  # the line it is on, if a key
        if match is not None and match.end(1) <= found and _yaml_list_blanket(text, match):
            return True
        found = text.find("tolerations", found + 11)
    return False


def _any_blanket(items: Any) -> bool:
    if not isinstance(items, list):
        return False  # the engine reads no tolerations from anything else
    for item in items:
        tol = toleration(item)
        if tol is not None and tol[0] == "" and tol[1] == "Exists":
            return True
    return False


def _json_list_blanket(text: str, start: int) -> bool:
    if text.startswith("null", start):
        return False
    if not text.startswith("[", start):
        return True  # not a list the engine would read, or not the field: read the item
    end = text.find("]", start) + 1  # tolerations are flat: the first "]" closes them, unless inside a string
    try:
        return _any_blanket(orjson.loads(text[start:end]))
    except orjson.JSONDecodeError:  # it was inside one (or the list is not what the API writes)
        end = _json_list_end(text, start)
    if end is None:
        return True
    try:
        return _any_blanket(orjson.loads(text[start:end]))
    except orjson.JSONDecodeError:
        return True


def _json_list_end(text: str, start: int) -> int | None:
    """The index past the JSON array opening at ``start`` (strings and escapes skipped)."""
    depth, i, n, in_string = 0, start, len(text), False
    while i < n:
        c = text[i]
        if in_string:
            if c == "\\":
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def _yaml_list_blanket(text: str, match: re.Match[str]) -> bool:
    """The block sequence under a ``tolerations:`` line, read line by line: every item a flat mapping of
    one-line scalars (how kubectl writes tolerations). Anything else (flow style, anchors, a value
    continued on another line, a nested node) is not guessed at: True."""
    rest = match.group(2).rstrip("\r").strip()
    if rest:
        return rest not in _YAML_NONE  # an empty list or null holds nothing; anything inline: read the item
    column = len(match.group(1))
    items: list[dict[str, str]] = []
    dash = content = -1
    for line in _lines(text, match.end() + 1):
        body = line.lstrip(" ")
        indent = len(line) - len(body)
        if not body or body.startswith("#"):
            continue
        if indent < column or (indent == column and not body.startswith("-")):
            break
        if body.startswith("-"):
            after = body[1:].lstrip(" ")
            if dash not in (-1, indent) or body[1:2] != " " or not after:
                return True
            dash, content = indent, len(line) - len(after)
            items.append({})
            body, indent = after, content
        if indent != content or not _field(items[-1], body):
            return True
    return any(_may_be_blanket(item) for item in items)


def _lines(text: str, start: int) -> Iterator[str]:
    """The lines of ``text`` from ``start``, read only as far as they are wanted."""
    n = len(text)
    while start < n:
        end = text.find("\n", start)
        end = n if end < 0 else end
        yield text[start:end].rstrip("\r")
        start = end + 1


_FIELD = re.compile(r"([A-Za-z]+):(?: +(.*))?$")


def _field(item: dict[str, str], body: str) -> bool:
    """Read one ``name: value`` line into ``item``; False where it is not one (or repeats a name)."""
    m = _FIELD.match(body)
    if m is None or m.group(1) in item:
        return False
    item[m.group(1)] = (m.group(2) or "").strip()
    return True


_NULLS = ("", "~", "null", "Null", "NULL")
_UNKNOWN = object()


def _scalar(raw: str) -> object:
    """A one-line YAML scalar as a string (None for null), or ``_UNKNOWN`` where it may be anything else."""
    if raw in _NULLS:
        return None
    if " #" in raw or raw[0] in "&*!|>{[%@`,?":
        return _UNKNOWN
    if raw[0] in "\"'":
        inner = raw[1:-1]
        if len(raw) < 2 or raw[-1] != raw[0] or "\\" in inner or raw[0] in inner:
            return _UNKNOWN
        return inner
    return raw


def _may_be_blanket(item: dict[str, str]) -> bool:
    """The engine's blanket toleration: an empty key (absent, null, "") with ``operator: Exists``."""
    key = _scalar(item["key"]) if "key" in item else None
    operator = _scalar(item["operator"]) if "operator" in item else "Equal"
    return key in (None, "", _UNKNOWN) and operator in ("Exists", _UNKNOWN)
