"""``audit`` under ``settings.enforcement: warn|audit``: it reports the rules' verdict (what the cluster would
refuse once enforced: ``result: fail``, exit 1) and says the mode everywhere it reports, so the observe step
of a rollout reads exactly what the enforce step will deny."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.audit.conftest import POLICIES, run_cli


def _policy(tmp_path: Path, mode: str) -> Path:
    where = tmp_path / f"policy-{mode}"
    where.mkdir()
    text = (POLICIES / "default.yaml").read_text()
    (where / "default.yaml").write_text(text.replace("failure: allow", f"failure: allow\n    enforcement: {mode}", 1))
    return where


@pytest.mark.parametrize("mode", ["warn", "audit"])
def test_openreports_keep_fail_and_say_the_mode(snapshot: Path, tmp_path: Path, mode: str) -> None:
    enforcing = run_cli("--snapshot", snapshot, "--policy", POLICIES, "-o", "openreports")
    observing = run_cli("--snapshot", snapshot, "--policy", _policy(tmp_path, mode), "-o", "openreports")
    assert enforcing.code == observing.code == 1, observing.err
    before = {d["metadata"]["namespace"]: d for d in yaml.safe_load_all(enforcing.out)}
    after = {d["metadata"]["namespace"]: d for d in yaml.safe_load_all(observing.out)}
    assert {ns: d["summary"] for ns, d in after.items()} == {ns: d["summary"] for ns, d in before.items()}
    assert all(d["metadata"]["annotations"]["gpu-admission.io/enforcement"] == mode for d in after.values())
    assert all(d["metadata"]["annotations"]["gpu-admission.io/enforcement"] == "enforce" for d in before.values())
    failed = [r for r in after["team-a"]["results"] if r["result"] == "fail"]
    assert failed and all(r["properties"]["wouldDeny"] == "true" for r in failed)
    assert all(r["properties"]["action"] == mode for r in failed)


def test_text_and_json_say_the_mode(snapshot: Path, tmp_path: Path) -> None:
    policy = _policy(tmp_path, "audit")
    text = run_cli("--snapshot", snapshot, "--policy", policy)
    assert text.code == 1
    assert "enforcement: audit (settings.enforcement): the cluster admits what is denied here" in text.out
    as_json = run_cli("--snapshot", snapshot, "--policy", policy, "-o", "json")
    report = json.loads(as_json.out)
    assert report["enforcement"] == "audit"
    pinned = next(r for r in report["results"] if r["name"] == "pinned")
    assert pinned["status"] == "denied"
    assert any(v["rule"] == "node-name-set" and v.get("wouldDeny") for v in pinned["violations"])
