"""``gpu-admission check`` as CI runs it: inputs, formats, exit codes, and file:line on every message."""

from __future__ import annotations

import json
import subprocess
import sys
from xml.etree import ElementTree as ET

import pytest
import yaml

from tests.conftest import ROOT
from webhook.cli import main

INFER = """apiVersion: v1
kind: Pod
metadata:
  name: infer
  labels: {gpu-admission.io/workload: inference}
  annotations: {gpu-admission.io/gpu-memory: 4Gi}
spec:
  containers:
  - name: vllm
    image: vllm:0.6
    resources:
      limits: {cpu: "2", memory: 8Gi}
      requests: {cpu: "2", memory: 8Gi}
"""
RAW = """apiVersion: v1
kind: Pod
metadata: {name: raw}
spec:
  containers:
  - {name: c, image: i, resources: {limits: {nvidia.com/gpu: 1}}}
"""
DENIED = """apiVersion: v1
kind: Pod
metadata:
  name: bad
  labels: {gpu-admission.io/workload: inference}
  annotations:
    gpu-admission.io/gpu-memory: 99Gi
spec:
  containers: [{name: c, image: i}]
"""
SERVICE = """# a comment that must survive
apiVersion: v1
kind: Service
metadata: {name: web}
spec: {ports: [{port: 80}]}
"""


def check(tmp_path, capsys, *docs: str, args: tuple[str, ...] = ()) -> tuple[int, str, str]:
    path = tmp_path / "manifests.yaml"
    path.write_text("---\n".join(docs))
    code = main(["check", str(path), *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_admitted_exits_0_and_names_file_and_line(tmp_path, capsys):
    code, out, _ = check(tmp_path, capsys, SERVICE, INFER)
    assert code == 0
    assert f"{tmp_path / 'manifests.yaml'}:7: Pod/infer (namespace default): admitted, 4 patch operation(s)" in out
    assert out.strip().splitlines()[-1].startswith("checked 2 document(s): 1 admitted, 0 warned, 0 denied, 1 skipped")


def test_denied_exits_1_with_the_field_line(tmp_path, capsys):
    code, out, _ = check(tmp_path, capsys, DENIED)
    assert code == 1
    assert f"{tmp_path / 'manifests.yaml'}:7: deny [gpu-memory-exceeded]" in out  # line of the annotation


def test_fail_on_warn(tmp_path, capsys):
    assert check(tmp_path, capsys, RAW)[0] == 0
    assert check(tmp_path, capsys, RAW, args=("--fail-on", "warn"))[0] == 1


def test_unreadable_input_and_bad_policy_exit_2(tmp_path, capsys):
    assert main(["check", str(tmp_path / "missing.yaml")]) == 2
    assert "no such file" in capsys.readouterr().out
    (tmp_path / "broken.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: [\n")
    assert main(["check", str(tmp_path / "broken.yaml")]) == 2
    assert "broken.yaml:4:1: error: YAML syntax error" in capsys.readouterr().out
    bad_policy = tmp_path / "pol"
    bad_policy.mkdir()
    (bad_policy / "p.yaml").write_text("apiVersion: gpu-admission.io/v1\nkind: GPUPolicy\nspec: {pols: {}}\n")
    (tmp_path / "ok.yaml").write_text(INFER)
    assert main(["check", str(tmp_path / "ok.yaml"), "--policy", str(bad_policy)]) == 2
    assert "p.yaml:3:8: error: spec.pols: unknown field 'pols' (hint: did you mean 'pools'?)" in capsys.readouterr().err


def test_not_a_kubernetes_object_is_invalid_exit_2(tmp_path, capsys):
    """Bad input, not a verdict: exit 2 as for an unreadable file (docs/ci.md, exit codes)."""
    code, out, _ = check(tmp_path, capsys, "version: v1\nsharing: {}\n")
    assert code == 2 and ":1: invalid: not a Kubernetes object" in out


def test_stdin_and_list_objects():
    listing = {"apiVersion": "v1", "kind": "List", "items": [yaml.safe_load(INFER), yaml.safe_load(RAW)]}
    proc = subprocess.run(
        [sys.executable, "-m", "webhook", "check", "-", "-o", "json"],
        cwd=ROOT,
        input=yaml.safe_dump(listing),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert [r["status"] for r in report["results"]] == ["admitted", "warned"]
    assert report["results"][0]["file"] == "<stdin>" and report["results"][1]["line"] > 1


def test_yaml_output_is_applyable_and_keeps_untouched_documents(tmp_path, capsys):
    code, out, err = check(tmp_path, capsys, SERVICE, INFER, RAW, args=("-o", "yaml"))
    assert code == 0
    docs = list(yaml.safe_load_all(out))
    assert [d["kind"] for d in docs] == ["Service", "Pod", "Pod"]
    assert docs[1]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/mig-1g.5gb"] == "1"
    assert out.startswith(SERVICE)  # verbatim, comment included
    assert docs[2]["spec"]["nodeSelector"] == {"workload": "gpu-infer"}  # a raw request is pinned, not translated
    assert "warn [raw-gpu-request]" in err  # diagnostics go to stderr, stdout stays applyable


def test_json_output(tmp_path, capsys):
    code, out, _ = check(tmp_path, capsys, INFER, DENIED, args=("-o", "json"))
    report = json.loads(out)
    infer, bad = report["results"]
    assert infer["patch"][0]["op"] in ("add", "replace", "remove") and infer["allowed"] is True
    assert bad["violations"][0]["rule"] == "gpu-memory-exceeded" and bad["violations"][0]["line"] == 21
    assert report["summary"]["denied"] == 1 and code == 1


def test_junit_output_is_valid_xml(tmp_path, capsys):
    _code, out, _ = check(tmp_path, capsys, SERVICE, INFER, DENIED, args=("-o", "junit"))
    suite = ET.fromstring(out.split("?>", 1)[1])
    assert suite.tag == "testsuite" and suite.get("tests") == "3" and suite.get("failures") == "1"
    assert suite.get("skipped") == "1"
    failure = suite.find("testcase/failure")
    assert failure is not None and failure.get("type") == "gpu-memory-exceeded"


def test_diff_and_explain(tmp_path, capsys):
    _code, out, _ = check(tmp_path, capsys, INFER, args=("--diff", "--explain"))
    assert "+        nvidia.com/mig-1g.5gb: '1'" in out
    assert "nvidia.com/mig-1g.5gb, the smallest profile >= 4Gi" in out
    assert "pool infer-a100: taken" in out


def test_namespaces_file_restricts_a_labelled_namespace(tmp_path, capsys):
    train = yaml.safe_load(INFER)
    train["metadata"]["labels"]["gpu-admission.io/workload"] = "training"
    (tmp_path / "ns.yaml").write_text(
        "apiVersion: v1\nkind: NamespaceList\nitems:\n- metadata:\n"
        "    name: serve\n    labels: {gpu-admission.io/tier: serving}\n"
    )
    manifest = tmp_path / "m.yaml"
    manifest.write_text(yaml.safe_dump(train))
    assert main(["check", str(manifest), "-n", "serve", "--namespaces", str(tmp_path / "ns.yaml")]) == 1
    assert main(["check", str(manifest), "-n", "other", "--namespaces", str(tmp_path / "ns.yaml")]) == 0
    capsys.readouterr()


@pytest.mark.parametrize("fmt", ["text", "json", "jsonl", "yaml", "junit", "github"])
def test_every_format_handles_every_status(tmp_path, capsys, fmt):
    code, out, _ = check(tmp_path, capsys, SERVICE, INFER, RAW, DENIED, args=("-o", fmt))
    assert code == 1 and out
    code, out, _ = check(tmp_path, capsys, SERVICE, INFER, RAW, DENIED, "plain: text\n", args=("-o", fmt))
    assert code == 2 and out


def test_directory_input_is_recursive(tmp_path, capsys):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "pod.yaml").write_text(INFER)
    (tmp_path / "a" / "notes.txt").write_text("not yaml")
    assert main(["check", str(tmp_path / "a"), "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["file"].endswith("pod.yaml") for r in report["results"]] == [True]


def test_check_is_fast_to_start():
    """check must not import the heavy server stack (kubernetes, gunicorn) to run."""
    code = (
        "import sys, io; from webhook.cli import main; sys.stdin = io.StringIO(''); "
        "main(['check', '-']); print(sorted(m for m in ('kubernetes', 'gunicorn', 'flask') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout + proc.stderr


AGENT_DS = """apiVersion: apps/v1
kind: DaemonSet
metadata: {name: node-agent}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      tolerations: [{operator: Exists}]
      containers:
      - name: agent
        image: agent:1
        volumeMounts: [{name: host, mountPath: /host}]
      volumes:
      - {name: host, hostPath: {path: /}}
"""


def test_a_cpu_daemonset_mounting_the_host_root_onto_sliced_nodes_is_denied_at_its_line(tmp_path, capsys):
    """privileged-gpu on a controller without GPUs: its pods tolerate every taint, so they land on the MIG
    nodes, and hostPath / reaches /dev there. Without the blanket toleration it is not a GPU workload."""
    code, out, _ = check(tmp_path, capsys, AGENT_DS)
    assert code == 1, out
    assert f"{tmp_path / 'manifests.yaml'}:13: deny [privileged-gpu] container 'agent' uses hostPath volume" in out
    code, out, _ = check(tmp_path, capsys, AGENT_DS.replace("      tolerations: [{operator: Exists}]\n", ""))
    assert code == 0 and "1 skipped" in out, out
