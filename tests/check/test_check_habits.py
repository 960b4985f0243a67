"""``check`` as kubectl users and large repositories use it: clearer flag names (old spellings kept),
a failures-only mode, and directories that hold kustomize files and Helm charts beside manifests."""

from __future__ import annotations

import pytest

from tests.check.test_check_cli import INFER, SERVICE
from tests.conftest import POLICIES
from webhook.cli import main

RAW16 = """\
apiVersion: v1
kind: Pod
metadata: {name: raw16}
spec:
  containers:
  - {name: c, image: i, resources: {limits: {nvidia.com/gpu: 16}}}
"""
SERVING_NS = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n  labels: {gpu-admission.io/tier: sandbox}\n"
TRAIN = (
    "apiVersion: v1\nkind: Pod\nmetadata:\n  name: t\n  namespace: shop\n"
    "  labels: {gpu-admission.io/workload: training}\nspec:\n  containers: [{name: c, image: i}]\n"
)


def _check(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["check", *map(str, args), "--policy", str(POLICIES)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(("new", "old"), [("--cluster-objects", "--context"), ("--namespace-labels", "--namespaces")])
def test_the_new_names_and_the_old_spellings_mean_the_same(tmp_path, capsys, new, old):
    (tmp_path / "ns.yaml").write_text(SERVING_NS)
    (tmp_path / "pod.yaml").write_text(TRAIN)
    code_new, out_new, _ = _check(capsys, tmp_path / "pod.yaml", new, tmp_path / "ns.yaml")
    code_old, out_old, _ = _check(capsys, tmp_path / "pod.yaml", old, tmp_path / "ns.yaml")
    assert (code_new, out_new) == (code_old, out_old)
    assert code_new == 1 and "class-not-allowed" in out_new  # the sandbox label was read: training is not entitled


def test_quiet_lists_only_denied_warned_and_problems(tmp_path, capsys):
    (tmp_path / "a.yaml").write_text(SERVICE + "---\n" + INFER)
    (tmp_path / "b.yaml").write_text(RAW16)
    (tmp_path / "c.yaml").write_bytes(b"kind: ConfigMap\ndata: {a: caf\xe9}\n")
    code, out, _ = _check(capsys, tmp_path, "--quiet")
    lines = out.splitlines()
    assert code == 2
    assert not any("Pod/infer" in line for line in lines)  # admitted: counted, not listed
    assert any("Pod/raw16" in line and "DENIED" in line for line in lines)
    assert any(line.startswith(f"{tmp_path / 'c.yaml'}:2: error: not UTF-8") for line in lines)
    assert lines[-1].startswith("checked 4 document(s): 1 admitted, 0 warned, 1 denied, 1 skipped")
    _, everything, _ = _check(capsys, tmp_path)
    assert "Pod/infer" in everything
    with pytest.raises(SystemExit) as usage:
        main(["check", str(tmp_path), "-q", "-v"])
    assert usage.value.code == 2


def test_kustomize_files_and_helm_charts_are_skipped_with_a_note(tmp_path, capsys):
    (tmp_path / "pod.yaml").write_text(INFER)
    (tmp_path / "kustomization.yaml").write_text("resources: [pod.yaml]\n")  # kustomize's short form
    chart = tmp_path / "charts" / "web"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: web\nversion: 0.1.0\n")
    (chart / "values.yaml").write_text("replicas: 1\n")
    (chart / "templates" / "deploy.yaml").write_text("metadata:\n  labels:\n    {{- include \"l\" . | nindent 4 }}\n")
    code, out, _ = _check(capsys, tmp_path)
    assert code == 0, out
    assert f"{tmp_path / 'kustomization.yaml'}: kustomize configuration, skipped: not a manifest; " in out
    assert f"`kubectl kustomize {tmp_path} | gpu-admission check -`" in out
    assert f"{chart}: a Helm chart, skipped: " in out
    assert f"`helm template RELEASE {chart} | gpu-admission check -`" in out
    assert "Pod/infer" in out and "error" not in out
    assert _check(capsys, chart)[0] == 0  # the chart itself, named: the same note
