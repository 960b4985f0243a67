"""An emulation of how kube-apiserver evaluates ValidatingAdmissionPolicies, with cel-python for cel-go.

Checked against the real kube-apiserver 1.36 (cel-go) in the end-to-end tier: every webhook-down case of
``tests/intree/test_webhook_down.py`` is created for real and must be denied with the same rule
(``tests/e2e/test_webhook_down.py``), and a sample of the differential corpus goes through the real
apiserver with the in-tree policies installed (``tests/e2e/test_intree_differential.py``). The emulation
stays because it judges thousands of objects in seconds; the real one settles what it cannot model
(its CEL cost, the absent ``request.subResource`` the real apiserver sends, which the emulation now
omits too).

No apiserver runs here: this module follows the documented contract of
``admissionregistration.k8s.io/v1`` ValidatingAdmissionPolicy (kubernetes.io "Validating Admission
Policy"; k8s.io/apiserver ``admission/plugin/policy/validating``), written independently of the
renderer under test. For each policy and each binding that names it, in this order:

1. **match constraints** (``resourceRules``: group, version, resource/subresource, operation;
   ``excludeResourceRules``; ``namespaceSelector`` against the namespace's labels; ``objectSelector``
   against the object's, or the old object's, labels) and then the **binding's** ``matchResources``
   (the same tests, narrowing further);
2. **matchConditions**, each evaluated with ``object``, ``oldObject`` (null on CREATE), ``request``,
   ``namespaceObject`` and ``params`` (null): any false -> the policy does not apply; otherwise an
   error -> ``failurePolicy`` (``Fail``: the error is a failure the binding's actions apply to);
3. **variables**, lazily: each is computed the first time an expression reads it, once, from the
   variables before it (an unused variable's error never matters);
4. **validations**, in order: false -> a failure with ``messageExpression``'s value (``message`` when
   it errors or is empty, else "failed expression: ..."); an error -> ``failurePolicy``;
5. the binding's **validationActions**: ``Deny`` denies, ``Warn`` adds a warning, ``Audit`` an audit
   annotation.

The CEL environment: the standard library plus the Kubernetes libraries these policies use, with
their documented semantics: ``matches`` is RE2 (partial match; ``\\s`` is ASCII whitespace only,
narrower than Python's), ``sum()`` of the Kubernetes lists library. ``has(a.b.c)`` with ``a.b``
absent is an error in cel-go but false in cel-python; ``unguarded_has`` (``tests/deploy/cel_match``)
rejects such expressions statically. Objects are pruned of nulls as the apiserver's typed decoding
does. Not emulated: cel-go's static type check and cost estimator (``tests/intree/test_cost.py``
bounds the expressions instead).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import celpy
from celpy import celtypes

from tests.cel_casts import free_casts
from tests.cel_evaluator import environment
from tests.deploy.cel_match import prune_nulls

free_casts()  # cel-python's per-step typing work, skipped (tests/cel_casts.py): same results, faster

DENY, ALLOW = "deny", "allow"


def _re2(pattern: str) -> re.Pattern[str]:
    return _compile_re2(pattern)


@lru_cache(maxsize=512)
def _compile_re2(pattern: str) -> re.Pattern[str]:
    """RE2's ``\\s`` is ``[\\t\\n\\f\\r ]``; Python's would also match Unicode spaces."""
    out, i, in_class = [], 0, False
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            pair = pattern[i : i + 2]
            out.append(("\\t\\n\\f\\r " if in_class else "[\\t\\n\\f\\r ]") if pair == "\\s" else pair)
            i += 2
            continue
        if ch == "[" and not in_class:
            in_class = True
        elif ch == "]" and in_class:
            in_class = False
        out.append(ch)
        i += 1
    return re.compile("".join(out))


def _matches(value: Any, pattern: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_re2(str(pattern)).search(str(value)) is not None)


def _sum(values: Any) -> Any:
    total = 0
    for v in values:
        total += int(v)
    return celtypes.IntType(total)


FUNCTIONS: dict[str, Callable[..., Any]] = {"matches": _matches, "sum": _sum}


# JSONPatch{...}: the MutatingAdmissionPolicy library's object type, read as a message (a map of its fields)
_ENV = environment(annotations={"JSONPatch": celtypes.MessageType})


@lru_cache(maxsize=4096)
def program(expression: str) -> Any:
    """Compiled once per expression text: cel-python is slow, and policies share most expressions."""
    return _ENV.program(_ENV.compile(expression), functions=FUNCTIONS)


class _Error(Exception):
    pass


def run(expression: str, activation: Mapping[str, Any]) -> Any:
    try:
        value = program(expression).evaluate(activation)
    except celpy.CELEvalError as exc:
        raise _Error(str(exc)) from None
    except (TypeError, ValueError, KeyError, IndexError, ZeroDivisionError) as exc:  # cel-python's own faults
        raise _Error(repr(exc)) from None
    if isinstance(value, celpy.CELEvalError):
        raise _Error(str(value))
    return value


class LazyVariables(celtypes.MapType):
    """``variables``: each one evaluated on first read, from the ones before it."""

    def __init__(self, definitions: list[tuple[str, str]], activation: dict[str, Any]) -> None:
        super().__init__({})
        self._defs = {celtypes.StringType(n): e for n, e in definitions}
        self._activation = activation

    def __contains__(self, key: object) -> bool:
        return key in self._defs

    def __getitem__(self, key: Any) -> Any:
        key = celtypes.StringType(key)
        if dict.__contains__(self, key):
            value = dict.__getitem__(self, key)
        else:
            try:
                value = run(self._defs[key], self._activation)
            except _Error as exc:
                value = exc
            dict.__setitem__(self, key, value)
        if isinstance(value, _Error):
            raise celpy.CELEvalError(f"variable {key}: {value}")
        return value


@dataclass(frozen=True)
class Request:
    """What the apiserver knows of one admission request."""

    obj: dict[str, Any] | None
    old: dict[str, Any] | None
    operation: str
    resource: tuple[str, str, str]  # group, version, resource
    namespace: str
    namespace_labels: Mapping[str, str]
    sub_resource: str = ""
    user: str = "alice"
    groups: tuple[str, ...] = ("system:authenticated",)


def selector_matches(sel: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector (``{}`` and absent match everything)."""
    if not sel:
        return True
    for k, v in (sel.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for req in sel.get("matchExpressions") or []:
        key, op, values = req["key"], req["operator"], req.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _rule_matches(rule: Mapping[str, Any], req: Request) -> bool:
    group, version, resource = req.resource
    full = f"{resource}/{req.sub_resource}" if req.sub_resource else resource

    def has(values: list[str], v: str) -> bool:
        return "*" in values or v in values

    return (
        has(rule.get("apiGroups", []), group)
        and has(rule.get("apiVersions", []), version)
        and has(rule.get("operations", []), req.operation)
        and (full in rule.get("resources", []) or "*" in rule.get("resources", []))
    )


def _resources_match(match: Mapping[str, Any] | None, req: Request, *, required: bool) -> bool:
    if not match:
        return not required
    rules = match.get("resourceRules")
    if rules is not None and not any(_rule_matches(r, req) for r in rules):
        return False
    if rules is None and required:
        return False
    if any(_rule_matches(r, req) for r in match.get("excludeResourceRules") or []):
        return False
    if not selector_matches(match.get("namespaceSelector"), req.namespace_labels):
        return False
    obj_labels = ((req.obj or req.old or {}).get("metadata") or {}).get("labels") or {}
    return selector_matches(match.get("objectSelector"), obj_labels)


def _namespace_object(req: Request) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": req.namespace, "labels": dict(req.namespace_labels)},
    }


@dataclass
class Verdict:
    decision: str
    messages: list[str] = field(default_factory=list)  # denials
    warnings: list[str] = field(default_factory=list)
    audit: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class InTree:
    """A set of rendered ValidatingAdmissionPolicies and bindings, judged as the apiserver judges them."""

    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.policies = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"}
        self.bindings = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"]
        for p in self.policies.values():  # compile everything up front: a bad expression fails here
            spec = p["spec"]
            for c in spec.get("matchConditions", []):
                program(c["expression"])
            for v in spec.get("variables", []):
                program(v["expression"])
            for v in spec["validations"]:
                program(v["expression"])
                if "messageExpression" in v:
                    program(v["messageExpression"])

    def review(self, req: Request) -> Verdict:
        verdict = Verdict(ALLOW)
        user: dict[str, Any] = {"username": req.user}
        if req.groups:
            user["groups"] = list(req.groups)
        meta = (req.obj or req.old or {}).get("metadata") or {}
        request = {
            "operation": req.operation,
            "name": meta.get("name", ""),
            "namespace": req.namespace,
            "resource": dict(zip(("group", "version", "resource"), req.resource, strict=True)),
            "userInfo": user,
            "dryRun": False,
        }
        if req.sub_resource:  # the AdmissionRequest's omitempty: an empty subResource is absent in CEL
            request["subResource"] = req.sub_resource
        base = {
            "object": celpy.json_to_cel(prune_nulls(req.obj) if req.obj is not None else None),
            "oldObject": celpy.json_to_cel(prune_nulls(req.old) if req.old is not None else None),
            "request": celpy.json_to_cel(request),
            "namespaceObject": celpy.json_to_cel(_namespace_object(req)),
            "params": None,
        }
        for binding in self.bindings:
            policy = self.policies.get(binding["spec"]["policyName"])
            if policy is None:
                continue
            self._one(policy, binding, req, dict(base), verdict)
        if verdict.messages:
            verdict.decision = DENY
        return verdict

    def _one(self, policy: dict, binding: dict, req: Request, activation: dict, verdict: Verdict) -> None:
        spec = policy["spec"]
        if not _resources_match(spec.get("matchConstraints"), req, required=True):
            return
        if not _resources_match(binding["spec"].get("matchResources"), req, required=False):
            return
        actions = binding["spec"]["validationActions"]
        fail = spec.get("failurePolicy", "Fail") == "Fail"
        name = policy["metadata"]["name"]

        def failed(message: str) -> None:
            if "Deny" in actions:
                verdict.messages.append(message)
            if "Warn" in actions:
                verdict.warnings.append(message)
            if "Audit" in actions:
                verdict.audit.append(message)

        errors = []
        for cond in spec.get("matchConditions", []):
            try:
                value = run(cond["expression"], activation)
            except _Error as exc:
                errors.append(f"{name}: matchCondition {cond['name']}: {exc}")
                continue
            if not isinstance(value, celtypes.BoolType):
                errors.append(f"{name}: matchCondition {cond['name']}: not a bool")
            elif not bool(value):
                return
        if errors:
            verdict.errors.extend(errors)
            if fail:
                failed(f"policy {name}: match condition error")
            return
        activation["variables"] = LazyVariables(
            [(v["name"], v["expression"]) for v in spec.get("variables", [])], activation
        )
        for v in spec["validations"]:
            try:
                value = run(v["expression"], activation)
            except _Error as exc:
                verdict.errors.append(f"{name}: {v.get('message', '')[:40]}: {exc}")
                if fail:
                    failed(f"policy {name}: expression error")
                continue
            if not isinstance(value, celtypes.BoolType):
                verdict.errors.append(f"{name}: validation is not a bool")
                if fail:
                    failed(f"policy {name}: expression error")
                continue
            if bool(value):
                continue
            text = v.get("message") or "failed expression: " + v["expression"]
            if "messageExpression" in v:
                try:
                    rendered = run(v["messageExpression"], activation)
                    if isinstance(rendered, str) and rendered:
                        text = str(rendered)
                except _Error as exc:
                    verdict.errors.append(f"{name}: messageExpression: {exc}")
            failed(text)


def _plain(value: Any) -> Any:
    """A CEL value as JSON (a JSONPatch's value)."""
    if isinstance(value, celtypes.BoolType):
        return bool(value)
    if isinstance(value, celtypes.IntType | celtypes.UintType):
        return int(value)
    if isinstance(value, celtypes.DoubleType):
        return float(value)
    if isinstance(value, celtypes.StringType):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


class Mutating:
    """Rendered MutatingAdmissionPolicies and bindings, applied as the apiserver applies them (KEP-3962):
    match constraints and binding, matchConditions (any false skips; an error is the failurePolicy's),
    variables, then each mutation in order, a ``JSONPatch`` expression evaluated against the object as
    the previous mutations left it and applied as RFC 6902 (an operation that fails is an error:
    ``failurePolicy: Fail`` denies the request). Policies run in binding order; reinvocation is the
    caller's (tests apply the policies again to check they are idempotent)."""

    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.policies = {o["metadata"]["name"]: o for o in objects if o["kind"] == "MutatingAdmissionPolicy"}
        self.bindings = [o for o in objects if o["kind"] == "MutatingAdmissionPolicyBinding"]
        for p in self.policies.values():
            for c in p["spec"].get("matchConditions", []):
                program(c["expression"])
            for m in p["spec"]["mutations"]:
                program(m["jsonPatch"]["expression"])

    def admit(self, req: Request) -> tuple[dict[str, Any] | None, list[str]]:
        """(the object after every matching policy, None when one denied; the policies that changed it)."""
        import jsonpatch

        obj = copy.deepcopy(req.obj)
        applied: list[str] = []
        for binding in self.bindings:
            policy = self.policies.get(binding["spec"]["policyName"])
            if policy is None:
                continue
            spec = policy["spec"]
            here = Request(
                obj,
                req.old,
                req.operation,
                req.resource,
                req.namespace,
                req.namespace_labels,
                req.sub_resource,
                req.user,
                req.groups,
            )
            if not _resources_match(spec.get("matchConstraints"), here, required=True):
                continue
            if not _resources_match(binding["spec"].get("matchResources"), here, required=False):
                continue
            activation = {
                "object": celpy.json_to_cel(prune_nulls(obj)),
                "oldObject": celpy.json_to_cel(prune_nulls(req.old) if req.old is not None else None),
                "request": celpy.json_to_cel(
                    {
                        "operation": req.operation,
                        "namespace": req.namespace,
                        "resource": dict(zip(("group", "version", "resource"), req.resource, strict=True)),
                        "subResource": req.sub_resource,
                    }
                ),
                "namespaceObject": celpy.json_to_cel(_namespace_object(here)),
            }
            fail = spec.get("failurePolicy", "Fail") == "Fail"
            try:
                results = [run(c["expression"], activation) for c in spec.get("matchConditions", [])]
            except _Error:
                if fail:
                    return None, applied
                continue
            if not all(bool(r) for r in results):
                continue
            for mutation in spec["mutations"]:
                activation["object"] = celpy.json_to_cel(prune_nulls(obj))
                try:
                    ops = _plain(run(mutation["jsonPatch"]["expression"], activation))
                    changed = jsonpatch.apply_patch(obj, ops)
                except (_Error, jsonpatch.JsonPatchException, jsonpatch.JsonPointerException):
                    if fail:
                        return None, applied
                    continue
                if changed != obj:
                    applied.append(policy["metadata"]["name"])
                obj = changed
        return obj, applied
