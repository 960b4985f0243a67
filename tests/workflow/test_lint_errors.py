"""``policy lint`` on broken policies: every error class at file:line:column, with its hint, and exit codes."""

from __future__ import annotations

import json

import pytest

from tests.conftest import POLICIES
from tests.workflow.conftest import DEFAULT_POLICY, line_of, write_policy

# (name, edit of default.yaml, the line the error must point at, text the output must contain)
BROKEN = [
    (
        "unknown field -> nearest valid name",
        ("gpusPerNode: 4", "gpusPerNod: 4"),
        "gpusPerNod: 4",
        "spec.pools.dev-cgpu.gpusPerNod: unknown field 'gpusPerNod' (hint: did you mean 'gpusPerNode'?)",
    ),
    (
        "class -> unknown pool",
        ("pools: [dev-cgpu]", "pools: [dev-gpu]"),
        "pools: [dev-gpu]",
        "spec.classes.dev.pools[0]: unknown pool 'dev-gpu' (hint: did you mean 'dev-cgpu'?)",
    ),
    (
        "namespace rule -> unknown class",
        ("classes: [inference, batch]\n", "classes: [inferense, batch]\n"),
        "classes: [inferense, batch]",
        "spec.namespaces[0].classes[0]: unknown class 'inferense' (hint: did you mean 'inference'?)",
    ),
    (
        "MIG profile the GPU model does not offer",
        ("mig: {strategy: mixed, layout: all-balanced}", "mig: {strategy: mixed, profiles: [1g.5gb, 1g.6gb]}"),
        "profiles: [1g.5gb, 1g.6gb]",
        "spec.pools.infer-a100.mig.profiles[1]: A100-40GB has no MIG profile '1g.6gb' (hint: valid: 1g.5gb,",
    ),
    (
        "unknown GPU model",
        ("gpuModel: A10\n", "gpuModel: A100\n"),
        "gpuModel: A100$",
        "spec.pools.dev-cgpu.gpuModel: unknown GPU model 'A100' (hint: did you mean 'A10'?)",
    ),
    (
        "unknown rule id",
        ("whole-gpu-waste: {action: warn}", "whole-gpu-wast: {action: warn}"),
        "whole-gpu-wast:",
        "spec.rules.whole-gpu-wast: unknown rule id 'whole-gpu-wast' (hint: did you mean 'whole-gpu-waste'?)",
    ),
    (
        "type error",
        ("gpusPerNode: 4", "gpusPerNode: four"),
        "gpusPerNode: four",
        "spec.pools.dev-cgpu.gpusPerNode: Input should be a valid integer",
    ),
    (
        "duplicate key",
        ("      nodes: 4\n", "      nodes: 4\n      nodes: 5\n"),
        "nodes: 5",
        "spec.pools.dev-cgpu.nodes: duplicate key (hint: keep one of them)",
    ),
    (
        "MIG layout the GPU model does not have",
        ("layout: all-balanced}", "layout: all-balancd}"),
        "layout: all-balancd",
        "spec.pools.infer-a100.mig.layout: A100-40GB has no mig-parted layout 'all-balancd' "
        "(hint: did you mean 'all-balanced'?",
    ),
    (
        "more instances of a profile than a GPU holds",
        ("layout: all-balanced}", "profiles: {1g.5gb: 8}}"),
        "profiles: {1g.5gb: 8}",
        "spec.pools.infer-a100.mig.profiles.1g.5gb: 8 x 1g.5gb per GPU: a A100-40GB holds at most 7",
    ),
    (
        "layout and profiles together",
        ("layout: all-balanced}", "layout: all-balanced, profiles: [1g.5gb]}"),
        "layout: all-balanced, profiles",
        "set either layout (a mig-parted config name) or profiles, not both",
    ),
    (
        "YAML syntax error",
        ("    dev:\n      description: notebooks", "    dev:\n      description: [notebooks"),
        None,
        "YAML syntax error",
    ),
]


@pytest.mark.parametrize(("name", "edit", "anchor", "expected"), BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_policy_errors_at_file_line_with_hint(tmp_path, cli, name, edit, anchor, expected):
    old, new = edit
    assert old in DEFAULT_POLICY, name
    text = DEFAULT_POLICY.replace(old, new, 1)
    policy = write_policy(tmp_path / "policies", text)
    run = cli("policy", "lint", policy)
    assert run.code == 1, run.out
    file = str(policy / "default.yaml")
    errors = [line for line in run.out.splitlines() if ": error:" in line]
    assert any(expected in line for line in errors), run.out
    found = next(line for line in errors if expected in line)
    assert found.startswith(f"{file}:")
    line, column = (int(x) for x in found[len(file) + 1 :].split(":")[:2])
    if anchor is not None:
        assert line == line_of(text, anchor), found
    assert column >= 1
    assert "the policy does not load" in run.out.splitlines()[-1]


def test_json_output_lists_every_issue(tmp_path, cli):
    text = DEFAULT_POLICY.replace("pools: [dev-cgpu]", "pools: [dev-gpu]").replace(
        "classes: [inference, batch]\n", "classes: [inferense, batch]\n"
    )
    policy = write_policy(tmp_path / "p", text)
    run = cli("policy", "lint", policy, "-o", "json")
    report = json.loads(run.out)
    assert run.code == 1 and report["exitCode"] == 1 and report["errors"] == 2
    by_path = {i["path"]: i for i in report["issues"]}
    pool = by_path["spec.classes.dev.pools[0]"]
    assert pool["severity"] == "error" and pool["hint"] == "did you mean 'dev-cgpu'?" and pool["code"] is None
    assert pool["line"] == line_of(text, "pools: [dev-gpu]") and pool["file"].endswith("default.yaml")
    assert by_path["spec.namespaces[0].classes[0]"]["hint"] == "did you mean 'inference'?"


def test_errors_across_files_point_at_the_right_file(tmp_path, cli):
    policy = write_policy(tmp_path / "p", DEFAULT_POLICY)
    extra = (
        "apiVersion: gpu-admission.io/v1\nkind: GPUPolicy\nspec:\n  classes:\n"
        "    research:\n      pools: [train-h200]\n"
    )
    write_policy(policy, extra, "team.yaml")
    run = cli("policy", "lint", policy)
    assert run.code == 1
    assert f"{policy / 'team.yaml'}:6:" in run.out and "unknown pool 'train-h200'" in run.out


def test_clean_default_policy(cli):
    run = cli("policy", "lint", POLICIES)
    assert run.code == 0, run.out
    assert run.out.strip().endswith("0 errors, 0 warning(s): the policy loads")


def test_unreadable_directory_exits_2(tmp_path, cli):
    run = cli("policy", "lint", tmp_path / "missing")
    assert run.code == 2 and "policy path does not exist" in run.out
    (tmp_path / "empty").mkdir()
    run = cli("policy", "lint", tmp_path / "empty")
    assert run.code == 2 and "no *.yaml policy files" in run.out


def test_not_a_gpupolicy_document(tmp_path, cli):
    policy = write_policy(tmp_path / "p", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    run = cli("policy", "lint", policy)
    assert run.code == 1 and "expected apiVersion gpu-admission.io/v1 and kind GPUPolicy" in run.out
    assert "tests go in policies/tests/" in run.out
