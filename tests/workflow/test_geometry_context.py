"""Node objects are the truth: ``check --context`` and ``policy lint --context`` with nodes that agree or
disagree with the default pool's stated geometry (mig-parted ``all-balanced``: per A100-40GB 2 x 1g.5gb,
1 x 2g.10gb, 1 x 3g.20gb; 8 GPUs per node)."""

from __future__ import annotations

import yaml

from tests.conftest import POLICIES
from tests.workflow.conftest import line_of


def _node(name: str, config: str, allocatable: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"workload": "gpu-infer", "nvidia.com/mig.config": config}},
        "status": {"allocatable": {"cpu": "64", **allocatable}},
    }


BALANCED = {"nvidia.com/mig-1g.5gb": "16", "nvidia.com/mig-2g.10gb": "8", "nvidia.com/mig-3g.20gb": "8"}
# what a node re-partitioned with all-1g.10gb advertises (4 per A100-40GB, mig-parted's device filter)
ALL_1G_10GB = {"nvidia.com/mig-1g.10gb": "32"}

BATCH_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: embed
  namespace: team
  labels: {gpu-admission.io/workload: batch}
spec:
  containers:
  - {name: worker, image: registry/shop/embed:1.2}
"""


def _write(tmp_path, name: str, nodes: list[dict]) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": nodes}))
    return str(path)


def test_check_with_nodes_that_run_the_layout_admits(tmp_path, cli):
    (tmp_path / "pod.yaml").write_text(BATCH_POD)
    nodes = _write(tmp_path, "nodes.yaml", [_node("a100-1", "all-balanced", BALANCED)])
    run = cli("check", tmp_path / "pod.yaml", "--context", nodes)
    assert run.code == 0, run.out
    assert "admitted" in run.out


def test_check_with_nodes_that_disagree_translates_to_what_they_advertise(tmp_path, cli):
    """The policy says all-balanced (9Gi -> 2g.10gb); the nodes run all-1g.10gb: the pod gets the 1g.10gb
    (9856Mi) they have, not a 2g.10gb that would stay Pending."""
    (tmp_path / "pod.yaml").write_text(BATCH_POD)
    nodes = _write(tmp_path, "nodes.yaml", [_node("a100-1", "all-1g.10gb", ALL_1G_10GB)])
    run = cli("check", tmp_path / "pod.yaml", "--context", nodes, "--diff", "--explain")
    assert run.code == 0, run.out
    assert "+        nvidia.com/mig-1g.10gb: '1'" in run.out and "mig-2g.10gb: '1'" not in run.out
    assert "the pool's nodes advertise nvidia.com/mig-1g.10gb, not nvidia.com/mig-2g.10gb" in run.out


def test_check_with_nodes_that_cannot_hold_the_request_denies_with_what_they_have(tmp_path, cli):
    (tmp_path / "pod.yaml").write_text(BATCH_POD.replace("labels: {gpu-admission.io/workload: batch}", (
        "labels: {gpu-admission.io/workload: batch}\n  annotations: {gpu-admission.io/gpu-memory: 12Gi}"
    )))
    nodes = _write(tmp_path, "nodes.yaml", [_node("a100-1", "all-1g.10gb", ALL_1G_10GB)])
    run = cli("check", tmp_path / "pod.yaml", "--context", nodes)
    assert run.code == 1, run.out
    assert "[gpu-memory-exceeded] no MIG device the nodes of pool infer-a100 advertise holds 12Gi" in run.out
    assert "(they advertise nvidia.com/mig-1g.10gb); ask for at most 9856Mi" in run.out


def test_a_profile_written_by_hand_is_judged_against_the_nodes(tmp_path, cli):
    pod = (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: raw, namespace: team}\nspec:\n"
        "  nodeSelector: {workload: gpu-infer}\n"
        "  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]\n  containers:\n"
        "  - {name: c, image: x, resources: {limits: {nvidia.com/mig-2g.10gb: '1'}}}\n"
    )
    (tmp_path / "pod.yaml").write_text(pod)
    nodes = _write(tmp_path, "nodes.yaml", [_node("a100-1", "all-1g.10gb", ALL_1G_10GB)])
    run = cli("check", tmp_path / "pod.yaml", "--context", nodes)
    assert "[mig-profile-unavailable] no node of pool infer-a100 advertises nvidia.com/mig-2g.10gb" in run.out
    assert "(they advertise nvidia.com/mig-1g.10gb)" in run.out


def test_check_without_nodes_trusts_the_policy(tmp_path, cli):
    (tmp_path / "pod.yaml").write_text(BATCH_POD)
    assert cli("check", tmp_path / "pod.yaml").code == 0


def test_lint_context_reports_the_pool_whose_nodes_disagree(tmp_path, cli):
    nodes = _write(
        tmp_path,
        "nodes.yaml",
        [_node("a100-1", "all-balanced", BALANCED), _node("a100-2", "all-1g.10gb", ALL_1G_10GB)],
    )
    run = cli("policy", "lint", POLICIES, "--context", nodes)
    assert run.code == 0, run.out  # a warning: the policy loads
    (line,) = [x for x in run.out.splitlines() if "[pool-nodes-disagree]" in x]
    text = (POLICIES / "default.yaml").read_text()
    at = line_of(text, "mig: {strategy: mixed, layout: all-balanced}")
    assert line.startswith(f"{POLICIES / 'default.yaml'}:{at}:")
    assert "1 of 2 node(s) of pool 'infer-a100' disagree with its MIG geometry (layout all-balanced)" in line
    assert "node a100-2 nvidia.com/mig.config=all-1g.10gb, not all-balanced" in line
    assert "does not advertise nvidia.com/mig-1g.5gb, nvidia.com/mig-2g.10gb, nvidia.com/mig-3g.20gb" in line
    assert "advertises nvidia.com/mig-1g.10gb: 32 the pool does not list" in line
    assert "a100-1" not in line


def test_lint_context_reports_fewer_instances_than_the_layout(tmp_path, cli):
    fewer = {**BALANCED, "nvidia.com/mig-3g.20gb": "4"}  # half the GPUs not partitioned
    nodes = _write(tmp_path, "nodes.yaml", [_node("a100-1", "all-balanced", fewer)])
    run = cli("policy", "lint", POLICIES, "--context", nodes)
    (line,) = [x for x in run.out.splitlines() if "[pool-nodes-disagree]" in x]
    assert "allocatable nvidia.com/mig-3g.20gb: 4 of 8 (8 GPUs x the layout)" in line


def test_lint_context_with_agreeing_nodes_is_quiet(tmp_path, cli):
    nodes = _write(tmp_path, "nodes.yaml", [_node("a100-1", "all-balanced", BALANCED)])
    run = cli("policy", "lint", POLICIES, "--context", nodes)
    assert run.code == 0 and "[pool-nodes-disagree]" not in run.out, run.out


def test_lint_context_that_cannot_be_read_is_bad_input(tmp_path, cli):
    bad = tmp_path / "nodes.yaml"
    bad.write_text("apiVersion: v1\nkind: Node\nmetadata: {}\n")
    run = cli("policy", "lint", POLICIES, "--context", bad)
    assert run.code == 2 and "--context" in run.err


def test_a_dra_mig_pool_is_not_compared_with_extended_resources(tmp_path, cli):
    """DRA nodes publish ResourceSlices, not nvidia.com/mig-*: no disagreement, and no translation change."""
    from tests.conftest import ROOT

    nodes = _write(tmp_path, "nodes.yaml", [_node("a100-1", "all-balanced", {})])
    run = cli("policy", "lint", ROOT / "examples" / "dra-policy", "--context", nodes)
    assert run.code == 0 and "[pool-nodes-disagree]" not in run.out, run.out
    (tmp_path / "pod.yaml").write_text(BATCH_POD.replace("namespace: team", "namespace: team-a"))
    run = cli("check", "--policy", ROOT / "examples" / "dra-policy", tmp_path / "pod.yaml", "--context", nodes)
    assert run.code == 0, run.out
