"""The chapter this product grew from: its own manifests, read in place from ../shared/seed, as test cases."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.conftest import SEED, TRAINING_NS, need_shared
from tests.engine.helpers import assert_valid, run, violation
from webhook.cli import main


def chapter_manifests() -> list[str]:
    """The YAML blocks of the chapter: from an ``apiVersion:`` line to the next ``---``, comment or command."""
    text = need_shared(SEED).read_text(encoding="utf-8")
    blocks, current = [], None
    for line in text.splitlines():
        if line.startswith("apiVersion:"):
            current = [line]
        elif current is not None:
            if line.startswith(("---", "#", "kubectl", "nvidia-smi", "ibstat", "nccl")) or not line.strip():
                blocks.append("\n".join(current) + "\n")
                current = None
            else:
                current.append(line)
    if current:
        blocks.append("\n".join(current) + "\n")
    return blocks


@pytest.fixture(scope="module")
def mig_pod() -> dict:
    return yaml.safe_load(chapter_manifests()[0])


@pytest.fixture(scope="module")
def train_qwen_text() -> str:
    return chapter_manifests()[1]


def test_chapter_has_the_two_manifests(mig_pod, train_qwen_text):
    assert mig_pod["kind"] == "Pod"
    assert "minMember: 8" in train_qwen_text and "batch.volcano.sh/v1alpha1" in train_qwen_text


def test_mig_pod_passes(policy, mig_pod):
    d = run(policy, mig_pod)
    assert d.allowed
    assert [v.rule for v in d.violations] == ["raw-gpu-request"]  # admitted, with the advice to declare a class
    # a raw request keeps its resources but is pinned to the entitled pool offering them (rawRequests: pin)
    assert d.mutated["spec"]["nodeSelector"]["workload"] == "gpu-infer"
    assert all(op["path"].startswith(("/spec/nodeSelector", "/spec/tolerations")) for op in d.patch)


def test_train_qwen_with_min_available_8_passes_and_gets_pool_rdma_gang_topology(policy, train_qwen_text):
    job = yaml.safe_load(train_qwen_text.replace("minMember: 8", "minAvailable: 8"))
    d = run(policy, job, namespace="default")  # no namespace labels: as the chapter applies it
    assert d.allowed, d.message
    out = d.mutated
    task = out["spec"]["tasks"][0]["template"]
    spec = task["spec"]
    assert spec["nodeSelector"] == {"workload": "gpu-train"}
    assert {"key": "workload", "operator": "Equal", "value": "gpu-train", "effect": "NoSchedule"} in spec["tolerations"]
    assert task["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == "rdma-net-a@net1"
    torch = spec["containers"][0]
    assert torch["resources"]["limits"] == {"nvidia.com/gpu": 1, "rdma/rdma_shared_device_a": "1"}
    assert "IPC_LOCK" in torch["securityContext"]["capabilities"]["add"]
    assert out["spec"]["schedulerName"] == "volcano" and out["spec"]["minAvailable"] == 8
    keys = [
        t["podAffinityTerm"]["topologyKey"]
        for t in spec["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    ]
    assert keys == ["kubernetes.io/hostname", "network.topology.nvidia.com/leaf"]  # user's hostname term kept
    assert out["spec"]["networkTopology"] == {"mode": "soft", "highestTierAllowed": 1}
    assert_valid(out)


def test_train_qwen_with_min_available_4_is_denied(policy, train_qwen_text):
    job = yaml.safe_load(train_qwen_text.replace("minMember: 8", "minAvailable: 4"))
    d = run(policy, job, namespace="default")
    assert not d.allowed
    assert d.message.startswith("[gang-incomplete]")
    assert "minAvailable 4 < 8 replicas" in violation(d, "gang-incomplete").message


def test_chapter_min_member_is_reported_with_line_and_hint(tmp_path, capsys, train_qwen_text):
    manifest = tmp_path / "train-qwen.yaml"
    manifest.write_text(train_qwen_text)
    namespaces = tmp_path / "ns.yaml"
    namespaces.write_text(yaml.safe_dump({"default": TRAINING_NS}))
    code = main(["check", str(manifest), "--namespaces", str(namespaces), "-o", "json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1
    (result,) = report["results"]
    (unknown,) = [v for v in result["violations"] if v["rule"] == "unknown-field"]
    assert unknown["path"] == "spec.minMember"
    assert unknown["line"] == train_qwen_text.splitlines().index("  minMember: 8                 # 缺一卡也不開跑") + 1
    assert "did you mean minAvailable?" in unknown["message"]


def test_chapter_through_check_text(tmp_path, capsys):
    manifest = tmp_path / "chapter.yaml"
    manifest.write_text("---\n".join(chapter_manifests()))
    code = main(["check", str(manifest)])
    out = capsys.readouterr().out
    assert code == 1  # train-qwen as written: minMember is a PodGroup field, not a Volcano Job's
    assert "Pod/infer-mig (namespace default): admitted with warnings" in out
    assert "[unknown-field]" in out and "[class-not-allowed]" not in out  # ordinary namespaces may train


@pytest.mark.parametrize(("min_available", "code", "rule"), [(8, 0, None), (4, 1, "gang-incomplete")])
def test_check_with_no_namespace_information_judges_train_qwen_by_its_gang(
    tmp_path, capsys, train_qwen_text, min_available, code, rule
):
    """The shipped default lets ordinary namespaces (`default`, as the chapter applies it) train."""
    manifest = tmp_path / "train-qwen.yaml"
    manifest.write_text(train_qwen_text.replace("minMember: 8", f"minAvailable: {min_available}"))
    assert main(["check", str(manifest), "-o", "json"]) == code
    (result,) = json.loads(capsys.readouterr().out)["results"]
    assert result["namespace"] == "default"
    assert [v["rule"] for v in result["violations"] if v["action"] == "deny"] == ([rule] if rule else [])


def test_a_serving_only_namespace_may_not_train(policy, train_qwen_text):
    job = yaml.safe_load(train_qwen_text.replace("minMember: 8", "minAvailable: 8"))
    d = run(policy, job, labels={"gpu-admission.io/tier": "serving"})
    assert not d.allowed
    assert "class-not-allowed" in {v.rule for v in d.violations}
