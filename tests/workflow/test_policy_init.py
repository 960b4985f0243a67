"""``policy init`` gives a pip-installed CLI the shipped default to adapt: the packaged scaffold (the
product's default, which the product's tests load), which then lints, tests and checks cleanly.

The scaffold is the product's; a repository's ``policies/`` is its platform team's (this repository's
started as a copy) and may differ from it freely: tests/workflow/test_user_policy.py checks that one."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import POLICIES
from webhook.cli import main
from webhook.policy.schema import render_schema

SCAFFOLD = Path(__file__).resolve().parents[2] / "webhook" / "policy" / "scaffold"


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_tests_load_the_packaged_scaffold():
    """The default the product's tests judge is the one the package ships, not a checkout's policies/."""
    assert SCAFFOLD.resolve() == POLICIES
    assert {"default.yaml", "schema.json"} <= set(_tree(SCAFFOLD)) and any(_tree(SCAFFOLD / "tests"))


def test_the_scaffolds_schema_is_current():
    assert (SCAFFOLD / "schema.json").read_text(encoding="utf-8") == render_schema(), (
        "gpu-admission policy schema > webhook/policy/scaffold/schema.json"
    )


def test_init_writes_a_policy_that_lints_tests_and_checks(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GPU_ADMISSION_POLICY")  # a shell that never set it: the default is policies/
    assert main(["policy", "init"]) == 0
    assert _tree(tmp_path / "policies") == _tree(POLICIES)
    assert "gpu-admission policy lint policies" in capsys.readouterr().out
    assert main(["policy", "lint", "policies"]) == 0
    assert main(["policy", "test", "policies"]) == 0
    pod = tmp_path / "policies" / "tests" / "objects" / "inference-pod.yaml"
    assert main(["check", str(pod)]) == 0  # the default --policy policies now exists


def test_init_refuses_a_directory_with_files(tmp_path, capsys):
    (tmp_path / "mine.yaml").write_text("keep: me\n")
    assert main(["policy", "init", str(tmp_path)]) == 2
    assert "already has files" in capsys.readouterr().err
    assert (tmp_path / "mine.yaml").read_text() == "keep: me\n"
    assert main(["policy", "init", str(tmp_path), "--force"]) == 0
    assert (tmp_path / "mine.yaml").read_text() == "keep: me\n" and (tmp_path / "default.yaml").is_file()


def test_check_without_a_policy_directory_says_how_to_get_one(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GPU_ADMISSION_POLICY")
    pod = POLICIES / "tests" / "objects" / "inference-pod.yaml"
    assert main(["check", str(pod)]) == 2
    err = capsys.readouterr().err
    assert "--policy DIR" in err and "gpu-admission policy init" in err


def test_every_command_reads_the_policy_directory_from_the_environment(tmp_path, monkeypatch, capsys):
    """``$GPU_ADMISSION_POLICY`` (which serve reads too) is the default of check and policy lint|test|render;
    DIR or --policy wins over it."""
    monkeypatch.chdir(tmp_path)
    assert main(["policy", "init", "mine"]) == 0
    text = (tmp_path / "mine" / "default.yaml").read_text().replace("gpusPerNode: 4", "gpusPerNod: 4")
    (tmp_path / "mine" / "default.yaml").write_text(text)
    monkeypatch.setenv("GPU_ADMISSION_POLICY", str(tmp_path / "mine"))
    pod = POLICIES / "tests" / "objects" / "inference-pod.yaml"
    capsys.readouterr()
    for argv in (["check", str(pod)], ["policy", "test"], ["policy", "render"]):
        assert main(argv) == 2, argv
        assert "gpusPerNod" in capsys.readouterr().err, argv
    assert main(["policy", "lint"]) == 1
    assert "gpusPerNod" in capsys.readouterr().out
    assert main(["check", str(pod), "--policy", str(POLICIES)]) == 0
