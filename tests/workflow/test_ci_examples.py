"""The CI examples and the pre-commit hooks users copy run commands that exist, against this repository."""

from __future__ import annotations

import re
import shlex
import shutil
import tomllib
from contextlib import redirect_stdout
from io import StringIO
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
import yaml

from tests.conftest import DEFAULT_POLICY_DIR, ROOT
from webhook.cli import main

EXAMPLES = ROOT / "examples" / "ci"
MANIFEST = "policies/tests/objects/inference-pod.yaml"


@pytest.fixture(autouse=True)
def platform_repo(tmp_path, monkeypatch):
    """The examples run in a platform team's repository: a fresh one holding the shipped default as
    ``policies/`` (what ``policy init`` writes), so they test the product, not this checkout's policy."""
    shutil.copytree(DEFAULT_POLICY_DIR, tmp_path / "policies")
    monkeypatch.chdir(tmp_path)
    return tmp_path
_VAR = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")


def gpu_admission_commands(script: str) -> list[str]:
    """Every ``gpu-admission …`` invocation in a shell script, up to a pipe, redirect or ``||``."""
    out = []
    for raw in script.replace("\\\n", " ").splitlines():
        line = raw.split(" #", 1)[0]
        at = line.find("gpu-admission ")
        if at < 0 or line[:at].strip().startswith("#") or "pip install" in line:
            continue
        command = re.split(r"\s(?:\|\||&&|\||>|;)\s?", line[at:])[0]
        out.append(command.strip())
    return out


def expand(command: str, env: dict[str, str], arrays: dict[str, list[str]]) -> list[str]:
    args: list[str] = []
    for token in shlex.split(command):
        array = re.fullmatch(r"\$\{(\w+)\[@\]\}", token)
        if array:
            args.extend(arrays[array.group(1)])
            continue
        args.append(_VAR.sub(lambda m: env[m.group(1)], token))
    assert args[0] == "gpu-admission", command
    return args[1:]


def run(args: list[str], monkeypatch) -> tuple[int, str]:
    buffer = StringIO()
    with redirect_stdout(buffer):
        try:
            code = main(args)
        except SystemExit as exc:  # argparse: an option the CLI does not have
            pytest.fail(f"`gpu-admission {' '.join(args)}` is not a valid command line (exit {exc.code})")
    return code, buffer.getvalue()


def test_console_script_is_the_hooks_entry():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["gpu-admission"] == "webhook.cli:main"


def test_pre_commit_hooks(monkeypatch):
    hooks = {h["id"]: h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    assert {"gpu-admission-check", "gpu-admission-policy-test"} <= set(hooks)
    for hook in hooks.values():
        assert hook["language"] == "python" and hook["entry"].split()[0] == "gpu-admission"
        assert hook["name"] and hook["description"]
        args = shlex.split(hook["entry"])[1:] + list(hook.get("args", []))
        if hook.get("pass_filenames", True):
            args.append(MANIFEST)  # pre-commit appends the staged files
            assert re.search(hook.get("exclude", "^$"), "policies/default.yaml")
            assert not re.search(hook.get("exclude", "^$"), "deploy/train.yaml")
        else:
            assert re.search(hook["files"], "policies/default.yaml")
        code, out = run(args, monkeypatch)
        assert code == 0, (hook["id"], out)


def test_github_actions_workflow(monkeypatch):
    workflow = yaml.safe_load((EXAMPLES / "github-actions.yaml").read_text())
    assert "pull_request" in workflow[True] or "pull_request" in workflow.get("on", {})  # YAML 1.1: on -> True
    env = dict(workflow["env"])
    assert env["POLICY_DIR"] == "policies"
    commands = [
        command
        for job in workflow["jobs"].values()
        for step in job["steps"]
        for command in gpu_admission_commands(step.get("run", ""))
    ]
    assert any(c.startswith("gpu-admission policy lint") for c in commands)
    assert any(c.startswith("gpu-admission policy test") for c in commands)
    (check,) = [c for c in commands if c.startswith("gpu-admission check")]
    assert "-o github" in check
    for command in commands:
        args = expand(command, env, {"files": [MANIFEST], "ns_args": []})
        code, out = run(args, monkeypatch)
        assert code == 0, (command, out)
        if args[0] == "check":
            assert "::notice title=gpu-admission check::checked 1 document(s): 1 admitted" in out


def test_gitlab_job_with_junit_reports(monkeypatch, tmp_path):
    config = yaml.safe_load((EXAMPLES / "gitlab-ci.yaml").read_text())
    (job,) = config.values()
    reports = job["artifacts"]["reports"]["junit"]
    assert job["artifacts"]["when"] == "always" and reports
    # GitLab stops a job's script at the first failing line: a step that fails must not stop the ones
    # after it, or the JUnit reports are never written (and "always upload" uploads nothing)
    steps = [line for line in job["script"] if "gpu-admission " in line]
    assert steps and all(re.search(r"\|\| (status=\$\?|true)\s*(#.*)?$", line) for line in steps), steps
    assert job["script"][-1] == "exit $status"
    env = dict(job["variables"], MANIFESTS=MANIFEST)
    written: dict[str, str] = {}
    for line in job["script"]:
        for command in gpu_admission_commands(line):
            code, out = run(expand(command, env, {}), monkeypatch)
            assert code == 0, (command, out)
            target = re.search(r">\s*(\S+\.xml)", line)
            if target:
                written[target.group(1)] = out
    assert sorted(written) == sorted(reports)
    for name, xml in written.items():
        root = ET.fromstring(xml.split("?>", 1)[1])
        assert root.tag in ("testsuite", "testsuites") and int(root.get("tests", "0")) >= 1, name


def test_examples_reference_files_that_exist():
    for name in ("github-actions.yaml", "gitlab-ci.yaml", "namespaces.yaml"):
        assert (EXAMPLES / name).is_file()
    doc = (ROOT / "docs" / "ci.md").read_text()
    for link in re.findall(r"\]\((\.\./[^)]+)\)", doc):
        assert (ROOT / "docs" / link).resolve().exists(), link
    assert Path(ROOT / ".pre-commit-hooks.yaml").is_file()


def _install_requirements() -> list[str]:
    github = yaml.safe_load((EXAMPLES / "github-actions.yaml").read_text())["env"]["GPU_ADMISSION"]
    (gitlab,) = yaml.safe_load((EXAMPLES / "gitlab-ci.yaml").read_text()).values()
    return [github, gitlab["variables"]["GPU_ADMISSION"]]


def test_examples_install_a_pinned_revision_from_source(tmp_path):
    """gpu-admission is on no package index: the examples install it from a git revision, and that form
    of requirement really installs this repository (pip resolves it from a local clone at HEAD)."""
    import json
    import subprocess
    import sys

    requirements = _install_requirements()
    for requirement in requirements:
        assert re.fullmatch(r"git\+https://\S+/gpu-admission@<commit-sha>", requirement), requirement
    hook_doc = (ROOT / ".pre-commit-hooks.yaml").read_text() + (ROOT / "docs" / "ci.md").read_text()
    assert "rev: v0." not in hook_doc, "no release tag exists to pin"
    assert "gpu-admission==" not in hook_doc, "gpu-admission is on no package index"
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: there is no revision to install")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    url = re.sub(r"git\+https://\S+/gpu-admission@<commit-sha>", f"git+file://{ROOT}@{head.strip()}", requirements[0])
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--report", str(report), url],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0 and "No matching distribution found for setuptools" in proc.stdout + proc.stderr:
        pytest.skip("no package index reachable for the build backend (setuptools)")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (item,) = json.loads(report.read_text())["install"]
    assert item["metadata"]["name"] == "gpu-admission"
    assert item["download_info"]["vcs_info"]["commit_id"] == head.strip()
