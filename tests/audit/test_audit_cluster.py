"""``gpu-admission audit`` against a fake apiserver, through the real ``kubernetes`` client."""

from __future__ import annotations

import json
import math
import re
import socket
from pathlib import Path
from xml.etree import ElementTree as ET

import yaml

from tests.audit.cluster import CPU_PODS, EXPECTED
from tests.audit.conftest import POLICIES, run_cli
from tests.audit.fake_apiserver import CORE, FakeAPIServer


def _results(out: str) -> dict[tuple[str, str, str], dict]:
    doc = json.loads(out)
    return {(r["namespace"], r["kind"], r["name"]): r for r in doc["results"]}


def test_every_gpu_object_is_judged_as_stored(kubeconfig: Path) -> None:
    ran = run_cli("--kubeconfig", kubeconfig, "--policy", POLICIES, "-o", "json", "--page-size", "7")
    assert ran.code == 1, ran.err  # denials
    results = _results(ran.out)
    assert {k: r["status"] for k, r in results.items()} == EXPECTED
    rules = {k: {v["rule"] for v in r["violations"]} for k, r in results.items()}
    # the scheduler's nodeName, defaulted tolerations and status are not findings
    assert rules[("team-a", "Pod", "infer-ok")] == set()
    # a class pod stored without our mutation
    assert rules[("team-a", "Pod", "infer-unmutated")] == {"placement-missing"}
    # managedFields show the user wrote spec.nodeName
    assert rules[("team-a", "Pod", "pinned")] == {"node-name-set"}
    assert rules[("team-a", "Pod", "raw-gpu")] == {"raw-gpu-request"}
    # the exemption of gpu-operator (namespace label) holds in audit as at admission
    assert rules[("gpu-operator", "DaemonSet", "dcgm")] == set()
    # pods of controllers are reported with their owner, through the ReplicaSet to the Deployment
    bad = results[("team-a", "Pod", "web-5d8f-bbbbb")]
    assert bad["owner"] == "Deployment/web (via ReplicaSet/web-5d8f)"
    summary = json.loads(ran.out)["summary"]
    assert summary["notIntercepted"] == 1  # kube-system's GPU pod
    assert summary["notGPURelevant"] == CPU_PODS
    assert summary["judged"] == len(EXPECTED)


def test_lists_are_paginated_and_unserved_kinds_noted(apiserver: FakeAPIServer, kubeconfig: Path) -> None:
    ran = run_cli("--kubeconfig", kubeconfig, "--policy", POLICIES, "--page-size", "7")
    pods = [r for r in apiserver.lists("pods")]
    total = sum(1 for _ in apiserver.objects[("", "pods")])
    assert len(pods) == math.ceil(total / 7)
    assert all(r.query["limit"] == "7" for r in pods)
    assert "continue" not in pods[0].query and all("continue" in r.query for r in pods[1:])
    # discovery, not guessing: the Volcano and Kubeflow kinds this cluster does not serve are notes
    assert "note: batch.volcano.sh/v1alpha1 Job: not served by this cluster, skipped" in ran.out
    assert "note: kubeflow.org/v1 PyTorchJob: not served by this cluster, skipped" in ran.out
    assert not [r for r in apiserver.requests if "volcano" in r.path and r.path.count("/") > 3]


def test_text_groups_by_namespace_and_rule_counts_first(kubeconfig: Path) -> None:
    ran = run_cli("--kubeconfig", kubeconfig, "--policy", POLICIES)
    lines = ran.out.splitlines()
    assert lines[1].startswith("audited 10 GPU-relevant object(s): 6 admitted, 1 warned, 3 denied")
    table = lines.index("findings by namespace and rule:")
    rows = [line.split() for line in lines[table + 1 : table + 4]]
    assert rows == [
        ["team-a", "node-name-set", "deny", "1"],
        ["team-a", "placement-missing", "deny", "6"],
        ["team-a", "raw-gpu-request", "warn", "1"],
    ]
    assert any("Pod/web-5d8f-bbbbb (owner Deployment/web (via ReplicaSet/web-5d8f))" in line for line in lines)


def test_junit(kubeconfig: Path) -> None:
    ran = run_cli("--kubeconfig", kubeconfig, "--policy", POLICIES, "-o", "junit")
    suite = ET.fromstring(ran.out)
    assert suite.get("tests") == str(len(EXPECTED))
    assert suite.get("failures") == "3"
    failed = {c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None}
    assert failed == {"Pod/infer-unmutated", "Pod/pinned", "Pod/web-5d8f-bbbbb"}


def test_namespace_flag_lists_one_namespace(apiserver: FakeAPIServer, kubeconfig: Path) -> None:
    ran = run_cli("--kubeconfig", kubeconfig, "--policy", POLICIES, "-o", "json", "--namespace", "serving")
    assert ran.code == 0, ran.err
    assert set(_results(ran.out)) == {("serving", "Pod", "serve-ok")}
    pod_lists = {r.path for r in apiserver.lists("pods")}
    assert pod_lists == {"/api/v1/namespaces/serving/pods"}


def test_expired_continue_token_relists_without_judging_twice(apiserver: FakeAPIServer, kubeconfig: Path) -> None:
    original = apiserver._list
    state = {"expired": False}

    def expire_once(served, namespace, query):  # the list's revision is compacted after the first page
        if query.get("continue") and not state["expired"] and served[2] == "pods":
            state["expired"] = True
            apiserver.expire_continues()
        return original(served, namespace, query)

    apiserver._list = expire_once
    ran = run_cli("--kubeconfig", kubeconfig, "--policy", POLICIES, "-o", "json", "--page-size", "5")
    assert state["expired"]
    pods = apiserver.lists("pods")
    assert "continue" not in pods[0].query
    restarted = [i for i, r in enumerate(pods) if i and "continue" not in r.query]
    assert restarted, "the list was not restarted after 410"
    doc = json.loads(ran.out)
    keys = [(r["namespace"], r["kind"], r["name"]) for r in doc["results"]]
    assert len(keys) == len(set(keys)) == len(EXPECTED)
    assert doc["summary"]["notGPURelevant"] == CPU_PODS


def test_rejected_token_is_exit_2_with_one_line(apiserver: FakeAPIServer, tmp_path: Path) -> None:
    expired = apiserver.kubeconfig(tmp_path, token="expired-token")
    ran = run_cli("--kubeconfig", expired, "--policy", POLICIES)
    assert ran.code == 2
    assert ran.err.count("\n") == 1 and "Traceback" not in ran.err
    assert "rejected the credentials (HTTP 401 Unauthorized)" in ran.err
    assert all(not r.authorized for r in apiserver.requests)


def test_unreachable_server_is_exit_2(tmp_path: Path) -> None:
    with socket.socket() as s:  # a loopback port with nothing listening on it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    api = FakeAPIServer()
    api.port = port
    config = api.kubeconfig(tmp_path)
    api.httpd.server_close()
    ran = run_cli("--kubeconfig", config, "--policy", POLICIES)
    assert ran.code == 2
    assert ran.err.count("\n") == 1 and "Traceback" not in ran.err
    assert f"cannot reach the API server at http://127.0.0.1:{port}" in ran.err


def test_bad_kubeconfigs_are_exit_2(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage"
    garbage.write_text("clusters: [ {unclosed\n")
    no_context = tmp_path / "empty"
    no_context.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "clusters": [], "users": []}))
    for config, words in (
        (tmp_path / "missing", "cannot"),
        (garbage, "cannot load kubeconfig"),
        (no_context, "cannot use kubeconfig"),
    ):
        ran = run_cli("--kubeconfig", config, "--policy", POLICIES)
        assert ran.code == 2, (config, ran.err)
        assert ran.err.count("\n") == 1 and "Traceback" not in ran.err, ran.err
        assert words in ran.err and str(config) in ran.err


def test_unserved_context_kind_is_a_note(policy, tmp_path: Path) -> None:
    api = FakeAPIServer(served=list(CORE)).start()  # no DRA, no apps, no batch
    try:
        from tests.audit.cluster import mutated, pod, stored

        api.add(stored(mutated(policy, pod("infer-ok", "team-a", cls="inference"))))
        ran = run_cli("--kubeconfig", api.kubeconfig(tmp_path), "--policy", POLICIES)
    finally:
        api.stop()
    assert ran.code == 0, ran.err
    assert "note: resource.k8s.io DeviceClass: not served by this cluster, not read" in ran.out
    assert "note: apps/v1 Deployment: not served by this cluster, skipped" in ran.out
    assert "1 admitted" in ran.out


def test_pages_are_judged_as_they_arrive(policy, apiserver: FakeAPIServer, kubeconfig: Path) -> None:
    from webhook.audit.inventory import ClusterInventory
    from webhook.audit.kube import Kube, load_client
    from webhook.audit.run import Audit

    kube = Kube(load_client(str(kubeconfig), None, False), page_size=5)
    stream = Audit(policy, ClusterInventory(kube, policy, None)).run()
    next(j for j in stream if j.kind == "Pod")
    assert len(apiserver.lists("pods")) == 1  # the first page is judged before the second is asked for
    rest = list(stream)
    assert len(apiserver.lists("pods")) == math.ceil(len(apiserver.objects[("", "pods")]) / 5)
    assert rest


def test_in_cluster_outside_a_pod_is_exit_2(monkeypatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    ran = run_cli("--in-cluster", "--policy", POLICIES)
    assert ran.code == 2
    assert ran.err.startswith("gpu-admission audit: cannot use the in-cluster service account:")
    assert ran.err.count("\n") == 1


def test_a_snapshot_and_a_cluster_are_exclusive(kubeconfig: Path, snapshot: Path) -> None:
    ran = run_cli("--snapshot", snapshot, "--kubeconfig", kubeconfig, "--policy", POLICIES)
    assert ran.code == 2 and "cannot be combined" in ran.err


def test_progress_names_the_list_being_read(policy, apiserver: FakeAPIServer, kubeconfig: Path) -> None:
    import io

    from webhook.audit.inventory import ClusterInventory
    from webhook.audit.kube import Kube, load_client
    from webhook.audit.run import Audit
    from webhook.check.progress import Progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    from tests.audit.cluster import pod

    for i in range(100):  # enough objects for the line to be redrawn while pods are listed
        apiserver.add(pod(f"more-{i}", "team-a"))
    ticks = iter(range(0, 100_000, 10))  # every object seen ten seconds after the one before
    inventory = ClusterInventory(Kube(load_client(str(kubeconfig), None, False), page_size=10), policy, None)
    term = Terminal()
    progress = Progress(
        term, name="audit", unit="objects", where=lambda j: inventory.listing, clock=lambda: next(ticks)
    )
    list(progress.observe(Audit(policy, inventory).run()))
    drawn = term.getvalue()
    assert "gpu-admission audit: 1 objects" in drawn and "now deployments.apps" in drawn
    assert re.search(r"now pods \(\d+ read, ~\d+ to go\)", drawn)  # remainingItemCount while pods are listed
    assert drawn.endswith("\r\x1b[2K")  # erased at the end


def test_claim_templates_are_judged_once_from_the_api(apiserver: FakeAPIServer, tmp_path: Path) -> None:
    """A template created after the pod that names it: listed as context, judged on its own, once."""
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "watch-gpus", "namespace": "team-a", "uid": "rct-1"},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "adminAccess": True}}
        ]}}},
    }
    apiserver.add(template)
    ran = run_cli("--kubeconfig", apiserver.kubeconfig(tmp_path), "--policy", POLICIES, "-o", "json")
    found = [r for r in json.loads(ran.out)["results"] if r["kind"] == "ResourceClaimTemplate"]
    assert [(r["name"], r["status"], [v["rule"] for v in r["violations"]]) for r in found] == [
        ("watch-gpus", "denied", ["privileged-gpu"])
    ]
