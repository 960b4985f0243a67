"""Cluster context for ``check``: Namespace objects in the inputs and ``--context`` files give namespace
labels (entitlements), and Nodes, ResourceClaimTemplates, ResourceClaims and DeviceClasses reach the
engine as its ``Cluster`` view. Precedence (docs/ci.md): ``--namespaces`` > ``--context`` > inputs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from tests.check.test_check_cli import INFER
from tests.check.test_check_edges import run
from tests.conftest import ROOT
from webhook.check import runner
from webhook.check.context import ContextError, from_files, mentions_context
from webhook.check.inputs import read_sources

TRAIN = INFER.replace("gpu-admission.io/workload: inference", "gpu-admission.io/workload: training").replace(
    "name: infer", "name: train\n  namespace: llm"
)
# the default policy restricts labelled namespaces: a serving-only namespace may not train
NS_SERVING = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: llm\n  labels: {gpu-admission.io/tier: serving}\n"
NS_PLAIN = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: llm\n  labels: {team: x}\n"
CLUSTER_DUMP = {
    "apiVersion": "v1",
    "kind": "List",
    "items": [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "llm", "labels": {"gpu-admission.io/tier": "serving"}},
        },
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1", "labels": {"workload": "gpu-train"}}},
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "gpu-admission-gpu-8", "namespace": "llm"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}}},
        },
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c1"}, "spec": {}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ignored"}},
    ],
}


def test_training_is_admitted_without_namespace_labels(tmp_path):
    (tmp_path / "job.yaml").write_text(TRAIN)
    assert run(str(tmp_path / "job.yaml"))[0] == 0


def test_a_namespace_yaml_next_to_the_jobs_applies_its_labels(tmp_path):
    """The namespace file sorts after the job: context is read from every input before judging."""
    (tmp_path / "a-job.yaml").write_text(TRAIN)
    (tmp_path / "namespace.yaml").write_text(NS_SERVING)
    code, out, _ = run(str(tmp_path))
    assert code == 1 and "[class-not-allowed]" in out, out
    assert "Namespace/llm: skipped" not in out  # context objects are quiet skips
    code, out, _ = run(str(tmp_path), "-v")
    assert "Namespace/llm: skipped (Namespace: read as cluster context, not judged)" in out
    # one stream, Namespace last, in a file and on stdin (stdin is spooled so it can be read twice)
    (tmp_path / "all.yaml").write_text(TRAIN + "---\n" + NS_SERVING)
    assert run(str(tmp_path / "all.yaml"))[0] == 1
    proc = subprocess.run(
        [sys.executable, "-m", "webhook", "check", "-"],
        cwd=ROOT,
        input=TRAIN + "---\n" + NS_SERVING,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1 and "[class-not-allowed]" in proc.stdout, proc.stdout + proc.stderr


def test_context_files_beat_the_inputs_and_namespaces_file_beats_both(tmp_path):
    (tmp_path / "job.yaml").write_text(TRAIN + "---\n" + NS_PLAIN)  # the PR drops its restricting label
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(CLUSTER_DUMP))  # the cluster says otherwise
    code, out, _ = run(str(tmp_path / "job.yaml"), "--context", str(tmp_path / "cluster.yaml"))
    assert code == 1 and "[class-not-allowed]" in out
    (tmp_path / "ns.yaml").write_text("llm: {team: x}\n")
    args = ("--context", str(tmp_path / "cluster.yaml"), "--namespaces", str(tmp_path / "ns.yaml"))
    assert run(str(tmp_path / "job.yaml"), *args)[0] == 0


def test_later_context_files_win(tmp_path):
    (tmp_path / "job.yaml").write_text(TRAIN)
    (tmp_path / "1.yaml").write_text(NS_PLAIN)
    (tmp_path / "2.yaml").write_text(NS_SERVING)
    one, two = ("--context", str(tmp_path / "1.yaml")), ("--context", str(tmp_path / "2.yaml"))
    assert run(str(tmp_path / "job.yaml"), *one, *two)[0] == 1
    assert run(str(tmp_path / "job.yaml"), *two, *one)[0] == 0


def test_context_objects_reach_the_engine_as_its_cluster_view(tmp_path, monkeypatch):
    """A spy around the real engine records the Cluster it is given (the rules that read nodes, claim
    templates and device classes are tested with the engine)."""
    seen = []
    real = runner.report

    def spy(policy, request):
        seen.append(request.cluster)
        return real(policy, request)

    monkeypatch.setattr(runner, "report", spy)
    (tmp_path / "cluster.json").write_text(json.dumps(CLUSTER_DUMP, indent=2))
    (tmp_path / "job.yaml").write_text(TRAIN)
    (tmp_path / "dc.yaml").write_text(
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: mig.nvidia.com}\n"
    )
    run(str(tmp_path / "job.yaml"), str(tmp_path / "dc.yaml"), "--context", str(tmp_path / "cluster.json"))
    cluster = seen[0]
    assert dict(cluster.namespaces["llm"]) == {"gpu-admission.io/tier": "serving"}
    assert [n["metadata"]["name"] for n in cluster.nodes] == ["gpu-1"]
    assert set(cluster.claim_templates) == {("llm", "gpu-admission-gpu-8")}
    assert set(cluster.claims) == {("default", "c1")}  # no namespace: --namespace
    assert set(cluster.device_classes) == {"gpu.nvidia.com", "mig.nvidia.com"}  # --context and inputs
    with pytest.raises(TypeError):
        cluster.namespaces["x"] = {}  # read-only, as the engine expects


def test_kubectl_list_forms_are_read(tmp_path):
    (tmp_path / "nodes.yaml").write_text(
        "apiVersion: v1\nkind: NodeList\nitems:\n- metadata: {name: n1}\n- metadata: {name: n2}\n"
    )
    objects = from_files(read_sources([str(tmp_path / "nodes.yaml")]), "default")
    assert set(objects.nodes) == {"n1", "n2"}


@pytest.mark.parametrize(
    ("text", "where", "what"),
    [
        ("apiVersion: v1\nkind: Namespace\nmetadata: {labels: {a: b}}\n", ":1:", "a Namespace without metadata.name"),
        ("kind: List\nitems:\n- kind: Node\n  metadata: {name: [x}\n", ":4:", "YAML syntax error"),
        ("apiVersion: v1\nkind: Namespace\nmetadata: {name: x, labels: [a]}\n", ":1:", "labels is not a map"),
    ],
)
def test_a_broken_context_file_exits_2_with_its_place(tmp_path, text, where, what):
    (tmp_path / "ctx.yaml").write_text(text)
    (tmp_path / "job.yaml").write_text(INFER)
    code, _out, err = run(str(tmp_path / "job.yaml"), "--context", str(tmp_path / "ctx.yaml"))
    assert code == 2 and f"--cluster-objects: {tmp_path / 'ctx.yaml'}{where}" in err and what in err
    with pytest.raises(ContextError):
        from_files(read_sources([str(tmp_path / "ctx.yaml")]), "default")


def test_a_missing_context_file_exits_2(tmp_path):
    (tmp_path / "job.yaml").write_text(INFER)
    code, _out, err = run(str(tmp_path / "job.yaml"), "--context", str(tmp_path / "nope.yaml"))
    assert code == 2 and "no such file" in err


def test_the_prefilter_finds_every_form_kubectl_writes():
    assert mentions_context("kind: Namespace\n")
    assert mentions_context('{"kind": "NodeList", "items": []}')
    assert mentions_context('  "kind": "DeviceClass",\n')
    assert mentions_context("kind: ResourceClaimTemplate # x\n")
    assert mentions_context("kind: Namespace")
    assert not mentions_context("kind: NodePool\n")
    assert not mentions_context("kind: Pod\n")


def test_a_namespaces_file_is_loaded_with_bounded_aliases_and_located_errors(tmp_path):
    from tests.check.test_hostile_files import billion_laughs

    (tmp_path / "job.yaml").write_text(INFER)
    (tmp_path / "ns.yaml").write_text(billion_laughs().replace("kind: Pod", "kind: Namespace"))
    code, _out, err = run(str(tmp_path / "job.yaml"), "--namespaces", str(tmp_path / "ns.yaml"))
    assert code == 2 and f"--namespace-labels: {tmp_path / 'ns.yaml'}:" in err and "YAML aliases expand" in err
    (tmp_path / "ns.yaml").write_text("llm: {a: [}\n")
    code, _out, err = run(str(tmp_path / "job.yaml"), "--namespaces", str(tmp_path / "ns.yaml"))
    assert code == 2 and f"{tmp_path / 'ns.yaml'}:1:" in err and "YAML syntax error" in err
