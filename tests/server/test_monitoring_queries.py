"""The Grafana dashboard and the alerts query metrics the real server exports (scraped after a day's
kinds of reviews), so a renamed metric cannot leave a panel silently empty."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from tests.conftest import ROOT
from tests.server.objects import inference_pod
from tests.server.support import ServerProcess, review

MONITORING = ROOT / "manifests" / "monitoring"
_METRIC = re.compile(r"\b(gpu_admission_[a-z_]+|up)\b")

pytestmark = pytest.mark.server


def _alert_exprs() -> list[str]:
    rules = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())["spec"]
    return [r["expr"] for g in rules["groups"] for r in g["rules"]]


def _queries() -> list[str]:
    dash = json.loads((MONITORING / "dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs += [v["query"] for v in dash["templating"]["list"] if v["type"] == "query"]
    return exprs


def test_dashboard_and_alerts_query_metrics_the_server_exports(default_server: ServerProcess):
    server = default_server
    """Scrape a real server after the reviews a day brings (a mutation, a denial, a bad request) and
    check every metric a dashboard panel or an alert names is there."""
    client = server.client()
    try:
        pod = inference_pod()
        assert client.post_review("mutate", review(pod))[0] == 200
        denied = inference_pod()
        denied["metadata"]["labels"]["gpu-admission.io/workload"] = "no-such-class"
        status, doc = client.post_review("validate", review(denied))
        assert status == 200 and doc["response"]["allowed"] is False
        status, _, _ = client.request("POST", "/validate", b"{")
        assert status == 400
    finally:
        client.close()
    server.wait_metric("gpu_admission_requests_total", 2)
    server.wait_metric("gpu_admission_rule_violations_total", 1)
    exported = set(re.findall(r"^([a-z_]+?)(?:_bucket|_count|_sum)?[{ ]", server.metrics(), re.M))
    exported |= set(re.findall(r"^([a-z_]+)[{ ]", server.metrics(), re.M))
    named = {m for expr in _queries() + _alert_exprs() for m in _METRIC.findall(expr)} - {
        "up",  # Prometheus's own, per scrape target
        "gpu_admission_exception_expiry_timestamp_seconds",  # series only for a policy with exceptions:
    }  # tests/server/test_exceptions.py scrapes it from a server that has some
    assert named, "the dashboard queries name metrics"
    missing = {m for m in named if m not in exported and re.sub(r"_bucket$", "", m) not in exported}
    assert not missing, f"queries name metrics the server does not export: {sorted(missing)}"
    assert server.metric("gpu_admission_build_info") == 1
