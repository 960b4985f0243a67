"""``check DIR`` over a repository that keeps tool documents beside its workloads: AdmissionReviews, PolicyTest
suites, the policy, CI configuration and namespace-label files are skipped with what reads them (never "declare
it in workloadKinds", never exit 2), while a manifest that lost its kind stays invalid."""

from __future__ import annotations

import json

from tests.conftest import POLICIES, ROOT

EXAMPLES = ROOT / "examples"


def test_check_examples_judges_the_workloads_and_skips_the_rest(cli):
    run = cli("check", EXAMPLES, "--policy", POLICIES, "-v")
    assert run.code == 0, run.out
    assert "workloadKinds" not in run.out and "invalid" not in run.out.split("checked")[0]
    for name in ("Pod/chat", "Job/finetune", "Deployment/embeddings"):
        assert f"{name} (namespace default): admitted" in run.out
    assert "review.json:1: AdmissionReview/<unnamed>: skipped (an AdmissionReview is what the apiserver sends" in (
        run.out
    )
    assert "jq .request.object" in run.out
    assert "PolicyTest/dra-policy: skipped (a PolicyTest suite, not a manifest; run it with `gpu-admission policy " \
        "test FILE`)" in run.out
    assert "GPUPolicy/dra-example: skipped (the admission policy itself" in run.out
    assert "github-actions.yaml:1: document: skipped (a GitHub Actions workflow, not a manifest)" in run.out
    assert "gitlab-ci.yaml:1: document: skipped (GitLab CI configuration, not a manifest)" in run.out
    assert "namespaces.yaml:1: document: skipped (a namespace-labels map, not a manifest; pass it with " in run.out
    assert "0 denied, 7 skipped, 0 invalid" in run.out and "not judged" not in run.out


def test_an_admission_review_with_intent_is_not_an_unknown_kind(tmp_path, cli):
    review = json.loads((EXAMPLES / "admission" / "review.json").read_text())
    (tmp_path / "review.json").write_text(json.dumps(review))
    run = cli("check", tmp_path, "--policy", POLICIES)
    assert run.code == 0 and "workloadKinds" not in run.out
    assert "1 skipped, 0 invalid" in run.out and "with GPU resources or intent keys" not in run.out


def test_a_manifest_without_kind_stays_invalid(tmp_path, cli):
    (tmp_path / "pod.yaml").write_text("apiVersion: v1\nmetadata: {name: p}\nspec:\n  containers: [{name: c}]\n")
    run = cli("check", tmp_path, "--policy", POLICIES)
    assert run.code == 2 and "invalid: not a Kubernetes object (a mapping without apiVersion/kind)" in run.out


def test_a_kind_of_another_group_named_like_ours_is_not_skipped_as_a_tool_document(tmp_path, cli):
    """Only admission.k8s.io's AdmissionReview and our own group's documents are tool documents."""
    (tmp_path / "x.yaml").write_text(
        "apiVersion: example.com/v1\nkind: PolicyTest\nmetadata: {name: x, labels: {gpu-admission.io/workload: "
        "training}}\nspec: {}\n"
    )
    run = cli("check", tmp_path, "--policy", POLICIES)
    assert "declare it in the policy's workloadKinds" in run.out
    assert "1 skipped with GPU resources or intent keys" in run.out
