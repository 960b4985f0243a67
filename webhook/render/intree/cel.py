"""CEL building blocks for the in-tree policies: the policy's data written into expressions.

The in-tree policies carry no ``paramKind``: pools, classes, entitlements and resource names are
rendered into the CEL, so nothing else has to exist in the cluster before they work and nothing a
tenant can edit changes what they enforce. Every helper returns a CEL expression as text.

The apiserver evaluates the stored object, after its own defaulting and admission plugins: every
field read here may be present with a default value (``schedulerName: default-scheduler``, the
not-ready/unreachable tolerations, requests copied from limits), so no helper ever reads "absent" as
"the user did not ask". Every nested read is ``has()``-guarded: an evaluation error would make the
apiserver apply ``failurePolicy: Fail`` and deny.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from webhook.engine.rules.registry import RULES
from webhook.policy.compiled import Policy
from webhook.policy.model import LabelSelector
from webhook.render.webhooks import cel_string, template_branches

NS_LABELS = "variables.nsLabels"
ENTITLEMENT = "variables.entitlement"


def cel_list(values: Iterable[str]) -> str:
    return "[" + ", ".join(cel_string(v) for v in values) + "]"


def indent(text: str, by: str = "  ") -> str:
    return text.replace("\n", "\n" + by)


def selector(sel: LabelSelector, labels: str = NS_LABELS) -> str:
    """A label selector (Kubernetes semantics) over the CEL map ``labels``."""
    parts = [
        f"({cel_string(k)} in {labels} && {labels}[{cel_string(k)}] == {cel_string(v)})"
        for k, v in sel.match_labels.items()
    ]
    for req in sel.match_expressions:
        key = cel_string(req.key)
        if req.operator == "In":
            parts.append(f"({key} in {labels} && {labels}[{key}] in {cel_list(req.values)})")
        elif req.operator == "NotIn":
            parts.append(f"(!({key} in {labels}) || !({labels}[{key}] in {cel_list(req.values)}))")
        elif req.operator == "Exists":
            parts.append(f"({key} in {labels})")
        else:
            parts.append(f"!({key} in {labels})")
    return " && ".join(parts) or "true"


def first_match(cases: list[tuple[str, str]], default: str) -> str:
    """``c1 ? v1 : c2 ? v2 : default``, a case whose condition is ``true`` ending the chain."""
    out = []
    for cond, value in cases:
        if cond == "true":
            return "".join(out) + value
        out.append(f"{cond} ? {value} :\n")
    return "".join(out) + default


def entitlement_index(policy: Policy) -> str:
    """Index of the first entitlement whose selector matches the namespace's labels, -1 for none."""
    return first_match([(selector(e.selector), str(i)) for i, e in enumerate(policy.namespaces)], "-1")


def per_entitlement(policy: Policy, value: Mapping[int, str], default: str) -> str:
    """A CEL value chosen by the namespace's entitlement index (``value[i]`` for entitlement ``i``)."""
    groups: dict[str, list[int]] = {}
    for i in range(len(policy.namespaces)):
        groups.setdefault(value[i], []).append(i)
    if len(groups) == 1 and len(policy.namespaces) > 0 and default == next(iter(groups)):
        return default
    cases = [(f"{ENTITLEMENT} in [{', '.join(map(str, idx))}]", v) for v, idx in groups.items()]
    return first_match(cases, default)


# --- where a rule's action comes from -----------------------------------------------------------------


def namespace_action(policy: Policy, rule_id: str) -> str | None:
    """The action the namespace's labels give ``rule_id`` ('' when they give none: the class decides),
    or None when the policy sets nothing per namespace for it."""
    settings = policy.rules.get(rule_id)
    excepted = excepted_namespaces(policy, rule_id)
    if (settings is None or not (settings.exempt or settings.namespaces)) and not excepted:
        return None
    cases = [(selector(s), "'off'") for s in excepted]
    if settings is not None:
        cases += [(selector(s), "'off'") for s in settings.exempt]
        cases += [(selector(o.selector), cel_string(o.action.value)) for o in settings.namespaces]
    return first_match(cases, "''")


def excepted_namespaces(policy: Policy, rule_id: str) -> list[LabelSelector]:
    """The namespaces of every exception naming ``rule_id``, expired or not (the render has no clock).

    CEL can verify neither the requester an exception names for pods (they come from controllers) nor a
    grant's signature, so the in-tree policies do not judge exceptions; and since they run while the
    webhook is up too, enforcing the rule there would deny what the webhook excepts. So the rule is off
    in-tree in those namespaces, for everyone (less than the webhook holds, never more); remove an
    expired exception and re-render (lint warns)."""
    return [e.namespaces for e in policy.spec.exceptions if rule_id in e.rules]


def rule_actions(policy: Policy, rule_id: str) -> set[str]:
    """Every action ``rule_id`` can have under this policy (what decides which bindings to render)."""
    settings = policy.rules.get(rule_id)
    default = RULES[rule_id].default.value
    if settings is None:
        return {default, "off"} if excepted_namespaces(policy, rule_id) else {default}
    out = {settings.action.value if settings.action else default}
    out.update(a.value for a in settings.classes.values())
    out.update(o.action.value for o in settings.namespaces)
    if settings.exempt or excepted_namespaces(policy, rule_id):
        out.add("off")
    return out


def action_is(policy: Policy, rule_id: str, action: str, class_expr: str | None) -> str:
    """CEL: ``rule_id``'s action for this namespace (and, when ``class_expr`` is given, the template's
    class) is ``action``; the order is the engine's: exemption, namespace override, class, policy."""
    settings = policy.rules.get(rule_id)
    base = RULES[rule_id].default.value
    if settings is not None and settings.action is not None:
        base = settings.action.value
    classes = dict(settings.classes) if settings is not None else {}
    if classes and class_expr is not None:
        table = "{" + ", ".join(f"{cel_string(c)}: {cel_string(a.value)}" for c, a in classes.items()) + "}"
        by_class = f"({class_expr} in {table} ? {table}[{class_expr}] : {cel_string(base)})"
    elif classes:  # no class known here: only where every class agrees with the policy's action
        by_class = cel_string(base) if all(a.value == base for a in classes.values()) else "'unknown'"
    else:
        by_class = cel_string(base)
    ns = namespace_action(policy, rule_id)
    if ns is None:
        value = by_class
    else:
        value = f"(variables.{ns_variable(rule_id)} != '' ? variables.{ns_variable(rule_id)} : {by_class})"
    if value == cel_string(action):
        return "true"
    if value.startswith("'"):
        return "false"
    return f"{value} == {cel_string(action)}"


def ns_variable(rule_id: str) -> str:
    return "ns_" + rule_id.replace("-", "_")


# --- pod templates --------------------------------------------------------------------------------------


def templates_of(policy: Policy, root: str) -> str:
    """The pod templates of ``root`` (``object`` or ``oldObject``), as the webhook's matchConditions find
    them: chosen by the request's resource, never by the object's shape (a Pod is its own template)."""
    chain = ""
    for branch in template_branches(policy):
        found = re.sub(r"\bobject\b", root, branch.templates)
        chain += f"{indent(branch.when())} ?\n    {found} :\n  "
    return f"{root} == null || !has({root}.spec) ? [] :\n  {chain}[]"


def label_of(policy: Policy, t: str, key: str) -> str:
    """The value of label ``key`` on template ``t``, '' when absent."""
    return (
        f"(has({t}.metadata) && has({t}.metadata.labels) && {cel_string(key)} in {t}.metadata.labels ?\n"
        f"  {t}.metadata.labels[{cel_string(key)}] : '')"
    )


def label_present(policy: Policy, t: str) -> str:
    key = cel_string(policy.keys.workload)
    return f"has({t}.metadata) && has({t}.metadata.labels) && {key} in {t}.metadata.labels"


def class_of(policy: Policy, t: str) -> str:
    """The template's own workload label ('' when absent; the workload's own metadata is not read, so a
    class set only there is judged by the webhook alone)."""
    return label_of(policy, t, policy.keys.workload)


def containers(t: str, *groups: str) -> str:
    return " +\n".join(f"(has({t}.spec.{g}) ? {t}.spec.{g} : [])" for g in groups)


ALL_CONTAINERS = ("containers", "initContainers", "ephemeralContainers")


LONG_KEY = 64
"""A resource name longer than this is not read in-tree: every test of a name costs the name's length (a
qualified name may have 317 characters, and a template's containers may name hundreds), while the device
names tested are short. Such a name answers whichever way makes the policy deny less, and the webhook
judges it."""


def key_is(test: str, long: bool) -> str:
    """``test`` on resource name ``k``, or ``long`` for a name longer than :data:`LONG_KEY` (unread: ``long``
    is the answer that makes the enclosing check deny less)."""
    return f"(size(k) > {LONG_KEY} || {test})" if long else f"(size(k) <= {LONG_KEY} && ({test}))"


def gpu_held(policy: Policy, t: str) -> str:
    """Template ``t`` asks for a positive, plainly written amount of a GPU resource in a container or init
    container: a GPU pod to the engine, whatever else it holds."""
    prefixes = " || ".join(f"k.startsWith({cel_string(p)})" for p in policy.gpu_prefixes) or "false"
    return (
        f"(has({t}.spec) && ({containers(t, 'containers', 'initContainers')}).exists(c,\n"
        "  has(c.resources) && has(c.resources.limits) && c.resources.limits.exists(k,\n"
        f"    {key_is(prefixes, long=False)} &&\n"
        "    string(c.resources.limits[k]).matches('^[0-9]{1,9}$') && string(c.resources.limits[k]).matches('[1-9]'))))"
    )


def any_gpu_key(policy: Policy, t: str) -> str:
    """Template ``t`` names a GPU resource anywhere (limits or requests, any amount): a superset of what
    the engine counts as holding GPUs."""
    prefixes = " || ".join(f"k.startsWith({cel_string(p)})" for p in policy.gpu_prefixes) or "false"
    return (
        f"(has({t}.spec) && ({containers(t, 'containers', 'initContainers')}).exists(c,\n"
        "  has(c.resources) && (\n"
        f"  (has(c.resources.limits) && c.resources.limits.exists(k, {key_is(prefixes, long=True)})) ||\n"
        f"  (has(c.resources.requests) && c.resources.requests.exists(k, {key_is(prefixes, long=True)})))))"
    )


RESOLUTION_RULES = (
    "intent-invalid",
    "class-not-allowed",
    "rdma-unavailable",
    "gpu-memory-exceeded",
    "gpu-count-exceeded",
    "mig-profile-unavailable",
    "pool-spoofing",
)
"""Rules a failed resolution (class -> pool) reports under (``webhook.engine.model.resolution``; a test keeps
this list complete). A check that needs the resolution to have succeeded holds only where every one
of them denies: a resolution that failed then denies too."""


def resolution_denies(policy: Policy, class_expr: str) -> str:
    tests = [action_is(policy, r, "deny", class_expr) for r in RESOLUTION_RULES]
    if "false" in tests:
        return "false"
    tests = [x for x in tests if x != "true"]
    return " && ".join(f"({x})" for x in tests) or "true"


def entitled_classes(policy: Policy) -> str:
    """CEL list: the classes the namespace's entitlement grants."""
    return per_entitlement(policy, {i: cel_list(e.classes) for i, e in enumerate(policy.namespaces)}, "[]")


def entitled_pools(policy: Policy) -> str:
    """CEL list: every pool of every class the namespace's entitlement grants (what a template whose
    class did not resolve, or a raw request, may reach)."""
    return per_entitlement(
        policy,
        {i: cel_list(policy.entitled_pools(e, None)) for i, e in enumerate(policy.namespaces)},
        "[]",
    )
