"""`gpu-admission policy render`: the cluster objects follow the policy they are rendered from.

The API server's matching is emulated by ``cel_match`` (cel-python for cel-go), independently of the
renderer: a webhook rendered from a policy must be called for that policy's intent label and GPU
resource names, and only for them.
"""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.conftest import POLICIES
from tests.deploy.cel_match import CALL, SKIP, Webhook, unguarded_has
from tests.deploy.conftest import one, render
from webhook.cli import main
from webhook.policy import load_policy
from webhook.render import RenderOptions
from webhook.render import render as render_policy
from webhook.render import webhooks as hooks

DEFAULT_TEXT = (POLICIES / "default.yaml").read_text()


def custom_policy(tmp_path: Path) -> Path:
    """The shipped policy under another prefix, with a GPU family the defaults do not know."""
    text = DEFAULT_TEXT.replace("prefix: gpu-admission.io ", "prefix: acme.example ")
    assert text != DEFAULT_TEXT
    text = text.replace(
        "    failure: allow", '    failure: allow\n    gpuResourcePrefixes: ["nvidia.com/gpu", "example.com/gpu"]'
    )
    (tmp_path / "policy.yaml").write_text(text)
    return tmp_path


def hooks_of(objects: list[dict]) -> dict[str, Webhook]:
    (mut,) = one(objects, "MutatingWebhookConfiguration")["webhooks"]
    (val,) = one(objects, "ValidatingWebhookConfiguration")["webhooks"]
    return {"mutating": Webhook(mut), "validating": Webhook(val)}


def pod(labels: dict | None = None, limits: dict | None = None, annotations: dict | None = None) -> dict:
    container: dict = {"name": "main", "image": "busybox"}
    if limits:
        container["resources"] = {"limits": limits}
    meta: dict = {"name": "p", "namespace": "team"}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [container]}}


def test_a_policy_prefix_and_resource_prefixes_reach_the_match_conditions(tmp_path):
    policy = load_policy(custom_policy(tmp_path))
    webhooks = hooks_of(render_policy(policy))
    for name, hook in webhooks.items():
        assert hook.decide(pod(labels={"acme.example/workload": "inference"})) == CALL, name
        assert hook.decide(pod(labels={"gpu-admission.io/workload": "inference"})) == SKIP, name
        assert hook.decide(pod(limits={"example.com/gpu": 1})) == CALL, name
        assert hook.decide(pod(limits={"nvidia.com/gpu": 1})) == CALL, name
        assert hook.decide(pod(limits={"nvidia.com/mig-1g.5gb": 1})) == SKIP, name  # no longer a GPU family
        assert hook.decide(pod(limits={"cpu": "1"})) == SKIP, name
        for _, expr, _ in hook.conditions:
            assert unguarded_has(expr) == []


def test_updates_of_intent_annotations_under_the_policy_prefix_are_validated(tmp_path):
    policy = load_policy(custom_policy(tmp_path))
    validating = hooks_of(render_policy(policy))["validating"]
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "team", "annotations": {"acme.example/gpus": "1"}},
        "spec": {"template": {"metadata": {"labels": {"acme.example/workload": "training"}}, "spec": {}}},
    }
    changed = json.loads(json.dumps(job))
    changed["metadata"]["annotations"]["acme.example/gpus"] = "8"
    assert validating.decide(changed, operation="UPDATE", old=job) == CALL
    unrelated = json.loads(json.dumps(job))
    unrelated["metadata"]["annotations"]["gpu-admission.io/gpus"] = "8"  # not this policy's key
    assert validating.decide(unrelated, operation="UPDATE", old=job) == SKIP


def test_rendered_objects_are_schema_valid_for_every_supported_version(policy):
    objects = render_policy(policy, RenderOptions(policy_files=(("default.yaml", DEFAULT_TEXT),)))
    assert {o["kind"] for o in objects} >= {
        "ConfigMap", "PriorityClass", "NetworkPolicy", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"
    }  # fmt: skip
    for version in ("1.30.0", "1.37.0"):
        for obj in objects:
            kubernetes_validate.validate(obj, version, strict=True)


def test_priority_classes_come_from_the_policy(tmp_path):
    text = DEFAULT_TEXT.replace("      value: 50000\n", "      value: 777\n      preemptionPolicy: Never\n")
    assert text != DEFAULT_TEXT
    (tmp_path / "p.yaml").write_text(text)
    objects = render_policy(load_policy(tmp_path))
    training = one(objects, "PriorityClass", "gpu-training")
    assert (training["value"], training["preemptionPolicy"]) == (777, "Never")
    assert "namespace" not in training["metadata"]  # cluster-scoped


def test_a_priority_class_defined_twice_is_an_error_at_its_line(tmp_path):
    (tmp_path / "a.yaml").write_text(DEFAULT_TEXT)
    (tmp_path / "b.yaml").write_text(
        "apiVersion: gpu-admission.io/v1\nkind: GPUPolicy\nspec:\n  priorityClasses:\n    gpu-dev: {value: 1}\n"
    )
    from webhook.policy import PolicyError

    with pytest.raises(PolicyError) as info:
        load_policy(tmp_path)
    (issue,) = info.value.issues
    assert (Path(issue.file).name, issue.line) == ("b.yaml", 5)
    assert "priority class 'gpu-dev' is already defined in" in issue.message


def test_a_priority_class_field_typo_is_an_error(tmp_path):
    (tmp_path / "p.yaml").write_text(DEFAULT_TEXT.replace("preemptionPolicy: Never", "preemption: Never"))
    assert main(["policy", "lint", str(tmp_path)]) == 1


def test_network_policy_admits_the_api_server_to_the_webhook_port_only():
    docs = render("base")
    netpol, dep = one(docs, "NetworkPolicy"), one(docs, "Deployment")
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert netpol["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert netpol["spec"]["policyTypes"] == ["Ingress"]
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    by_port = {r["ports"][0]["port"]: r["from"] for r in netpol["spec"]["ingress"]}
    assert set(by_port) == {ports["https"], ports["http-metrics"]}  # nothing else is reachable
    assert all("ipBlock" in peer for peer in by_port[ports["https"]])  # no pod or namespace selector
    monitoring = [p for p in by_port[ports["http-metrics"]] if "namespaceSelector" in p]
    assert monitoring == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]


def test_cli_narrows_the_network_policy_and_moves_the_webhook(capsys):
    code = main([
        "policy", "render", "--policy", str(POLICIES), "-o", "json", "--control-plane-cidr", "10.0.0.0/24",
        "--webhook-namespace", "gpu-system", "--monitoring-namespace", "",
    ])  # fmt: skip
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "List"
    netpol = one(doc["items"], "NetworkPolicy")
    assert netpol["metadata"]["namespace"] == "gpu-system"
    assert [r["from"] for r in netpol["spec"]["ingress"]] == [[{"ipBlock": {"cidr": "10.0.0.0/24"}}]] * 2
    (hook,) = one(doc["items"], "ValidatingWebhookConfiguration")["webhooks"]
    assert hook["clientConfig"]["service"]["namespace"] == "gpu-system"
    assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system", "gpu-system"]
    assert one(doc["items"], "ConfigMap")["data"] == {"default.yaml": DEFAULT_TEXT}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--control-plane-cidr", "api-server"], "is not a CIDR"),
        (["/nonexistent/policies"], "does not load; nothing rendered"),
        ([str(POLICIES), "--policy", "/elsewhere"], "give the policy directory once"),
    ],
)
def test_cli_refuses_bad_input_with_exit_2(capsys, args, message):
    assert main(["policy", "render", *args]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""


def test_a_broken_policy_renders_nothing(tmp_path, capsys):
    (tmp_path / "p.yaml").write_text(DEFAULT_TEXT.replace("pools: [infer-a100]", "pools: [infer-a10O]", 1))
    assert main(["policy", "render", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "unknown pool 'infer-a10O'" in captured.err


def test_yaml_output_round_trips_and_keeps_cel_readable(policy):
    from webhook.render.output import to_yaml

    objects = render_policy(policy)
    text = to_yaml(objects)
    assert [d for d in yaml.safe_load_all(text) if d] == objects
    assert "expression: |-" in text and "&id" not in text


def test_resource_sources_extend_the_rules(policy, monkeypatch):
    """The extension point for new kinds: one more source adds a rule; repeating a built-in adds nothing."""
    extra = hooks.Intercepted("example.com", "v1", "trainruns", mutate=hooks.CREATE, validate=hooks.CREATE_UPDATE)
    repeat = hooks.Intercepted("", "v1", "pods", validate=hooks.CREATE)
    monkeypatch.setattr(hooks, "RESOURCE_SOURCES", [*hooks.RESOURCE_SOURCES, lambda p: [extra, repeat]])
    mutating = hooks.rules(policy, "mutating")
    assert mutating[-1]["apiGroups"] == ["example.com"] and mutating[-1]["resources"] == ["trainruns"]
    validating = hooks.rules(policy, "validating")
    pods = [r for r in validating if r["resources"] == ["pods"]]
    assert pods == [{**pods[0], "operations": ["CREATE", "UPDATE"]}]  # the built-in entry won
    extra_test = lambda p, mapped: "has(t.spec.resourceClaims)"  # noqa: E731
    monkeypatch.setattr(hooks, "TEMPLATE_TESTS", [*hooks.TEMPLATE_TESTS, extra_test])
    assert "has(t.spec.resourceClaims)" in hooks.gpu_relevant(policy, "validating")


def test_without_control_plane_cidrs_the_render_says_so_and_never_opens_metrics(capsys):
    assert main(["policy", "render", str(POLICIES), "-o", "json"]) == 0
    captured = capsys.readouterr()
    netpol = one(json.loads(captured.out)["items"], "NetworkPolicy")
    by_port = {r["ports"][0]["port"]: r["from"] for r in netpol["spec"]["ingress"]}
    assert by_port[8443] == [{"ipBlock": {"cidr": "0.0.0.0/0"}}, {"ipBlock": {"cidr": "::/0"}}]
    assert by_port[9102] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    assert "note: no --control-plane-cidr given: the NetworkPolicy admits any address to the webhook port 8443" in (
        captured.err
    )
    assert main(["policy", "render", str(POLICIES), "-o", "json", "--monitoring-namespace", ""]) == 0
    captured = capsys.readouterr()
    netpol = one(json.loads(captured.out)["items"], "NetworkPolicy")
    assert [r["ports"][0]["port"] for r in netpol["spec"]["ingress"]] == [8443]  # metrics: no rule, so closed
    assert "the metrics port 9102 admits nothing" in captured.err
    assert main(["policy", "render", str(POLICIES), "--control-plane-cidr", "10.0.0.0/24"]) == 0
    assert "note:" not in capsys.readouterr().err


def test_render_reads_namespace_objects_under_both_spellings(tmp_path, capsys):
    ns = tmp_path / "ns.yaml"
    ns.write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: a, labels: {gpu-admission.io/tier: serving}}\n")
    outs = []
    for flag in ("--cluster-objects", "--context"):
        assert main(["policy", "render", str(POLICIES), flag, str(ns), "--control-plane-cidr", "10.0.0.0/8"]) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1]
