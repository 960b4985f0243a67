"""``check`` on Kubernetes 1.36 DRA objects: claim templates are judged on their own (tolerations,
the scheduler's marker, capacity from ResourceSlices in ``--context``), and two workloads of the inputs
claiming one ComputeDomain are denied."""

from __future__ import annotations

import json

import yaml

from webhook.cli import main


def _run(capsys, *args: str) -> tuple[int, list[dict]]:
    code = main(["check", *args, "--namespace", "team-a", "-o", "json"])
    report = json.loads(capsys.readouterr().out)
    return code, report["results"] if isinstance(report, dict) else report


def _write(path, *docs: dict) -> str:
    path.write_text(yaml.safe_dump_all(docs))
    return str(path)


TOLERANT = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "any-gpu", "namespace": "team-a"},
    "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
        "deviceClassName": "gpu.nvidia.com", "tolerations": [{"key": "gpu.nvidia.com/gpu-lost", "operator": "Exists"}],
    }}]}}},
}  # fmt: skip


def test_a_claim_template_in_the_inputs_is_judged(tmp_path, capsys):
    code, results = _run(capsys, _write(tmp_path / "rct.yaml", TOLERANT))
    (result,) = results
    assert code == 1 and result["status"] == "denied"
    assert [v["rule"] for v in result["violations"]] == ["device-taint-tolerated"]
    assert "gpu.nvidia.com/gpu-lost" in result["violations"][0]["message"]


def test_capacity_is_judged_against_the_context_slices(tmp_path, capsys):
    big = json.loads(json.dumps(TOLERANT))
    big["spec"]["spec"]["devices"]["requests"][0]["exactly"] = {
        "deviceClassName": "gpu.nvidia.com", "capacity": {"requests": {"memory": "96Gi"}}
    }  # fmt: skip
    slices = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "node-1"},
        "spec": {"driver": "gpu.nvidia.com", "nodeName": "node-1", "pool": {"name": "node-1"}, "devices": [{
            "name": "gpu-0", "allowMultipleAllocations": True,
            "capacity": {"memory": {
                "value": "80Gi", "requestPolicy": {"default": "8Gi", "validValues": ["8Gi", "40Gi", "80Gi"]},
            }},
        }]},
    }  # fmt: skip
    path = _write(tmp_path / "rct.yaml", big)
    code, results = _run(capsys, path)
    assert code == 0 and results[0]["status"] == "admitted"  # without slices nothing is known
    assert results[0]["violations"] == []
    context = _write(tmp_path / "cluster.yaml", slices)
    code, results = _run(capsys, path, "--context", context)
    (v,) = results[0]["violations"]
    assert code == 1 and v["rule"] == "claim-capacity-unsatisfiable" and "at most 80Gi" in v["message"]


def _job(name: str, channel: str) -> dict:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"minAvailable": 2, "tasks": [{"name": "worker", "replicas": 2, "template": {
            "metadata": {"labels": {"gpu-admission.io/workload": "training"},
                         "annotations": {"gpu-admission.io/gpus": "8"}},
            "spec": {"restartPolicy": "OnFailure",
                     "resourceClaims": [{"name": "imex", "resourceClaimTemplateName": channel}],
                     "containers": [{"name": "main", "image": "registry/ml/torch:2",
                                     "resources": {"claims": [{"name": "imex"}]}}]},
        }}]},
    }  # fmt: skip


def test_two_workloads_of_the_inputs_sharing_a_compute_domain_are_denied(tmp_path, capsys):
    cd = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": "nvl-a", "namespace": "team-a"},
        "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "nvl-a-channel"}}},
    }
    alone = _write(tmp_path / "one.yaml", cd, _job("run-1", "nvl-a-channel"))
    code, results = _run(capsys, alone)
    judged = [r for r in results if r["kind"] == "Job"]
    assert [v["rule"] for v in judged[0]["violations"] if v["rule"].startswith("compute-domain")] == []
    second = _write(tmp_path / "two.yaml", _job("run-2", "nvl-a-channel"))
    code, results = _run(capsys, alone, second)
    for r in (r for r in results if r["kind"] == "Job"):
        found = [v for v in r["violations"] if v["rule"] == "compute-domain-invalid"]
        other = "Job/run-2" if r["name"] == "run-1" else "Job/run-1"
        assert found and f"also claimed by {other}" in found[0]["message"], r
    assert code == 1
