"""``settings.inTree``: the cluster's in-tree render recorded in the policy, each field overridden by its
flag (``--kube-version``, ``--mutating``/``--no-mutating``, ``--availability``); lint's ``render-needed``
follows the setting."""

from __future__ import annotations

import pytest
import yaml

from webhook.cli import main

MAP = "MutatingAdmissionPolicy"

POLICY = """\
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
spec:
  settings:
    inTree: {in_tree}
  pools:
    a100:
      gpuModel: A100-80GB
      gpusPerNode: 8
      nodeSelector: {{pool: a100}}
  classes:
    inference:
      pools: [a100]
  namespaces:
    - selector: {{}}
      classes: [inference]
"""


def write(tmp_path, in_tree: str):
    policies = tmp_path / "policies"
    policies.mkdir(exist_ok=True)
    (policies / "policy.yaml").write_text(POLICY.format(in_tree=in_tree))
    return policies


def kinds(capsys, *args) -> list[str]:
    assert main(["policy", "render", *args]) == 0
    return [d["kind"] for d in yaml.safe_load_all(capsys.readouterr().out) if d]


def modes(capsys, *args) -> set[str]:
    assert main(["policy", "render", *args]) == 0
    docs = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    return {
        d["metadata"]["annotations"]["gpu-admission.io/availability"]
        for d in docs
        if d["kind"].endswith("WebhookConfiguration")
    }


def test_kube_version_setting_emits_the_maps_and_the_flag_overrides_it(tmp_path, capsys):
    policies = write(tmp_path, '{kubeVersion: "1.36"}')
    assert MAP in kinds(capsys, "--in-tree", str(policies))
    assert MAP not in kinds(capsys, "--in-tree", "--kube-version", "1.30", str(policies))
    assert MAP not in kinds(capsys, "--in-tree", "--no-mutating", str(policies))


def test_mutating_false_keeps_validating_only_unless_the_flag_says_otherwise(tmp_path, capsys):
    policies = write(tmp_path, '{kubeVersion: "1.36", mutating: false}')
    found = kinds(capsys, "--in-tree", str(policies))
    assert MAP not in found and "ValidatingAdmissionPolicy" in found
    assert MAP in kinds(capsys, "--in-tree", "--mutating", str(policies))


def test_without_the_setting_nothing_changes(tmp_path, capsys):
    policies = write(tmp_path, "{}")
    assert MAP not in kinds(capsys, "--in-tree", str(policies))
    assert MAP in kinds(capsys, "--in-tree", "--kube-version", "1.36", str(policies))
    assert modes(capsys, str(policies)) == {"webhook"}


def test_availability_setting_and_its_flag(tmp_path, capsys):
    policies = write(tmp_path, "{availability: in-tree}")
    assert modes(capsys, str(policies)) == {"in-tree"}
    assert modes(capsys, "--availability", "webhook", str(policies)) == {"webhook"}


@pytest.mark.parametrize(
    ("in_tree", "says"),
    [
        ("{kubeVersion: 1.36}", "quote the version"),
        ('{kubeVersion: "one.two"}', "kubeVersion"),
        ("{mutating: sometimes}", "mutating"),
        ("{availability: maybe}", "availability"),
        ("{kubeVersoin: '1.36'}", "kubeVersoin"),
    ],
)
def test_a_bad_setting_is_a_clear_error_naming_the_field(tmp_path, capsys, in_tree, says):
    policies = write(tmp_path, in_tree)
    assert main(["policy", "render", "--in-tree", str(policies)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and says in captured.err and "Traceback" not in captured.err
    assert "policy.yaml:5" in captured.err, captured.err  # file and line of settings.inTree
    assert main(["policy", "lint", str(policies)]) != 0
    assert says in capsys.readouterr().out


def test_render_needed_follows_the_setting(tmp_path, capsys):
    """lint's render-needed (SPEC §12, #24 item 6): the in-tree manifest beside the policy directory is
    compared with what the policy renders, the setting included."""
    policies = write(tmp_path, '{kubeVersion: "1.36"}')
    manifest = tmp_path / "manifests" / "in-tree" / "rendered.yaml"
    manifest.parent.mkdir(parents=True)
    assert main(["policy", "render", "--in-tree", str(policies)]) == 0
    manifest.write_text(capsys.readouterr().out)
    assert "kind: MutatingAdmissionPolicy\n" in manifest.read_text()
    main(["policy", "lint", str(policies)])
    assert "render-needed" not in capsys.readouterr().out
    write(tmp_path, '{kubeVersion: "1.36", mutating: false}')  # the MAPs must go: the manifest is stale
    main(["policy", "lint", str(policies)])
    out = capsys.readouterr().out
    assert "[render-needed]" in out and "--in-tree" in out and str(manifest) in out
    assert main(["policy", "render", "--in-tree", str(policies)]) == 0
    manifest.write_text(capsys.readouterr().out)
    main(["policy", "lint", str(policies)])
    assert "render-needed" not in capsys.readouterr().out


def test_render_needed_when_a_class_change_alters_the_in_tree_policies(tmp_path, capsys):
    policies = write(tmp_path, "{}")
    manifest = tmp_path / "manifests" / "in-tree" / "rendered.yaml"
    manifest.parent.mkdir(parents=True)
    assert main(["policy", "render", "--in-tree", str(policies)]) == 0
    manifest.write_text(capsys.readouterr().out)
    main(["policy", "lint", str(policies)])
    assert "render-needed" not in capsys.readouterr().out
    text = (policies / "policy.yaml").read_text().replace("pools: [a100]\n", "pools: [a100]\n      maxGPUs: 2\n")
    (policies / "policy.yaml").write_text(text)
    main(["policy", "lint", str(policies)])
    assert "[render-needed]" in capsys.readouterr().out


def test_availability_in_tree_is_render_needed_against_the_shipped_manifests(tmp_path, capsys):
    """The shipped webhook configurations run in `webhook` mode: a policy that records `in-tree` needs a
    re-render before the cluster runs the validating webhook fail-open."""
    policies = write(tmp_path, "{availability: in-tree}")
    main(["policy", "lint", str(policies)])
    out = capsys.readouterr().out
    assert "[render-needed] settings.inTree.availability (in-tree)" in out, out
    assert "policy.yaml:5" in out
    write(tmp_path, "{availability: webhook}")
    main(["policy", "lint", str(policies)])
    assert "render-needed" not in capsys.readouterr().out
