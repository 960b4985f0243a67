"""The README's samples are run, not just read: the ``check --explain --diff`` block is what the
command prints for the README's pod on the shipped default (the ``curl`` line:
tests/server/test_readme_curl.py)."""

from __future__ import annotations

import json
import re
import shlex

from tests.conftest import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
REVIEW = ROOT / "examples" / "admission" / "review.json"


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```\n", README, re.S)


def test_the_check_sample_is_what_check_prints(cli, tmp_path, monkeypatch):
    (pod,) = [b for b in _blocks("yaml") if "name: chat" in b]
    (console,) = [b for b in _blocks("console") if b.startswith("$ gpu-admission check pod.yaml")]
    command, *expected = console.splitlines()
    (tmp_path / "pod.yaml").write_text(pod, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    run = cli(*shlex.split(command)[2:])  # "$ gpu-admission check …"
    assert run.code == 0, run.err
    assert run.out.splitlines() == expected, (
        "README.md's check sample is stale: replace the block's output with what "
        f"`{command[2:]}` prints for the README's pod on the shipped default"
    )


def test_the_sample_review_is_the_readmes_pod():
    review = json.loads(REVIEW.read_text(encoding="utf-8"))
    (pod,) = [b for b in _blocks("yaml") if "name: chat" in b]
    import yaml

    sent = review["request"]["object"]
    written = yaml.safe_load(pod)
    assert sent["metadata"]["labels"] == written["metadata"]["labels"]
    assert sent["metadata"]["annotations"] == written["metadata"]["annotations"]
    assert sent["spec"] == written["spec"]
