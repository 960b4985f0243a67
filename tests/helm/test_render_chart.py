"""``gpu-admission policy render --chart DIR`` and ``--helm-values``: one bundle, two ways to deliver it, and
no render option silently dropped (the chart takes those from its values)."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from tests.conftest import DEFAULT_POLICY_DIR
from tests.helm.conftest import CHART
from webhook.cli import main
from webhook.render.chart import NAMESPACE_PLACEHOLDER, policy_digest


@pytest.fixture
def chart(tmp_path):
    target = tmp_path / "gpu-admission"
    shutil.copytree(CHART, target)
    (target / "files" / "policy-bundle.json").unlink()
    return target


def test_chart_and_helm_values_carry_the_same_bundle(chart, capsys):
    assert main(["policy", "render", "--chart", str(chart), str(DEFAULT_POLICY_DIR)]) == 0
    written = json.loads((chart / "files" / "policy-bundle.json").read_text(encoding="utf-8"))
    capsys.readouterr()
    assert main(["policy", "render", "--helm-values", str(DEFAULT_POLICY_DIR)]) == 0
    values = yaml.safe_load(capsys.readouterr().out)
    assert values == {"policy": {"bundle": written}}
    files = tuple(written["files"].items())
    assert written["policyDigest"] == policy_digest(files)
    assert {p.name for p in DEFAULT_POLICY_DIR.iterdir() if p.suffix in {".yaml", ".yml"}} <= set(written["files"])
    services = [w["clientConfig"]["service"] for o in written["objects"] for w in o.get("webhooks", [])]
    assert services and {s["namespace"] for s in services} == {NAMESPACE_PLACEHOLDER}


def test_the_bundle_objects_are_the_renders_own(chart, capsys):
    """The bundle holds exactly what `policy render` gives the kustomize base (the namespace aside)."""
    from tests.deploy.conftest import render_policy

    assert main(["policy", "render", "--chart", str(chart), str(DEFAULT_POLICY_DIR)]) == 0
    written = json.loads((chart / "files" / "policy-bundle.json").read_text(encoding="utf-8"))
    rendered = [d for d in yaml.safe_load_all(render_policy(DEFAULT_POLICY_DIR)) if d]
    want = [d for d in rendered if d["kind"] not in {"ConfigMap", "NetworkPolicy"}]
    got = json.loads(json.dumps(written["objects"]).replace(NAMESPACE_PLACEHOLDER, "gpu-admission"))
    assert got == want


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--control-plane-cidr", "10.0.0.0/24"),
        ("--webhook-namespace", "platform"),
        ("--monitoring-namespace", "prometheus"),
        ("--availability", "in-tree"),
        ("--kube-version", "1.36"),
        ("--namespaces", "team-a"),
        ("--in-tree", None),
        ("--no-mutating", None),
    ],
)
def test_a_render_option_the_chart_takes_from_values_is_refused_not_dropped(chart, capsys, flag, value):
    """Attack surface: `--chart --control-plane-cidr X` that silently rendered an open webhook port would
    leave the NetworkPolicy admitting any address while its author believes it narrowed."""
    args = ["policy", "render", "--chart", str(chart), flag, *([value] if value else []), str(DEFAULT_POLICY_DIR)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert flag in err and "values" in err
    assert not (chart / "files" / "policy-bundle.json").exists()


def test_chart_must_be_a_chart(tmp_path, capsys):
    assert main(["policy", "render", "--chart", str(tmp_path), str(DEFAULT_POLICY_DIR)]) == 2
    assert "no Chart.yaml" in capsys.readouterr().err
