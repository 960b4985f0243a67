"""The audit believes a grant a controller carried only through an owner chain it read (issue 41, item 3).

A stored pod's owner references are its own word: a tenant who copies a legitimate pod (grant included)
and names a made-up owner — a ConfigMap, an owner that does not exist, the granted Deployment itself —
or swaps the image of a granted pod, must be reported as if it carried no grant, and the finding says
why. The cluster is tests/audit/test_audit_exceptions.py's (a subject's Deployment, its ReplicaSet and
pod, signed with the test's key), plus these pods; read as a snapshot (in both orders: ``kubectl get all``
lists pods first) and through the fake API (pods listed last).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.audit.conftest import run_cli
from tests.audit.fake_apiserver import FakeAPIServer
from tests.audit.test_audit_exceptions import DAY, KEY, NS, POLICY, cluster

LEGIT = "dcgm-diag-5d8f-abcde"


def _owned_by(pod: dict[str, Any], name: str, kind: str, api_version: str, uid: str | None = None) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["metadata"]["name"] = name
    pod["metadata"]["uid"] = f"uid-{name}"
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": api_version, "kind": kind, "name": name if kind == "self" else kind_name[kind],
         "uid": uid or f"uid-{kind_name[kind]}", "controller": True}
    ]  # fmt: skip
    return pod


kind_name = {"ConfigMap": "dcgm-diag-abc12", "ReplicaSet": "dcgm-diag-9zz9z", "Deployment": "dcgm-diag"}

ATTACKS = {  # pod name -> what the report must say about the grant
    "via-configmap": "is not of a kind Deployment/dcgm-diag creates",
    "via-ghost-rs": "does not exist in what the audit read",
    "via-deployment": "does not create Pods itself",
    "via-other-uid": "does not exist in what the audit read (or has another uid)",
    "swapped-image": "",  # the engine compares the content: no grant holds, nothing to explain
}


def attacked() -> list[dict[str, Any]]:
    objects = cluster()
    legit = next(o for o in objects if o["metadata"]["name"] == LEGIT)
    swapped = copy.deepcopy(legit)
    swapped["metadata"]["name"] = swapped["metadata"]["uid"] = "swapped-image"
    swapped["spec"]["containers"][0]["image"] = "registry.example/miner:1"
    other_uid = copy.deepcopy(legit)  # the right name, a uid that is not the ReplicaSet's
    other_uid["metadata"]["name"] = other_uid["metadata"]["uid"] = "via-other-uid"
    other_uid["metadata"]["ownerReferences"][0]["uid"] = "uid-a-deleted-replicaset"
    return [
        *objects,
        _owned_by(legit, "via-configmap", "ConfigMap", "v1"),
        _owned_by(legit, "via-ghost-rs", "ReplicaSet", "apps/v1"),
        _owned_by(legit, "via-deployment", "Deployment", "apps/v1"),
        other_uid,
        swapped,
    ]


@pytest.fixture
def key(tmp_path: Path) -> Path:
    path = tmp_path / "grant.key"
    path.write_bytes(KEY + b"\n")
    return path


def results(ran_out: str) -> dict[str, Any]:
    return {r["name"]: r for r in json.loads(ran_out)["results"]}


def assert_judged_without_grant(by_name: dict[str, Any]) -> None:
    legit = [v for v in by_name[LEGIT]["violations"] if v["rule"] == "privileged-gpu"]
    assert [(v["action"], v.get("exception")) for v in legit] == [("audit", "dcgm-diag")]
    for name, why in ATTACKS.items():
        found = [v for v in by_name[name]["violations"] if v["rule"] == "privileged-gpu"]
        assert [(v["action"], v.get("exception")) for v in found] == [("deny", None)], name
        assert why in found[0]["message"], (name, found[0]["message"])
        if why:
            assert "grant of exception dcgm-diag not honoured" in found[0]["message"]


@pytest.mark.parametrize(
    ("pods_first", "workers"),
    [(False, "1"), (True, "1"), (True, "2")],
    ids=["owners-first", "pods-first", "pods-first-2-workers"],
)
def test_snapshot_believes_only_the_chain_it_read(tmp_path: Path, key: Path, pods_first: bool, workers: str) -> None:
    objects = attacked()
    if pods_first:
        objects.sort(key=lambda o: o["kind"] != "Pod")
    path = tmp_path / "snapshot.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects}))
    ran = run_cli("--snapshot", path, "--policy", POLICY, "--date", DAY, "--grant-key", key, "-o", "json",
                  "--workers", workers)  # fmt: skip
    assert ran.code == 1, ran.err
    by_name = results(ran.out)
    assert_judged_without_grant(by_name)
    (used,) = json.loads(ran.out)["exceptions"]["inUse"]
    assert used["objects"] == 3  # the Deployment, its ReplicaSet and its pod: nothing else


def test_the_api_path_believes_only_the_chain_it_read(tmp_path: Path, key: Path) -> None:
    api = FakeAPIServer().start()
    try:
        for obj in attacked():
            api.add(obj)
        ran = run_cli("--kubeconfig", api.kubeconfig(tmp_path), "--policy", POLICY, "--date", DAY,
                      "--grant-key", key, "-o", "json")  # fmt: skip
    finally:
        api.stop()
    assert ran.code == 1, ran.err
    assert_judged_without_grant(results(ran.out))


def test_a_v1_grant_is_not_believed_by_the_audit_and_the_report_says_to_re_apply(tmp_path: Path, key: Path) -> None:
    import dataclasses

    from webhook.engine.model.grants import GrantKeys, issue, read_grants

    keys = GrantKeys((KEY,))
    objects = cluster()
    for obj in objects:
        holder = obj["spec"].get("template", obj) if obj["kind"] != "Namespace" else None
        annotations = (holder or {}).get("metadata", {}).get("annotations", {})
        if "gpu-admission.io/exception-grant" in annotations:
            (grant,), _ = read_grants(keys, annotations["gpu-admission.io/exception-grant"])
            annotations["gpu-admission.io/exception-grant"] = issue(keys, dataclasses.replace(grant, content=""))
    path = tmp_path / "snapshot.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects}))
    ran = run_cli("--snapshot", path, "--policy", POLICY, "--date", DAY, "--grant-key", key, "-o", "json")
    (found,) = [v for v in results(ran.out)[LEGIT]["violations"] if v["rule"] == "privileged-gpu"]
    assert found["action"] == "deny" and "predates content binding (v1)" in found["message"]
    assert "re-apply Deployment/dcgm-diag" in found["message"]


def cronjob_cluster(policy_dir: Path) -> list[dict[str, Any]]:
    """A CronJob its subject applied, the Job the cronjob controller made of it and that Job's pod, as stored;
    the kind table lists Jobs before CronJobs, so the audit must read owners first whatever the table says."""
    import datetime

    import jsonpatch

    from webhook.engine import Request, mutate
    from webhook.engine.model.grants import GrantKeys
    from webhook.engine.model.requester import Requester
    from webhook.policy import load_policy

    policy = load_policy(policy_dir)
    labels = {"kubernetes.io/metadata.name": NS, "team": "gpu-diag"}

    def stored(obj: dict[str, Any], by: str) -> dict[str, Any]:
        request = Request(obj, namespace=NS, namespace_labels=labels, requester=Requester(by),
                          today=datetime.date.fromisoformat(DAY), grant_keys=GrantKeys((KEY,)))  # fmt: skip
        return jsonpatch.apply_patch(obj, list(mutate(policy, request).patch))

    container = {"name": "burn", "image": "nvcr.io/nvidia/dcgm:3", "securityContext": {"privileged": True},
                 "resources": {"limits": {"nvidia.com/gpu": "1"}}}  # fmt: skip
    job_spec = {"template": {"metadata": {}, "spec": {"containers": [container], "restartPolicy": "Never"}}}
    cron = stored({"apiVersion": "batch/v1", "kind": "CronJob",
                   "metadata": {"name": "nightly", "namespace": NS, "uid": "uid-nightly"},
                   "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": job_spec}}}, "carol")  # fmt: skip
    owner = {"apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly", "uid": "uid-nightly", "controller": True}
    job = stored({"apiVersion": "batch/v1", "kind": "Job",
                  "metadata": {"name": "nightly-29412180", "namespace": NS, "uid": "uid-job",
                               "ownerReferences": [owner]},
                  "spec": copy.deepcopy(cron["spec"]["jobTemplate"]["spec"])},
                 "system:serviceaccount:kube-system:cronjob-controller")  # fmt: skip
    template = job["spec"]["template"]
    pod = stored({"apiVersion": "v1", "kind": "Pod",
                  "metadata": {**copy.deepcopy(template["metadata"]), "name": "nightly-29412180-q7x2z", "namespace": NS,
                               "uid": "uid-pod", "ownerReferences": [
                                   {"apiVersion": "batch/v1", "kind": "Job", "name": "nightly-29412180",
                                    "uid": "uid-job", "controller": True}]},
                  "spec": copy.deepcopy(template["spec"])},
                 "system:serviceaccount:kube-system:job-controller")  # fmt: skip
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS, "labels": labels}}
    return [namespace, cron, job, pod]


def test_the_api_path_reads_a_cronjob_before_its_jobs(tmp_path: Path, key: Path) -> None:
    doc = yaml.safe_load((POLICY / "policy.yaml").read_text())
    doc["spec"]["exceptions"].append({
        "name": "nightly", "rules": ["privileged-gpu"], "namespaces": {"matchLabels": {"team": "gpu-diag"}},
        "kinds": ["CronJob"], "names": ["nightly"], "subjects": [{"kind": "User", "name": "carol"}],
        "expires": "2027-12-31", "reason": "burn-in", "owner": "platform-team",
    })  # fmt: skip
    policy_dir = tmp_path / "policy"
    policy_dir.mkdir()
    (policy_dir / "policy.yaml").write_text(yaml.safe_dump(doc))
    api = FakeAPIServer().start()
    try:
        for obj in cronjob_cluster(policy_dir):
            api.add(obj)
        ran = run_cli("--kubeconfig", api.kubeconfig(tmp_path), "--policy", policy_dir, "--date", DAY,
                      "--grant-key", key, "-o", "json")  # fmt: skip
    finally:
        api.stop()
    by_name = results(ran.out)
    for name in ("nightly", "nightly-29412180", "nightly-29412180-q7x2z"):
        found = [v for v in by_name[name]["violations"] if v["rule"] == "privileged-gpu"]
        assert [(v["action"], v.get("exception")) for v in found] == [("audit", "nightly")], (name, found)
