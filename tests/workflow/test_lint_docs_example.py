"""docs/policy.md's lint example is what lint prints: one pass of field errors, then the references."""

from __future__ import annotations

import re

from tests.conftest import POLICIES, ROOT
from webhook.cli import main


def test_lint_example_in_the_docs_is_what_lint_prints(tmp_path, capsys, monkeypatch):
    doc = (ROOT / "docs" / "policy.md").read_text()
    block = re.search(r"```text\n(\$ gpu-admission policy lint policies/\n.*?)```", doc, re.S).group(1)
    runs = [r.strip().splitlines() for r in block.split("$ gpu-admission policy lint policies/\n")[1:]]
    runs = [[line for line in run if not line.startswith("$")] for run in runs]
    assert len(runs) == 2
    text = (POLICIES / "default.yaml").read_text()
    broken = text.replace("      gpusPerNode: 4\n", "      gpusPerNod: 4\n", 1).replace(
        "      pools: [dev-cgpu]\n", "      pools: [dev-cgpus]\n", 1
    )
    assert broken.count("gpusPerNod:") == 1 and "[dev-cgpus]" in broken
    (tmp_path / "policies").mkdir()
    monkeypatch.chdir(tmp_path)
    for fixed, expected in ((broken, runs[0]), (broken.replace("gpusPerNod:", "gpusPerNode:"), runs[1])):
        (tmp_path / "policies" / "default.yaml").write_text(fixed)
        main(["policy", "lint", "policies/"])
        assert capsys.readouterr().out.strip().splitlines() == expected
