"""``check`` sees DRA: the corpus's DRA pods are GPU pods, and ``--context`` reports a missing template."""

from __future__ import annotations

import json

import yaml

from tests.conftest import CORPUS, need_shared
from webhook.cli import main

DRA_FILES = (
    "k8s-dra-driver-gpu/gpu-test2.yaml",
    "k8s-dra-driver-gpu/v1beta1-gpu-test1.yaml",
    "k8s-dra-driver-gpu/mig-1g-12gb.yaml",
    "kueue/sample-dra-counter-job.yaml",
    "kai-scheduler/gpu-imex-pod.yaml",
)
MORE_DRA_FILES = ("k8s-dra-driver-gpu/nvbandwidth-test-job-1.yaml", "jobset/dra-jobset.yaml")

POD = """apiVersion: v1
kind: Pod
metadata: {name: trainer, namespace: team-a}
spec:
  resourceClaims:
  - {name: gpu, resourceClaimTemplateName: eight-gpus}
  containers:
  - name: torch
    image: registry/ml/torch:2
    resources:
      claims: [{name: gpu}]
"""
TEMPLATE = """apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: eight-gpus, namespace: team-a}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.nvidia.com, count: 8}
"""


def _json(capsys, *args: str) -> tuple[int, dict]:
    code = main(["check", *args, "-o", "json"])
    return code, json.loads(capsys.readouterr().out)


def _results(report: dict) -> list[dict]:
    return report["results"] if isinstance(report, dict) else report


def test_the_corpus_dra_pods_are_gpu_pods(capsys):
    paths = [str(need_shared(CORPUS / f)) for f in DRA_FILES]
    _code, report = _json(capsys, *paths)
    judged = [r for r in _results(report) if r["kind"] in ("Pod", "Job") and r["status"] != "skipped"]
    assert len(judged) == 6, [(r["kind"], r["name"], r["status"]) for r in _results(report)]
    by_name = {r["name"]: r for r in judged}
    # the templates and the DeviceClass in the same files resolve the claims: no claim-unresolved
    for name in ("pod", "pod1", "pod2", "mig-1g12gb-pod", "gpu-imex-pod"):
        assert "claim-unresolved" not in {v["rule"] for v in by_name[name]["violations"]}, name
    # Kueue's sample uses gpu.example.com, which nobody describes: warned, judged as a GPU
    job = next(r for r in judged if r["kind"] == "Job")
    assert "claim-unresolved" in {v["rule"] for v in job["violations"]}


def test_every_corpus_dra_manifest_is_judged_not_skipped(capsys):
    from tests.engine.test_dra import DRA_FILES as EVERY  # the engine test keeps the list complete

    assert set(DRA_FILES) | set(MORE_DRA_FILES) == set(EVERY)
    paths = [str(need_shared(CORPUS / f)) for f in MORE_DRA_FILES]
    _code, report = _json(capsys, *paths)
    judged = {r["kind"]: r for r in _results(report) if r["status"] != "skipped"}
    assert {"MPIJob", "JobSet"} <= set(judged), [(r["kind"], r["status"]) for r in _results(report)]
    # the ComputeDomain in the MPIJob's file resolves the IMEX channel claim; the JobSet's template is
    # not in the corpus: warned with the fix, and still a GPU workload
    assert "claim-unresolved" not in {v["rule"] for v in judged["MPIJob"]["violations"]}
    found = [v for v in judged["JobSet"]["violations"] if v["rule"] == "claim-unresolved"]
    assert found and "create ResourceClaimTemplate gpu-claim-template in default first" in found[0]["message"]


def test_the_documented_context_report_is_what_check_prints(tmp_path, capsys):
    """docs/ci.md shows the line `check --context` prints for a template missing from the namespace."""
    from pathlib import Path

    path = tmp_path / "pod.yaml"
    path.write_text(POD)
    context = tmp_path / "cluster.yaml"
    context.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}))
    code = main(["check", str(path), "--context", str(context), "--fail-on", "warn"])
    out = capsys.readouterr().out
    assert code == 1
    docs = (Path(__file__).resolve().parents[2] / "docs" / "ci.md").read_text()
    line = next(t for t in docs.splitlines() if t.startswith("[claim-unresolved] create ResourceClaimTemplate"))
    assert line in out, out


def test_a_template_in_the_inputs_resolves_the_claim(tmp_path, capsys):
    path = tmp_path / "m.yaml"
    path.write_text(TEMPLATE + "---\n" + POD)
    _code, report = _json(capsys, str(path))
    pod = next(r for r in _results(report) if r["kind"] == "Pod")
    assert "claim-unresolved" not in {v["rule"] for v in pod["violations"]}


def test_with_context_a_template_missing_from_the_namespace_is_reported(tmp_path, capsys):
    path = tmp_path / "pod.yaml"
    path.write_text(POD)
    context = tmp_path / "cluster.yaml"
    other_ns = yaml.safe_load(TEMPLATE)
    other_ns["metadata"]["namespace"] = "team-b"  # exists, but not where the pod runs
    context.write_text(
        yaml.safe_dump_all([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}, other_ns])
    )
    code, report = _json(capsys, str(path), "--context", str(context), "--fail-on", "warn")
    assert code == 1
    pod = next(r for r in _results(report) if r["kind"] == "Pod")
    found = [v for v in pod["violations"] if v["rule"] == "claim-unresolved"]
    assert found and "create ResourceClaimTemplate eight-gpus in team-a first" in found[0]["message"]
    assert found[0]["path"] == "spec.resourceClaims[0]"


def test_with_context_the_platforms_own_template_must_exist_in_the_namespace(tmp_path, capsys):
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "examples" / "dra-policy"
    path = tmp_path / "pod.yaml"
    path.write_text(POD.replace("eight-gpus", "gpu-admission-gpu-8"))
    context = tmp_path / "cluster.yaml"
    context.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}))
    # without --context the policy knows its own template: resolved, no warning
    _, report = _json(capsys, str(path), "--policy", str(example))
    pod = next(r for r in _results(report) if r["kind"] == "Pod")
    assert "claim-unresolved" not in {v["rule"] for v in pod["violations"]}
    # with the cluster's state, the template is not applied in team-a: say how to fix it
    _code, report = _json(capsys, str(path), "--policy", str(example), "--context", str(context))
    pod = next(r for r in _results(report) if r["kind"] == "Pod")
    found = [v for v in pod["violations"] if v["rule"] == "claim-unresolved"]
    assert found and "policy render" in found[0]["message"]


def test_with_context_an_admin_access_template_is_privileged_gpu(tmp_path, capsys):
    """A template whose request has adminAccess gives the container devices other pods hold: denied at
    the pod's claim entry; the same template without it passes."""
    path = tmp_path / "pod.yaml"
    path.write_text(POD)
    context = tmp_path / "cluster.yaml"
    admin = yaml.safe_load(TEMPLATE)
    admin["spec"]["spec"]["devices"]["requests"][0]["exactly"]["adminAccess"] = True
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "team-a", "labels": {"resource.kubernetes.io/admin-access": "true"}},
    }
    context.write_text(yaml.safe_dump_all([namespace, admin]))
    code, report = _json(capsys, str(path), "--context", str(context))
    assert code == 1
    pod = next(r for r in _results(report) if r["kind"] == "Pod")
    found = [v for v in pod["violations"] if v["rule"] == "privileged-gpu"]
    assert found and found[0]["path"] == "spec.resourceClaims[0]", pod["violations"]
    assert found[0]["message"].startswith(
        "container 'torch' gets request 'gpu' of claim 'gpu' (ResourceClaimTemplate eight-gpus) with adminAccess"
    )
    context.write_text(yaml.safe_dump_all([namespace, yaml.safe_load(TEMPLATE)]))
    _code, report = _json(capsys, str(path), "--context", str(context))
    pod = next(r for r in _results(report) if r["kind"] == "Pod")
    assert "privileged-gpu" not in {v["rule"] for v in pod["violations"]}


def test_a_template_is_judged_on_its_own_for_what_it_gives_a_pod(tmp_path, capsys):
    """``check`` of a template alone (it may be applied after the pod that names it): ``adminAccess`` is
    privileged-gpu; with a namespace whose pods all have a class maximum, ``allocationMode: All`` and a
    count past every entitled class are gpu-count-exceeded."""
    admin = yaml.safe_load(TEMPLATE)
    admin["spec"]["spec"]["devices"]["requests"][0]["exactly"]["adminAccess"] = True
    path = tmp_path / "template.yaml"
    path.write_text(yaml.safe_dump(admin))
    code, report = _json(capsys, str(path))
    assert code == 1
    (result,) = [r for r in _results(report) if r["kind"] == "ResourceClaimTemplate"]
    assert [v["rule"] for v in result["violations"]] == ["privileged-gpu"], result
    assert "adminAccess on a GPU" in result["violations"][0]["message"]

    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "examples" / "dra-policy" / "policy.yaml"
    policy = yaml.safe_load(example.read_text())
    policy["spec"]["rules"]["raw-gpu-request"]["namespaces"] = [
        {"selector": {"matchLabels": {"gpu-admission.io/raw-gpus": "denied"}}, "action": "deny"}
    ]
    policy_dir = tmp_path / "policy"
    policy_dir.mkdir()
    (policy_dir / "policy.yaml").write_text(yaml.safe_dump(policy))
    labels = {"gpu-admission.io/tier": "serving", "gpu-admission.io/raw-gpus": "denied"}
    context = tmp_path / "cluster.yaml"
    context.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": "team-a", "labels": labels}}))
    every = yaml.safe_load(TEMPLATE)
    every["spec"]["spec"]["devices"]["requests"][0]["exactly"] = {"deviceClassName": "gpu.nvidia.com",
                                                                   "allocationMode": "All"}
    path.write_text(yaml.safe_dump_all([every, yaml.safe_load(TEMPLATE)]))
    code, report = _json(capsys, str(path), "--policy", str(policy_dir), "--context", str(context))
    assert code == 1
    rules = [[v["rule"] for v in r["violations"]] for r in _results(report) if r["kind"] == "ResourceClaimTemplate"]
    assert rules == [["gpu-count-exceeded"], ["gpu-count-exceeded"]], rules  # All, then 8 GPUs (at most 2)
