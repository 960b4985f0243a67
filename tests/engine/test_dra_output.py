"""DRA output on examples/dra-policy: intent becomes claims on the platform's templates.

Mutated Pods are checked against the strict OpenAPI schema of 1.34 (the first release serving
``resource.k8s.io/v1`` and the flat ``resourceClaimTemplateName``) and 1.37, and the rendered
ResourceClaimTemplates against ``resource.k8s.io/v1`` of both, with ``kubernetes-validate``.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.engine.helpers import container, intent, pod, rules, run
from webhook.engine import Stage
from webhook.policy import load_policy
from webhook.render import RenderOptions
from webhook.render.claimtemplates import render as render_templates

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "dra-policy"
DRA_VERSIONS = ("1.34.0", "1.37.0")


@pytest.fixture(scope="module")
def dra_policy():
    return load_policy(EXAMPLE)


def strict_errors(obj: dict) -> list[str]:
    errors = []
    for version in DRA_VERSIONS:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{version}: {str(exc).splitlines()[0]}")
    return errors


def gpu_pod(**annotations) -> dict:
    workload = annotations.pop("workload", "inference")
    limits = {"cpu": "2", "memory": "8Gi"}
    gpus = annotations.get("gpus", "1")  # a written count that disagrees with the annotation is intent-invalid
    return pod(
        intent(workload, **annotations),
        [container("server", limits={**limits, "nvidia.com/gpu": gpus}, requests={**limits, "nvidia.com/gpu": gpus})],
    )


CASES = [
    ({"gpu_memory": "4Gi"}, "gpu-admission-mig-1g-5gb"),
    ({"gpu_memory": "15Gi"}, "gpu-admission-mig-3g-20gb"),
    ({"isolation": "exclusive"}, "gpu-admission-gpu-1"),
    ({"isolation": "exclusive", "gpus": "2"}, "gpu-admission-gpu-2"),
    ({"workload": "dev", "gpu_memory": "3Gi"}, "gpu-admission-mem-4gi"),
    ({"workload": "dev", "gpu_memory": "9000Mi"}, "gpu-admission-mem-12gi"),
]


@pytest.mark.parametrize("annotations, template", CASES)
def test_intent_becomes_a_claim_on_the_platform_template(dra_policy, annotations, template):
    decision = run(dra_policy, gpu_pod(**annotations), namespace="team-a")  # patch applies; idempotent
    assert decision.allowed, [v.render() for v in decision.violations]
    spec = decision.mutated["spec"]
    assert spec["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": template}]
    resources = spec["containers"][0]["resources"]
    assert resources["claims"] == [{"name": "gpu"}]
    # the extended resource the claim replaces is gone from limits and requests; cpu/memory stay
    assert resources["limits"] == {"cpu": "2", "memory": "8Gi"}
    assert resources["requests"] == {"cpu": "2", "memory": "8Gi"}
    assert not strict_errors(decision.mutated), strict_errors(decision.mutated)
    # the template it names is one `policy render` emits for the namespace, valid resource.k8s.io/v1
    rendered = {t["metadata"]["name"]: t for t in render_templates(dra_policy, RenderOptions(namespaces=("team-a",)))}
    assert template in rendered
    assert not strict_errors(rendered[template]), strict_errors(rendered[template])


def test_the_judged_output_is_the_claim(dra_policy):
    """/validate of the mutated pod resolves the claim from the policy's own templates: same verdict."""
    decision = run(dra_policy, gpu_pod(gpu_memory="4Gi"), namespace="team-a")
    again = run(dra_policy, decision.mutated, namespace="team-a", stage=Stage.STORED)
    assert again.allowed and not again.violations
    assert again.waste is not None and again.waste.device_bytes == 4864 * 2**20  # 1g.5gb: 4.75Gi usable


def test_privileged_next_to_the_translated_claim_is_denied(dra_policy):
    obj = gpu_pod(workload="dev", gpu_memory="2Gi")
    obj["spec"]["containers"].append(container("debug", securityContext={"privileged": True}))
    assert "privileged-gpu" in rules(run(dra_policy, obj, namespace="team-a"))


def test_every_rendered_template_is_valid_v1(dra_policy):
    templates = render_templates(dra_policy, RenderOptions(namespaces=("team-a",)))
    assert len(templates) == 17  # 3 MIG profiles of all-balanced + 8 GPU counts on infer-a100, 6 slices on dev-a10
    for t in templates:
        assert not strict_errors(t), (t["metadata"]["name"], strict_errors(t))


def test_templates_only_for_the_pools_a_namespace_is_entitled_to(dra_policy):
    # serving-teams: inference and batch only -> the inference pool's templates, no dev slices
    options = RenderOptions(namespace_labels={"shop": {"gpu-admission.io/tier": "serving"}}, namespaces=("team-a",))
    names = {(t["metadata"]["namespace"], t["metadata"]["name"]) for t in render_templates(dra_policy, options)}
    assert ("shop", "gpu-admission-mig-1g-5gb") in names and ("shop", "gpu-admission-mem-4gi") not in names
    assert ("team-a", "gpu-admission-mem-4gi") in names


def test_the_default_policy_renders_no_templates(policy):
    assert render_templates(policy, RenderOptions(namespaces=("team-a",))) == []


def test_policy_render_with_context_namespaces(tmp_path):
    namespaces = tmp_path / "ns.yaml"
    namespaces.write_text(
        yaml.safe_dump_all(
            [
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": "shop", "labels": {"gpu-admission.io/tier": "serving"}},
                },
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "lab"}},
            ]
        )
    )
    out = subprocess.run(
        [sys.executable, "-m", "webhook", "policy", "render", str(EXAMPLE), "--context", str(namespaces)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    docs = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "ResourceClaimTemplate"]
    per_ns: dict[str, set[str]] = {}
    for d in docs:
        per_ns.setdefault(d["metadata"]["namespace"], set()).add(d["metadata"]["name"])
    assert "gpu-admission-mem-4gi" in per_ns["lab"] and "gpu-admission-mem-4gi" not in per_ns["shop"]
    assert per_ns["shop"] >= {"gpu-admission-mig-1g-5gb", "gpu-admission-gpu-8"}


def test_the_example_suite_passes():
    result = subprocess.run(
        [sys.executable, "-m", "webhook", "policy", "test", str(EXAMPLE)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASS: 20 case(s)" in result.stdout


def test_a_dra_pool_must_name_a_fitting_device_class(tmp_path):
    from webhook.policy import PolicyError, load_policy_texts

    text = (
        (EXAMPLE / "policy.yaml")
        .read_text()
        .replace("deviceClasses: {shared: gpu.nvidia.com}", "deviceClasses: {shared: mig.nvidia.com}")
    )
    with pytest.raises(PolicyError) as err:
        load_policy_texts([("policy.yaml", text)])
    assert "cannot serve isolation shared" in str(err.value)
    unknown = (EXAMPLE / "policy.yaml").read_text().replace("{shared: gpu.nvidia.com}", "{shared: gpu.nope.io}")
    with pytest.raises(PolicyError) as err:
        load_policy_texts([("policy.yaml", unknown)])
    assert "unknown DeviceClass 'gpu.nope.io'" in str(err.value)


def test_the_webhook_never_overwrites_a_users_claim_of_the_same_name(dra_policy):
    obj = gpu_pod(gpu_memory="4Gi")
    obj["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "mine"}]
    decision = run(dra_policy, copy.deepcopy(obj), namespace="team-a")
    assert "intent-invalid" in rules(decision)
    assert all("resourceClaims" not in op["path"] for op in decision.patch)
