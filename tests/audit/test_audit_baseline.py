"""``--baseline OLD``: the preview of a policy change on a snapshot, in words, with the exit code CI needs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from tests.audit.cluster import cluster_objects, deployment, mutated, pod, stored
from tests.audit.conftest import POLICIES, run_cli
from webhook.policy import load_policy

DEFAULT = (POLICIES / "default.yaml").read_text()


def _policy(directory: Path, text: str) -> Path:
    directory.mkdir()
    (directory / "default.yaml").write_text(text)
    load_policy(directory)  # the test's own edits must load
    return directory


def _snapshot(policy, tmp_path: Path) -> Path:
    objs = cluster_objects(policy)
    burstable = pod("burstable", "team-a", cls="inference")
    del burstable["spec"]["containers"][0]["resources"]["limits"]["cpu"]  # Burstable QoS
    objs.append(stored(mutated(policy, burstable)))
    objs.append(stored(deployment("batcher", "team-a", "batch")))
    path = tmp_path / "snapshot.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objs}))
    return path


def _change(tmp_path: Path) -> tuple[Path, Path]:
    # the old policy: QoS for inference not checked
    old_text = DEFAULT.replace("inference-not-guaranteed: {action: warn}", "inference-not-guaranteed: {action: off}")
    assert old_text != DEFAULT
    old = _policy(tmp_path / "old", old_text)
    # the new one: raw GPU requests denied, pinned pods only warned, batch's default memory halved
    new_text = DEFAULT.replace("raw-gpu-request:\n      action: warn", "raw-gpu-request:\n      action: deny")
    new_text, halved = re.subn(r"(\n    batch:\n(?:      .*\n)*?      defaultGPUMemory: )\S+", r"\g<1>4Gi", new_text)
    assert halved == 1
    new = _policy(tmp_path / "new", new_text + "    node-name-set: {action: warn}\n")
    return old, new


def test_baseline_states_each_change_in_words(policy, tmp_path: Path) -> None:
    snap = _snapshot(policy, tmp_path)
    old, new = _change(tmp_path)
    ran = run_cli("--snapshot", snap, "--policy", new, "--baseline", old, "-o", "json")
    assert ran.code == 1, ran.err  # a new denial
    doc = json.loads(ran.out)
    change = {r["name"]: r["baseline"] for r in doc["results"]}
    assert change["raw-gpu"]["change"] == "newly denied"
    assert change["raw-gpu"]["oldStatus"] == "warned"
    assert change["burstable"]["change"] == "newly warned"
    assert change["pinned"]["change"] == "newly admitted"
    assert [v["rule"] for v in change["pinned"]["oldViolations"]] == ["node-name-set"]
    assert change["infer-ok"]["change"] == "unchanged"
    assert change["dcgm"]["change"] == "unchanged"  # exempt from raw-gpu-request under both
    # the batch Deployment's pods would now get a smaller MIG slice (one the cluster's nodes offer)
    batcher = change["batcher"]
    assert batcher["mutatedDifferently"]
    assert any(w.startswith("now placed as") and "mig-1g.5gb" in w for w in batcher["mutation"])
    assert not change["infer-ok"]["mutatedDifferently"]
    counts = doc["summary"]["baseline"]
    assert (counts["newly denied"], counts["newly warned"]) == (1, 1) and counts["newly admitted"] >= 1
    assert counts["mutatedDifferently"] >= 1


def test_baseline_text_and_exit_codes(policy, tmp_path: Path) -> None:
    snap = _snapshot(policy, tmp_path)
    old, new = _change(tmp_path)
    ran = run_cli("--snapshot", snap, "--policy", new, "--baseline", old)
    assert re.search(r"1 newly denied, 1 newly warned, \d+ newly admitted", ran.out)
    assert "newly denied (1):\n  team-a/Pod/raw-gpu: [raw-gpu-request]" in ran.out
    assert "  team-a/Pod/pinned: no longer [node-name-set]" in ran.out
    assert "mutated differently (" in ran.out and "team-a/Deployment/batcher" in ran.out
    # the same policy as its own baseline: nothing new is denied, whatever the cluster's own denials
    same = run_cli("--snapshot", snap, "--policy", POLICIES, "--baseline", POLICIES)
    assert same.code == 0, same.err
    assert "0 newly denied, 0 newly warned, 0 newly admitted, 0 no longer warned" in same.out
    assert "0 would be mutated differently" in same.out
    # without --baseline the cluster's own denials are exit 1
    assert run_cli("--snapshot", snap, "--policy", POLICIES).code == 1


def test_a_baseline_that_does_not_load_is_exit_2(snapshot: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "p.yaml").write_text("apiVersion: gpu-admission.io/v1\nkind: GPUPolicy\nspec: {pools: 3}\n")
    ran = run_cli("--snapshot", snapshot, "--policy", POLICIES, "--baseline", bad)
    assert ran.code == 2
    assert ran.err.startswith(f"gpu-admission audit: the baseline policy in {bad} does not load:")
    assert ran.err.count("\n") == 1


def test_the_ci_example_runs_the_preview(policy, tmp_path: Path) -> None:
    """examples/ci/policy-preview.yaml: its audit command line exists and previews the change."""
    import shutil

    from tests.conftest import ROOT
    from tests.workflow.test_ci_examples import expand, gpu_admission_commands

    workflow = yaml.safe_load((ROOT / "examples" / "ci" / "policy-preview.yaml").read_text())
    steps = workflow["jobs"]["preview"]["steps"]
    commands = [c for step in steps for c in gpu_admission_commands(step.get("run", ""))]
    (command,) = commands
    assert "--baseline" in command and "--snapshot" in command
    shutil.copytree(POLICIES, tmp_path / "base" / "policies")
    env = dict(workflow["env"], SNAPSHOT=str(_snapshot(policy, tmp_path)), POLICY_DIR=str(POLICIES))
    args = expand(command.replace("/tmp/policy-base/$POLICY_DIR", f"{tmp_path}/base/policies"), env, {})
    ran = run_cli(*args[1:])
    assert ran.code == 0, ran.err  # the same policy: nothing newly denied
    assert "0 newly denied" in ran.out


def _device_plugin(namespace: str) -> dict:
    """The GPU operator's device plugin DaemonSet: privileged, /dev from the host, on every node."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "nvidia-device-plugin", "namespace": namespace, "uid": f"uid-dp-{namespace}"},
        "spec": {
            "selector": {"matchLabels": {"app": "dp"}},
            "template": {
                "metadata": {"labels": {"app": "dp"}},
                "spec": {
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [
                        {
                            "name": "dp",
                            "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
                            "securityContext": {"privileged": True},
                            "volumeMounts": [{"name": "dev", "mountPath": "/dev"}],
                        }
                    ],
                    "volumes": [{"name": "dev", "hostPath": {"path": "/dev"}}],
                },
            },
        },
        "status": {"numberReady": 3},
    }


def test_the_gpu_operators_exempt_namespace_is_exempt_in_audit(tmp_path: Path) -> None:
    exempt = DEFAULT + (
        "    privileged-gpu:\n      exempt:\n        - matchLabels: {gpu-admission.io/privileged: allowed}\n"
    )
    policy_dir = _policy(tmp_path / "policy", exempt)
    objs = [
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": "gpu-operator", "labels": {"gpu-admission.io/privileged": "allowed"}}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}},
        _device_plugin("gpu-operator"),
        _device_plugin("team-a"),  # the same DaemonSet where nothing exempts it
    ]
    snap = tmp_path / "snap.yaml"
    snap.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objs}))
    ran = run_cli("--snapshot", snap, "--policy", policy_dir, "-o", "json")
    assert ran.code == 1, ran.err
    found = {r["namespace"]: {v["rule"] for v in r["violations"]} for r in json.loads(ran.out)["results"]}
    assert found == {"gpu-operator": set(), "team-a": {"privileged-gpu"}}
