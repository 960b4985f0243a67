"""The observe-first rollout on a copy of the shipped policy directory: the shipped suite passes unchanged at
every step (``policy test`` judges as enforce with mutation applied, and says the mode), and ``lint`` says
what each step needs re-rendered."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import DEFAULT_POLICY_DIR

STEPS = [
    ("audit", "off"),
    ("audit", "apply"),
    ("warn", "apply"),
    ("enforce", "apply"),
]


def _step(tmp_path: Path, enforcement: str, mutation: str) -> Path:
    root = tmp_path / f"policies-{enforcement}-{mutation}"
    shutil.copytree(DEFAULT_POLICY_DIR, root)
    text = (root / "default.yaml").read_text()
    settings = f"failure: allow\n    enforcement: {enforcement}\n    mutation: {mutation}"
    (root / "default.yaml").write_text(text.replace("failure: allow", settings, 1))
    return root


@pytest.mark.parametrize(("enforcement", "mutation"), STEPS)
def test_the_shipped_suite_passes_at_every_step(tmp_path, cli, enforcement, mutation):
    root = _step(tmp_path, enforcement, mutation)
    run = cli("policy", "test", root)
    assert run.code == 0, run.out
    noted = "cases are judged as enforce with mutation applied" in run.err
    assert noted == ((enforcement, mutation) != ("enforce", "apply")), run.err
    lint = cli("policy", "lint", root)
    assert lint.code == 0, lint.out
    assert ("settings.enforcement" in lint.out) == (enforcement != "enforce"), lint.out
    assert ("settings.mutation is off" in lint.out) == (mutation == "off"), lint.out
