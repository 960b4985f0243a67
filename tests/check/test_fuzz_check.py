"""Fuzzing ``gpu-admission check -`` with generated YAML: whatever a pull request contains, ``check``
ends within a timeout, never prints a traceback (nor its last-resort "internal error" line, which would
mean an unhandled bug), and exits 0, 1 or 2 only.

Inputs are Kubernetes-shaped objects (GPU resources, intent keys with odd values) dumped as YAML and
then damaged the way hostile or broken files are: anchors, aliases and merge keys (up to alias bombs),
huge scalars, deep nesting, tabs, a byte-order mark, control characters, invalid UTF-8, truncation,
plus raw text over YAML's special characters. Each example runs the real console entry in-process
with stdin, stdout and stderr replaced (``main(["check", "-"])``), under a SIGALRM timeout.

``CHECK_FUZZ_EXAMPLES`` sets the number of examples (default 150 for CI; the longer run recorded in
docs/reliability.md used 5,000).
"""

from __future__ import annotations

import io
import os
import signal
import sys

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import POLICIES
from webhook.cli import main

EXAMPLES = int(os.environ.get("CHECK_FUZZ_EXAMPLES", "150"))
TIMEOUT = 30  # seconds per call: far above any real input, far below a hang

ODD_VALUES = st.one_of(
    st.sampled_from(["1", "8", "0", "-1", "1e3", "0x10", "4Gi", "4GB", "", "null", "true", "9" * 40]),
    st.sampled_from(["\u09ee", "\u00b2", "\uff18"]),  # Bengali eight, superscript two, fullwidth eight
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True),
    st.booleans(),
    st.none(),
    st.text(max_size=20),
)
INTENT_KEYS = st.sampled_from(
    [f"gpu-admission.io/{k}" for k in ("workload", "gpus", "gpu-memory", "isolation", "gpu-model", "pool", "rdma",
                                       "gang", "gang-size", "topology", "container")]
)
RESOURCE_KEYS = st.sampled_from(
    ["nvidia.com/gpu", "nvidia.com/mig-1g.5gb", "aliyun.com/gpu-mem", "nvidia.com/gpumem", "cpu", "memory",
     "rdma/rdma_shared_device_a", "volcano.sh/vgpu-memory"]
)
KINDS = st.sampled_from(
    [("v1", "Pod"), ("batch/v1", "Job"), ("apps/v1", "Deployment"), ("batch.volcano.sh/v1alpha1", "Job"),
     ("kubeflow.org/v1", "PyTorchJob"), ("example.com/v1", "Trainer"), ("v1", "Namespace"), ("v1", "List"),
     ("v1", "Service")]
)


@st.composite
def containers(draw):
    return {
        "name": draw(st.sampled_from(["c", "main", "", "x" * 70])),
        "image": "i",
        "resources": {
            draw(st.sampled_from(["limits", "requests"])): draw(st.dictionaries(RESOURCE_KEYS, ODD_VALUES, max_size=3))
        },
        **draw(st.fixed_dictionaries({}, optional={"securityContext": st.just({"privileged": True})})),
    }


@st.composite
def objects(draw):
    api, kind = draw(KINDS)
    pod_spec = {"containers": draw(st.lists(containers(), max_size=3))}
    meta = {
        "name": draw(st.text(min_size=0, max_size=12)),
        "labels": draw(st.dictionaries(INTENT_KEYS, ODD_VALUES, max_size=3)),
        "annotations": draw(st.dictionaries(INTENT_KEYS, ODD_VALUES, max_size=4)),
    }
    template = {"metadata": meta, "spec": pod_spec}
    spec = draw(
        st.sampled_from(
            [
                pod_spec,
                {"template": template, "parallelism": 3},
                {"minAvailable": 4, "tasks": [{"name": "w", "replicas": 8, "template": template}]},
                {"pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": template}}},
                {"worker": {"template": template}},
            ]
        )
    )
    obj = {"apiVersion": api, "kind": kind, "metadata": meta, "spec": spec}
    if kind == "List":
        obj = {"apiVersion": "v1", "kind": "List", "items": [{**obj, "kind": "Pod"}, obj]}
    return obj


def bomb(levels: int, width: int) -> str:
    lines = ["apiVersion: v1", "kind: Pod", "metadata: {name: b}", "x:", "  l0: &l0 [lol]"]
    lines += [f"  l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]" for i in range(1, levels + 1)]
    return "\n".join([*lines, f"spec: {{containers: [{{name: c, image: i, args: *l{levels}}}]}}"]) + "\n"


def damage(text: str, how: str, data) -> bytes:
    if how == "none":
        return text.encode()
    if how == "anchors":  # anchor the first mapping value and alias it later, with a merge key
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if line.rstrip().endswith(":") and not line.startswith(" "):
                lines[i] = line.rstrip() + " &a"
                break
        lines.append("extra: *a")
        lines.append("merged: {<<: *a, k: v}")
        return "\n".join(lines).encode()
    if how == "bomb":
        return (text + "---\n" + bomb(data.draw(st.integers(2, 12)), data.draw(st.integers(2, 12)))).encode()
    if how == "recursive":
        return b"apiVersion: v1\nkind: Pod\nmetadata: &m {name: r, self: *m}\nspec: &s {containers: [{x: *s}]}\n"
    if how == "huge":
        size = data.draw(st.sampled_from([10_000, 1_000_000, 3_000_000]))
        return text.encode() + b"\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: h\n  annotations: {a: '" + (
            b"x" * size
        ) + b"'}\n"
    if how == "deep-flow":
        depth = data.draw(st.integers(100, 3000))
        return b"apiVersion: v1\nkind: Pod\nmetadata: {name: d}\nspec: " + b"[" * depth + b"]" * depth + b"\n"
    if how == "deep-block":
        depth = data.draw(st.integers(100, 1500))
        body = "".join(" " * i + f"k{i}:\n" for i in range(depth)) + " " * depth + "v\n"
        return ("apiVersion: v1\nkind: Pod\nmetadata: {name: d}\nspec:\n" + body.replace("\n", "\n ")).encode()
    if how == "deep-alias":  # nesting built by aliases: each level wraps the previous
        depth = data.draw(st.integers(50, 1200))
        lines = ["apiVersion: v1", "kind: Pod", "metadata: {name: d}", "z:", "  a0: &a0 [x]"]
        lines += [f"  a{i}: &a{i} [*a{i - 1}]" for i in range(1, depth)]
        lines.append(f"spec: {{containers: [{{name: c, image: i, args: *a{depth - 1}}}]}}")
        return ("\n".join(lines) + "\n").encode()
    if how == "tabs":
        return text.replace("  ", "\t", data.draw(st.integers(1, 5))).encode()
    if how == "bom":
        return b"\xef\xbb\xbf" + text.encode()
    if how == "control":
        at = data.draw(st.integers(0, len(text)))
        char = data.draw(st.sampled_from(["\x00", "\x07", "\x1b", "\ufffe", "\x85", "\u2028"]))
        return (text[:at] + char + text[at:]).encode()
    if how == "invalid-utf8":
        at = data.draw(st.integers(0, len(text)))
        bad = data.draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xe9"]))
        return text[:at].encode() + bad + text[at:].encode()
    if how == "truncate":
        return text[: data.draw(st.integers(0, len(text)))].encode()
    if how == "raw":
        alphabet = st.sampled_from([*"-:{}[]&*!|>'\"%@`#,? \t\nab01", "---\n", "<<: ", "*a", "&a ", "!!binary "])
        return "".join(data.draw(st.lists(alphabet, max_size=200))).encode()
    if how == "binary":
        return data.draw(st.binary(max_size=300))
    raise AssertionError(how)


HOW = st.sampled_from(
    ["none", "anchors", "bomb", "recursive", "huge", "deep-flow", "deep-block", "deep-alias", "tabs", "bom",
     "control", "invalid-utf8", "truncate", "raw", "binary"]
)


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang(f"check did not finish within {TIMEOUT} s")


def run_check(payload: bytes, fmt: str) -> tuple[int, str, str]:
    stdin = io.TextIOWrapper(io.BytesIO(payload), encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdin, sys.stdout, sys.stderr
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIMEOUT)
    sys.stdin, sys.stdout, sys.stderr = stdin, out, err
    try:
        code = main(["check", "-", "--policy", str(POLICIES), "-o", fmt])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        sys.stdin, sys.stdout, sys.stderr = saved
    return code, out.getvalue(), err.getvalue()


@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="needs SIGALRM for the per-call timeout")
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=EXAMPLES <= 150,  # CI: the same examples on every run; a long run explores
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
@given(
    docs=st.lists(objects(), min_size=1, max_size=3),
    how=HOW,
    fmt=st.sampled_from(["text", "json", "jsonl", "yaml", "junit", "github"]),
    data=st.data(),
)
def test_check_survives_generated_yaml(docs, how, fmt, data):
    text = yaml.safe_dump_all(docs, sort_keys=False, allow_unicode=True)
    payload = damage(text, how, data)
    code, out, err = run_check(payload, fmt)  # an escaping exception fails the example: a traceback
    assert code in (0, 1, 2), (code, how)
    assert "Traceback" not in err and "internal error" not in err, err[-2000:]
    if how in ("recursive", "invalid-utf8", "binary"):  # never an object anyone can apply
        assert code == 2, (how, out[-1500:])
