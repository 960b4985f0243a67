"""Errors that say where the mistake began and what was written: a YAML error names the line where its
mapping (or key) began, not only where the parser gave up; a type error echoes the bad value."""

from __future__ import annotations

from tests.workflow.conftest import DEFAULT_POLICY, write_policy

UNINDENTED = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n  labels:\n    a: b\n   e: f\nspec: {}\n"
NO_COLON = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n  labels\n  e: f\nspec: {}\n"


def test_check_names_the_line_where_the_mapping_began(tmp_path, cli):
    (tmp_path / "a.yaml").write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: n}\n---\n" + UNINDENTED)
    run = cli("check", tmp_path / "a.yaml")
    assert run.code == 2
    # the mapping of metadata began on the 4th line of the second document: line 8 of the file
    assert f"{tmp_path / 'a.yaml'}:11:4: error: YAML syntax error: did not find expected key (while parsing a block " \
        "mapping that began at line 8, column 3)" in run.out, run.out


def test_check_names_the_line_where_the_key_began(tmp_path, cli):
    (tmp_path / "b.yaml").write_text(NO_COLON)
    run = cli("check", tmp_path / "b.yaml")
    assert "(while scanning a simple key that began at line 5, column 3)" in run.out, run.out


def test_policy_lint_names_the_line_where_the_mapping_began(tmp_path, cli):
    text = DEFAULT_POLICY.replace("      gpusPerNode: 8\n", "      gpusPerNode: 8\n     stray: 1\n", 1)
    run = cli("policy", "lint", write_policy(tmp_path / "p", text))
    assert run.code == 1 and "that began at line " in run.out, run.out


def test_a_type_error_echoes_the_bad_value(tmp_path, cli):
    text = DEFAULT_POLICY.replace("gpusPerNode: 8", "gpusPerNode: eight", 1).replace("maxGPUs: 2", "maxGPUs: [2]", 1)
    run = cli("policy", "lint", write_policy(tmp_path / "p", text))
    assert run.code == 1
    assert "gpusPerNode: Input should be a valid integer, unable to parse string as an integer (got 'eight')" in run.out
    assert "maxGPUs: Input should be a valid integer (got [2])" in run.out


def test_a_long_bad_value_is_cut_short(tmp_path, cli):
    text = DEFAULT_POLICY.replace("gpusPerNode: 8", f"gpusPerNode: {'x' * 500}", 1)
    run = cli("policy", "lint", write_policy(tmp_path / "p", text))
    (line,) = [ln for ln in run.out.splitlines() if "gpusPerNode" in ln]
    assert "(got 'xxxx" in line and line.endswith("…)") and len(line) < 300
