"""`policy render` of a policy with exceptions: the mutating webhook also sees the controller kinds at
CREATE and UPDATE (it writes the grants their pods carry), and the output lists the exceptions; a policy
without exceptions renders exactly as before (the shipped manifests are compared in test_render)."""

from __future__ import annotations

import pytest
import yaml

from tests.conftest import POLICIES
from tests.engine.test_exceptions import POLICY_DIR
from webhook.cli import main


def rendered(capsys, policy) -> tuple[str, list[dict]]:
    assert main(["policy", "render", str(policy)]) == 0
    out = capsys.readouterr().out
    return out, [d for d in yaml.safe_load_all(out) if d]


def mutating_rules(objects: list[dict]) -> dict[str, list[str]]:
    (config,) = [o for o in objects if o["kind"] == "MutatingWebhookConfiguration"]
    return {r: rule["operations"] for hook in config["webhooks"] for rule in hook["rules"] for r in rule["resources"]}


def test_exceptions_send_controller_kinds_to_mutate_at_create_and_update(capsys):
    _, objects = rendered(capsys, POLICY_DIR)
    rules = mutating_rules(objects)
    for resource in ("deployments", "replicasets", "statefulsets", "daemonsets", "cronjobs", "jobs"):
        assert rules[resource] == ["CREATE", "UPDATE"], resource
    assert rules["pods"] == ["CREATE"]  # pods carry grants, they never get one


def test_without_exceptions_controllers_are_not_mutated(capsys):
    out, objects = rendered(capsys, POLICIES)
    assert "deployments" not in mutating_rules(objects)
    assert "Policy exceptions" not in out


def test_the_rendered_header_lists_each_exception_with_subjects_scope_and_expiry(capsys):
    out, _ = rendered(capsys, POLICY_DIR)
    head = out.split("\n---\n")[0]
    assert "#   dcgm-diag: privileged-gpu, raw-gpu-request for User:alice, Group:gpu-diagnostics, " in head
    assert "ServiceAccount:ci:deployer in team=diag; expires 2027-01-31; owner platform-team" in head
    assert "#   nightly-only: privileged-gpu for User:carol in team=diag; kinds CronJob; names nightly;" in head
    assert "judged by the webhook alone" in head


def test_the_exception_grants_component_mounts_the_key_and_passes_grant_key(tmp_path):
    """``manifests/components/exception-grants`` on top of the base: the flag, the mount, the Secret."""
    import shutil
    import subprocess

    from tests.deploy.conftest import product_manifests

    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed")
    (tmp_path / "base").symlink_to(product_manifests() / "base")
    (tmp_path / "components").symlink_to(product_manifests() / "components")
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [base]\n"
        "components: [components/exception-grants]\n"
    )
    proc = subprocess.run(["kubectl", "kustomize", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    (deployment,) = [d for d in yaml.safe_load_all(proc.stdout) if d and d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (webhook,) = pod["containers"]
    assert "--grant-key=/etc/gpu-admission/grant-key/key" in webhook["args"]
    (mount,) = [m for m in webhook["volumeMounts"] if m["name"] == "grant-key"]
    assert mount == {"name": "grant-key", "mountPath": "/etc/gpu-admission/grant-key", "readOnly": True}
    (volume,) = [v for v in pod["volumes"] if v["name"] == "grant-key"]
    assert volume["secret"]["secretName"] == "gpu-admission-grant-key"
