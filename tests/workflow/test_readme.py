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


def test_the_readme_says_why_the_sample_review_is_denied_at_validate():
    """The sample is the pod as written; /validate sees pods as /mutate left them, so the README's
    account of the denial must match what the engine decides for it."""
    from tests.conftest import POLICIES
    from webhook.engine import validate
    from webhook.engine.model.request import Request, Stage
    from webhook.policy import load_policy

    obj = json.loads(REVIEW.read_text(encoding="utf-8"))["request"]["object"]
    decision = validate(load_policy(POLICIES), Request(obj, namespace="default", stage=Stage.STORED))
    denied = {v.rule for v in decision.violations if v.action.value == "deny"}
    assert decision.allowed is False and denied == {"placement-missing"}
    assert "Sent to `/validate` instead, the same review is **denied** (`placement-missing`" in README
    assert "Sent to `/validate` instead" in README.split("## What users write")[0]  # beside the curl line
    # the examples/ copy of the README's pod is the review's object
    import yaml

    assert yaml.safe_load((ROOT / "examples" / "workloads" / "pod.yaml").read_text()) == obj | {
        "metadata": {k: v for k, v in obj["metadata"].items() if k != "namespace"}
    }
