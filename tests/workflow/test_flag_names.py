"""One name, one meaning across the CLI: ``--namespace-labels`` (where labels come from), ``--cluster-objects``
(files of cluster objects), ``--namespace`` (namespace names), ``--context`` (a kubeconfig context). The old
spellings still work, with the same result, and say on stderr what to write instead."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import POLICIES, ROOT

NS_OBJECT = "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop, labels: {gpu-admission.io/tier: sandbox}}\n"
TRAIN = (
    "apiVersion: v1\nkind: Pod\nmetadata:\n  name: t\n  namespace: shop\n"
    "  labels: {gpu-admission.io/workload: training}\nspec:\n  containers: [{name: c, image: i}]\n"
)
NODES = "apiVersion: v1\nkind: List\nitems: []\n"


def _warning(old: str, new: str) -> str:
    return f"warning: {old} is an old spelling, deprecated; use {new} (same meaning)"


@pytest.mark.parametrize(("new", "old"), [("--cluster-objects", "--context"), ("--namespace-labels", "--namespaces")])
def test_check_old_spellings_warn_and_mean_the_same(tmp_path, cli, new, old):
    (tmp_path / "ns.yaml").write_text(NS_OBJECT)
    (tmp_path / "pod.yaml").write_text(TRAIN)
    fresh = cli("check", tmp_path / "pod.yaml", new, tmp_path / "ns.yaml", "--policy", POLICIES)
    legacy = cli("check", tmp_path / "pod.yaml", old, tmp_path / "ns.yaml", "--policy", POLICIES)
    assert (fresh.code, fresh.out) == (legacy.code, legacy.out)
    assert fresh.code == 1 and "class-not-allowed" in fresh.out  # the label was read under either name
    assert "deprecated" not in fresh.err
    assert f"gpu-admission check: {_warning(old, new)}" in legacy.err


def test_lint_reads_nodes_from_cluster_objects_and_warns_on_context(tmp_path, cli):
    (tmp_path / "nodes.yaml").write_text(NODES)
    fresh = cli("policy", "lint", POLICIES, "--cluster-objects", tmp_path / "nodes.yaml")
    legacy = cli("policy", "lint", POLICIES, "--context", tmp_path / "nodes.yaml")
    assert (fresh.code, fresh.out) == (legacy.code, legacy.out)
    assert "deprecated" not in fresh.err
    assert f"gpu-admission policy lint: {_warning('--context', '--cluster-objects')}" in legacy.err


def test_lint_names_the_new_flag_in_its_error(tmp_path, cli):
    (tmp_path / "bad.yaml").write_text("kind: Node\nmetadata: [no]\n")
    run = cli("policy", "lint", POLICIES, "--cluster-objects", tmp_path / "bad.yaml")
    assert run.code == 2 and "--cluster-objects:" in run.err and "--context" not in run.err


def test_render_takes_namespace_names_under_namespace(tmp_path, cli):
    cidr = ("--control-plane-cidr", "10.0.0.0/8")
    fresh = cli("policy", "render", ROOT / "examples" / "dra-policy", "--namespace", "team-a,team-b", *cidr)
    short = cli("policy", "render", ROOT / "examples" / "dra-policy", "-n", "team-a", "-n", "team-b", *cidr)
    legacy = cli("policy", "render", ROOT / "examples" / "dra-policy", "--namespaces", "team-a,team-b", *cidr)
    assert fresh.code == short.code == legacy.code == 0
    assert fresh.out == short.out == legacy.out
    assert "namespace: team-b" in fresh.out  # the per-namespace objects were rendered into both
    assert "deprecated" not in fresh.err + short.err
    assert f"gpu-admission policy render: {_warning('--namespaces', '--namespace')}" in legacy.err


def test_render_warns_on_context(tmp_path, cli):
    (tmp_path / "ns.yaml").write_text(NS_OBJECT)
    cidr = ("--control-plane-cidr", "10.0.0.0/8")
    fresh = cli("policy", "render", POLICIES, "--cluster-objects", tmp_path / "ns.yaml", *cidr)
    legacy = cli("policy", "render", POLICIES, "--context", tmp_path / "ns.yaml", *cidr)
    assert fresh.out == legacy.out and fresh.code == legacy.code == 0
    assert _warning("--context", "--cluster-objects") in legacy.err and "deprecated" not in fresh.err


def _serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        # the namespace source is read before any certificate is made: --certs-dir stays unwritten
        [sys.executable, "-m", "webhook", "serve", "--metrics-bind", "off", "--certs-dir", "/nonexistent", *args],
        capture_output=True, text=True, timeout=60, cwd=ROOT, env=env,
    )


@pytest.mark.slow  # two `serve` processes: a few seconds each
def test_serve_takes_namespace_labels_and_warns_on_namespaces(tmp_path):
    bad = tmp_path / "ns.yaml"
    bad.write_text("research: [not, a, map]\n")
    fresh = _serve("--namespace-labels", str(bad))
    legacy = _serve("--namespaces", str(bad))
    assert fresh.returncode == legacy.returncode == 2  # the file was read under both names, and refused
    assert "--namespace-labels: " in fresh.stderr and "must map to a label map" in fresh.stderr
    assert "deprecated" not in fresh.stderr
    assert f"gpu-admission serve: {_warning('--namespaces', '--namespace-labels')}" in legacy.stderr
    assert "must map to a label map" in legacy.stderr


@pytest.mark.slow
def test_serve_reads_the_old_environment_variable_with_a_warning(tmp_path):
    import os

    bad = tmp_path / "ns.yaml"
    bad.write_text("research: [not, a, map]\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith("GPU_ADMISSION_")}
    legacy = _serve(env={**base, "GPU_ADMISSION_NAMESPACES": str(bad)})
    fresh = _serve(env={**base, "GPU_ADMISSION_NAMESPACE_LABELS": str(bad)})
    assert fresh.returncode == legacy.returncode == 2
    assert "must map to a label map" in fresh.stderr and "must map to a label map" in legacy.stderr
    assert _warning("GPU_ADMISSION_NAMESPACES", "GPU_ADMISSION_NAMESPACE_LABELS") in legacy.stderr
    assert "deprecated" not in fresh.stderr


def test_context_means_a_kubeconfig_context_where_it_remains():
    """``audit --context`` and ``certs inject --context`` are kubectl's meaning; no alias shadows them."""
    from webhook.cli import build_parser

    parser = build_parser()
    audit = parser.parse_args(["audit", "--kubeconfig", "k", "--context", "prod"])
    assert audit.context == "prod"
