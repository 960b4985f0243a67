"""``check`` never hides a GPU workload of ../shared/realworld/corpus (read in place; skipped without it).

The test finds GPU workloads on its own, independently of the engine: a document with a GPU extended
resource (the default policy's prefixes) above zero, an intent key, a KAI GPU-fraction annotation or
a pod resource claim. Every such document must be judged (admitted, warned or denied), never skipped;
a document the engine skips but whose resources merely *look* like a GPU (``example.com/gpu``, the
Kueue DRA example's device) is reported on its own line with how to make it judged, and is judged
once its DeviceClass is given as context.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import CORPUS, need_shared
from tests.engine.helpers import pod, rules, run
from webhook import yamlpos
from webhook.check.inputs import read_sources
from webhook.check.runner import Namespaces, Status, check_sources
from webhook.cli import main

GPU_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-", "aliyun.com/gpu", "volcano.sh/vgpu-", "tke.cloud.tencent.com/qgpu")
FRACTIONS = ("gpu-fraction", "gpu-memory")  # KAI scheduler pod annotations (docs/gpu-sharing)


def _gpu_evidence(node: Any) -> str | None:
    """Where a document holds GPU devices or intent, by a plain walk (not the engine's reading)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("limits", "requests") and isinstance(value, dict):
                for name, amount in value.items():
                    if str(name).startswith(GPU_PREFIXES) and str(amount) not in ("0", ""):
                        return f"{key}[{name}]"
            if key in ("labels", "annotations") and isinstance(value, dict):
                for name in value:
                    if str(name).startswith("gpu-admission.io/") or (key == "annotations" and name in FRACTIONS):
                        return f"{key}[{name}]"
            if key == "resourceClaims" and value:
                return "resourceClaims"
            found = _gpu_evidence(value)
            if found:
                return found
    elif isinstance(node, list):
        for item in node:
            found = _gpu_evidence(item)
            if found:
                return found
    return None


def _documents() -> list[tuple[str, dict]]:
    out = []
    for path in sorted(need_shared(CORPUS).rglob("*.yaml")):
        for doc in yamlpos.iter_documents(path.read_text(), with_nodes=False):
            if not isinstance(doc, yamlpos.SyntaxProblem) and isinstance(doc.data, dict) and doc.data.get("kind"):
                out.append((f"{path.relative_to(CORPUS)}:{doc.line}", doc.data))
    return out


def _results(policy, extra: list[str] = ()) -> list:
    sources = read_sources([str(p) for p in sorted(need_shared(CORPUS).rglob("*.yaml"))] + list(extra))
    return list(check_sources(policy, sources, namespaces=Namespaces("default", {})))


CONTEXT_KINDS = {"Namespace", "ResourceClaimTemplate", "ResourceClaim", "DeviceClass", "Node"}


def test_no_gpu_workload_of_the_corpus_is_skipped(policy):
    gpu_docs = {where for where, obj in _documents() if obj["kind"] not in CONTEXT_KINDS and _gpu_evidence(obj)}
    assert len(gpu_docs) >= 40, "the corpus holds dozens of GPU workloads"
    kai = {w for w in gpu_docs if w.startswith("kai-scheduler/gpu-")}
    assert {w.split(":")[0] for w in kai} >= {"kai-scheduler/gpu-sharing.yaml", "kai-scheduler/gpu-memory.yaml"}
    for r in _results(policy):
        where = f"{Path(r.file).relative_to(CORPUS)}:{r.line}"
        if r.status is Status.SKIPPED and where in gpu_docs:
            raise AssertionError(f"{where} holds GPU devices or intent ({_gpu_evidence(r.obj)}) and was skipped")


def test_a_gpu_lookalike_is_reported_on_its_own_line_and_judged_with_its_device_class(policy, tmp_path, capsys):
    results = _results(policy)
    attention = [r for r in results if r.attention]
    assert [Path(r.file).name for r in attention] == ["sample-dra-extended-resource-job.yaml"]
    message = attention[0].message
    assert "example.com/gpu" in message and "gpuResourcePrefixes" in message and "--cluster-objects" in message
    code = main(["check", str(need_shared(CORPUS)), "-o", "json"])
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert summary["unjudgedGpu"] == 1 and code == 2  # (2: plugin-config.yaml is not a Kubernetes object)
    device_class = tmp_path / "dc.yaml"
    device_class.write_text(
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: gpu.example.com}\n"
        "spec: {extendedResourceName: example.com/gpu}\n"
    )
    main(["check", str(need_shared(CORPUS)), "--context", str(device_class), "-o", "json"])
    report = json.loads(capsys.readouterr().out)
    assert report["summary"]["unjudgedGpu"] == 0


def test_a_kai_gpu_fraction_pod_is_a_gpu_pod(policy):
    """A pod whose only GPU is a KAI ``gpu-fraction`` annotation shares a card: it is judged (a raw
    request, pinned like one) and a privileged container in it is privileged-gpu (it would see the
    neighbours' memory on the shared card)."""
    frac = pod({"annotations": {"gpu-fraction": "0.5"}}, schedulerName="kai-scheduler")
    d = run(policy, frac)
    assert d.relevant and "raw-gpu-request" in rules(d)
    assert d.mutated["spec"].get("nodeSelector"), "pinned to an entitled pool offering whole GPUs"
    priv = pod(
        {"annotations": {"gpu-memory": "2000"}},
        [{"name": "c", "image": "x", "securityContext": {"privileged": True}}],
    )
    assert "privileged-gpu" in rules(run(policy, priv))
    assert not run(policy, pod({"annotations": {"other": "0.5"}})).relevant
