"""What each rendered CEL expression can cost the apiserver at run time, charged as cel-go charges it.

The apiserver meters CEL as cel-go's interpreter runs it (``interpreter/runtimecost.go``) against
k8s.io/apiserver's limits (``pkg/apis/cel/config.go``): :data:`PER_CALL_LIMIT` per expression
evaluation (webhook matchConditions included), :data:`MATCH_CONDITIONS_BUDGET` for the matchConditions
of one webhook or binding together, :data:`BINDING_BUDGET` per ValidatingAdmissionPolicy binding
evaluation. Past a limit the evaluation errors and ``failurePolicy: Fail`` denies (a false denial), or
``Ignore`` skips the webhook. There is no estimated-cost check at creation for admission policies, so a
render that does not bound its expressions ships a policy that fails only on large objects.

:func:`bound` is that run-time cost, charged rule by rule as cel-go charges it, as a worst case over every
object within a :class:`Profile` (how many templates, containers, env entries, ... an object may carry,
per instance and in all, and how long its strings are; :data:`DOCUMENTED` is the bound docs/policy.md
promises). ``policy render`` refuses what passes a limit (:func:`check`), in-tree policies and webhook
configurations alike:

* a guard ``size(x) <= n && ...`` (or ``size(x) > n || ...``) on a comprehension variable or a field bounds
  x's length or entries to n on the right, for every object (the renderer guards what it walks this way);
* a fold over a list read through other folds' variables runs once per step of each, over another instance
  each time: with a joint bound (``Profile.totals``), at most that many steps in all;
* 1 per identifier, field selection or index (``x[k]``: the index 1, reading ``k`` for it nothing: cel-go
  observes the qualifier, not its operand); ``has()`` itself nothing (its operand's reads are charged);
  constants nothing; ``&&``, ``||`` and ``?:`` nothing themselves (both sides of ``&&``/``||`` charged,
  the dearer branch of ``?:``);
* a list literal 10, a map literal 30, a struct (``JSONPatch{...}``) 40, plus their elements;
* a function 1, except: ``in`` on a list its size; ``==``, ``!=``, ``<``, ... ⌈0.1·min(sizes)⌉ (a
  string's length, a list's or map's entries, 1 for a scalar); ``startsWith``/``endsWith``
  ⌈0.1·len(receiver)⌉; string ``+`` ⌈0.1·(len a + len b)⌉; ``contains`` ⌈0.1·len s⌉·⌈0.1·len t⌉;
  ``matches`` ⌈0.1·(1 + len s)⌉·⌈0.25·len(regex)⌉; Kubernetes' ``sum()`` the list's size;
* a macro is a fold: its range, the accumulator's initial value (``[]``: 10), and per element its loop
  condition (``exists``/``all``: ``@not_strictly_false(!accu)``, 3) and step: ``accu || p`` (1 + p),
  ``map``: ``accu + [f]`` (12 + f), ``filter``: ``p ? accu + [x] : accu`` (13 + p), ``exists_one``:
  ``p ? accu + 1 : accu`` (2 + p); then the result (1).

A ValidatingAdmissionPolicy's variables are lazy and computed once per binding evaluation, each as its own
program with its own per-call limit: an expression's per-call bound is its own cost (reading a variable
costs the read), the binding's bound each variable once plus every validation (:attr:`Estimate.cost` adds
the variables an expression reads, for a first evaluation that computes them). :func:`problems` says what
passes a limit or cel-go's parser limits (100,000 code points, nesting 250), and by how much;
:func:`check` raises :class:`TooLarge` with it.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from webhook.render.intree.celparse import CelSyntaxError, Node, parse

PER_CALL_LIMIT = 1_000_000
BINDING_BUDGET = 10_000_000
MATCH_CONDITIONS_BUDGET = 2_500_000
MAX_OBJECT_BYTES = 1_000_000  # etcd stores objects up to 1.5 MiB; leave room for managedFields



class TooLarge(ValueError):
    """A rendered object the apiserver would refuse (cel-go's parser limits) or could not evaluate within
    its CEL budget on an object within the documented bounds."""


LIST_CREATE, MAP_CREATE, STRUCT_CREATE = 10, 30, 40
TRAVERSAL = 0.1  # cel-go's common.StringTraversalCostFactor
REGEX = 0.25  # common.RegexStringLengthCostFactor


@dataclass(frozen=True)
class Profile:
    """The largest object an expression is priced for: list and map sizes by field name, string lengths
    by field name (a map's keys and values by the map's name), ``string`` for every other string."""

    lists: Mapping[str, int]
    maps: Mapping[str, int]
    strings: Mapping[str, int]
    list_default: int = 8
    string: int = 4096
    totals: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    """The most elements a list field has in the whole object, all its instances together (the containers of
    every template): a joint bound, so a fold nested in others is charged for that many steps in all, not
    for the product of the per-instance bounds (every template at its largest at once)."""


DOCUMENTED = Profile(
    # a JobSet or Volcano Job of 8 roles; per pod 16 containers, 8 init and 8 ephemeral ones; per container
    # 64 env entries, 32 mounts; per pod 32 volumes, 16 tolerations (docs/policy.md, "Within the CEL budget")
    lists=MappingProxyType({
        "tasks": 8, "replicatedJobs": 8, "workerGroupSpecs": 8, "containers": 16, "initContainers": 8,
        "ephemeralContainers": 8, "tolerations": 16, "volumes": 32, "volumeMounts": 32, "volumeDevices": 8,
        "env": 64, "envFrom": 8, "add": 8, "drop": 8, "resourceClaims": 8, "claims": 8, "schedulingGates": 8,
        "nodeSelectorTerms": 8, "matchExpressions": 8, "values": 16, "groups": 16,
    }),
    maps=MappingProxyType({
        "limits": 8, "requests": 8, "nodeSelector": 8, "labels": 32, "annotations": 32,
    }),
    strings=MappingProxyType({
        # Kubernetes validation: names and qualified keys, label values, canonical quantities
        "name": 253, "namespace": 63, "key": 317, "labels": 317, "annotations": 317, "nodeSelector": 317,
        "limits": 317, "requests": 317, "operator": 12, "effect": 16, "restartPolicy": 16, "kind": 63,
        "apiVersion": 317, "schedulerName": 253, "priorityClassName": 253, "nodeName": 253,
        "operation": 7, "group": 253, "resource": 253, "subResource": 253, "version": 63, "username": 253,
        "serviceAccountName": 253, "resourceClaimTemplateName": 253, "resourceClaimName": 253,
    }),
    string=4096,  # any other string (an env value, a capability, a path): 4 KiB each
    # and in the whole object (all templates together): 64 containers of each kind together, 2,048 env
    # entries, 2,048 mounts, 256 volumes, 128 tolerations, 512 keys of limits (and of requests)
    totals=MappingProxyType({
        "containers": 64, "initContainers": 32, "ephemeralContainers": 16, "env": 2048, "volumeMounts": 2048,
        "volumeDevices": 256, "volumes": 256, "tolerations": 128, "limits": 512, "requests": 512,
    }),
)
MAP_VALUES = MappingProxyType({"labels": 63, "nodeSelector": 63, "limits": 64, "requests": 64, "annotations": 4096})
"""String length of a map's values by the map's name (label values, canonical quantities)."""


@dataclass(frozen=True)
class Value:
    """What an expression's value can be, as far as cost depends on it: ``kind`` (list, map, str,
    scalar, or dyn: read from the object, named by its field), its size bound, its elements, and ``deps``:
    the folds whose variables it was read through (another step of such a fold reads another instance)."""

    kind: str
    size: int = 1
    name: str = ""
    elem: Value | None = None
    key: Value | None = None
    deps: frozenset[str] = frozenset()


SCALAR = Value("scalar")


def _dyn(name: str, profile: Profile, deps: frozenset[str] = frozenset()) -> Value:
    """A field read from the object: what it is (list, map, string) depends on its name in ``profile``."""
    return Value("dyn", name=name, deps=deps)


def _as_list(v: Value, profile: Profile) -> Value:
    if v.kind in ("list", "map"):
        return v
    if v.kind == "dyn":
        if v.name in profile.maps:
            key = Value("str", profile.strings.get(v.name, profile.string), deps=v.deps)
            value = Value("str", MAP_VALUES.get(v.name, profile.string), deps=v.deps)
            return Value("map", profile.maps[v.name], v.name, value, key, v.deps)
        n = profile.lists.get(v.name, profile.list_default)
        return Value("list", n, v.name, Value("dyn", name=v.name + "[]", deps=v.deps), deps=v.deps)
    return Value("list", profile.list_default, elem=Value("dyn", deps=v.deps), deps=v.deps)


def _length(v: Value, profile: Profile) -> int:
    """cel-go's actualSize: a string's length, a list's or map's entries, 1 for anything else."""
    if v.kind in ("str", "list", "map"):
        return v.size
    if v.kind == "dyn":
        if v.name in profile.maps:
            return profile.maps[v.name]
        if v.name in profile.lists:
            return profile.lists[v.name]
        return profile.strings.get(v.name, profile.string)
    return 1


def _join(a: Value, b: Value) -> Value:
    deps = a.deps | b.deps
    if a.kind == b.kind and a.kind in ("str", "list", "map"):
        return Value(a.kind, max(a.size, b.size), a.name or b.name, _join_opt(a.elem, b.elem), _join_opt(a.key, b.key),
                     deps)
    return dataclasses.replace(a if a.kind == "dyn" else b, deps=deps)


def _ceil(x: float) -> int:
    return math.ceil(x)


@dataclass
class _Pricer:
    profile: Profile
    variables: Mapping[str, Value] = field(default_factory=dict)
    read: set[str] = field(default_factory=set)  # variables this expression reads
    steps: dict[str, int] = field(default_factory=dict)  # the enclosing folds' step counts, by fold

    def price(self, node: Node, scope: Mapping[str, Value]) -> tuple[int, Value]:
        op = node.op
        if op == "const":
            v = node.value
            return 0, Value("str", len(v)) if isinstance(v, str) else SCALAR
        if op == "ident":
            if node.name in scope:
                return 1, scope[node.name]
            return 1, _dyn(node.name, self.profile)
        if op == "select":
            base = node.args[0]
            if base.op == "ident" and base.name == "variables" and "variables" not in scope:
                self.read.add(node.name)
                return 2, self.variables.get(node.name, Value("dyn", name=node.name))
            cost, of = self.price(base, scope)
            return cost + 1, scope.get(_path(node) or "", _dyn(node.name, self.profile, of.deps))
        if op == "has":
            cost, _ = self.price(node.args[0].args[0], scope)
            return cost, SCALAR
        if op == "index":
            c1, container = self.price(node.args[0], scope)
            c2, _ = self.price(node.args[1], scope)
            if _path(node.args[1]) is not None:  # ``x[k]``: the qualifier 1, its own read of k uncharged
                c2 = 0
            seq = _as_list(container, self.profile)
            return c1 + c2 + 1, seq.elem or Value("dyn", deps=container.deps)
        if op == "and":  # ``size(x) <= n && ...``: the right side runs only on an x of at most n
            narrowed = _narrowed(node.args[0], scope, self.profile)
            return self.price(node.args[0], scope)[0] + self.price(node.args[1], narrowed)[0], SCALAR
        if op == "or":  # ``size(x) > n || ...``: the right side runs only on an x of at most n
            narrowed = _narrowed(node.args[0], scope, self.profile, negated=True)
            return self.price(node.args[0], scope)[0] + self.price(node.args[1], narrowed)[0], SCALAR
        if op == "cond":
            c0, _ = self.price(node.args[0], scope)
            c1, v1 = self.price(node.args[1], scope)
            c2, v2 = self.price(node.args[2], scope)
            return c0 + max(c1, c2), _join(v1, v2)
        if op == "list":
            cost, elem = LIST_CREATE, None
            for a in node.args:
                c, v = self.price(a, scope)
                cost += c
                elem = v if elem is None else _join(elem, v)
            elem = elem or SCALAR
            return cost, Value("list", len(node.args), elem=elem, deps=elem.deps)
        if op == "map":
            cost = MAP_CREATE + sum(self.price(a, scope)[0] for a in node.args)
            values = [self.price(a, scope)[1] for a in node.args[1::2]]
            elem = values[0] if values else SCALAR
            for v in values[1:]:
                elem = _join(elem, v)
            return cost, Value("map", len(node.args) // 2, elem=elem, key=Value("str", 317))
        if op == "struct":
            return STRUCT_CREATE + sum(self.price(a, scope)[0] for a in node.args), Value("dyn", name=node.name)
        if op == "comprehension":
            return self._fold(node, scope)
        return self._call(node, scope)

    def _fold(self, node: Node, scope: Mapping[str, Value]) -> tuple[int, Value]:
        c_range, rng = self.price(node.args[0], scope)
        seq = _as_list(rng, self.profile)
        # this fold runs once per step of the folds its range was read through, each time over another
        # instance of the list: where the object holds at most ``total`` of them in all, fewer steps each
        runs = math.prod(self.steps.get(d, 1) for d in seq.deps)
        total = self.profile.totals.get(seq.name)
        if total is not None and seq.size * runs > total:
            seq = dataclasses.replace(seq, size=max(1, -(-total // runs)))
        token = f"{node.var}#{len(self.steps)}"
        item = seq.key if seq.kind == "map" and seq.key is not None else (seq.elem or Value("dyn"))
        item = dataclasses.replace(item, deps=item.deps | seq.deps | {token})
        inner = {k: v for k, v in scope.items() if not k.startswith(node.var + ".")}  # a narrowed field of
        inner[node.var] = item  # an outer variable of the same name no longer applies
        self.steps[token] = max(1, seq.size)
        try:
            bodies = [self.price(a, inner) for a in node.args[1:]]
        finally:
            del self.steps[token]
        body = sum(c for c, _ in bodies)
        macro = node.name
        if macro in ("exists", "all"):
            step, init, out = 3 + 1 + body, 0, SCALAR
        elif macro == "exists_one":
            step, init, out = 2 + body, 0, SCALAR
        elif macro == "map":
            step, init = 12 + body, LIST_CREATE
            mapped = bodies[-1][1]
            out = Value("list", seq.size, elem=dataclasses.replace(mapped, deps=(mapped.deps - {token}) | seq.deps),
                        deps=seq.deps)
        else:  # filter
            step, init = 13 + body, LIST_CREATE
            out = Value("list", seq.size, seq.name, dataclasses.replace(item, deps=item.deps - {token}), deps=seq.deps)
        return c_range + init + seq.size * step + 1, out

    def _call(self, node: Node, scope: Mapping[str, Value]) -> tuple[int, Value]:
        priced = [self.price(a, scope) for a in node.args]
        cost = sum(c for c, _ in priced)
        vals = [v for _, v in priced]
        name = node.name
        size = [_length(v, self.profile) for v in vals]
        if name == "_in_":
            rhs = _as_list(vals[1], self.profile)
            return cost + (rhs.size if rhs.kind == "list" else 1), SCALAR
        if name in ("_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_"):
            return cost + _ceil(min(size) * TRAVERSAL), SCALAR
        if name in ("startsWith", "endsWith"):
            return cost + _ceil(size[0] * TRAVERSAL), SCALAR
        if name == "contains":
            return cost + _ceil(size[0] * TRAVERSAL) * _ceil(size[1] * TRAVERSAL), SCALAR
        if name == "matches":
            s, regex = (size[0], size[1]) if len(size) == 2 else (size[0], size[0])
            return cost + _ceil((1 + s) * TRAVERSAL) * _ceil(regex * REGEX), SCALAR
        if name == "_+_":
            a, b = vals
            if "str" in (a.kind, b.kind) or (a.kind == b.kind == "dyn" and not _listy(a, b, self.profile)):
                return cost + _ceil((size[0] + size[1]) * TRAVERSAL), Value("str", size[0] + size[1])
            la, lb = _as_list(a, self.profile), _as_list(b, self.profile)
            return cost + 1, Value("list", la.size + lb.size, la.name or lb.name, _join_opt(la.elem, lb.elem),
                                   deps=la.deps | lb.deps)
        if name in ("sum", "min", "max") and node.method:
            return cost + _as_list(vals[0], self.profile).size, SCALAR
        if name == "string" and vals:
            return cost + 1, Value("str", size[0] if vals[0].kind in ("str", "dyn") else 20)
        if name == "size":
            return cost + 1, SCALAR
        return cost + 1, SCALAR


_HOLDS = {"_<=_": 0, "_<_": -1}  # size(x) OP n held: x has at most n + this
_FAILED = {"_>_": 0, "_>=_": -1}  # size(x) OP n failed


def _narrowed(test: Node, scope: Mapping[str, Value], profile: Profile, negated: bool = False) -> Mapping[str, Value]:
    """The scope after ``size(x) <= n`` (or ``< n``) held, or ``size(x) > n`` (``>= n``) failed (``negated``,
    the right side of ``||``), ``x`` a comprehension variable: x (a string, list or map) has at most n
    characters or entries, whatever the profile says (the bound holds for every object, not only those
    within the profile). The renderer guards the lists it walks and the strings costly functions read this
    way, and leaves longer ones to the webhook."""
    if test.op == ("or" if negated else "and"):  # both sides failed (held)
        scope = _narrowed(test.args[0], scope, profile, negated)
        return _narrowed(test.args[1], scope, profile, negated)
    table = _FAILED if negated else _HOLDS
    if test.op != "call" or test.name not in table or test.args[1].op != "const":
        return scope
    size, limit = test.args
    if size.op != "call" or size.name != "size" or len(size.args) != 1:
        return scope
    name, n = _path(size.args[0]), limit.value
    if name is None or not isinstance(n, int):
        return scope
    if name not in scope:  # a field (``t.spec.tolerations``): what the profile says it is, bounded
        root = scope.get(name.split(".", 1)[0])
        scope = {**scope, name: _dyn(name.rsplit(".", 1)[-1], profile, root.deps if root else frozenset())}
    n += table[test.name]
    value = scope[name]
    if value.kind == "dyn" and (value.name in profile.maps or value.name in profile.lists):
        value = _as_list(value, profile)
    if value.kind in ("list", "map"):
        return {**scope, name: dataclasses.replace(value, size=n)}
    return {**scope, name: Value("str", n)}


def _path(node: Node) -> str | None:
    """``a.b.c`` for a chain of field selections on an identifier (a key of the narrowed scope)."""
    if node.op == "ident":
        return node.name
    if node.op == "select" and node.args:
        base = _path(node.args[0])
        return None if base is None else f"{base}.{node.name}"
    return None


def _join_opt(a: Value | None, b: Value | None) -> Value | None:
    if a is None or b is None:
        return a or b
    return _join(a, b)


def _listy(a: Value, b: Value, profile: Profile) -> bool:
    return any(v.name in profile.lists or v.name in profile.maps or v.name.endswith("[]") for v in (a, b))


@dataclass(frozen=True)
class Estimate:
    where: str
    cost: int  # own cost plus every variable it reads (computed on first read)
    size: int  # characters
    own: int = 0  # what the expression's own evaluation is charged (the per-call limit applies to it)


def _parsed(expression: str) -> Node:
    return _parse_cached(expression)


@lru_cache(maxsize=4096)
def _parse_cached(expression: str) -> Node:
    return parse(expression)


def bound(expression: str, profile: Profile = DOCUMENTED, variables: Mapping[str, str] | None = None) -> int:
    """The most one evaluation of ``expression`` can cost, in cel-go's runtime units, on any object within
    ``profile`` (``variables``: the policy's variables, name -> expression; reading one costs the read, its
    own evaluation is charged to it). A pure function of its arguments, for the end-to-end tier to set
    against the apiserver's figures."""
    return _bounds([("expression", expression)], profile, variables or {})[0].own


def _variable_values(variables: Mapping[str, str], profile: Profile) -> tuple[dict[str, Value], dict[str, int],
                                                                             dict[str, set[str]]]:
    values: dict[str, Value] = {}
    costs: dict[str, int] = {}
    reads: dict[str, set[str]] = {}
    for name, expression in variables.items():  # each reads only the ones before it
        pricer = _Pricer(profile, values)
        cost, value = pricer.price(_parsed(expression), {})
        values[name], costs[name], reads[name] = value, cost, pricer.read
    return values, costs, reads


def _closure(names: Iterable[str], reads: Mapping[str, set[str]]) -> set[str]:
    out: set[str] = set()
    todo = list(names)
    while todo:
        n = todo.pop()
        if n in out or n not in reads:
            continue
        out.add(n)
        todo.extend(reads[n])
    return out


def _bounds(items: list[tuple[str, str]], profile: Profile, variables: Mapping[str, str]) -> list[Estimate]:
    values, costs, reads = _variable_values(variables, profile)
    out = []
    for where, expression in items:
        pricer = _Pricer(profile, values)
        own, _ = pricer.price(_parsed(expression), {})
        lazy = sum(costs[n] for n in _closure(pricer.read, reads))
        out.append(Estimate(where, own + lazy, len(expression), own))
    return out


def _items(spec: Mapping[str, Any], part: str) -> list[tuple[str, str]]:
    out = []
    for i, item in enumerate(spec.get(part) or []):
        name = item.get("name") or (item.get("message") or "")[:40] or str(i)
        for key in ("expression", "messageExpression"):
            if key in item:
                out.append((f"{part}[{name}]", item[key]))
    if part == "mutations":
        for i, mutation in enumerate(spec.get("mutations") or []):
            for holder in (mutation.get("jsonPatch"), mutation.get("applyConfiguration")):
                if holder and "expression" in holder:
                    out.append((f"mutations[{i}]", holder["expression"]))
    return out


def estimates(obj: Mapping[str, Any], profile: Profile = DOCUMENTED) -> list[Estimate]:
    """Every expression of one policy or webhook configuration, bounded (variables charged where read)."""
    name = obj["metadata"]["name"]
    if obj.get("kind") in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        out = []
        for hook in obj.get("webhooks") or []:
            items = _items(hook, "matchConditions")
            out += [Estimate(f"{name}/{hook['name']}: {e.where}", e.cost, e.size, e.own)
                    for e in _bounds(items, profile, {})]
        return out
    spec = obj.get("spec") or {}
    variables = {v["name"]: v["expression"] for v in spec.get("variables") or []}
    items = [x for part in ("matchConditions", "validations", "mutations") for x in _items(spec, part)]
    found = _bounds(items, profile, variables)
    _, costs, _ = _variable_values(variables, profile)
    found += [Estimate(f"variables[{n}]", c, len(variables[n]), c) for n, c in costs.items()]
    return [Estimate(f"{name}: {e.where}", e.cost, e.size, e.own) for e in found]


def problems(objects: Iterable[Mapping[str, Any]], profile: Profile = DOCUMENTED) -> list[str]:
    """What in ``objects`` (in-tree policies, webhook configurations) would pass an apiserver limit."""
    out = []
    for obj in objects:
        kind = obj.get("kind")
        if kind not in ("ValidatingAdmissionPolicy", "MutatingAdmissionPolicy", "ValidatingWebhookConfiguration",
                        "MutatingWebhookConfiguration"):
            continue
        name = obj["metadata"]["name"]
        try:
            found = estimates(obj, profile)
        except CelSyntaxError as exc:
            out.append(f"{name}: cel-go's parser would refuse it: {exc}")
            continue
        for e in found:
            if e.own > PER_CALL_LIMIT:
                out.append(
                    f"{e.where}: costs up to {e.own:,} > the per-expression limit {PER_CALL_LIMIT:,} "
                    f"(by {e.own - PER_CALL_LIMIT:,})"
                )
        if kind.endswith("WebhookConfiguration"):
            hooks: dict[str, int] = {}
            for e in found:
                hook = e.where.split(":", 1)[0]
                hooks[hook] = hooks.get(hook, 0) + e.own
            for hook, total in hooks.items():
                if total > MATCH_CONDITIONS_BUDGET:
                    out.append(f"{hook}: matchConditions together cost up to {total:,} > {MATCH_CONDITIONS_BUDGET:,} "
                               f"(by {total - MATCH_CONDITIONS_BUDGET:,})")
            continue
        conditions = sum(e.own for e in found if ": matchConditions[" in e.where)
        body = sum(e.own for e in found if ": matchConditions[" not in e.where)
        if conditions > MATCH_CONDITIONS_BUDGET:
            out.append(f"{name}: matchConditions together cost up to {conditions:,} > {MATCH_CONDITIONS_BUDGET:,} "
                       f"(by {conditions - MATCH_CONDITIONS_BUDGET:,})")
        if body > BINDING_BUDGET:
            out.append(f"{name}: one binding evaluation (variables once, validations) costs up to {body:,} > "
                       f"{BINDING_BUDGET:,} (by {body - BINDING_BUDGET:,})")
        size = len(json.dumps(obj))
        if size > MAX_OBJECT_BYTES:
            out.append(f"{name}: {size:,} bytes > {MAX_OBJECT_BYTES:,} (etcd stores objects up to 1.5 MiB)")
    return out


def check(objects: list[dict[str, Any]], profile: Profile = DOCUMENTED, *, in_tree: bool = True) -> None:
    """Raise :class:`TooLarge` naming every expression, policy or webhook past a limit."""
    found = problems(objects, profile)
    if found:
        what, remedy = (
            ("in-tree enforcement", "Fewer pools, classes or entitlements, or run without --in-tree (the webhook "
             "enforces everything).") if in_tree else
            ("the webhooks' matchConditions", "Fewer pools, GPU resource prefixes or extended resource names.")
        )
        raise TooLarge(
            f"too large for {what} (the apiserver would reject these objects, or run out of CEL budget on an "
            "object within the documented size bounds and deny it unjudged): " + "; ".join(found) + ". " + remedy
        )
