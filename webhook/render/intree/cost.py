"""A bound on what each rendered CEL expression costs the apiserver, and the refusal of what would not fit.

The apiserver meters CEL at run time: ``PerCallLimit`` (1,000,000) per expression evaluation,
``RuntimeCELCostBudget`` (10,000,000) per ValidatingAdmissionPolicy binding for its variables and
validations, ``RuntimeCELCostBudgetMatchConditions`` (2,500,000) for the match conditions (k8s.io/
apiserver ``pkg/apis/cel/config.go``). An expression that runs out errors, and under
``failurePolicy: Fail`` the request is denied: a false denial. So every expression is bounded here
for a large but real object (:data:`BOUNDS`: how many templates, containers, tolerations, volumes,
env entries, ... it may carry), and a policy whose expressions would pass a limit at those sizes is
refused with the reason instead of rendered.

The gate's model, a token heuristic in cel-go's units (it under-counts list and map literals, the appends
of ``map``/``filter`` and ``matches`` on long strings; :mod:`webhook.render.intree.runtimecost` charges
what cel-go charges, and the rendered policies do not fit it yet): every operation node of the parsed
expression costs 1; a comprehension (``exists``, ``all``, ``filter``, ``map``, ``exists_one``) costs its
range plus the range's bound times its body; ``matches`` costs a tenth of the string bound (cel-go's
string traversal factor), ``sum``/``in`` their list's bound. It is not cel-go's static
estimator (which assumes lists as long as a 3 MiB request allows, and is not what admission enforces).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

PER_CALL_LIMIT = 1_000_000
BINDING_BUDGET = 10_000_000
MATCH_CONDITIONS_BUDGET = 2_500_000
MAX_OBJECT_BYTES = 1_000_000  # etcd stores objects up to 1.5 MiB; leave room for managedFields

BOUNDS: dict[str, int] = {
    # a large real workload: a JobSet or Volcano Job of 8 roles; per pod 16 containers, 8 init and 8
    # ephemeral ones; per container 64 env entries, 32 mounts; per pod 32 volumes, 16 tolerations
    "templates": 8, "classed": 8, "gpu": 8, "raw": 8, "oldTemplates": 8, "tasks": 8, "replicatedJobs": 8,
    "workerGroupSpecs": 8, "containers": 16, "initContainers": 8, "ephemeralContainers": 8,
    "tolerations": 16, "volumes": 32, "volumeMounts": 32, "volumeDevices": 8, "env": 64, "envFrom": 8,
    "add": 8, "resourceClaims": 8,
    # maps
    "limits": 8, "requests": 8, "nodeSelector": 8, "labels": 32, "annotations": 32,
}
DEFAULT_BOUND = 8
STRING_BOUND = 1024
COMPREHENSIONS = frozenset({"exists", "all", "filter", "map", "exists_one"})


class TooLarge(ValueError):
    """The policy's in-tree expressions would not fit the apiserver's limits; the message says which."""


@dataclass(frozen=True)
class Estimate:
    where: str  # policy/expression name
    cost: int
    size: int  # characters


_TOKEN = re.compile(
    r"\s*(?:(?P<str>'(?:[^'\\]|\\.)*')|(?P<num>\d+)|(?P<id>[A-Za-z_][A-Za-z0-9_]*)|(?P<op>&&|\|\||[=!<>]=|[-+*/%!<>?:.,()\[\]{}]))"
)


def tokens(expression: str) -> list[str]:
    """The expression's tokens (string literals kept whole); the renderer's CEL only, not all of CEL."""
    out, pos = [], 0
    while pos < len(expression):
        m = _TOKEN.match(expression, pos)
        if m is None or m.end() == pos:
            if expression[pos:].strip() == "":
                break
            raise ValueError(f"cannot read CEL at {expression[pos:pos + 20]!r}")
        out.append(m.group(m.lastgroup or "op"))
        pos = m.end()
    return out


_OPEN, _CLOSE = {"(": ")", "[": "]", "{": "}"}, {")": "(", "]": "[", "}": "{"}


def _close(toks: list[str], i: int) -> int:
    """Index of the bracket closing the one at ``i``."""
    depth = 0
    for j in range(i, len(toks)):
        if toks[j] in _OPEN:
            depth += 1
        elif toks[j] in _CLOSE:
            depth -= 1
            if depth == 0:
                return j
    raise ValueError("unbalanced brackets")


def _open(toks: list[str], j: int) -> int:
    depth = 0
    for i in range(j, -1, -1):
        if toks[i] in _CLOSE:
            depth += 1
        elif toks[i] in _OPEN:
            depth -= 1
            if depth == 0:
                return i
    raise ValueError("unbalanced brackets")


def _split(toks: list[str], sep: str) -> list[list[str]]:
    parts, depth, cur = [], 0, []
    for t in toks:
        if t in _OPEN:
            depth += 1
        elif t in _CLOSE:
            depth -= 1
        if t == sep and depth == 0:
            parts.append(cur)
            cur = []
        else:
            cur.append(t)
    parts.append(cur)
    return parts


def _range_bound(toks: list[str], end: int) -> int:
    """Bound of the range expression ending at token ``end`` (just before ``.method(``)."""
    t = toks[end]
    if t == "]":
        start = _open(toks, end)
        if start == 0 or toks[start - 1] in ("(", ",", "?", ":", "&&", "||", "!", "+"):  # a list literal
            inner = toks[start + 1:end]
            return len(_split(inner, ",")) if inner else 0
        return DEFAULT_BOUND
    if t == ")":
        start = _open(toks, end)
        if start >= 2 and toks[start - 2] == "." and toks[start - 1] in COMPREHENSIONS | {"flatten"}:
            return _range_bound(toks, start - 3)  # x.filter(...).exists(...): x's bound
        inner = toks[start + 1:end]
        total = 0
        for part in _split(inner, "+"):  # (a ? x : []) + (b ? y : []): the parts' sum
            branches = _split(part, ":")
            total += max(_last_bound(b) for b in branches)
        return total
    return BOUNDS.get(t, DEFAULT_BOUND)


def _last_bound(toks: list[str]) -> int:
    idents = [t for t in toks if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", t) and t not in ("has", "size")]
    if toks and toks[-1] == "]" and "[" in toks:
        return _range_bound(toks, len(toks) - 1)
    return BOUNDS.get(idents[-1], DEFAULT_BOUND) if idents else 0


def _cost(toks: list[str]) -> int:
    cost, i = 0, 0
    while i < len(toks):
        t = toks[i]
        if t == "." and i + 2 < len(toks) and toks[i + 2] == "(":
            method, close = toks[i + 1], _close(toks, i + 2)
            args = _split(toks[i + 3:close], ",")
            if method in COMPREHENSIONS:
                cost += 1 + _range_bound(toks, i - 1) * (_cost(args[-1]) + 2)
                i = close + 1
                continue
            if method == "matches":
                cost += STRING_BOUND // 10
            elif method == "sum":
                cost += _range_bound(toks, i - 1)
        elif t == "in" and i + 1 < len(toks):
            nxt = toks[i + 1]
            cost += _range_bound(toks, _close(toks, i + 1)) if nxt in _OPEN else BOUNDS.get(nxt, DEFAULT_BOUND)
        if t not in _OPEN and t not in _CLOSE and t != ",":
            cost += 1
        i += 1
    return cost


@lru_cache(maxsize=2048)
def estimate(expression: str) -> int:
    """The bound on one evaluation of ``expression`` (see the module docstring)."""
    return _cost(tokens(expression))


def _expressions(spec: dict[str, Any], part: str) -> Iterable[tuple[str, str]]:
    for i, item in enumerate(spec.get(part) or []):
        name = item.get("name") or (item.get("message") or "")[:40] or str(i)
        for key in ("expression", "messageExpression"):
            if key in item:
                yield f"{part}[{name}]", item[key]
    for i, mutation in enumerate(spec.get("mutations") or [] if part == "mutations" else []):
        for key in ("expression",):
            for holder in (mutation.get("jsonPatch"), mutation.get("applyConfiguration")):
                if holder and key in holder:
                    yield f"mutations[{i}]", holder[key]


def estimates(obj: dict[str, Any]) -> list[Estimate]:
    spec = obj.get("spec") or {}
    out = []
    for part in ("matchConditions", "variables", "validations", "mutations"):
        for where, expression in _expressions(spec, part):
            out.append(Estimate(f"{obj['metadata']['name']}: {where}", estimate(expression), len(expression)))
    return out


def check(objects: list[dict[str, Any]]) -> None:
    """Raise :class:`TooLarge` naming every expression or policy past a limit, or past cel-go's parser
    limits (100,000 code points, nesting 250: the apiserver would reject the policy at creation)."""
    import json

    from webhook.render.intree.celparse import CelSyntaxError, parse

    problems = []
    for obj in objects:
        if obj.get("kind") not in ("ValidatingAdmissionPolicy", "MutatingAdmissionPolicy"):
            continue
        name = obj["metadata"]["name"]
        for part in ("matchConditions", "variables", "validations", "mutations"):
            for where, expression in _expressions(obj.get("spec") or {}, part):
                try:
                    parse(expression)
                except CelSyntaxError as exc:
                    problems.append(f"{name}: {where}: cel-go's parser would refuse it: {exc}")
        found = estimates(obj)
        for e in found:
            if e.cost > PER_CALL_LIMIT:
                problems.append(f"{e.where}: estimated cost {e.cost:,} > the per-expression limit {PER_CALL_LIMIT:,}")
        conditions = sum(e.cost for e in found if ": matchConditions[" in e.where)
        body = sum(e.cost for e in found if ": matchConditions[" not in e.where)
        if conditions > MATCH_CONDITIONS_BUDGET:
            problems.append(f"{name}: match conditions cost {conditions:,} > {MATCH_CONDITIONS_BUDGET:,}")
        if body > BINDING_BUDGET:
            problems.append(f"{name}: variables and validations cost {body:,} > the binding budget {BINDING_BUDGET:,}")
        size = len(json.dumps(obj))
        if size > MAX_OBJECT_BYTES:
            problems.append(f"{name}: {size:,} bytes > {MAX_OBJECT_BYTES:,} (etcd stores objects up to 1.5 MiB)")
    if problems:
        raise TooLarge(
            "the policy is too large for in-tree enforcement (the apiserver would reject these policies or run out "
            "of CEL budget and deny): " + "; ".join(problems)
            + ". Fewer pools, classes or entitlements, or run without --in-tree (the webhook enforces everything)."
        )
