"""A policy or policy-test file is YAML from a pull request too: ``policy lint`` and ``policy test`` load
it through the same bounded loader as ``check`` (webhook/yamlpos.py), so an alias bomb is an error at
its file:line:col instead of a hang. Real CLI in a subprocess, with a timeout."""

from __future__ import annotations

import shutil
import subprocess
import sys

from tests.check.test_hostile_files import billion_laughs
from tests.conftest import POLICIES, ROOT


def bomb_of(kind: str) -> str:
    return billion_laughs().replace("apiVersion: v1", "apiVersion: gpu-admission.io/v1").replace("kind: Pod", kind)


def gpu_admission(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def test_policy_lint_reports_an_alias_bomb_at_its_place(tmp_path):
    (tmp_path / "p.yaml").write_text(bomb_of("kind: GPUPolicy"))
    proc = gpu_admission("policy", "lint", str(tmp_path))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert f"{tmp_path / 'p.yaml'}:12:9: error: YAML syntax error: YAML aliases expand" in proc.stdout + proc.stderr


def test_policy_test_reports_an_alias_bomb_in_a_suite(tmp_path):
    shutil.copy(POLICIES / "default.yaml", tmp_path / "default.yaml")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "bomb.test.yaml").write_text(bomb_of("kind: PolicyTest"))
    proc = gpu_admission("policy", "test", str(tmp_path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "bomb.test.yaml:12:9: error: YAML syntax error: YAML aliases expand" in proc.stdout + proc.stderr
