"""``policy test``: suites that pass and fail, exit codes, go-test output, JUnit, --run, broken suites."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
import yaml

from tests.conftest import POLICIES
from tests.workflow.conftest import line_of
from webhook.engine.rules import RULES
from webhook.policytest import match

SUITE_HEAD = "apiVersion: gpu-admission.io/v1\nkind: PolicyTest\nmetadata: {name: mine}\n"
POD = """\
      apiVersion: v1
      kind: Pod
      metadata:
        name: chat
        labels: {gpu-admission.io/workload: inference}
        annotations: {gpu-admission.io/gpu-memory: 4Gi}
      spec:
        containers:
        - name: server
          image: vllm
          resources: {limits: {cpu: "1", memory: 1Gi}}
"""


@pytest.fixture
def repo(tmp_path) -> Path:
    """A copy of the policy directory (default.yaml + its tests) that a test may break."""
    root = tmp_path / "policies"
    root.mkdir()
    shutil.copy(POLICIES / "default.yaml", root / "default.yaml")
    (root / "tests").mkdir()
    return root


def suite(directory: Path, body: str, name: str = "mine.test.yaml") -> tuple[Path, str]:
    text = SUITE_HEAD + textwrap.dedent(body)
    path = directory / "tests" / name
    path.write_text(text, encoding="utf-8")
    return path, text


def case(name: str, expect: str, extra: str = "") -> str:
    return (
        f"  - name: {name}\n    namespace: team\n{extra}    object:\n{textwrap.indent(POD, '  ')}    expect:\n{expect}"
    )


# --- the shipped suite ----------------------------------------------------------------------------


def test_shipped_suite_passes_with_full_coverage(cli):
    run = cli("policy", "test", POLICIES, "--require-coverage")
    assert run.code == 0, run.out + run.err
    assert "--- " not in run.out  # by default only failures are listed, then the summary
    assert "--- PASS: default-policy/chapter MIG pod" in cli("policy", "test", POLICIES, "-v").out
    assert "  rules   " in run.out and "not covered" not in run.out
    assert run.out.splitlines()[-1].startswith("PASS: ")


def test_every_rule_is_expected_to_fire_somewhere():
    """The coverage rule of the issue: each rule id of the registry appears as expected-firing."""
    expected: set[str] = set()
    for path in sorted((POLICIES / "tests").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(doc, dict) and doc.get("kind") == "PolicyTest":
                for c in doc["cases"]:
                    expected.update((c.get("expect") or {}).get("rules") or [])
    assert set(RULES) - expected == set(), "rules no shipped test expects to fire"


def test_shipped_suite_covers_every_class_and_pool(cli):
    report = json.loads(cli("policy", "test", POLICIES, "--coverage", "-o", "json").out)
    (cov,) = report["coverage"]
    policy = yaml.safe_load((POLICIES / "default.yaml").read_text(encoding="utf-8"))["spec"]
    assert set(cov["classes"]) == set(policy["classes"]) and all(cov["classes"].values())
    assert set(cov["pools"]) == set(policy["pools"]) and all(cov["pools"].values())
    assert all(cov["rules"].values()) and cov["complete"]


def test_chapter_cases(cli):
    run = cli("policy", "test", POLICIES, "--run", "chapter", "-o", "json")
    cases = {c["name"]: c for c in json.loads(run.out)["suites"][0]["cases"]}
    mig = cases["chapter MIG pod passes with a raw-gpu-request warning"]["decision"]
    assert mig["allowed"] and mig["rules"] == ["raw-gpu-request"] and mig["warnings"]
    assert cases["chapter train-qwen with minAvailable 4 is denied gang-incomplete"]["decision"]["rules"] == [
        "gang-incomplete"
    ]
    minmember = cases["chapter train-qwen as written (minMember) is denied unknown-field"]["decision"]
    assert minmember["rules"] == ["unknown-field"] and "minAvailable" in minmember["violations"][0]["message"]
    assert run.code == 0


# --- passing and failing suites -------------------------------------------------------------------


def test_failing_case_exit_1_with_file_line_and_diff(repo, cli):
    path, text = suite(
        repo,
        "cases:\n"
        + case(
            "wrong profile",
            "      object:\n        spec:\n          containers:\n"
            "          - resources: {limits: {nvidia.com/mig-2g.10gb: '1'}}\n",
        )
        + case("wrong verdict", "      allowed: false\n      rules: [gpu-memory-exceeded]\n")
        + case("right", "      allowed: true\n      exactRules: true\n      notRules: [raw-gpu-request]\n"),
    )
    run = cli("policy", "test", repo)
    assert run.code == 1
    out = run.out
    assert "--- FAIL: mine/wrong profile (" in out and "--- PASS" not in out  # passing cases: -v
    assert f"{path}:{line_of(text, 'object:', 2)}: object: the resulting object does not contain" in out
    assert "-        nvidia.com/mig-2g.10gb: '1'" in out and "+        nvidia.com/mig-1g.5gb: '1'" in out
    assert f"{path}:{line_of(text, 'allowed: false')}: allowed: expected false, got true (admitted)" in out
    assert "rules: expected gpu-memory-exceeded to fire; fired: none" in out
    assert f"FAIL\t{path}\t" in out and out.splitlines()[-1] == "FAIL: 2 of 3 case(s) failed in 1 suite(s)"


def test_verbose_shows_run_lines_and_trace(repo, cli):
    suite(repo, "cases:\n" + case("ok", "      allowed: true\n"))
    run = cli("policy", "test", repo, "-v")
    assert run.code == 0
    assert "=== RUN   mine/ok" in run.out and "    backend: 4Gi on A100-40GB -> nvidia.com/mig-1g.5gb" in run.out
    assert f"ok  \t{repo / 'tests' / 'mine.test.yaml'}\t" in run.out


def test_warnings_messages_patch_and_update(repo, cli):
    burstable = POD.replace('          resources: {limits: {cpu: "1", memory: 1Gi}}\n', "")
    body = (
        "cases:\n"
        "  - name: warned\n"
        "    namespace: team\n"
        f"    object:\n{textwrap.indent(burstable, '  ')}"
        "    expect:\n"
        "      warnings: [inference-not-guaranteed, 'Guaranteed QoS']\n"
        "      messages: ['no cpu limit']\n"
        "  - name: update is not mutated\n"
        "    operation: UPDATE\n"
        "    namespace: team\n"
        "    object: {apiVersion: v1, kind: Pod, metadata: {name: a, labels: {gpu-admission.io/workload: dev},"
        " annotations: {gpu-admission.io/gpu-memory: 4Gi}}, spec: {containers: [{name: c, image: i}]}}\n"
        "    oldObject: {apiVersion: v1, kind: Pod, metadata: {name: a}, spec: {containers: [{name: c, image: i}]}}\n"
        "    expect: {allowed: true, patch: []}\n"
        "  - name: wrong patch\n"
        "    namespace: team\n"
        "    object: {apiVersion: v1, kind: Pod, metadata: {name: a},"
        " spec: {containers: [{name: c, image: i, resources: {limits: {nvidia.com/gpu: 1}}}]}}\n"
        "    expect: {patch: [{op: add, path: /spec/nodeSelector, value: {x: y}}]}\n"
    )
    suite(repo, body)
    run = cli("policy", "test", repo, "-v")  # -v: the passing cases are listed too
    assert "--- PASS: mine/warned" in run.out and "--- PASS: mine/update is not mutated" in run.out, run.out + run.err
    # the raw request is pinned (two operations: nodeSelector, tolerations), neither the one expected
    assert "--- FAIL: mine/wrong patch" in run.out and "patch: expected 1 operation(s), got 2 that differ" in run.out
    assert "-    x: y" in run.out and "+    workload: gpu-infer" in run.out
    assert run.code == 1


def test_run_selects_cases(repo, cli):
    suite(repo, "cases:\n" + case("alpha", "      allowed: true\n") + case("beta", "      allowed: false\n"))
    run = cli("policy", "test", repo, "--run", "alph", "-v")
    assert run.code == 0 and "mine/alpha" in run.out and "mine/beta" not in run.out
    assert cli("policy", "test", repo, "--run", "^mine/beta$").code == 1
    nothing = cli("policy", "test", repo, "--run", "gamma")
    assert nothing.code == 0 and "no case matches --run 'gamma'" in nothing.err
    assert cli("policy", "test", repo, "--run", "(").code == 2


def test_junit_is_valid_xml(repo, cli):
    path, _ = suite(repo, "cases:\n" + case("good", "      allowed: true\n") + case("bad", "      allowed: false\n"))
    run = cli("policy", "test", repo, "-o", "junit")
    assert run.code == 1
    root = ET.fromstring(run.out.split("?>", 1)[1])
    assert root.tag == "testsuites" and root.get("tests") == "2" and root.get("failures") == "1"
    (ts,) = root.findall("testsuite")
    assert ts.get("name") == "mine" and ts.get("file") == str(path) and ts.get("failures") == "1"
    good, bad = ts.findall("testcase")
    assert good.find("failure") is None and good.get("classname") == "mine" and float(good.get("time")) >= 0
    failure = bad.find("failure")
    assert failure is not None and failure.get("type") == "allowed"
    assert failure.get("message") == "allowed: expected false, got true (admitted)"
    assert f"{path}:" in (failure.text or "") and bad.get("line", "").isdigit()


def test_suite_policy_field_and_policy_override(repo, cli, tmp_path):
    other = tmp_path / "elsewhere"
    other.mkdir()
    text = SUITE_HEAD + "policy: ../policies\ncases:\n" + case("ok", "      allowed: true\n")
    (other / "s.test.yaml").write_text(text)
    assert cli("policy", "test", other / "s.test.yaml").code == 0
    assert cli("policy", "test", other / "s.test.yaml", "--policy", tmp_path / "nope").code == 2


# --- broken suites: exit 2 with file:line ----------------------------------------------------------

BROKEN = [
    (
        "unknown field",
        "    expect:\n      alowed: true\n",
        "alowed",
        "unknown field 'alowed' (hint: did you mean 'allowed'?)",
    ),
    (
        "unknown rule",
        "    file: objects/pod.yaml\n    expect:\n      rules: [gang-incomplet]\n",
        "rules: [gang-incomplet]",
        "unknown rule id 'gang-incomplet' (hint: did you mean 'gang-incomplete'?)",
    ),
    ("missing file", "    file: nope.yaml\n", "file: nope.yaml", "cannot read 'nope.yaml'"),
    (
        "update without old",
        "    operation: UPDATE\n    file: objects/pod.yaml\n",
        "- name: broken",
        "operation UPDATE needs the object before the update",
    ),
    (
        "document out of range",
        "    file: objects/pod.yaml\n    document: 3\n",
        "document: 3",
        "holds 1 document(s); there is no document 3",
    ),
]


@pytest.mark.parametrize(("name", "body", "anchor", "message"), BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_suite_exits_2_with_file_line(repo, cli, name, body, anchor, message):
    (repo / "tests" / "objects").mkdir()
    (repo / "tests" / "objects" / "pod.yaml").write_text(textwrap.dedent(POD))
    path, text = suite(repo, "cases:\n  - name: broken\n    namespace: team\n" + body)
    run = cli("policy", "test", repo)
    assert run.code == 2, run.out + run.err
    assert "no case was run" in run.err
    line = next((x for x in run.err.splitlines() if message in x), None)
    assert line is not None, run.err
    assert line.strip().startswith(f"{path}:{line_of(text, anchor)}:"), line


def test_duplicate_case_names_and_kind_typo(repo, cli):
    path, text = suite(repo, "cases:\n" + case("same", "      allowed: true\n") + case("same", "      allowed: true\n"))
    run = cli("policy", "test", repo)
    assert run.code == 2 and f"{path}:{line_of(text, 'name: same', 2)}:" in run.err and "already used" in run.err
    path.write_text(text.replace("kind: PolicyTest", "kind: PolicyTests"))
    run = cli("policy", "test", repo)
    assert run.code == 2 and "no PolicyTest document in this file" in run.err


def test_broken_policy_or_no_suites_exit_2(repo, cli):
    assert cli("policy", "test", repo).code == 2  # tests/ is empty
    suite(repo, "cases:\n" + case("ok", "      allowed: true\n"))
    (repo / "default.yaml").write_text(
        (POLICIES / "default.yaml").read_text().replace("gpusPerNode: 4", "gpusPerNod: 4")
    )
    run = cli("policy", "test", repo)
    assert run.code == 2 and "does not load" in run.err and "did you mean 'gpusPerNode'?" in run.err


# --- the subset matcher --------------------------------------------------------------------------------


def test_subset_matching_rules():
    actual = {"spec": {"tolerations": [{"key": "a", "effect": "NoSchedule"}, {"key": "b"}], "x": 1}}
    assert match.matches({"spec": {"tolerations": [{"key": "b"}]}}, actual)  # any element
    assert match.matches({"spec": {"tolerations": [{"key": "a"}, {"key": "b"}]}}, actual)  # element-wise
    assert not match.matches({"spec": {"tolerations": [{"key": "b"}, {"key": "b"}]}}, actual)  # distinct
    assert match.matches({"spec": {"nodeName": None}}, actual)  # null: absent
    assert not match.matches({"spec": {"x": None}}, actual)
    assert not match.matches({"spec": {"x": True}}, {"spec": {"x": 1}})  # no bool/int confusion
    assert match.mismatches({"spec": {"y": 2}}, actual) == ["spec.y: missing"]
    assert match.mismatches({"a": {"b/c": 1}}, {"a": {"b/c": 2}}) == ["a[b/c]: expected 1, got 2"]
