"""The test suite's faster CEL evaluator (``tests/cel_evaluator.py``) gives cel-python's own answers.

Every emulation of the apiserver in the suite runs on it, so a difference would silently move what the
differential and match-condition tests compare. Each expression runs on cel-python's evaluator and on
ours; the value, or the fact of an error, must be the same: the webhooks' rendered matchConditions on
objects of every shape the engine knows (and the real-world corpus where ``../shared`` is present), and
a table of the cases the two changes touch (logical operators over errors, macro bodies, precedence
chains, ``has()``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml

from tests.cel_evaluator import environment
from tests.conftest import CORPUS
from tests.deploy.cel_match import prune_nulls, resource_of
from tests.deploy.conftest import one, render

PLAIN = celpy.Environment()
FAST = environment()
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _answer(program: Any, activation: dict[str, Any]) -> Any:
    try:
        value = program.evaluate(activation)
    except celpy.CELEvalError:
        return "error"
    return "error" if isinstance(value, celpy.CELEvalError) else value


def _programs(expression: str) -> tuple[Any, Any]:
    """The expression compiled by cel-python's environment and by ours (a long one parses in seconds)."""
    return tuple(env.program(env.compile(expression)) for env in (FAST, PLAIN))


def _activation(obj: dict[str, Any], old: Any = None) -> dict[str, Any]:
    group, version, resource = resource_of(obj) or ("", "", "")
    request = {  # what the apiserver sends (tests/deploy/cel_match.py)
        "operation": "CREATE" if old is None else "UPDATE",
        "resource": {"group": group, "version": version, "resource": resource},
        "kind": {"group": group, "version": version, "kind": obj.get("kind", "")},
        "namespace": "team",
        "name": "x",
    }
    return {
        "object": celpy.json_to_cel(prune_nulls(obj)),
        "oldObject": celpy.json_to_cel(prune_nulls(old)),
        "request": celpy.json_to_cel(request),
    }


EDGE_CASES = [
    # logical operators: CEL absorbs an error on either side when the other decides
    ("false && object.missing == 1", {"missing": None}),
    ("object.missing == 1 && false", {}),
    ("object.missing == 1 && true", {}),
    ("true || object.missing == 1", {}),
    ("object.missing == 1 || true", {}),
    ("object.missing == 1 || false", {}),
    ("object.a == 1 || object.a == 2 || object.a == 3", {"a": 3}),
    ("object.a == 1 && object.b.c == 2", {"a": 1}),
    ("object.a == 1 && object.b.c == 2", {"a": 2}),
    # macro bodies: now run by our evaluator
    ("object.items.all(i, i.x > 0 || i.y.z == 1)", {"items": [{"x": 1}, {"x": 2}]}),
    ("object.items.all(i, i.x > 0 || i.y.z == 1)", {"items": [{"x": 0}]}),
    ("object.items.exists(i, i.x > 5 && i.y.z == 1)", {"items": [{"x": 1}, {"x": 9, "y": {"z": 1}}]}),
    ("object.items.exists(i, false && i.y.z == 1)", {"items": [{"x": 1}]}),
    ("object.items.map(i, i.x * 2 + 1).filter(v, v > 2)", {"items": [{"x": 0}, {"x": 1}, {"x": 3}]}),
    ("object.items.filter(i, has(i.y) && i.y.z == 1).size()", {"items": [{"y": {"z": 1}}, {"x": 1}]}),
    ("object.items.exists_one(i, i.x == 1)", {"items": [{"x": 1}, {"x": 2}]}),
    # precedence chains around every operator kind
    ("-(object.a) + 2 * 3 - 4 / 2 % 3 < 10 == true", {"a": 1}),
    ("!(object.a in [1, 2]) ? 'no' : 'yes'", {"a": 2}),
    ("(object.a + object.b) * (object.a - 1)", {"a": 4, "b": 5}),
    ("object.m['k'].size() > 0 && 'k' in object.m", {"m": {"k": "v"}}),
    ("object.a / 0 > 1", {"a": 1}),
    ("has(object.spec.x) ? object.spec.x : 'none'", {"spec": {}}),
    ("has(object.spec.x) ? object.spec.x : 'none'", {"spec": {"x": "y"}}),
    ("[1, 2, 3].map(x, x * object.a).exists(y, y == 6)", {"a": 2}),
    ("{'a': object.a}.a + 1", {"a": 1}),
    ("size(object.s) > 2 && object.s.startsWith('ab') && object.s.matches('^ab+c$')", {"s": "abbc"}),
]


@pytest.mark.parametrize(("expression", "obj"), EDGE_CASES, ids=[e for e, _ in EDGE_CASES])
def test_the_edge_cases_answer_as_cel_python_does(expression: str, obj: dict[str, Any]) -> None:
    activation = _activation(obj)
    fast, plain = _programs(expression)
    assert _answer(fast, activation) == _answer(plain, activation)


def _objects() -> list[tuple[str, dict[str, Any]]]:
    paths = sorted(EXAMPLES.rglob("*.yaml"))
    if CORPUS.exists():  # more shapes where ../shared is present; the examples alone otherwise
        paths += sorted(CORPUS.rglob("*.yaml"))
    out = []
    for path in paths:
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if isinstance(doc, dict) and "kind" in doc:
                out.append((f"{path.name}#{i}", doc))
    return out


def test_the_webhooks_match_conditions_answer_as_cel_python_does() -> None:
    docs = render("base")
    conditions = [
        (hook["name"], c["name"], *_programs(c["expression"]))
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
        for hook in one(docs, kind)["webhooks"]
        for c in hook.get("matchConditions", [])
    ]
    objects = _objects()
    assert len(conditions) >= 4 and len(objects) >= 5
    compared = 0
    for i, (where, obj) in enumerate(objects):
        activation = _activation(obj, obj if i % 2 else None)  # CREATE and UPDATE, alternately
        for hook, name, fast_program, plain_program in conditions:
            fast, plain = _answer(fast_program, activation), _answer(plain_program, activation)
            assert fast == plain, f"{hook}/{name} on {where}: ours {fast!r}, cel-python {plain!r}"
            compared += 1
    assert compared == len(objects) * len(conditions)
