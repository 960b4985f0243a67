"""The policy loads completely or not at all, and every problem is reported at file:line:column."""

from __future__ import annotations

import pytest

from tests.conftest import POLICIES
from webhook.policy import PolicyError, load_policy, load_policy_texts
from webhook.policy.catalog import BUILTIN_GPU_MODELS

HEAD = "apiVersion: gpu-admission.io/v1\nkind: GPUPolicy\nspec:\n"


def issues(*files: tuple[str, str]) -> list:
    with pytest.raises(PolicyError) as exc:
        load_policy_texts(list(files))
    return list(exc.value.issues)


def test_default_policy_loads(policy):
    assert sorted(policy.classes) == ["batch", "dev", "inference", "training"]
    assert policy.pools["infer-a100"].gpu.name == "A100-40GB"
    assert policy.keys.workload == "gpu-admission.io/workload"


def test_builtin_catalog_has_the_spec_models_and_profiles(policy):
    for model in ("A30", "A100-40GB", "A100-80GB", "H100-80GB", "H100-94GB", "H200-141GB", "GH200-96GB", "B200"):
        assert policy.models[model].profiles, model
    assert [p.name for p in policy.models["A100-40GB"].profiles] == [
        "1g.5gb",
        "1g.5gb+me",
        "1g.10gb",
        "2g.10gb",
        "3g.20gb",
        "4g.20gb",
        "7g.40gb",
    ]
    assert policy.models["H200-141GB"].profiles[-1].name == "7g.141gb"
    assert policy.models["A100-80GB"].profiles[1].resource == "nvidia.com/mig-1g.10gb.me"
    assert set(BUILTIN_GPU_MODELS) >= {"B200", "GH200-96GB"}


def test_catalog_override_by_policy():
    policy = load_policy_texts(
        [
            (
                "p.yaml",
                HEAD
                + """
  gpuModels:
    A100-80GB: {memory: 80Gi, product: X, mig: [{name: 7g.79gb, max: 1}]}
  pools:
    p: {gpuModel: A100-80GB, gpusPerNode: 8, isolation: [mig], mig: {strategy: mixed}}
""",
            )
        ]
    )
    assert [p.name for p in policy.pools["p"].profiles] == ["7g.79gb"]


def test_unknown_field_has_line_column_and_hint():
    (issue,) = issues(("a.yaml", HEAD + "  pools:\n    p:\n      gpuModel: H100-80GB\n      gpusPerNod: 8\n"))
    assert (issue.file, issue.line, issue.column) == ("a.yaml", 7, 7)
    assert issue.path == "spec.pools.p.gpusPerNod" and issue.hint == "did you mean 'gpusPerNode'?"


def test_bad_quantity_and_missing_field():
    found = issues(
        (
            "a.yaml",
            HEAD + "  pools:\n    p: {gpuModel: H100-80GB}\n  classes:\n    c: {pools: [p], maxGPUMemory: lots}\n",
        )
    )
    messages = {i.path: i.message for i in found}
    assert "required field 'gpusPerNode' is missing" in messages["spec.pools.p.gpusPerNode"]
    assert "not a Kubernetes quantity" in messages["spec.classes.c.maxGPUMemory"]


def test_cross_references_are_checked_with_hints():
    found = issues(
        (
            "a.yaml",
            HEAD
            + """  pools:
    train: {gpuModel: H100-80G, gpusPerNode: 8}
    infer: {gpuModel: A100-40GB, gpusPerNode: 8, isolation: [mig], mig: {profiles: [1g.6gb]}}
  classes:
    c: {pools: [trian]}
  namespaces:
    - {classes: [d]}
  rules:
    gang-incomplet: {action: warn}
""",
        )
    )
    by_path = {i.path: i for i in found}
    assert by_path["spec.pools.train.gpuModel"].hint == "did you mean 'H100-80GB'?"
    assert "valid: 1g.5gb" in by_path["spec.pools.infer.mig.profiles[0]"].hint
    assert (
        by_path["spec.classes.c.pools[0]"].hint == "did you mean 'train'?"
        and by_path["spec.classes.c.pools[0]"].line == 8
    )
    assert "unknown class 'd'" in by_path["spec.namespaces[0].classes[0]"].message
    assert by_path["spec.rules.gang-incomplet"].hint == "did you mean 'gang-incomplete'?"


def test_files_are_merged_and_duplicates_rejected():
    a = ("a.yaml", HEAD + "  pools:\n    p: {gpuModel: H100-80GB, gpusPerNode: 8}\n")
    b = ("b.yaml", HEAD + "  classes:\n    c: {pools: [p]}\n  namespaces: [{classes: [c]}]\n")
    policy = load_policy_texts([a, b])
    assert policy.classes["c"].pools == ("p",) and policy.sources == ("a.yaml", "b.yaml")
    (dup,) = issues(a, ("c.yaml", HEAD + "  pools:\n    p: {gpuModel: H100-80GB, gpusPerNode: 4}\n"))
    assert dup.file == "c.yaml" and dup.line == 5 and "already defined in a.yaml:5" in dup.message


def test_yaml_syntax_error_wrong_kind_and_duplicate_keys():
    (syntax,) = issues(("a.yaml", HEAD + "  pools: [\n"))
    assert syntax.message.startswith("YAML syntax error") and syntax.line >= 4
    (kind,) = issues(("a.yaml", "apiVersion: v1\nkind: ConfigMap\n"))
    assert "expected apiVersion gpu-admission.io/v1 and kind GPUPolicy" in kind.message
    (dup,) = issues(("a.yaml", HEAD + "  pools: {}\n  pools: {}\n"))
    assert dup.message == "duplicate key" and dup.line == 5


def test_policy_directory_reads_only_top_level_yaml(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "suite.yaml").write_text("kind: PolicyTest\n")
    (tmp_path / "schema.json").write_text("{}")
    (tmp_path / "p.yaml").write_text((POLICIES / "default.yaml").read_text())
    assert load_policy(tmp_path).sources == (str(tmp_path / "p.yaml"),)
    (tmp_path / "empty").mkdir()
    with pytest.raises(PolicyError, match=r"no \*\.yaml policy files"):
        load_policy(tmp_path / "empty")
    with pytest.raises(PolicyError, match=r"does not exist"):
        load_policy(tmp_path / "missing")


def test_policy_is_immutable(policy):
    with pytest.raises(Exception):  # noqa: B017 - pydantic raises ValidationError for frozen models
        policy.spec.classes["training"].max_gpus = 99  # type: ignore[misc]
