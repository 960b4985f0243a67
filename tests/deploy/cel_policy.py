"""An emulation of how the API server evaluates a ValidatingAdmissionPolicy, with cel-python for cel-go.

What is emulated (k8s.io/apiserver admission/plugin/policy/validating, KEP-3488; the documented
contract of admissionregistration.k8s.io/v1):

* ``matchConstraints.resourceRules``: group, version, resource (with subresource, ``namespaces/status``)
  and operation of the request;
* the CEL environment: ``object`` (null on DELETE), ``oldObject`` (null on CREATE), ``request``
  (``operation``, ``userInfo.username``/``groups``, ``resource``, ``subResource``, ``name``) and
  ``variables.<name>``, each variable evaluated once, in order, from the ones before it;
* ``validations``: an expression that is false fails the request with ``messageExpression``'s value
  (``message`` if that errors); an expression that errors is a failure the ``failurePolicy`` decides
  (``Fail``: the request is denied);
* the binding's ``validationActions``: ``Deny`` turns a failure into a denial.

What is not: cel-go's static type check and cost budget (no API server here); ``unguarded_has`` of
``cel_match`` covers the one leniency of cel-python that matters (``has()`` of an absent parent). Objects
are pruned of nulls as the API server's typed decoding would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import celpy

from tests.cel_evaluator import environment
from tests.deploy.cel_match import prune_nulls

ALLOW, DENY = "allow", "deny"


@dataclass
class Verdict:
    decision: str
    message: str = ""
    errors: tuple[str, ...] = ()


class AdmissionPolicy:
    """A rendered ValidatingAdmissionPolicy and its binding, able to say what the API server would do."""

    _env = environment()

    def __init__(self, policy: dict[str, Any], binding: dict[str, Any]) -> None:
        assert binding["spec"]["policyName"] == policy["metadata"]["name"]
        self.policy = policy
        self.actions = binding["spec"]["validationActions"]
        spec = policy["spec"]
        self.failure_policy = spec.get("failurePolicy", "Fail")
        self.rules = spec["matchConstraints"]["resourceRules"]
        self.variables = [(v["name"], self._compile(v["expression"])) for v in spec.get("variables", [])]
        self.validations = [
            (
                self._compile(v["expression"]),
                self._compile(v["messageExpression"]) if "messageExpression" in v else None,
                v.get("message", "failed expression: " + v["expression"]),
            )
            for v in spec["validations"]
        ]

    def _compile(self, expression: str) -> Any:
        return self._env.program(self._env.compile(expression))

    def matches(self, group: str, version: str, resource: str, operation: str) -> bool:
        return any(
            group in r["apiGroups"]
            and version in r["apiVersions"]
            and resource in r["resources"]
            and operation in r["operations"]
            for r in self.rules
        )

    def review(
        self,
        obj: dict[str, Any] | None,
        *,
        operation: str = "CREATE",
        old: dict[str, Any] | None = None,
        user: str = "alice",
        groups: tuple[str, ...] = ("system:authenticated",),
        resource: tuple[str, str, str] = ("", "v1", "namespaces"),
    ) -> Verdict:
        group, version, res = resource
        if not self.matches(group, version, res, operation):
            return Verdict(ALLOW)
        meta = ((obj or old) or {}).get("metadata") or {}
        user_info: dict[str, Any] = {"username": user}
        if groups:  # omitempty: a user with no groups has no groups field
            user_info["groups"] = list(groups)
        main, _, sub = res.partition("/")
        request = {
            "operation": operation,
            "name": meta.get("name", ""),
            "resource": {"group": group, "version": version, "resource": main},
            "subResource": sub,
            "userInfo": user_info,
        }
        activation: dict[str, Any] = {
            "object": celpy.json_to_cel(prune_nulls(obj) if obj is not None else None),
            "oldObject": celpy.json_to_cel(prune_nulls(old) if old is not None else None),
            "request": celpy.json_to_cel(request),
        }
        variables: dict[str, Any] = {}
        errors: list[str] = []
        for name, program in self.variables:
            activation["variables"] = celpy.celtypes.MapType(
                {celpy.celtypes.StringType(k): v for k, v in variables.items()}
            )
            value = _run(program, activation)
            if isinstance(value, Exception):  # an unused variable's error is harmless (lazy in cel-go)
                errors.append(f"variable {name}: {value}")
            variables[name] = value
        activation["variables"] = celpy.celtypes.MapType(
            {celpy.celtypes.StringType(k): v for k, v in variables.items()}
        )
        for expression, message_expression, message in self.validations:
            value = _run(expression, activation)
            if isinstance(value, Exception) or not isinstance(value, celpy.celtypes.BoolType):
                errors.append(f"validation: {value!r}")
                if self.failure_policy == "Fail" and "Deny" in self.actions:
                    return Verdict(DENY, "expression error", tuple(errors))
                continue
            if bool(value):
                continue
            text = message
            if message_expression is not None:
                rendered = _run(message_expression, activation)
                if isinstance(rendered, str):
                    text = str(rendered)
                else:
                    errors.append(f"messageExpression: {rendered!r}")
            if "Deny" in self.actions:
                return Verdict(DENY, text, tuple(errors))
        return Verdict(ALLOW, "", tuple(errors))


def _run(program: Any, activation: dict[str, Any]) -> Any:
    try:
        value = program.evaluate(activation)
    except celpy.CELEvalError as exc:
        return exc
    return value
