"""PatchBuilder against the specification it implements: for any sequence of operations on any JSON
document, the recorded RFC 6902 operations applied with jsonpatch give exactly ``doc``, the source is
never changed, and reads see what was written."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webhook.engine.patch import PatchBuilder

KEYS = st.sampled_from(["a", "b", "spec", "x/y", "m~n", "labels"])
SCALARS = st.one_of(st.none(), st.integers(-3, 3), st.text(max_size=3), st.booleans())
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(KEYS, inner, max_size=3)), max_leaves=6)
DOCS = st.dictionaries(KEYS, VALUES, max_size=4)


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Every existing path, plus one missing key under each map (where writes create things)."""
    out = [prefix] if prefix else []
    if isinstance(doc, dict):
        out.append((*prefix, "new"))
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def scripts(draw):
    doc = draw(DOCS)
    steps = []
    for _ in range(draw(st.integers(1, 8))):
        paths = _paths(doc) or [("a",)]
        path = draw(st.sampled_from(paths))
        if draw(st.booleans()):
            path = (*path, draw(KEYS))  # sometimes below a missing or scalar node
        steps.append((draw(st.sampled_from(["set", "overwrite", "append", "extend", "remove"])), path,
                      draw(VALUES), draw(st.lists(SCALARS, max_size=3))))
    return doc, steps


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scripts())
def test_ops_replayed_with_jsonpatch_equal_doc_and_the_source_never_changes(script):
    doc, steps = script
    source = copy.deepcopy(doc)
    builder = PatchBuilder(doc)
    given_values = []  # what the caller handed over, and a copy to compare with at the end
    for kind, path, value, values in steps:
        given_values.append((value, copy.deepcopy(value), values, copy.deepcopy(values)))
        try:
            if kind == "set":
                builder.set(path, value)
            elif kind == "overwrite":
                builder.set(path, value, overwrite=True)
                assert builder.get(path) == value
            elif kind == "append":
                builder.append(path, value)
                assert builder.get(path)[-1] == value
            elif kind == "extend":
                builder.extend(path, values)
            else:
                builder.remove(path)
                assert not builder.exists(path) or isinstance(path[-1], int)
        except ValueError:
            pass  # asked to write through a scalar or into a list index: refused, nothing recorded
        assert doc == source, "the source object was changed"
        replayed = jsonpatch.apply_patch(copy.deepcopy(source), copy.deepcopy(builder.ops))
        assert replayed == builder.doc
    for value, before, values, values_before in given_values:  # later writes copy them, never edit
        assert value == before and values == values_before, "a value the caller passed was changed"
