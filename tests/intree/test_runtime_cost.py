"""cel-go's runtime cost, charged as the apiserver charges it, for every rendered expression (webhooks included).

``webhook.render.intree.runtimecost`` walks the parsed expression and charges what cel-go's
``interpreter/runtimecost.go`` charges, as a worst case over objects within a size profile. The rules
are checked one by one against hand-computed figures (list and map literals, the appends of
``map``/``filter``, ``matches`` on long strings: what the token heuristic the render used to gate on
under-counted); then every rendered expression is set against the limit that applies to it. The real
apiserver confirms the charges in the end-to-end tier (``tests/e2e/test_cel_cost_model.py``).
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

import pytest

from tests.intree.conftest import in_tree, policy_named
from webhook.render.core import RenderOptions, render
from webhook.render.intree.celparse import MAX_CODE_POINTS, MAX_RECURSION_DEPTH, CelSyntaxError, parse
from webhook.render.intree.runtimecost import (
    DOCUMENTED,
    MATCH_CONDITIONS_BUDGET,
    PER_CALL_LIMIT,
    TooLarge,
    bound,
    check,
    estimates,
    problems,
)

SMALL = dataclasses.replace(
    DOCUMENTED, lists=MappingProxyType({"items": 10}), maps=MappingProxyType({"m": 4}),
    strings=MappingProxyType({"s": 1000}), string=100,
)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("[1, 2, 3]", 10),  # list literal: 10, constants free
        ("{'a': 1}", 30),  # map literal: 30
        ("JSONPatch{op: 'add', path: '/x'}", 40),  # struct
        ("object.s", 2),  # one identifier, one selection
        ("has(object.s)", 1),  # has() itself free, its operand's reads charged
        ("object.s == 'abc'", 2 + 1),  # ⌈0.1·min(1000, 3)⌉
        ("object.s.startsWith('a')", 2 + 100),  # ⌈0.1·1000⌉
        ("object.s.matches('abcd')", 2 + 101 * 1),  # ⌈0.1·(1+1000)⌉·⌈0.25·4⌉
        ("object.s.matches('abcdefgh')", 2 + 101 * 2),
        ("'x' in object.items", 2 + 10),  # in a list: its size
        ("object.items.exists(x, true)", 2 + 10 * 4 + 1),  # condition 3 + accu || p
        ("object.items.map(x, x)", 2 + 10 + 10 * (12 + 1) + 1),  # [] + per element accu + [f]
        ("object.items.filter(x, true)", 2 + 10 + 10 * 13 + 1),
        ("object.items.exists(x, object.items.exists(y, true))", 2 + 10 * (4 + 2 + 10 * 4 + 1) + 1),
        ("true ? object.items.exists(x, true) : 1", 43),  # the dearer branch
        ("object.s + object.s", 4 + 200),  # ⌈0.1·(1000 + 1000)⌉
    ],
)
def test_each_charge_is_cel_gos(expression, expected):
    assert bound(expression, SMALL) == expected


def test_a_size_guard_bounds_the_string_a_costly_function_reads():
    """``size(a) <= 64 && a.matches(...)``: the in-tree capability test; a longer string is the webhook's."""
    guarded = bound("object.items.exists(a, size(a) <= 64 && a.matches('abcd'))", SMALL)
    assert guarded == 2 + 10 * (4 + 1 + 1 + 1 + 1 + 7) + 1  # size() 1, <= 1, a twice, matches ⌈6.5⌉·1
    assert bound("object.items.exists(a, a.matches('abcd'))", SMALL) > guarded


def test_a_size_guard_on_the_left_of_or_bounds_the_right_side():
    """``size(x) > n || ...``: the webhooks' walks forward what is longer than they read."""
    # per element: the step 4, the guard 3 (a, size, >), a.matches on at most 8 characters 2
    assert bound("object.items.exists(a, size(a) > 8 || a.matches('abcd'))", SMALL) == 2 + 10 * (4 + 3 + 2) + 1
    assert bound("object.items.exists(a, a.matches('abcd'))", SMALL) == 2 + 10 * (4 + 1 + 11) + 1  # 100 chars
    # every later disjunct of a chain reads at most 8 characters too (contains 2, matches 2)
    chained = bound("object.items.exists(p, size(p) > 8 || p.contains('..') || p.matches('abcd'))", SMALL)
    assert chained == 2 + 10 * (4 + 3 + 2 + 2) + 1
    # a field (not only a comprehension variable) is bounded too: 3 elements read, not 10
    assert bound("size(object.items) > 3 || object.items.exists(x, true)", SMALL) == 4 + 2 + 3 * 4 + 1


def test_a_variable_is_charged_once_to_the_binding_and_its_read_to_the_expression():
    variables = {"names": "object.items.map(x, x)"}
    assert bound("variables.names.exists(n, true)", SMALL, variables) == 2 + 10 * 4 + 1


def test_the_parser_limits_are_cel_gos():
    parse("(" * (MAX_RECURSION_DEPTH - 1) + "1" + ")" * (MAX_RECURSION_DEPTH - 1))
    with pytest.raises(CelSyntaxError, match="recursion limit"):
        parse("(" * MAX_RECURSION_DEPTH + "1" + ")" * MAX_RECURSION_DEPTH)
    with pytest.raises(CelSyntaxError, match="code points"):
        parse("'" + "x" * MAX_CODE_POINTS + "'")
    chain = " ? 1 :\n".join(f"x == {i}" for i in range(300)) + " ? 1 : 0"
    with pytest.raises(CelSyntaxError, match="recursion limit"):
        parse(chain)


def _webhooks() -> list[dict]:
    return [o for o in render(policy_named("default"), RenderOptions()) if o["kind"].endswith("WebhookConfiguration")]


def _vap(expression: str) -> dict:
    return {"kind": "ValidatingAdmissionPolicy", "metadata": {"name": "p"},
            "spec": {"validations": [{"expression": expression, "message": "m"}]}}


def test_the_render_refuses_what_cel_gos_parser_would_refuse():
    with pytest.raises(TooLarge, match=r"parser would refuse it: .*recursion limit"):
        check([_vap("(" * 300 + "true" + ")" * 300)])
    with pytest.raises(TooLarge, match="code points"):
        check([_vap("'" + "x" * MAX_CODE_POINTS + "' == ''")])


def test_a_limit_passed_is_reported_with_what_and_by_how_much():
    found = problems([_vap("object.spec.containers.exists(c, c.env.exists(e, e.value.matches('" + "a" * 400 + "')))")])
    # 16 containers x (64 env x (⌈0.1·4097⌉·⌈0.25·400⌉ + 2 reads + 4 per step) + 2 + 1 + 4) + 3 + 1
    assert found[0] == "p: validations[m]: costs up to 41,990,260 > the per-expression limit 1,000,000 (by 40,990,260)"
    assert "binding evaluation" in found[1]


@pytest.mark.parametrize("name", ["default", "providers", "dra-example"])
def test_every_rendered_expression_parses_and_has_a_bound(name):
    for obj in in_tree(name, (1, 36)):
        if obj["kind"].endswith("Policy"):
            assert all(e.own > 0 for e in estimates(obj)), obj["metadata"]["name"]


def test_the_webhooks_match_conditions_fit_the_apiservers_limits():
    """Each webhook's conditions within the per-expression limit and together within their budget, at the
    documented bounds (joint ones included)."""
    objects = _webhooks()
    assert objects
    assert problems(objects) == []
    assert max(e.own for o in objects for e in estimates(o)) <= PER_CALL_LIMIT


def test_the_in_tree_policies_fit_the_apiservers_limits_at_the_documented_sizes():
    assert problems(in_tree("default", (1, 36))) == []


def test_each_webhook_is_priced_on_its_own():
    objects = _webhooks()
    hooks = {e.where.split(":")[0] for o in objects for e in estimates(o)}
    assert hooks == {
        "gpu-admission-mutating/mutate.gpu-admission.io",
        "gpu-admission-validating/validate.gpu-admission.io",
    }
    # without the joint bounds (every template at its largest at once) the guards still bound every walk
    unbounded = dataclasses.replace(DOCUMENTED, totals=MappingProxyType({}))
    assert max(e.own for o in objects for e in estimates(o, unbounded)) <= PER_CALL_LIMIT
    assert all(sum(e.own for e in estimates(o, unbounded)) <= MATCH_CONDITIONS_BUDGET * 2 for o in objects)
