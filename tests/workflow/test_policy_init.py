"""``policy init`` gives a pip-installed CLI the shipped default to adapt: the same files as the
repository's policies/, which then lint, test and check cleanly."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import POLICIES
from webhook.cli import main

SCAFFOLD = Path(__file__).resolve().parents[2] / "webhook" / "policy" / "scaffold"


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_packaged_scaffold_is_the_shipped_policy_directory():
    """Edit policies/ and copy it: cp -r policies/. webhook/policy/scaffold/"""
    assert _tree(SCAFFOLD) == _tree(POLICIES)


def test_init_writes_a_policy_that_lints_tests_and_checks(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
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
    pod = POLICIES / "tests" / "objects" / "inference-pod.yaml"
    assert main(["check", str(pod)]) == 2
    err = capsys.readouterr().err
    assert "--policy DIR" in err and "gpu-admission policy init" in err
