"""``check --as USER[,GROUP…]``: CI judges a manifest as the pipeline that will apply it, so a policy
exception for that pipeline shows as the audit entry admission will log (and the exit code agrees)."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.engine.test_exceptions import POLICY_DIR, a_deployment
from webhook.cli import main

MANIFEST = yaml.safe_dump(a_deployment())


def check(tmp_path, capsys, *args: str) -> tuple[int, str, str]:
    path = tmp_path / "deploy.yaml"
    path.write_text(MANIFEST)
    code = main(["check", str(path), "--policy", str(POLICY_DIR), "-n", "diag", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_without_as_the_rule_denies(tmp_path, capsys):
    code, out, _ = check(tmp_path, capsys, "--date", "2026-12-03")
    assert code == 1 and "deny [privileged-gpu]" in out


@pytest.mark.parametrize(
    "who",
    ["system:serviceaccount:ci:deployer", "alice", "dave,gpu-diagnostics", "bot,ci,gpu-diagnostics"],
)
def test_as_a_subject_the_finding_is_an_audit_entry_naming_the_exception(tmp_path, capsys, who):
    namespaces = tmp_path / "ns.yaml"
    namespaces.write_text("diag: {team: diag}\n")
    code, out, _ = check(tmp_path, capsys, "--as", who, "--date", "2026-12-03", "--namespaces", str(namespaces))
    assert code == 0, out
    assert "audit [privileged-gpu]" in out and "[exception dcgm-diag]" in out


def test_the_namespace_labels_decide_as_at_admission(tmp_path, capsys):
    """Offline the namespace has only its name label: the exception selects team=diag, so it does not apply."""
    code, out, _ = check(tmp_path, capsys, "--as", "alice", "--date", "2026-12-03")
    assert code == 1 and "deny [privileged-gpu]" in out


def test_as_someone_else_or_after_expiry_the_rule_denies(tmp_path, capsys):
    namespaces = tmp_path / "ns.yaml"
    namespaces.write_text("diag: {team: diag}\n")
    for args in (("--as", "mallory,tenants"), ("--as", "alice", "--date", "2027-01-31")):
        code, out, _ = check(tmp_path, capsys, *args, "--namespaces", str(namespaces))
        assert code == 1 and "deny [privileged-gpu]" in out, args


def test_json_names_the_exception(tmp_path, capsys):
    namespaces = tmp_path / "ns.yaml"
    namespaces.write_text("diag: {team: diag}\n")
    code, out, _ = check(
        tmp_path, capsys, "--as", "alice", "--date", "2026-12-03", "--namespaces", str(namespaces), "-o", "json"
    )
    assert code == 0
    (result,) = json.loads(out)["results"]
    (v,) = [v for v in result["violations"] if v["rule"] == "privileged-gpu"]
    assert (v["action"], v["exception"]) == ("audit", "dcgm-diag")


@pytest.mark.parametrize(
    ("args", "message"),
    [(("--as", ""), "--as: expected USER[,GROUP…]"), (("--as", "a,,b"), "--as"), (("--date", "tomorrow"), "--date")],
)
def test_bad_as_or_date_exit_2_with_one_line(tmp_path, capsys, args, message):
    code, _, err = check(tmp_path, capsys, *args)
    assert code == 2 and message in err and "Traceback" not in err


def test_explain_files_the_exception_step_and_names_it_on_the_rule(tmp_path, capsys):
    namespaces = tmp_path / "ns.yaml"
    namespaces.write_text("diag: {team: diag}\n")
    code, out, _ = check(
        tmp_path, capsys, "--as", "alice", "--date", "2026-12-03", "--namespaces", str(namespaces), "-o", "json",
        "--explain",
    )  # fmt: skip
    assert code == 0
    (result,) = json.loads(out)["results"]
    steps = result["trace"]["steps"]
    assert {"step": "exceptions", "text": "exception dcgm-diag: requester User:alice matches"} in steps
    (failed,) = [f for f in result["trace"]["rules"]["failed"] if f["rule"] == "privileged-gpu"]
    assert (failed["action"], failed["exception"]) == ("audit", "dcgm-diag")
