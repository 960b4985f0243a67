"""The training-operator's own MPIJob (``kubeflow.org/v1``, release-1.9 ``mpi_types.go``): the same
``spec.mpiReplicaSpecs.<Role>.template`` and ``runPolicy.schedulingPolicy`` as its PyTorchJob, and a
different kind from mpi-operator's ``kubeflow.org/v2beta1`` MPIJob. It carries pod templates, so it is
judged by the engine and by ``check``, and intercepted by the rendered webhook configurations."""

from __future__ import annotations

import json

import yaml

from tests.engine.helpers import rules
from webhook.cli import main
from webhook.engine import Request, report
from webhook.render import render
from webhook.render import webhooks as hooks

TRAIN = {"gpu-admission.io/workload": "training"}


def template(labels: dict | None, name: str, gpus: int = 0) -> dict:
    c: dict = {"name": name, "image": "mpi:1"}
    if gpus:
        c["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    tpl: dict = {"spec": {"containers": [c]}}
    if labels:
        tpl["metadata"] = {"labels": labels}
    return tpl


def mpijob_v1(workers: int = 2, **spec) -> dict:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "MPIJob",
        "metadata": {"name": "nccl", "namespace": "team-a"},
        "spec": {
            "slotsPerWorker": 8,
            "runPolicy": {"cleanPodPolicy": "Running"},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": template(None, "launcher")},
                "Worker": {"replicas": workers, "template": template(TRAIN, "worker")},
            },
            **spec,
        },
    }


def test_a_v1_mpijob_is_mutated_on_every_template_and_gets_a_full_gang(policy):
    d = report(policy, Request(mpijob_v1(), namespace="team-a"))
    assert d.relevant and d.allowed, [v.render() for v in d.violations]
    paths = {op["path"] for op in d.patch}
    assert any(p.startswith("/spec/mpiReplicaSpecs/Worker/template/spec/containers/0/resources") for p in paths)
    assert "/spec/mpiReplicaSpecs/Launcher/template/spec/schedulerName" in paths  # the launcher joins the gang
    ops = {op["path"]: op.get("value") for op in d.patch}
    min_available = ops.get("/spec/runPolicy/schedulingPolicy") or {}
    assert ops.get("/spec/runPolicy/schedulingPolicy/minAvailable", min_available.get("minAvailable")) == 3


def test_a_v1_mpijob_below_its_gang_is_gang_incomplete(policy):
    obj = mpijob_v1(workers=4)
    obj["spec"]["runPolicy"]["schedulingPolicy"] = {"minAvailable": 2}
    d = report(policy, Request(obj, namespace="team-a"))
    assert "gang-incomplete" in rules(d), [v.render() for v in d.violations]


def test_a_raw_gpu_v1_mpijob_is_judged_not_skipped(policy):
    obj = mpijob_v1()
    obj["spec"]["mpiReplicaSpecs"]["Worker"]["template"] = template(None, "worker", gpus=1)
    d = report(policy, Request(obj, namespace="team-a"))
    assert d.relevant and "raw-gpu-request" in rules(d)


def test_check_judges_a_v1_mpijob(tmp_path, capsys):
    path = tmp_path / "mpijob.yaml"
    path.write_text(yaml.safe_dump(mpijob_v1()))
    code = main(["check", str(path), "-o", "json"])
    out = capsys.readouterr().out
    report = json.loads(out)
    results = report["results"] if isinstance(report, dict) else report
    kinds = {(r.get("kind"), r.get("status")) for r in results}
    assert code == 0, out
    assert ("MPIJob", "skipped") not in kinds and any(k == "MPIJob" for k, _ in kinds), kinds


def test_the_webhooks_intercept_v1_mpijobs(policy):
    for webhook, ops in (("mutating", ["CREATE"]), ("validating", ["CREATE", "UPDATE"])):
        found = [
            r
            for r in hooks.rules(policy, webhook)
            if r["apiGroups"] == ["kubeflow.org"] and r["apiVersions"] == ["v1"] and "mpijobs" in r["resources"]
        ]
        assert found and found[0]["operations"][: len(ops)] == ops, (webhook, hooks.rules(policy, webhook))
    docs = render(policy)
    val = next(d for d in docs if d["kind"] == "ValidatingWebhookConfiguration")
    assert any("mpijobs" in r["resources"] and r["apiVersions"] == ["v1"] for r in val["webhooks"][0]["rules"])
