"""What operators install to watch the webhook: the PrometheusRule's alerts (unit-tested with
promtool), the ServiceMonitor, and a Grafana dashboard whose every query names a metric the real
server exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT
from tests.deploy.conftest import one, render

MONITORING = ROOT / "manifests" / "monitoring"
ALERTS_TEST = Path(__file__).with_name("alerts.test.yaml")
_METRIC = re.compile(r"\b(gpu_admission_[a-z_]+|up)\b")


def _rules() -> dict:
    doc = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    assert doc["kind"] == "PrometheusRule"
    return doc["spec"]


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus; .ci/run installs it)")
    return found


def test_alert_rules_pass_promtool_unit_tests(tmp_path: Path):
    promtool = _promtool()
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(_rules()))
    shutil.copy(ALERTS_TEST, tmp_path / ALERTS_TEST.name)
    check = subprocess.run([promtool, "check", "rules", "rules.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    result = subprocess.run(
        [promtool, "test", "rules", ALERTS_TEST.name], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_unit_test_and_one_latency_threshold():
    alerts = [r for g in _rules()["groups"] for r in g["rules"] if "alert" in r]
    cases = yaml.safe_load(ALERTS_TEST.read_text())["tests"]
    tested = {t["alertname"] for case in cases for t in case["alert_rule_test"]}
    assert {a["alert"] for a in alerts} == tested
    latency = [a for a in alerts if "request_duration_seconds" in a["expr"]]
    assert len(latency) == 1, "one p99 threshold, stated once"
    threshold = float(re.search(r">\s*([0-9.]+)\s*$", latency[0]["expr"].strip()).group(1))
    for doc in ("docs/operations.md", "docs/install.md"):
        text = (ROOT / doc).read_text()
        assert "prometheusrule.yaml" in text, f"{doc} points to the shipped rules"
        stated = re.findall(r"p99[^\n]*?(?:above|>)\s*([0-9.]+)\s*(ms|s)\b", text)
        assert stated, f"{doc} states the p99 threshold"
        for value, unit in stated:
            assert float(value) / (1000 if unit == "ms" else 1) == threshold, f"{doc}: p99 {value} {unit}"


def test_monitoring_kustomization_renders_servicemonitor_rule_and_dashboard():
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed")
    proc = subprocess.run(["kubectl", "kustomize", str(MONITORING)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    monitor = one(docs, "ServiceMonitor")
    service = one(render("base"), "Service")
    ports = {p["name"] for p in service["spec"]["ports"]}
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert one(docs, "PrometheusRule")["spec"] == _rules()
    dashboard = one(docs, "ConfigMap", "gpu-admission-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["dashboard.json"]) == json.loads((MONITORING / "dashboard.json").read_text())
