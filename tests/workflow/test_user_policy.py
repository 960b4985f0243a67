"""The platform team's own policy: the repository's ``policies/`` and ``manifests/base/rendered.yaml``.

These are the only tests that read ``policies/``. They check what the docs ask of a policy change
(lint, its own PolicyTest suites, a current ``schema.json``, a re-rendered ``rendered.yaml``), so they
stay green after any change made the documented way, and say which command to run when not. Every
other test judges the product on the shipped default (the packaged copy) or on policies of its own.

The newcomer test below makes such a change on a copy (a pool, a class, its PriorityClass and an
entitlement, then a re-render) and runs the same checks, which is what keeps CI green for a team
that keeps its policy in this repository.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import yaml

from tests.conftest import DEFAULT_POLICY_DIR, RENDERED, ROOT, USER_POLICIES
from tests.deploy.conftest import render_in_tree, render_policy
from webhook.policy.schema import render_schema
from webhook.render.chart import BUNDLE_PATH, bundle, bundle_text


def user_policy_problems(
    cli, policy_dir: Path, rendered: Path, in_tree: Path | None = None, chart: Path | None = None
) -> list[str]:
    """What is wrong with a platform team's policy directory and its rendered manifest, each with the
    command that fixes it (an empty list: CI stays green)."""
    problems = []
    lint = cli("policy", "lint", policy_dir)
    if lint.code != 0:
        problems.append(f"gpu-admission policy lint {policy_dir} fails:\n{lint.out}{lint.err}")
    if (policy_dir / "tests").is_dir():
        run = cli("policy", "test", policy_dir)
        if run.code != 0:
            problems.append(f"gpu-admission policy test {policy_dir} fails:\n{run.out}{run.err}")
    schema = policy_dir / "schema.json"
    if schema.is_file() and schema.read_text(encoding="utf-8") != render_schema():
        problems.append(f"{schema} is stale: gpu-admission policy schema > {schema}")
    if rendered.read_text(encoding="utf-8") != render_policy(policy_dir):
        problems.append(f"{rendered} is stale: gpu-admission policy render {policy_dir} > {rendered}")
    if in_tree is not None and in_tree.read_text(encoding="utf-8") != render_in_tree(policy_dir):
        problems.append(f"{in_tree} is stale: gpu-admission policy render --in-tree {policy_dir} > {in_tree}")
    if chart is not None and _chart_bundle(chart) != render_chart_bundle(policy_dir):
        problems.append(f"{chart / BUNDLE_PATH} is stale: gpu-admission policy render --chart {chart} {policy_dir}")
    return problems


def _chart_bundle(chart: Path) -> str | None:
    path = chart / BUNDLE_PATH
    return path.read_text(encoding="utf-8") if path.is_file() else None


def render_chart_bundle(policy_dir: Path) -> str:
    """What ``gpu-admission policy render --chart CHART DIR`` writes to the chart's bundle."""
    from webhook.policy import load_policy
    from webhook.policy.loader import policy_files

    files = tuple((p.name, p.read_text(encoding="utf-8")) for p in policy_files(policy_dir))
    return bundle_text(bundle(load_policy(policy_dir), files))


def test_the_repositorys_policy_is_linted_tested_and_rendered(cli):
    in_tree = ROOT / "manifests" / "in-tree" / "rendered.yaml"
    assert user_policy_problems(cli, USER_POLICIES, RENDERED, in_tree, ROOT / "charts" / "gpu-admission") == []


def test_a_chart_bundle_that_drifted_from_the_policy_is_reported_with_the_command(cli, tmp_path):
    policy, chart = tmp_path / "policies", tmp_path / "chart"
    shutil.copytree(DEFAULT_POLICY_DIR, policy)
    (chart / "files").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: gpu-admission\nversion: 0.1.0\n", encoding="utf-8")
    rendered = tmp_path / "rendered.yaml"
    rendered.write_text(render_policy(policy), encoding="utf-8")
    assert cli("policy", "render", "--chart", chart, policy).code == 0
    assert user_policy_problems(cli, policy, rendered, chart=chart) == []
    default = policy / "default.yaml"
    default.write_text(default.read_text(encoding="utf-8").replace("value: 100000", "value: 100001"), encoding="utf-8")
    rendered.write_text(render_policy(policy), encoding="utf-8")
    (problem,) = user_policy_problems(cli, policy, rendered, chart=chart)
    assert problem == f"{chart / BUNDLE_PATH} is stale: gpu-admission policy render --chart {chart} {policy}"


def test_a_stale_render_is_reported_with_the_command_that_fixes_it(cli, tmp_path):
    policy = tmp_path / "policies"
    shutil.copytree(DEFAULT_POLICY_DIR, policy)
    rendered = tmp_path / "rendered.yaml"
    rendered.write_text(render_policy(policy).replace("value: 100000", "value: 1"), encoding="utf-8")
    (problem,) = user_policy_problems(cli, policy, rendered)
    assert problem == f"{rendered} is stale: gpu-admission policy render {policy} > {rendered}"


def _add_a_pool_and_a_class(policy_dir: Path) -> None:
    """The change docs/policy.md walks through: a new pool, a class on it, the PriorityClass the class
    names, and a labelled namespace entitled to it (first, since the first matching rule wins). The
    names are the test's own, so the edit applies to any team's policy."""
    path = policy_dir / "default.yaml"
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    spec = doc["spec"]
    spec["pools"]["newcomer-l40s"] = {
        "description": "L40S inference nodes, whole cards",
        "gpuModel": "L40S",
        "gpusPerNode": 4,
        "nodes": 2,
        "nodeSelector": {"workload": "gpu-newcomer-l40s"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "isolation": ["exclusive"],
    }
    spec["classes"]["newcomer-research"] = {
        "description": "research notebooks on whole L40S cards",
        "pools": ["newcomer-l40s"],
        "isolation": {"default": "exclusive", "allowed": ["exclusive"]},
        "maxGPUs": 2,
        "priorityClassName": "gpu-newcomer-research",
    }
    spec["priorityClasses"]["gpu-newcomer-research"] = {"value": 20000, "description": "research notebooks"}
    research = {"matchLabels": {"gpu-admission.io/tier": "newcomer-research"}}
    spec["namespaces"].insert(0, {"name": "newcomer-research", "selector": research, "classes": ["newcomer-research"]})
    path.write_text("# yaml-language-server: $schema=./schema.json\n" + yaml.safe_dump(doc, sort_keys=False))


def test_a_newcomers_policy_change_keeps_ci_green(cli, tmp_path):
    """Copy the repository's policy files, edit them as documented, re-render with the documented
    command: the checks on the team's policy pass, and the new class really works."""
    policy = tmp_path / "policies"
    shutil.copytree(USER_POLICIES, policy)
    rendered = tmp_path / "rendered.yaml"
    _add_a_pool_and_a_class(policy)
    (stale,) = user_policy_problems(cli, policy, RENDERED)  # the edit alone: rendered.yaml is now stale
    assert stale.startswith(f"{RENDERED} is stale: gpu-admission policy render {policy} > ")
    render = cli("policy", "render", policy)
    assert render.code == 0, render.err
    rendered.write_text(render.out, encoding="utf-8")
    assert "name: gpu-newcomer-research" in render.out
    assert user_policy_problems(cli, policy, rendered) == []
    pod = tmp_path / "pod.yaml"
    pod.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: nb\n  labels: {gpu-admission.io/workload: newcomer-research}\n"
        "spec:\n  containers: [{name: nb, image: jupyter}]\n",
        encoding="utf-8",
    )
    (tmp_path / "ns.yaml").write_text(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: lab\n"
        "  labels: {gpu-admission.io/tier: newcomer-research}\n",
        encoding="utf-8",
    )
    check = cli("check", pod, "--policy", policy, "--namespace", "lab", "--context", tmp_path / "ns.yaml", "--explain")
    assert check.code == 0, check.out + check.err
    assert "pool newcomer-l40s: taken" in check.out


EXCEPTION = """\
# yaml-language-server: $schema=./schema.json
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
spec:
  exceptions:                            # in any file of the policy directory; merged like the rest
    - name: dcgm-diag
      rules: [privileged-gpu]
      namespaces: {matchLabels: {team: gpu-diag}}
      kinds: [Deployment]
      names: [dcgm-diag]
      subjects:
        - {kind: Group, name: gpu-diagnostics}
      expires: 2099-01-31
      reason: weekly NVIDIA DCGM diagnostics need a privileged container
      owner: platform-team
"""


def _add_an_exception_and_the_in_tree_setting(policy_dir: Path) -> None:
    """What docs/policy.md (Exceptions) and docs/install.md (the in-tree settings) tell a team to write:
    an exceptions file beside the policy, and settings.inTree recording the cluster's version and mode."""
    (policy_dir / "exceptions.yaml").write_text(EXCEPTION, encoding="utf-8")
    path = policy_dir / "default.yaml"
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    in_tree = {"kubeVersion": "1.36", "mutating": True, "availability": "in-tree"}
    doc["spec"].setdefault("settings", {})["inTree"] = in_tree
    path.write_text("# yaml-language-server: $schema=./schema.json\n" + yaml.safe_dump(doc, sort_keys=False))


def test_exceptions_and_in_tree_settings_the_documented_way_keep_ci_green(cli, tmp_path):
    """A scratch copy of the repository's policy and manifests, an exception and settings.inTree added as
    the docs say, both manifests re-rendered with the documented commands: `policy lint --strict` is
    clean (the manifests beside the policy are current, so nothing needs a render) and the freshness
    checks the product's tests run agree with the CLI."""
    policy = tmp_path / "policies"
    shutil.copytree(USER_POLICIES, policy)
    base = tmp_path / "manifests" / "base" / "rendered.yaml"
    in_tree = tmp_path / "manifests" / "in-tree" / "rendered.yaml"
    base.parent.mkdir(parents=True)
    in_tree.parent.mkdir(parents=True)
    base.write_text(RENDERED.read_text(encoding="utf-8"), encoding="utf-8")
    in_tree.write_text((ROOT / "manifests" / "in-tree" / "rendered.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    assert user_policy_problems(cli, policy, base, in_tree) == []
    _add_an_exception_and_the_in_tree_setting(policy)
    lint = cli("policy", "lint", policy, "--strict")
    assert lint.code != 0 and "[render-needed]" in lint.out, lint.out  # not rendered yet: lint says so
    assert str(base) in lint.out, "the warning names the manifest to re-render"
    for target, flags in ((base, ()), (in_tree, ("--in-tree",))):
        render = cli("policy", "render", *flags, policy)
        assert render.code == 0, render.err
        target.write_text(render.out, encoding="utf-8")
    assert "dcgm-diag" in base.read_text(encoding="utf-8"), "the render lists the exception in its header"
    assert "kind: MutatingAdmissionPolicy\n" in in_tree.read_text(encoding="utf-8")
    lint = cli("policy", "lint", policy, "--strict")
    assert lint.code == 0, lint.out + lint.err
    assert "render-needed" not in lint.out
    assert user_policy_problems(cli, policy, base, in_tree) == []


def test_no_product_test_reads_the_repositorys_policy_directory():
    """A product test that reads policies/ breaks when the platform team edits it: product tests take
    the shipped default from tests.conftest (POLICIES / DEFAULT_POLICY_DIR)."""
    reads = re.compile(r"""(ROOT|parents\[\d\])\s*/\s*["']policies["']|Path\(["']policies\b|USER_POLICIES""")
    offenders = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "tests").rglob("*.py"))
        if path.name not in ("conftest.py", "test_user_policy.py") and reads.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []
