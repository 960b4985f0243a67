"""``check`` refuses what the apiserver's metadata validation refuses before any webhook runs: passing CI
must not promise an admission the apiserver will refuse (docs/ci.md)."""

from __future__ import annotations

from tests.conftest import POLICIES
from webhook.check.apiserver_limits import refused_by_apiserver
from webhook.cli import main

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: chat
  labels: {{gpu-admission.io/workload: inference{labels}}}
  annotations:
    gpu-admission.io/gpu-memory: 4Gi
{annotations}spec:
  containers: [{{name: c, image: i}}]
"""


def _check(tmp_path, capsys, text: str) -> tuple[int, str]:
    (tmp_path / "pod.yaml").write_text(text)
    capsys.readouterr()
    code = main(["check", str(tmp_path / "pod.yaml"), "--policy", str(POLICIES)])
    return code, capsys.readouterr().out


def test_a_5_mib_annotation_is_invalid_not_admitted(tmp_path, capsys):
    code, out = _check(tmp_path, capsys, POD.format(labels="", annotations=f"    note: {'x' * (5 << 20)}\n"))
    assert code == 2
    assert "pod.yaml:6: invalid: the apiserver would refuse it: metadata.annotations: annotations take 5.0 MiB in " \
        "total; the apiserver allows 256.0 KiB" in out
    assert "0 admitted, 0 warned, 0 denied, 0 skipped, 1 invalid" in out


def test_annotations_just_under_the_limit_are_judged(tmp_path, capsys):
    key = "note"
    room = 256 * 1024 - len(key) - len("gpu-admission.io/gpu-memory") - len("4Gi")
    code, out = _check(tmp_path, capsys, POD.format(labels="", annotations=f"    {key}: {'x' * room}\n"))
    assert "invalid" not in out.split("checked")[0] and "Pod/chat" in out
    code, out = _check(tmp_path, capsys, POD.format(labels="", annotations=f"    {key}: {'x' * (room + 1)}\n"))
    assert code == 2 and "annotations take 256.0 KiB in total" in out


def test_label_values_and_keys_and_names(tmp_path, capsys):
    code, out = _check(tmp_path, capsys, POD.format(labels=f", team: {'a' * 64}", annotations=""))
    assert code == 2 and "metadata.labels.team: label value of 'team' (64 characters" in out
    assert _check(tmp_path, capsys, POD.format(labels=f", team: {'a' * 63}", annotations=""))[0] == 0
    code, out = _check(tmp_path, capsys, POD.format(labels=", 'bad key!': x", annotations=""))
    assert code == 2 and "label key 'bad key!'" in out
    code, out = _check(tmp_path, capsys, POD.format(labels=", team: 'has space'", annotations=""))
    assert code == 2 and "label value of 'team'" in out
    code, out = _check(tmp_path, capsys, POD.replace("name: chat", "name: Chat_1").format(labels="", annotations=""))
    assert code == 2 and "metadata.name: name 'Chat_1' must be a lower-case DNS subdomain" in out


def test_a_pod_templates_metadata_is_validated_too():
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "Team_A"},
        "spec": {"template": {"metadata": {"labels": {"app": "x" * 64}, "annotations": {"a/b/c": "1"}}}},
    }
    found = dict(refused_by_apiserver(deployment))
    assert set(found) == {
        ("metadata", "namespace"),
        ("spec", "template", "metadata", "labels", "app"),
        ("spec", "template", "metadata", "annotations"),
    }
    assert "DNS label" in found[("metadata", "namespace")]
    assert "prefix 'a/b' must be a lower-case DNS subdomain" in found[("spec", "template", "metadata", "annotations")]


def test_ordinary_metadata_passes():
    ok = {
        "metadata": {
            "name": "llama-70b.serving",
            "labels": {"app.kubernetes.io/name": "llama", "empty": "", "n": 3},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}" * 1000},
        }
    }
    assert refused_by_apiserver(ok) == []
