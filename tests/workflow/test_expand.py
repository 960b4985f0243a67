"""``check --expand``: the pods a workload's controller will create, as the webhook admits them (gator's
``expand``). A Deployment alone shows no pod; with --expand CI sees the pod's GPU resources, pool and
priority, and a pod the webhook would deny or warn about fails the check like the workload would."""

from __future__ import annotations

import json

import yaml

from tests.conftest import POLICIES, ROOT

DEPLOYMENT = ROOT / "examples" / "workloads" / "deployment.yaml"


def _pods(out: str) -> list[dict]:
    """The pods printed after `expands to`, each a `    | `-prefixed YAML block."""
    pods, current = [], None
    for line in out.splitlines():
        if line.startswith("  expands to "):
            current = []
            pods.append(current)
        elif current is not None and line.startswith("    | "):
            current.append(line[6:])
        elif current is not None and not line.startswith("    "):
            current = None
    return [yaml.safe_load("\n".join(p)) for p in pods]


def test_a_deployment_expands_to_its_pod_as_admitted(cli):
    plain = cli("check", DEPLOYMENT, "--policy", POLICIES)
    assert "expands to" not in plain.out and "nvidia.com/mig" not in plain.out  # without --expand: no pod
    run = cli("check", DEPLOYMENT, "--policy", POLICIES, "--expand")
    assert run.code == 0, run.out
    assert "  expands to 3 pod(s) from spec.template: admitted, 4 patch operation(s)" in run.out
    (pod,) = _pods(run.out)
    assert pod["kind"] == "Pod" and pod["metadata"]["generateName"] == "embeddings-"
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "Deployment"
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/mig-3g.20gb"] == "1"
    assert pod["spec"]["nodeSelector"] == {"workload": "gpu-infer"}
    assert pod["spec"]["priorityClassName"] == "gpu-inference"


def test_a_denied_workload_creates_no_pods(tmp_path, cli):
    """The engine judges the templates with the workload: a template it would deny denies the workload,
    which then never exists to create pods."""
    text = DEPLOYMENT.read_text().replace("gpu-admission.io/gpu-memory: 10Gi", "gpu-admission.io/gpus: '3'")
    (tmp_path / "d.yaml").write_text(text)
    run = cli("check", tmp_path / "d.yaml", "--policy", POLICIES, "--expand")
    assert run.code == 1, run.out
    assert "Deployment/embeddings (namespace default): DENIED" in run.out and "[intent-invalid]" in run.out
    assert "expands to" not in run.out


def test_json_carries_the_expanded_pods(cli):
    run = cli("check", DEPLOYMENT, ROOT / "examples" / "workloads" / "pod.yaml", "--policy", POLICIES, "--expand",
              "-o", "json")
    results = {r["kind"]: r for r in json.loads(run.out)["results"]}
    (expanded,) = results["Deployment"]["expanded"]
    assert expanded["template"] == "spec.template" and expanded["replicas"] == 3 and expanded["allowed"] is True
    assert expanded["pod"]["spec"]["priorityClassName"] == "gpu-inference"
    assert "expanded" not in results["Pod"]  # a Pod is its own pod


def test_a_job_expands_with_the_mutations_of_the_job(cli):
    run = cli("check", ROOT / "examples" / "workloads" / "training-job.yaml", "--policy", POLICIES, "--expand")
    (pod,) = _pods(run.out)
    assert "&id" not in run.out  # no YAML anchors where the mutation shares a value
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "8" and pod["spec"]["nodeSelector"] == {"workload": "gpu-train"}
