"""Every ``$ gpu-admission …`` sample in docs/*.md is what the tool prints now, as the README's are
(tests/workflow/test_readme.py): each sample is registered here with the files it needs (a policy with the
typo the text describes, a suite with a failing case), run through the real CLI, and compared line by line.
A sample that is not registered fails too, so a new one cannot go stale unseen.

Regenerate the blocks after an intended change of output: ``python -m tests.workflow.test_docs_samples``.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import POLICIES, ROOT
from webhook.cli import main

DOCS = ROOT / "docs"
BLOCK = re.compile(r"```(?:text|console)\n(\$ gpu-admission .*?)```\n", re.S)
TIMING = re.compile(r"\d+\.\d+s\b")  # `policy test` durations differ per run


def _policies(tmp: Path, edit: Callable[[str], str] = lambda t: t,
              suite: Callable[[str], str] = lambda t: t) -> None:
    shutil.copytree(POLICIES, tmp / "policies")
    policy = tmp / "policies" / "default.yaml"
    policy.write_text(edit(policy.read_text(encoding="utf-8")), encoding="utf-8")
    tests = tmp / "policies" / "tests" / "default-policy.test.yaml"
    tests.write_text(suite(tests.read_text(encoding="utf-8")), encoding="utf-8")


def _typo_in_a_field(tmp: Path) -> None:
    _policies(tmp, lambda t: t.replace("      gpusPerNode: 4\n", "      gpusPerNod: 4\n", 1))


def _typo_in_a_reference(tmp: Path) -> None:
    _policies(tmp, lambda t: t.replace("pools: [dev-cgpu]", "pools: [dev-cgpus]", 1))


def _a_failing_case(tmp: Path) -> None:
    _policies(tmp, suite=lambda t: t.replace(
        'containers:\n          - resources: {limits: {nvidia.com/mig-3g.20gb: "1"}}',
        'containers:\n          - resources: {limits: {nvidia.com/mig-2g.10gb: "1"}}', 1))


# (doc, the sample's first command) -> how to set up its working directory
SAMPLES: dict[tuple[str, str], Callable[[Path], None]] = {
    ("policy.md", "gpu-admission check policies/tests/objects/inference-pod.yaml --namespace team --explain"):
        _policies,
    ("policy.md", "gpu-admission policy lint policies/"): _typo_in_a_field,
    ("policy.md", "gpu-admission policy test policies/"): _a_failing_case,
}
# a sample of several commands: the later ones run after these edits
FOLLOW_UPS: dict[tuple[str, str], Callable[[Path], None]] = {
    ("policy.md", "gpu-admission policy lint policies/"): _typo_in_a_reference,
}


def _run(command: str, cwd: Path) -> list[str]:
    out = io.StringIO()
    old = Path.cwd()
    try:
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            main(shlex.split(command)[1:])
    finally:
        os.chdir(old)
    return out.getvalue().splitlines()


def render(doc: str, first: str, tmp: Path) -> list[str]:
    """The sample as the tool prints it: ``$ command`` lines, each followed by its output."""
    setup = SAMPLES[(doc, first)]
    setup(tmp)
    lines = [f"$ {first}", *_run(first, tmp)]
    follow = FOLLOW_UPS.get((doc, first))
    if follow is not None:
        shutil.rmtree(tmp / "policies")
        follow(tmp)
        lines += ["$ # fixed; run again:", f"$ {first}", *_run(first, tmp)]
    return [TIMING.sub("0.000s", line) for line in lines]


def samples() -> list[tuple[str, str, str]]:
    """(doc, first command, block text) of every ``$ gpu-admission`` sample in docs/*.md."""
    found = []
    for path in sorted(DOCS.glob("*.md")):
        for block in BLOCK.findall(path.read_text(encoding="utf-8")):
            found.append((path.name, block.splitlines()[0][2:], block))
    return found


def test_every_sample_is_registered():
    missing = [(doc, first) for doc, first, _ in samples() if (doc, first) not in SAMPLES]
    assert not missing, f"docs samples no test renders: {missing}; register them in {__file__}"
    assert len(samples()) >= len(SAMPLES)


@pytest.mark.parametrize(("doc", "first", "block"), samples(), ids=lambda v: str(v)[:40])
def test_the_sample_is_what_the_tool_prints(doc, first, block, tmp_path):
    expected = [TIMING.sub("0.000s", line) for line in block.splitlines()]
    assert render(doc, first, tmp_path) == expected, (
        f"docs/{doc}: the sample `{first}` is stale; regenerate: python -m tests.workflow.test_docs_samples"
    )


def _update() -> None:
    import tempfile

    for path in sorted(DOCS.glob("*.md")):
        text = path.read_text(encoding="utf-8")
        for block in BLOCK.findall(text):
            first = block.splitlines()[0][2:]
            with tempfile.TemporaryDirectory() as tmp:
                fresh = "\n".join(render(path.name, first, Path(tmp))) + "\n"
            text = text.replace(block, fresh, 1)
        path.write_text(text, encoding="utf-8")
        print(f"{path}: samples rendered", file=sys.stderr)


if __name__ == "__main__":
    _update()
