"""The type gate's fast checker and its reporting walk must agree on every object.

The fast checker is generated code (``shape._compile``); the walk is what tells the user where an
object is malformed. If they ever disagreed, a malformed object could reach the mutation steps (fast
says yes, walk would have said no) or a good one be reported with no message (the reverse).
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webhook.engine import shape as shape_mod
from webhook.engine.shape import BOOL, INT, LIST, MAP, STR, STR_MAP, checker, shape_errors
from webhook.policy.kinds import CompiledKind, builtin_table

KINDS = {kind.name: kind for kind in builtin_table().values()}
SHAPES = {name: checker(kind)[0] for name, kind in KINDS.items()}

WRONG = st.one_of(
    st.integers(), st.booleans(), st.text(max_size=3), st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2), st.floats(allow_nan=False),
)


def _value(shape: Any) -> st.SearchStrategy[Any]:
    """Mostly well-typed values for ``shape``, with a wrong type, a null or an absence now and then."""
    if isinstance(shape, str):
        right = {
            STR: st.text(max_size=3),
            INT: st.integers(-3, 10),
            BOOL: st.booleans(),
            MAP: st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
            STR_MAP: st.dictionaries(st.text(max_size=2), st.one_of(st.text(max_size=2), st.integers()), max_size=2),
            LIST: st.lists(st.integers(), max_size=2),
        }[shape]
    elif isinstance(shape, list):
        right = st.lists(st.one_of(st.none(), _value(shape[0])), max_size=2)
    else:
        right = st.fixed_dictionaries({}, optional={key: _value(sub) for key, sub in shape.items()})
    return st.one_of(right, right, right, right, st.none(), WRONG)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(SHAPES, key=str)).flatmap(lambda k: st.tuples(st.just(k), _value(SHAPES[k]))))
def test_fast_check_and_reporting_walk_agree(case: tuple[str, Any]) -> None:
    name, obj = case
    if not isinstance(obj, dict):
        return  # classify() never hands the gate anything but a map
    kind: CompiledKind = KINDS[name]
    fast = checker(kind)[1](obj)
    errors: list[tuple[str, str]] = []
    shape_mod._walk(obj, SHAPES[name], (), errors)
    assert fast == (not errors), (name, obj, errors)
    assert shape_errors(obj, kind) == errors


def test_a_wrong_type_deep_in_a_volcano_task_is_reported_with_its_path() -> None:
    obj = {"spec": {"tasks": [{"template": {"spec": {"containers": [{"env": [{"name": 3}]}]}}}]}}
    assert not checker(KINDS['VolcanoJob'])[1](obj)
    assert shape_errors(obj, KINDS['VolcanoJob']) == [
        ("spec.tasks[0].template.spec.containers[0].env[0].name",
         "spec.tasks[0].template.spec.containers[0].env[0].name must be a string, got an integer")
    ]


def test_nulls_count_as_absent_at_every_level() -> None:
    obj = {"metadata": None, "spec": {"containers": [None, {"resources": None, "env": [None]}], "nodeSelector": None}}
    assert checker(KINDS['Pod'])[1](obj)
    assert shape_errors(obj, KINDS['Pod']) == []


SAMPLES: tuple[Any, ...] = ("s", 3, True, 1.5, [], ["s"], [3], {}, {"k": "v"}, {"k": 3}, None)


def _leaves(shape: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    """Every field the gate knows, as (path with 0 for list items, its shape)."""
    out = [(path, shape)]
    if isinstance(shape, list):
        out += _leaves(shape[0], (*path, 0))
    elif isinstance(shape, dict):
        for key, sub in shape.items():
            out += _leaves(sub, (*path, key))
    return out


def _build(path: tuple[Any, ...], value: Any) -> Any:
    for part in reversed(path):
        value = [value] if part == 0 else {part: value}
    return value


def test_every_field_with_every_type_gets_the_same_answer_from_both() -> None:
    checked = 0
    for kind, shape in SHAPES.items():
        for path, _ in _leaves(shape):
            if not path:
                continue
            for sample in SAMPLES:
                obj = _build(path, sample)
                errors: list[tuple[str, str]] = []
                shape_mod._walk(obj, shape, (), errors)
                assert checker(KINDS[kind])[1](obj) == (not errors), (kind, path, sample, errors)
                checked += 1
    assert checked > 1000
