"""The observe-first rollout on the user's own ``policies/`` copy: the shipped suite passes unchanged at
every step (``policy test`` judges as enforce with mutation applied, and says the mode), and ``check`` and
``lint`` agree with what each step does."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import USER_POLICIES

STEPS = [
    ("audit", "off"),
    ("audit", "apply"),
    ("warn", "apply"),
    ("enforce", "apply"),
]


def _step(tmp_path: Path, enforcement: str, mutation: str) -> Path:
    root = tmp_path / f"policies-{enforcement}-{mutation}"
    shutil.copytree(USER_POLICIES, root)
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
