"""``check -o github``: workflow commands GitHub turns into annotations, escaped by GitHub's own rules."""

from __future__ import annotations

import re

from tests.conftest import POLICIES
from webhook.check.github import annotation, escape_data, escape_property

OBJECTS = POLICIES / "tests" / "objects"
COMMAND = re.compile(r"^::(error|warning|notice)(?: ([^:]*))?::(.*)$")


def test_escaping_follows_the_actions_toolkit():
    assert escape_data("100% done\r\nnext") == "100%25 done%0D%0Anext"
    assert escape_property("a:b,c%\n") == "a%3Ab%2Cc%25%0A"
    line = annotation("error", "line one\nline two: 5%", file="deploy/a,b.yaml", line=3, title="[rule-id]")
    assert line == "::error file=deploy/a%2Cb.yaml,line=3,title=[rule-id]::line one%0Aline two: 5%25\n"
    assert annotation("notice", "done") == "::notice::done\n"


def test_denials_warnings_and_summary(cli):
    run = cli("check", OBJECTS / "train-qwen.yaml", OBJECTS / "chapter-infer-mig.yaml", "-n", "team", "-o", "github")
    assert run.code == 1
    commands = [COMMAND.match(line) for line in run.out.splitlines() if line.startswith("::")]
    annotations = [m for m in commands if m is not None]
    errors = [m for m in annotations if m.group(1) == "error"]
    warnings = [m for m in annotations if m.group(1) == "warning"]
    notices = [m for m in annotations if m.group(1) == "notice"]
    qwen = str(OBJECTS / "train-qwen.yaml")
    assert any(f"file={qwen},line=" in m.group(2) and "title=[gang-incomplete]" in m.group(2) for m in errors)
    mig = str(OBJECTS / "chapter-infer-mig.yaml")
    (warning,) = [m for m in warnings if f"file={mig}" in m.group(2)]
    assert "title=[raw-gpu-request]" in warning.group(2) and warning.group(3).startswith(
        "Pod/infer-mig: GPUs requested"
    )
    assert warning.group(2).split("line=")[1].split(",")[0] == "4"  # metadata: (labels is missing)
    (notice,) = notices
    assert notice.group(2) == "title=gpu-admission check" and notice.group(3).startswith("checked 4 document(s)")


def test_fail_on_warn_turns_warnings_into_errors(cli):
    run = cli("check", OBJECTS / "chapter-infer-mig.yaml", "-o", "github", "--fail-on", "warn")
    assert run.code == 1 and "::error file=" in run.out and "title=[raw-gpu-request]" in run.out


def test_report_is_protected_from_command_injection(tmp_path, cli):
    evil = tmp_path / "evil.yaml"
    evil.write_text(
        # generateName: a name with a line break is refused as invalid metadata before it is judged
        'apiVersion: v1\nkind: Pod\nmetadata:\n  generateName: "x\\n::set-env name=A::1"\n'
        "spec:\n  nodeName: n1\n  containers:\n  - {name: c, image: i, resources: {limits: {nvidia.com/gpu: 1}}}\n"
    )
    out = cli("check", evil, "-o", "github").out
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("::stop-commands::"))
    token = lines[start].split("::")[2]
    end = lines.index(f"::{token}::")
    assert (
        start < end and lines[start - 1] == "::group::gpu-admission check report" and lines[end + 1] == "::endgroup::"
    )
    outside = lines[:start] + lines[end + 1 :]
    assert not any(line.startswith("::set-env") for line in outside)
    assert any(line.startswith("::set-env") for line in lines[start:end])  # only as inert text in the report
    assert any("Pod/x%0A::set-env name=A::1*: nodeName" in line for line in outside)


def test_lint_github_output(tmp_path, cli):
    text = (POLICIES / "default.yaml").read_text().replace("gpusPerNode: 4", "gpusPerNod: 4")
    (tmp_path / "default.yaml").write_text(text)
    run = cli("policy", "lint", tmp_path, "-o", "github")
    assert run.code == 1
    line = text.splitlines().index("      gpusPerNod: 4") + 1
    assert f"::error file={tmp_path / 'default.yaml'},line={line},col=7,title=policy error::" in run.out
