"""``load_fast`` (the event builder, webhook/yaml_events.py) against PyYAML's standard load.

``check`` parses every document with ``yamlpos.load_fast``; it must read exactly what
``yaml.load(text, Loader=CSafeLoader)`` reads (values *and* types: ``True`` is not ``1``, ``1.0`` is
not ``1``, NaN is NaN) and fail exactly as it fails (same exception type, message and marks). Three
sources of documents: every YAML file of the repository (and ../shared/realworld when present), an
edge-case table that also says which path each case must take (built from events, or handed to
PyYAML), and generated YAML (random data through ``yaml.safe_dump``, hand-picked scalar spellings,
and raw text over YAML's special characters, which is mostly invalid and tests the errors).
"""

from __future__ import annotations

import datetime
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import REALWORLD, ROOT, need_shared
from webhook import yamlpos
from webhook.yaml_events import EventBuilder, Unusual

BUILDER = EventBuilder(yamlpos._Loader)


def canonical(value: Any) -> Any:
    """A comparable form that keeps types, key order and NaN (``nan != nan``, so ``==`` cannot)."""
    if isinstance(value, dict):
        return ("dict", [(canonical(k), canonical(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [canonical(v) for v in value])
    if isinstance(value, float):
        return ("float", "nan" if math.isnan(value) else repr(value))  # repr: -0.0 is not 0.0
    return (type(value).__name__, repr(value))


def outcome(load: Any, text: str) -> Any:
    try:
        return canonical(load(text))
    except Exception as exc:
        return ("error", type(exc).__name__, str(exc))


def direct(text: str) -> bool:
    """Whether the event builder loads ``text`` itself (False: it hands it to the standard load)."""
    try:
        BUILDER.load(text)
    except Unusual:
        return False
    except Exception:  # a syntax error or an invalid date: the standard load re-raises its own
        return False
    return True


def assert_same(text: str) -> None:
    assert outcome(yamlpos.load_fast, text) == outcome(yamlpos.load_standard, text), text


def test_canonical_tells_types_apart():
    """The comparison itself must see the differences the loader could get wrong."""
    assert canonical(True) != canonical(1)
    assert canonical(1.0) != canonical(1)
    assert canonical(0.0) != canonical(-0.0)
    assert canonical({"a": 1, "b": 2}) != canonical({"b": 2, "a": 1})
    assert canonical(float("nan")) == canonical(float("nan"))
    assert canonical(datetime.date(2001, 1, 1)) != canonical(datetime.datetime(2001, 1, 1))


# --- the repository's own YAML, and the real-world corpus --------------------------------------

def _chunks(paths: list[Path]) -> list[tuple[str, str]]:
    out = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # a deliberately broken fixture: not YAML text
            continue
        out += [(f"{path}:{line}", chunk) for line, chunk in yamlpos.split_documents(text)
                if yamlpos.has_content(chunk)]
    return out


def _yaml_files(root: Path) -> list[Path]:
    return sorted(p for ext in ("*.yaml", "*.yml") for p in root.rglob(ext))


def _check_corpus(chunks: list[tuple[str, str]], min_direct: float) -> None:
    assert chunks
    for where, chunk in chunks:
        assert outcome(yamlpos.load_fast, chunk) == outcome(yamlpos.load_standard, chunk), where
    share = sum(direct(chunk) for _, chunk in chunks) / len(chunks)
    assert share >= min_direct, f"only {share:.0%} of the documents were built from events"


def test_every_yaml_file_of_the_repository():
    paths = [p for d in ("tests", "policies", "manifests") for p in _yaml_files(ROOT / d)]
    _check_corpus(_chunks(paths), min_direct=0.8)


def test_every_yaml_file_of_the_realworld_corpus():
    _check_corpus(_chunks(_yaml_files(need_shared(REALWORLD))), min_direct=0.8)


def test_the_benchmark_stream():
    from bench.check_throughput import MIX

    chunks = [(str(i), yaml.safe_dump(doc, sort_keys=False)) for i, doc in enumerate(MIX)]
    _check_corpus(chunks, min_direct=1.0)


# --- edge cases: the result, and the path that produced it ------------------------------------

FAST = True  # built from events
STANDARD = False  # handed to PyYAML (what it refuses or what needs its composer)

EDGES: list[tuple[str, bool]] = [
    # scalars: every implicit type, in the spellings YAML 1.1 allows
    ("v: 1", FAST), ("v: +12", FAST), ("v: -12", FAST), ("v: 0x1F", FAST), ("v: 0o17", FAST),
    ("v: 017", FAST), ("v: 0b101", FAST), ("v: 1_000", FAST), ("v: 1:30", FAST), ("v: -1:30:00", FAST),
    ("v: 190:20:30.15", FAST), ("v: 1.5", FAST), ("v: 1e3", FAST), ("v: 1.0e+3", FAST),
    ("v: .5", FAST), ("v: 6.8523015e+5", FAST), ("v: .inf", FAST), ("v: -.inf", FAST),
    ("v: +.Inf", FAST), ("v: .NaN", FAST), ("v: .nan", FAST), ("v: 0.", FAST), ("v: -0.0", FAST),
    ("v: yes", FAST), ("v: No", FAST), ("v: on", FAST), ("v: OFF", FAST), ("v: true", FAST),
    ("v: False", FAST), ("v: y", FAST), ("v: ~", FAST), ("v: null", FAST), ("v: NULL", FAST),
    ("v:", FAST), ("v: ''", FAST), ('v: ""', FAST),
    ("v: 2001-12-14t21:59:43.10-05:00", FAST), ("v: 2001-12-14 21:59:43.10 -5", FAST),
    ("v: 2001-12-15T02:59:43.1Z", FAST), ("v: 2002-12-14", FAST), ("v: 2001-12-14 21:59:43", FAST),
    # quoted and block scalars are strings, whatever they spell
    ("v: 'yes'", FAST), ('v: "1"', FAST), ("v: '~'", FAST), ('v: "0x1F"', FAST), ("v: '2002-12-14'", FAST),
    ("v: |\n  literal\n  text\n", FAST), ("v: >\n  folded\n  text\n\n  para\n", FAST),
    ("v: |-\n  strip\n", FAST), ("v: >+\n  keep\n\n", FAST), ("v: |2\n   indented\n", FAST),
    ('v: "esc\\t\\u00e9\\n"', FAST), ("v: 'it''s'", FAST),
    # strings that only look special
    ("v: 1.2.3", FAST), ("v: 0x", FAST), ("v: 1__0", FAST), ("v: 12:60", FAST), ("v: nvidia.com/gpu", FAST),
    ("v: 4Gi", FAST), ("v: '-'", FAST), ("v: yesno", FAST), ("v: Null~", FAST), ("v: .infinity", FAST),
    # keys are resolved like values; duplicate keys keep the last value at the first place
    ("1: a\ntrue: b\n~: c\n1.5: d\n2001-01-01: e", FAST), ("a: 1\nb: 2\na: 3", FAST),
    ("1: a\ntrue: b", FAST), ("? a\n: 1", FAST), ("'a': 1\n\"b\": 2", FAST),
    ("v: [.nan, .nan]\n.nan: 1\n.NaN: 2", FAST),
    # unicode and long strings
    ("name: 日本語\nemoji: \"\\U0001F600\"\n'ключ': значение", FAST), ("v: " + "x" * 100_000, FAST),
    ("v: '" + "y " * 20_000 + "'", FAST), ("\ufeffv: bom", FAST),
    # shapes: flow and block collections, empty ones, nesting, bare roots
    ("{a: [1, {b: c}], d: [], e: {}}", FAST), ("[1, [2, [3, []]], {x: y}]", FAST), ("- a\n- - b\n  - c\n- {}", FAST),
    ("a:\n  b:\n    c:\n      - d: 1\n        e: [x, 'y']", FAST), ("plain scalar", FAST), ("- 1\n- two", FAST),
    ("'quoted root'", FAST), ("~", FAST), ("# only a comment", FAST), ("", FAST), ("...", STANDARD),
    ("a: 1\n...\n", FAST), ("a: 1 # comment\n# trailing\n", FAST), ("[a, b,]", FAST),
    ("a: 1\n--- b", STANDARD),  # two documents: PyYAML's "expected a single document"
    # what PyYAML itself must do: anchors, aliases, tags, merge and value keys, collection keys
    ("a: &x 1\nb: *x", STANDARD), ("a: &x [1, 2]\nb: *x", STANDARD),
    ("base: &b {x: 1}\nc:\n  <<: *b\n  y: 2", STANDARD),
    ("<<: {a: 1}\nb: 2", STANDARD), ("<<: [{a: 1}, {b: 2}]", STANDARD), ("v: <<", STANDARD),
    ("=: 1", STANDARD), ("v: =", STANDARD), ("!!str 1", STANDARD), ("v: !!int '7'", STANDARD),
    ("v: !!float 1", STANDARD), ("v: !!binary aGk=", STANDARD), ("v: !!set {a, b}", STANDARD),
    ("v: !!omap [a: 1]", STANDARD), ("v: !custom x", STANDARD), ("v: ! x", STANDARD),
    ("!!map {a: 1}", STANDARD), ("? [a]\n: 1", STANDARD), ("? {a: 1}\n: 1", STANDARD),
    ("[a, b]: 1", STANDARD), ("%YAML 1.1\n--- a", STANDARD), ("%TAG !e! tag:e.com,2000:\n--- !e!x 1", STANDARD),
    ("v: *unknown", STANDARD), ("a: &x [*x]", STANDARD), ("v: !!python/object:os.system x", STANDARD),
    # errors: PyYAML's own, raised by the standard load the builder hands them to
    ("v: 2001-13-45", STANDARD), ("v: 2001-02-30", STANDARD), ("v: [", STANDARD), ("a: b: c", STANDARD),
    ("a:\n\t- b", STANDARD), ("v: 'open", STANDARD), ("v: 2001-13-45\nw: [", STANDARD), ("- a\nb: c", STANDARD),
    ("v: \x07", STANDARD), ("v: " + "[" * 1100 + "]" * 1100, STANDARD),
    ("".join(" " * i + f"k{i}:\n" for i in range(1100)) + " " * 1100 + "v\n", STANDARD),
]


@pytest.mark.parametrize(("text", "path"), EDGES, ids=[repr(t[:40]) for t, _ in EDGES])
def test_edge_case(text: str, path: bool):
    assert_same(text)
    assert direct(text) is path, "built from events" if not path else "handed to the standard load"


def test_edge_case_values():
    """A few results spelled out, so the table above cannot pass by both loaders being wrong alike."""
    assert yamlpos.load_fast("- 0x1F\n- 1:30\n- yes\n- 'yes'\n- ~\n-\n- 0b101\n- +12\n- 1_000") == [
        31, 90, True, "yes", None, None, 5, 12, 1000]
    values = yamlpos.load_fast("- .inf\n- -.inf\n- .NaN\n- 2001-12-14t21:59:43.10-05:00\n- 2002-12-14")
    assert values[:2] == [math.inf, -math.inf] and math.isnan(values[2])
    assert values[3] == datetime.datetime(2001, 12, 15, 2, 59, 43, 100000, tzinfo=datetime.UTC)
    assert type(values[4]) is datetime.date
    assert yamlpos.load_fast("a: 1\na: 2") == {"a": 2}
    nans = yamlpos.load_fast(".nan: 1\n.NaN: 2")  # PyYAML returns one shared NaN object: one key
    assert len(nans) == len(yamlpos.load_standard(".nan: 1\n.NaN: 2")) == 1 and list(nans.values()) == [2]
    with pytest.raises(ValueError, match=r"month must be in 1\.\.12"):
        yamlpos.load_fast("v: 2001-13-45")
    with pytest.raises(yaml.constructor.ConstructorError, match="found unhashable key"):
        yamlpos.load_fast("? [a]\n: 1")


def test_errors_keep_their_marks():
    """The error callers turn into ``file:line:col`` is PyYAML's, marks included."""
    text = "a: 1\nb:\n  - c\n  d: e\n"
    with pytest.raises(yaml.YAMLError) as fast:
        yamlpos.load_fast(text)
    with pytest.raises(yaml.YAMLError) as standard:
        yamlpos.load_standard(text)
    assert type(fast.value) is type(standard.value)
    assert str(fast.value) == str(standard.value)
    assert fast.value.problem_mark.line == standard.value.problem_mark.line == 3  # type: ignore[attr-defined]


def test_an_invalid_date_before_a_syntax_error_reports_the_syntax_error():
    """PyYAML composes the whole document before constructing; the builder must not report the date first."""
    with pytest.raises(yaml.YAMLError):
        yamlpos.load_fast("v: 2001-13-45\nw: [\n")


def test_the_scalar_cache_is_bounded_and_changes_nothing():
    builder = EventBuilder(yamlpos._Loader)
    from webhook import yaml_events

    for i in range(yaml_events._CACHE_LIMIT + 10):
        assert builder.plain(str(i)) == i
    assert len(builder._plain) <= yaml_events._CACHE_LIMIT
    assert builder.plain("yes") is True and builder.plain("yes") is True
    assert builder.plain("1") == 1 and type(builder.plain("1")) is int


def test_builder_refuses_loaders_it_cannot_follow():
    with pytest.raises(TypeError):
        EventBuilder(yaml.BaseLoader)

    class WithPathResolver(yaml.SafeLoader):
        pass

    WithPathResolver.add_path_resolver("tag:yaml.org,2002:str", ["spec"], yaml.ScalarNode)
    with pytest.raises(TypeError):
        EventBuilder(WithPathResolver)


def test_the_pure_python_loader_gives_the_same_results():
    """Where PyYAML lacks libyaml, ``_Loader`` is ``SafeLoader``: the builder follows it too."""
    builder = EventBuilder(yaml.SafeLoader)
    for text, path in EDGES:
        if path is FAST and len(text) < 1000:
            assert outcome(builder.load, text) == outcome(lambda t: yaml.load(t, Loader=yaml.SafeLoader), text), text


# --- generated YAML ----------------------------------------------------------------------------

SPELLINGS = [
    "1", "-1", "+12", "0x1F", "0o17", "017", "0b101", "1_000", "1:30", "1.5", "1e3", ".inf", "-.inf", ".NaN",
    "yes", "No", "on", "OFF", "true", "y", "n", "~", "null", "", "2001-12-14t21:59:43.10-05:00", "2002-12-14",
    "2001-13-45", "'yes'", '"1"', "'~'", "4Gi", "nvidia.com/gpu", "a b", "é", "<<", "=", "&a x", "*a", "!!str 1",
    "!x y", "[1, 2]", "{a: b}", "|\n  lit", "'it''s'", "- x", "? k", "#c", "x #c", "1.2.3",
]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
    st.sampled_from([s for s in SPELLINGS if s]), st.dates(), st.datetimes(),  # naive: safe_dump tags an aware datetime
)
keys = st.one_of(st.text(max_size=12), st.integers(-5, 5), st.booleans(), st.none(), st.sampled_from(SPELLINGS))
data = st.recursive(
    scalars,
    lambda children: st.one_of(st.lists(children, max_size=5), st.dictionaries(keys, children, max_size=5)),
    max_leaves=40,
)
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(value=data, flow=st.sampled_from([None, True, False]), unicode=st.booleans())
def test_dumped_data(value: Any, flow: bool | None, unicode: bool):
    text = yaml.safe_dump(value, default_flow_style=flow, allow_unicode=unicode, sort_keys=False)
    assert_same(text)
    # safe_dump writes no anchors for trees; its only tags are on datetimes it must quote
    assert direct(text) or "!!timestamp" in text, text


@SETTINGS
@given(
    items=st.lists(st.tuples(st.sampled_from(SPELLINGS), st.sampled_from(SPELLINGS)), min_size=1, max_size=6),
    shape=st.sampled_from(["block-map", "block-seq", "flow-seq", "flow-map", "nested"]),
)
def test_spellings_written_raw(items: list[tuple[str, str]], shape: str):
    """Hand-picked spellings placed as keys and values, as a person would type them (often invalid)."""
    if shape == "block-map":
        text = "".join(f"{k}: {v}\n" for k, v in items)
    elif shape == "block-seq":
        text = "".join(f"- {v}\n" for _, v in items)
    elif shape == "flow-seq":
        text = "[" + ", ".join(v for _, v in items) + "]"
    elif shape == "flow-map":
        text = "{" + ", ".join(f"{k}: {v}" for k, v in items) + "}"
    else:
        text = "top:\n" + "".join(f"  k{i}:\n    - {v}\n    - {k}: {v}\n" for i, (k, v) in enumerate(items))
    assert_same(text)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(alphabet="ab01.:-?[]{},'\"#&*!|>%<=~ \t\n", max_size=60))
def test_raw_text(text: str):
    """Mostly broken YAML: whatever the standard load returns or raises, load_fast does the same."""
    assert_same(text)
