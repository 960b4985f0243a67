"""``check --old FILE``: an UPDATE judged against the object it replaces, on the server's engine path
(``evaluate(..., operation="UPDATE", old_object=...)``), never re-mutated."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from tests.conftest import POLICIES, TRAINING_NS
from tests.engine.test_gangs import PROVIDERS
from webhook.cli import main
from webhook.engine import Request, report
from webhook.policy import load_policy

VCJOB = {
    "apiVersion": "batch.volcano.sh/v1alpha1",
    "kind": "Job",
    "metadata": {"name": "scaled", "namespace": "ml", "labels": {"gpu-admission.io/workload": "training"}},
    "spec": {
        "minAvailable": 2,
        "tasks": [
            {
                "name": "worker",
                "replicas": 2,
                "template": {"spec": {"containers": [{"name": "torch", "image": "registry/torch:2"}]}},
            }
        ],
    },
}
BATCH_JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {
        "name": "train",
        "namespace": "ml",
        "annotations": {"scheduling.volcano.sh/group-min-member": "2"},  # as our mutation stored it
    },
    "spec": {
        "parallelism": 2,
        "template": {
            "metadata": {"labels": {"gpu-admission.io/workload": "training"}},
            "spec": {
                "restartPolicy": "Never",
                "schedulerName": "volcano",
                "containers": [{"name": "torch", "image": "registry/torch:2"}],
            },
        },
    },
}
KUEUE_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "member-0",
        "namespace": "team",
        "labels": {"gpu-admission.io/workload": "kueue-train", "kueue.x-k8s.io/pod-group-name": "g1"},
        "annotations": {"kueue.x-k8s.io/pod-group-total-count": "2"},
    },
    "spec": {
        "nodeSelector": {"pool": "kueue"},
        "containers": [{"name": "main", "image": "registry/app:1", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
    },
}


def _files(tmp_path, old: dict, new: dict):
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(old))
    (tmp_path / "new.yaml").write_text(yaml.safe_dump(new))
    (tmp_path / "ns.yaml").write_text(yaml.safe_dump({"ml": TRAINING_NS, "team": {}}))
    return tmp_path / "old.yaml", tmp_path / "new.yaml", tmp_path / "ns.yaml"


def _check_json(capsys, policy_dir, new, old, ns) -> tuple[int, dict]:
    args = ["check", str(new), "--old", str(old), "--namespaces", str(ns), "--policy", str(policy_dir)]
    code = main([*args, "-o", "json"])
    report = json.loads(capsys.readouterr().out)
    results = report["results"] if isinstance(report, dict) else report
    return code, results[0]


def _scaled_job():
    new = copy.deepcopy(BATCH_JOB)
    new["spec"]["parallelism"] = 4
    return BATCH_JOB, new


def _raised_min_available():
    new = copy.deepcopy(VCJOB)
    new["spec"]["minAvailable"] = 4
    return VCJOB, new


def _renamed_group():
    new = copy.deepcopy(KUEUE_POD)
    new["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] = "Group_2"
    return KUEUE_POD, new


@pytest.mark.parametrize(
    ("case", "policy_dir", "rule"),
    [
        (_scaled_job, POLICIES, "gang-incomplete"),
        (_raised_min_available, POLICIES, "gang-unschedulable"),
        (_renamed_group, PROVIDERS, "workload-invalid"),
    ],
)
def test_old_judges_the_update_on_the_servers_engine_path(tmp_path, capsys, case, policy_dir, rule):
    old, new = case()
    old_path, new_path, ns = _files(tmp_path, old, new)
    code, result = _check_json(capsys, policy_dir, new_path, old_path, ns)
    assert code == 1 and result["operation"] == "UPDATE" and result["status"] == "denied"
    assert rule in [v["rule"] for v in result["violations"]]
    assert not result.get("patch"), "an UPDATE is never mutated"
    namespace = new["metadata"]["namespace"]
    expected = report(
        load_policy(policy_dir),
        Request(
            new,
            operation="UPDATE",
            old_object=old,
            namespace=namespace,
            namespace_labels=TRAINING_NS if namespace == "ml" else {},
        ),
    )
    assert [v["rule"] for v in result["violations"]] == [v.rule for v in expected.violations]
    assert [v["message"] for v in result["violations"]] == [v.message for v in expected.violations]


def test_the_unchanged_object_as_an_update_passes(tmp_path, capsys):
    old_path, new_path, ns = _files(tmp_path, VCJOB, VCJOB)
    code, result = _check_json(capsys, POLICIES, new_path, old_path, ns)
    assert result["operation"] == "UPDATE" and code == 0, result


def test_text_output_says_update(tmp_path, capsys):
    old, new = _raised_min_available()
    old_path, new_path, ns = _files(tmp_path, old, new)
    code = main(["check", str(new_path), "--old", str(old_path), "--namespaces", str(ns), "--policy", str(POLICIES)])
    out = capsys.readouterr().out
    assert code == 1 and "Job/scaled (namespace ml) (UPDATE of the --old object): DENIED" in out
    assert "patch operation" not in out.splitlines()[0]


def test_documents_without_an_old_object_are_creates(tmp_path, capsys):
    old_path, new_path, ns = _files(tmp_path, VCJOB, VCJOB)
    other = copy.deepcopy(VCJOB)
    other["metadata"]["name"] = "fresh"
    new_path.write_text(yaml.safe_dump_all([VCJOB, other]))
    main(["check", str(new_path), "--old", str(old_path), "--namespaces", str(ns), "--policy", str(POLICIES), "-ojson"])
    report = json.loads(capsys.readouterr().out)
    results = report["results"] if isinstance(report, dict) else report
    assert [r["operation"] for r in results] == ["UPDATE", "CREATE"]


def test_an_old_object_that_replaces_nothing_is_bad_input(tmp_path, capsys):
    other = copy.deepcopy(VCJOB)
    other["metadata"]["name"] = "scaeld"
    old_path, new_path, ns = _files(tmp_path, other, VCJOB)
    code = main(["check", str(new_path), "--old", str(old_path), "--namespaces", str(ns), "--policy", str(POLICIES)])
    err = capsys.readouterr().err
    assert code == 2 and "Job/scaeld (namespace ml) replaces no checked document" in err and "old.yaml:1" in err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("apiVersion: v1\nkind: Pod\nmetadata: {}\n", "has no metadata.name"),
        ("just: [a, mapping\n", "YAML syntax error"),
        ("- a list\n", "not a Kubernetes object"),
    ],
)
def test_a_broken_old_file_is_bad_input_with_file_and_line(tmp_path, capsys, text, message):
    old_path, new_path, _ = _files(tmp_path, VCJOB, VCJOB)
    old_path.write_text(text)
    code = main(["check", str(new_path), "--old", str(old_path), "--policy", str(POLICIES)])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "old.yaml" in err and "Traceback" not in err


CUDA_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "cuda", "namespace": "team"},
    "spec": {
        "schedulingGates": [{"name": "example.com/hold"}],
        "containers": [{"name": "main", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"}],
    },
}


def test_a_cpu_pod_that_gains_a_gpu_pools_reach_by_update_is_denied(tmp_path, capsys):
    """Issue 41 item 1, offline: the CUDA pod created with no toleration gains a GPU pool's toleration
    and (gated) nodeSelector; its env cannot change any more, so the answer says to re-create it."""
    new = copy.deepcopy(CUDA_POD)
    new["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    new["spec"]["nodeSelector"] = {"workload": "gpu-dev"}
    old_path, new_path, ns = _files(tmp_path, CUDA_POD, new)
    code, result = _check_json(capsys, POLICIES, new_path, old_path, ns)
    assert code == 1 and result["operation"] == "UPDATE" and result["status"] == "denied", result
    found = [v for v in result["violations"] if v["rule"] == "privileged-gpu"]
    assert found and "re-create the pod" in found[0]["message"]
    code, result = _check_json(capsys, POLICIES, old_path, old_path, ns)
    assert code == 0, "the pod as created is not GPU-relevant"
