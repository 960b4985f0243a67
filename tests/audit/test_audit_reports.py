"""``-o openreports`` and ``--apply-reports``: valid against the OpenReports CRD, bounded, applied as SSA."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import yaml

from tests.audit.conftest import POLICIES, run_cli
from tests.audit.fake_apiserver import APPLY, CORE, FakeAPIServer
from tests.audit.openreports_schema import NAMESPACED, schema
from webhook.audit.judge import Judged
from webhook.audit.openreports import MAX_MESSAGE, MAX_RESULTS, OMITTED_ANNOTATION, ReportBuilder
from webhook.check.runner import Status
from webhook.engine import Action, Violation

ETCD_LIMIT = 1.5 * 1024 * 1024


def _valid(doc: dict) -> None:
    jsonschema.validate(doc, schema(doc["kind"]))
    assert doc["metadata"]["name"] == "gpu-admission"
    assert ("namespace" in doc["metadata"]) is NAMESPACED[doc["kind"]]


def test_one_report_per_namespace_valid_against_the_crd(kubeconfig: Path) -> None:
    ran = run_cli("--kubeconfig", kubeconfig, "--policy", POLICIES, "-o", "openreports")
    assert ran.code == 1, ran.err
    docs = list(yaml.safe_load_all(ran.out))
    for doc in docs:
        _valid(doc)
    by_ns = {d["metadata"]["namespace"]: d for d in docs}
    assert set(by_ns) == {"team-a", "serving", "gpu-operator"}  # never kube-system: not intercepted
    team = by_ns["team-a"]
    # 4 objects without a finding; 7 denials (1 node-name-set, 3 + 3 placement-missing); 1 warning
    assert team["summary"] == {"pass": 4, "fail": 7, "warn": 1, "error": 0, "skip": 0}
    assert len(team["results"]) == 8
    assert [r["result"] for r in team["results"]] == ["fail"] * 7 + ["warn"]
    pinned = next(r for r in team["results"] if r["rule"] == "node-name-set")
    assert pinned["resources"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "pinned", "namespace": "team-a", "uid": "uid-pod-team-a-pinned"}
    ]
    assert pinned["properties"]["path"] == "spec.nodeName"
    owned = [r for r in team["results"] if r["resources"][0]["name"] == "web-5d8f-bbbbb"]
    assert {r["properties"]["owner"] for r in owned} == {"Deployment/web (via ReplicaSet/web-5d8f)"}
    assert by_ns["serving"]["summary"]["pass"] == 1 and by_ns["serving"]["results"] == []


def test_cluster_scoped_objects_get_a_cluster_report(tmp_path: Path) -> None:
    trainer = {"name": "t", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 8}}}
    runtime = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "torch-distributed"},
        "spec": {
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "replicas": 1,
                            "template": {
                                "spec": {
                                    "template": {
                                        "spec": {
                                            "containers": [trainer]
                                        }
                                    }
                                }
                            },
                        }
                    ]
                }
            }
        },
    }
    snap = tmp_path / "runtime.yaml"
    snap.write_text(yaml.safe_dump(runtime))
    ran = run_cli("--snapshot", snap, "--policy", POLICIES, "-o", "openreports")
    docs = list(yaml.safe_load_all(ran.out))
    assert [d["kind"] for d in docs] == ["ClusterReport"], ran.err
    _valid(docs[0])
    assert docs[0]["results"] and "namespace" not in docs[0]["results"][0]["resources"][0]


def _judged(i: int, action: Action, long: bool = False) -> Judged:
    name = ("p" * 240 + str(i)) if long else f"pod-{i}"
    message = "m" * (MAX_MESSAGE * 3) if long else "broken; fix it"
    rule = "placement-missing" if action is Action.DENY else "raw-gpu-request"
    return Judged(
        "v1",
        "Pod",
        "big" + ("-" + "n" * 50 if long else ""),
        name,
        f"{i:08d}-0000-0000-0000-000000000000",
        Status.DENIED if action is Action.DENY else Status.WARNED,
        (Violation(rule, action, "spec." + "x" * 400, message),),
        owner=("Deployment/" + "d" * 250 + " (via ReplicaSet/" + "r" * 250 + ")") if long else "",
    )


def test_results_are_capped_failures_first_summary_counts_all() -> None:
    builder = ReportBuilder(1_796_000_000.25)
    for i in range(MAX_RESULTS):  # a full report of warnings first
        builder.add(_judged(i, Action.WARN))
    for i in range(MAX_RESULTS, MAX_RESULTS + 50):  # then failures: they displace warnings
        builder.add(_judged(i, Action.DENY))
    (doc,) = builder.documents()
    _valid(doc)
    assert doc["summary"] == {"pass": 0, "fail": 50, "warn": MAX_RESULTS, "error": 0, "skip": 0}
    assert len(doc["results"]) == MAX_RESULTS == doc["configuration"]["limits"]["maxResults"]
    assert [r["result"] for r in doc["results"]] == ["fail"] * 50 + ["warn"] * (MAX_RESULTS - 50)
    assert doc["metadata"]["annotations"][OMITTED_ANNOTATION] == "50"
    assert doc["results"][0]["timestamp"] == {"seconds": 1_796_000_000, "nanos": 250_000_000}


def test_a_full_report_of_the_longest_results_stays_far_below_etcds_limit() -> None:
    builder = ReportBuilder(1_796_000_000.0)
    for i in range(MAX_RESULTS * 4):
        builder.add(_judged(i, Action.DENY, long=True))
    (doc,) = builder.documents()
    _valid(doc)
    size = len(json.dumps(doc).encode())
    assert size < ETCD_LIMIT / 2, size
    assert doc["summary"]["fail"] == MAX_RESULTS * 4
    assert all(len(r["message"]) <= MAX_MESSAGE for r in doc["results"])


def test_apply_reports_is_server_side_apply(apiserver: FakeAPIServer, kubeconfig: Path) -> None:
    # a report another manager wrote by hand: only `force` takes it over
    old = "/apis/openreports.io/v1alpha1/namespaces/old-team/reports/gpu-admission"
    apiserver.managers[old.replace("old-team", "team-a")] = "kubectl"
    # an earlier run's report in a namespace that has no GPU objects now
    apiserver.reports[old] = {
        "apiVersion": "openreports.io/v1alpha1",
        "kind": "Report",
        "metadata": {"name": "gpu-admission", "namespace": "old-team",
                     "labels": {"app.kubernetes.io/managed-by": "gpu-admission"}},
        "summary": {"fail": 3},
        "results": [{"policy": "gpu-admission", "result": "fail"}] * 3,
    }
    ran = run_cli("--kubeconfig", kubeconfig, "--policy", POLICIES, "--apply-reports")
    assert ran.code == 1, ran.err
    assert "applied 4 report(s)" in ran.err
    patches = apiserver.patches()
    assert {p.path.split("/")[5] for p in patches} == {"team-a", "serving", "gpu-operator", "old-team"}
    for p in patches:
        assert p.content_type == APPLY
        assert p.query == {"fieldManager": "gpu-admission", "force": "true"}
        assert p.path.endswith("/reports/gpu-admission")
        _valid(yaml.safe_load(p.body))
    assert apiserver.reports[old]["summary"] == {"pass": 0, "fail": 0, "warn": 0, "error": 0, "skip": 0}
    assert apiserver.reports[old]["results"] == []
    assert apiserver.managers[old.replace("old-team", "team-a")] == "gpu-admission"


def test_apply_reports_without_the_crds_is_exit_2(policy, tmp_path: Path) -> None:
    api = FakeAPIServer(served=list(CORE)).start()
    try:
        ran = run_cli("--kubeconfig", api.kubeconfig(tmp_path), "--policy", POLICIES, "--apply-reports")
    finally:
        api.stop()
    assert ran.code == 2
    assert "does not serve openreports.io/v1alpha1 reports" in ran.err and ran.err.count("\n") == 1
    assert not api.patches()


def test_apply_reports_needs_a_cluster(snapshot: Path) -> None:
    ran = run_cli("--snapshot", snapshot, "--policy", POLICIES, "--apply-reports")
    assert ran.code == 2 and "--apply-reports writes to a cluster" in ran.err
