"""Files a pull request can put in front of ``check``: alias bombs ("billion laughs"), recursive aliases
and merge-key bombs must end quickly with exit 2 naming the file and line, and ordinary anchors must
still work. Run through the real CLI in a subprocess with a timeout: a hang fails the test instead of
stalling the suite."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.check.test_check_cli import INFER
from tests.conftest import ROOT

TIMEOUT = 60  # seconds: a bomb that is expanded takes hours and gigabytes


def check(path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook", "check", str(path), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def billion_laughs(levels: int = 9, width: int = 9) -> str:
    lines = ["apiVersion: v1", "kind: Pod", "metadata:", "  name: lol", "  annotations:"]
    lines.append('    l0: &l0 "' + "lol" * 3 + '"')
    for i in range(1, levels + 1):
        lines.append(f"    l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]")
    lines += [
        "spec:",
        "  containers:",
        "  - name: c",
        "    image: i",
        f"    args: *l{levels}",
        "    resources: {limits: {nvidia.com/gpu: 1}}",
    ]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("fmt", ["text", "json", "yaml", "junit"])
def test_billion_laughs_exits_2_quickly_with_file_and_line(tmp_path, fmt):
    path = tmp_path / "bomb.yaml"
    path.write_text(INFER + "---\n" + billion_laughs())
    proc = check(path, "-o", fmt)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    both = proc.stdout + proc.stderr
    assert "YAML aliases expand this document past 4,000,000 characters" in both
    assert str(path) in both and "Traceback" not in proc.stderr


def test_billion_laughs_error_points_into_the_bomb(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(INFER + "---\n" + billion_laughs())
    proc = check(path)
    first = len(INFER.splitlines()) + 2  # the bomb document's first line
    line = next(x for x in proc.stdout.splitlines() if "YAML aliases expand" in x)
    where = int(line.split(":")[1])
    assert first <= where <= first + 20, line
    assert "Pod/infer (namespace default): admitted" in proc.stdout  # the document before it still counts


def test_merge_key_bomb_exits_2(tmp_path):
    lines = ["apiVersion: v1", "kind: ConfigMap", "metadata: {name: m}", "data:", "  a0: &a0 {k0: v}"]
    for i in range(1, 30):
        lines.append(f"  a{i}: &a{i} {{<<: [*a{i - 1}, *a{i - 1}], k{i}: v}}")
    path = tmp_path / "merge.yaml"
    path.write_text("\n".join(lines) + "\n")
    proc = check(path)
    assert proc.returncode == 2 and "YAML aliases expand" in proc.stdout


def test_recursive_alias_exits_2(tmp_path):
    path = tmp_path / "rec.yaml"
    path.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: &m\n  name: x\n  again: *m\n"
        "spec: {containers: [{name: c, image: i, resources: {limits: {nvidia.com/gpu: 1}}}]}\n"
    )
    proc = check(path)
    assert proc.returncode == 2
    assert f"{path}:3:11: error: YAML syntax error: recursive YAML alias" in proc.stdout


def test_ordinary_anchors_and_merge_keys_still_work(tmp_path):
    path = tmp_path / "anchors.yaml"
    path.write_text(
        """apiVersion: v1
kind: Pod
metadata:
  name: infer
  labels: {gpu-admission.io/workload: inference}
  annotations: {gpu-admission.io/gpu-memory: 4Gi}
spec:
  containers:
  - name: vllm
    image: vllm:0.6
    resources:
      limits: &res {cpu: "2", memory: 8Gi}
      requests:
        <<: *res
"""
    )
    proc = check(path)
    assert proc.returncode == 0, proc.stdout
    assert "admitted, " in proc.stdout


def test_an_intent_integer_the_engine_cannot_parse_never_passes(tmp_path):
    """Whatever the engine makes of a non-ASCII digit, ``check`` exits 1 (intent-invalid) or 2
    (engine-error, with file:line): never 0, never a traceback."""
    path = tmp_path / "digits.yaml"
    path.write_text(INFER.replace("gpu-admission.io/gpu-memory: 4Gi", 'gpu-admission.io/gpus: "\u00b2"'))
    proc = check(path)
    assert proc.returncode in (1, 2) and "Traceback" not in proc.stderr
    if proc.returncode == 2:
        assert f"{path}:1: engine-error: the engine failed on this object" in proc.stdout


def test_non_ascii_digits_are_not_gpu_counts(tmp_path):
    """``"৮"`` (Bengali eight) and ``"²"`` are digits to Python's int() but not to Kubernetes: an
    intent integer must be ASCII, else intent-invalid (exit 1), never 8 GPUs and never a traceback."""
    for value in ("\u09ee", "\u00b2", "\uff18"):  # Bengali eight, superscript two, fullwidth eight
        path = tmp_path / "digits.yaml"
        path.write_text(INFER.replace("gpu-admission.io/gpu-memory: 4Gi", f'gpu-admission.io/gpus: "{value}"'))
        proc = check(path, "-o", "json")
        assert proc.returncode == 1, (value, proc.stdout[-1500:], proc.stderr[-1500:])
        assert '"rule": "intent-invalid"' in proc.stdout and "Traceback" not in proc.stderr
