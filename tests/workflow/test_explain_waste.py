"""``check --explain`` rendering and the GPU memory (waste) report, in text, JSON and JUnit."""

from __future__ import annotations

import json
from xml.etree import ElementTree as ET

from tests.conftest import POLICIES, ROOT
from webhook.check import explain

OBJECTS = POLICIES / "tests" / "objects"
EXCLUSIVE_8GI = """\
apiVersion: v1
kind: Pod
metadata:
  name: whole
  labels: {gpu-admission.io/workload: inference}
  annotations: {gpu-admission.io/gpu-memory: 8Gi, gpu-admission.io/isolation: exclusive}
spec:
  containers:
  - {name: s, image: x, resources: {limits: {cpu: "1", memory: 1Gi}}}
"""
JOB_2X2 = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: eval
  labels: {gpu-admission.io/workload: inference}
  annotations: {gpu-admission.io/gpu-memory: 30Gi, gpu-admission.io/gpus: "2", gpu-admission.io/isolation: exclusive}
spec:
  parallelism: 2
  template:
    spec:
      restartPolicy: Never
      containers:
      - {name: e, image: x, resources: {limits: {cpu: "1", memory: 1Gi}}}
"""


def test_explain_text_shows_the_documented_mig_choice(cli):
    run = cli("check", OBJECTS / "inference-pod.yaml", "--namespace", "team", "--explain")
    lines = run.out.splitlines()
    assert "    decision trace:" in lines
    assert "      namespace team: entitlement everyone-else -> classes training, inference, batch, dev" in lines
    assert "      pool infer-a100: taken (A100-40GB, 8 GPUs/node)" in lines
    assert "      backend: 4Gi on A100-40GB -> nvidia.com/mig-1g.5gb, the smallest profile >= 4Gi" in lines
    assert any(line.startswith("      rules: ") and "passed" in line for line in lines)
    assert not any(line.strip().startswith("rule ") and line.strip().endswith(": pass") for line in lines)
    assert "      patch: 4 operation(s)" in lines


def test_explain_puts_failing_rules_first_with_their_action(cli):
    ns = ROOT / "examples" / "ci" / "namespaces.yaml"  # ml-research: tier training
    run = cli("check", OBJECTS / "train-qwen.yaml", "-n", "ml-research", "--namespaces", ns, "--explain")
    block = run.out.split("Job/train-qwen", 3)[2]  # the minAvailable-4 document
    rules_at = block.index("rules: ")
    assert block.index("deny  gang-incomplete: minAvailable 4 < 8 replicas") < block.index("pass  ", rules_at)
    assert "adopted as class training" in block and "gang: backend volcano, 8 pod(s), name train-qwen" in block


def test_explain_in_json_is_raw_and_structured(cli):
    run = cli("check", OBJECTS / "inference-pod.yaml", "-n", "team", "--explain", "-o", "json")
    (result,) = json.loads(run.out)["results"]
    assert "backend: 4Gi on A100-40GB -> nvidia.com/mig-1g.5gb, the smallest profile >= 4Gi" in result["explanation"]
    steps = {s["step"]: s["text"] for s in result["trace"]["steps"]}
    assert steps["backend"] == "4Gi on A100-40GB -> nvidia.com/mig-1g.5gb, the smallest profile >= 4Gi"
    assert steps["pool"].startswith("infer-a100: taken") and steps["class"].startswith("pod: inference")
    assert "extended-resource" in result["trace"]["rules"]["passed"] and result["trace"]["rules"]["failed"] == []


def test_explain_keeps_unknown_lines():
    trace = explain.parse(["namespace x: no entitlement", "something new from the engine", "rule a: pass"])
    assert ("note", "something new from the engine") in trace.steps
    assert "      something new from the engine" in explain.render(["something new from the engine"])


def test_waste_lines_and_summary(tmp_path, cli):
    manifests = tmp_path / "m.yaml"
    manifests.write_text(EXCLUSIVE_8GI + "---\n" + JOB_2X2)
    run = cli("check", OBJECTS / "inference-pod.yaml", manifests, "-n", "team")
    out = run.out
    # a 1g.5gb holds 4864Mi (nvidia-smi mig -lgip: 4.75Gi), not the 5Gi of its name
    assert "  gpu memory: 4Gi requested on a MIG 1g.5gb of A100-40GB (4864Mi): 84% used, 768Mi idle\n" in out
    assert "  gpu memory: 8Gi requested on a whole A100-40GB (40Gi): 20% used, 32Gi idle\n" in out
    assert (
        "  gpu memory: 30Gi requested on a whole A100-40GB (40Gi): 75% used, "
        "10Gi idle per device x 2 devices x 2 pods = 40Gi idle\n"
    ) in out
    # 4 + 8 + 30*4 = 132Gi requested of 4.75 + 40 + 40*4 = 204.75Gi
    assert out.splitlines()[-1].endswith(
        "GPU memory: 132Gi requested of 204.8Gi allocated (64% used, 72.8Gi idle) across 3 objects"
    )


def test_waste_for_undeclared_and_denied(cli):
    ns = ROOT / "examples" / "ci" / "namespaces.yaml"  # ml-research: tier training
    run = cli("check", OBJECTS / "train-qwen.yaml", "-n", "ml-research", "--namespaces", ns)
    first, denied = run.out.split("Job/train-qwen")[1:3]
    assert (
        # an H100-80GB reports 81559Mi (GFD nvidia.com/gpu.memory), not 80Gi
        "gpu memory: no gpu-memory declared: 1 device per pod x 8 pods on a whole H100-80GB (81559Mi), "
        "637.2Gi allocated"
    ) in first
    assert "gpu memory" not in denied  # a denied object occupies no device
    assert run.out.splitlines()[-1].endswith("637.2Gi allocated to 1 object without gpu-memory")


def test_waste_in_json_and_junit(tmp_path, cli):
    manifests = tmp_path / "m.yaml"
    manifests.write_text(EXCLUSIVE_8GI)
    report = json.loads(cli("check", manifests, "-o", "json").out)
    gpu = report["results"][0]["gpuMemory"]
    assert gpu["usedPercent"] == 20 and gpu["idleBytesPerDevice"] == 32 * 2**30 and gpu["devices"] == 1
    assert gpu["text"] == "8Gi requested on a whole A100-40GB (40Gi): 20% used, 32Gi idle"
    total = report["summary"]["gpuMemory"]
    assert total["requestedBytes"] == 8 * 2**30 and total["allocatedBytes"] == 40 * 2**30 and total["usedPercent"] == 20
    junit = cli("check", manifests, "-o", "junit").out
    suite = ET.fromstring(junit.split("?>", 1)[1])
    props = {p.get("name"): p.get("value") for p in suite.findall("properties/property")}
    assert props["gpuMemory.idleBytes"] == str(32 * 2**30) and "20% used" in props["gpuMemory.summary"]
    case_props = {p.get("name"): p.get("value") for p in suite.findall("testcase/properties/property")}
    assert case_props["gpuMemory.usedPercent"] == "20"


def test_a_bare_pod_gang_counts_each_pod_once(cli, tmp_path):
    """Two pods of a gang of 2, 8 H100s each: 16 cards of 81559 MiB, the memory an H100-80GB node reports (each
    pod object is one pod, not the gang: not 2 x 16 cards)."""
    pod = (
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: w{i}\n  labels: {{gpu-admission.io/workload: training}}\n"
        "  annotations: {{gpu-admission.io/gpus: '8', gpu-admission.io/gang: g1, gpu-admission.io/gang-size: '2'}}\n"
        "spec:\n  containers: [{{name: c, image: i}}]\n"
    )
    path = tmp_path / "gang.yaml"
    path.write_text("---\n".join(pod.format(i=i) for i in range(2)))
    run = cli("check", path, "--namespace", "ml", "-o", "json")
    report = json.loads(run.out)
    assert [r["gpuMemory"]["pods"] for r in report["results"]] == [1, 1]
    assert report["summary"]["gpuMemory"]["undeclaredBytes"] == 16 * 81559 * 2**20
    text = cli("check", path, "--namespace", "ml").out
    assert "1274.4Gi allocated to 2 objects without gpu-memory" in text and "2548.7Gi" not in text
