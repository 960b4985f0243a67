"""``check`` under ``settings.enforcement``: its verdict is the cluster's (under an observe mode nothing is
denied, so what passes CI is still what is admitted), and CI still sees what ``enforce`` would deny: marked
in every format, counted in the summary, an annotation even under ``audit``, and ``--fail-on would-deny``
fails on it."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from tests.conftest import POLICIES
from webhook.cli import main

ATTACK = """apiVersion: v1
kind: Pod
metadata:
  name: attack
  labels: {gpu-admission.io/workload: training}
spec:
  nodeName: gpu-node-1
  containers:
  - name: c
    image: i
    securityContext: {privileged: true}
"""


def _policy(tmp_path: Path, mode: str) -> Path:
    where = tmp_path / f"policy-{mode}"
    where.mkdir()
    text = (POLICIES / "default.yaml").read_text()
    (where / "default.yaml").write_text(text.replace("failure: allow", f"failure: allow\n    enforcement: {mode}", 1))
    return where


@pytest.fixture
def attack(tmp_path: Path) -> Path:
    path = tmp_path / "attack.yaml"
    path.write_text(ATTACK)
    return path


@pytest.mark.parametrize(
    ("mode", "fail_on", "code"),
    [
        ("enforce", "deny", 1),
        ("warn", "deny", 0),
        ("audit", "deny", 0),
        ("warn", "would-deny", 1),
        ("audit", "would-deny", 1),
        ("audit", "warn", 1),
    ],
)
def test_exit_codes_follow_the_mode_and_fail_on(tmp_path, attack, capsys, mode, fail_on, code):
    args = ["check", "--policy", str(_policy(tmp_path, mode)), "--fail-on", fail_on, str(attack)]
    assert main(args) == code
    out = capsys.readouterr().out
    if mode != "enforce":
        assert "(enforce would deny: 2 finding(s))" in out
        assert "[privileged-gpu] " in out and "[would deny]" in out
        assert "1 admitted that enforce would deny (settings.enforcement)" in out


def test_json_marks_each_would_be_denial(tmp_path, attack, capsys):
    assert main(["check", "--policy", str(_policy(tmp_path, "audit")), "-o", "json", str(attack)]) == 0
    report = json.loads(capsys.readouterr().out)
    (result,) = report["results"]
    assert result["status"] == "admitted" and result["allowed"] is True
    marked = {v["rule"] for v in result["violations"] if v.get("wouldDeny")}
    assert marked == {"privileged-gpu", "node-name-set"}
    assert all(v["action"] == "audit" for v in result["violations"] if v.get("wouldDeny"))
    assert report["summary"]["wouldDeny"] == 1


def test_github_shows_would_be_denials_as_warnings_even_under_audit(tmp_path, attack, capsys):
    assert main(["check", "--policy", str(_policy(tmp_path, "audit")), "-o", "github", str(attack)]) == 0
    out = capsys.readouterr().out
    assert "::warning " in out and "title=[privileged-gpu]" in out
    policy = str(tmp_path / "policy-audit")
    assert main(["check", "--policy", policy, "-o", "github", "--fail-on", "would-deny", str(attack)]) == 1
    assert "::error " in capsys.readouterr().out


def test_junit_fails_would_be_denials_only_when_asked(tmp_path, attack, capsys):
    policy = str(_policy(tmp_path, "warn"))
    assert main(["check", "--policy", policy, "-o", "junit", str(attack)]) == 0
    assert ET.fromstring(capsys.readouterr().out).get("failures") == "0"
    assert main(["check", "--policy", policy, "-o", "junit", "--fail-on", "would-deny", str(attack)]) == 1
    assert ET.fromstring(capsys.readouterr().out).get("failures") == "1"
