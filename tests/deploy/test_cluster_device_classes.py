"""Extended resources a cluster DeviceClass maps (``spec.extendedResourceName``, KEP-5004) that the policy
does not name (issue 41, item 6).

The engine counts a pod asking for such a resource as a GPU pod (through the class, from the cluster
objects it is given); the rendered matchConditions, made from the policy alone, did not send it, so it
was stored unjudged. ``policy render --cluster-objects`` renders them in, and ``policy lint --cluster-objects``
warns when a cluster class maps a name a render of the policy alone does not know.
"""

from __future__ import annotations

import json

import yaml

from tests.conftest import POLICIES
from tests.deploy.cel_match import CALL, SKIP, Webhook
from webhook.cli import main
from webhook.engine import Request, report
from webhook.engine.model.cluster import Cluster
from webhook.policy import load_policy

ACCEL = "example.com/accel"
DEVICE_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "accel.example.com"},
    "spec": {
        "selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}],
        "extendedResourceName": ACCEL,
    },
}
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "accel", "namespace": "team-a"},
    "spec": {"containers": [{"name": "main", "image": "cuda:12", "resources": {"limits": {ACCEL: "1"}}}]},
}


def _validating(capsys, *args: str) -> Webhook:
    assert main(["policy", "render", str(POLICIES), "-o", "json", *args]) == 0
    docs = json.loads(capsys.readouterr().out)
    docs = docs["items"] if isinstance(docs, dict) else docs
    (hook,) = next(d for d in docs if d["kind"] == "ValidatingWebhookConfiguration")["webhooks"]
    return Webhook(hook)


def test_the_engine_judges_a_pod_asking_for_a_cluster_mapped_resource():
    cluster = Cluster(device_classes={DEVICE_CLASS["metadata"]["name"]: DEVICE_CLASS})
    decision = report(load_policy(POLICIES), Request(POD, namespace="team-a", cluster=cluster))
    assert decision.relevant, "a GPU pod through the class: the webhooks must see it"


def test_render_with_cluster_objects_sends_pods_asking_for_a_mapped_resource(tmp_path, capsys):
    assert _validating(capsys).decide(POD) == SKIP, "the policy alone does not know the name"
    objects = tmp_path / "deviceclasses.yaml"
    objects.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [DEVICE_CLASS]}))
    hook = _validating(capsys, "--cluster-objects", str(objects))
    outcome = hook.evaluate(POD)
    assert not outcome.errors and outcome.decision == CALL, outcome.results
    other = json.loads(json.dumps(POD))
    other["spec"]["containers"][0]["resources"]["limits"] = {"example.com/other": "1"}
    assert hook.decide(other) == SKIP, "only the names the classes map"


def test_lint_warns_when_a_cluster_class_maps_a_name_the_render_does_not_know(tmp_path, capsys):
    objects = tmp_path / "deviceclasses.yaml"
    objects.write_text(yaml.safe_dump(DEVICE_CLASS))
    main(["policy", "lint", str(POLICIES), "--cluster-objects", str(objects)])
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "[device-class-unrendered]" in line]
    assert len(lines) == 1 and ACCEL in lines[0] and "--cluster-objects" in lines[0], out
    known = json.loads(json.dumps(DEVICE_CLASS))
    known["spec"]["extendedResourceName"] = "nvidia.com/gpu"  # a GPU prefix: every render sends it
    objects.write_text(yaml.safe_dump(known))
    main(["policy", "lint", str(POLICIES), "--cluster-objects", str(objects)])
    assert "[device-class-unrendered]" not in capsys.readouterr().out
