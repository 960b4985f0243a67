"""The committed JSON Schema and docs/policy.md stay in step with the policy model and the rule registry."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

from tests.conftest import POLICIES, ROOT
from webhook.engine.rules import RULES
from webhook.policy import model as m
from webhook.policy.schema import FIELDS, ORDER, policy_schema, render_doc, render_schema

SCHEMA_FILE = POLICIES / "schema.json"
DOC = ROOT / "docs" / "policy.md"


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_committed_schema_is_in_sync_with_the_model(cli):
    assert SCHEMA_FILE.read_text(encoding="utf-8") == render_schema(), (
        "the shipped schema is stale: gpu-admission policy schema > webhook/policy/scaffold/schema.json"
    )
    assert cli("policy", "schema").out == render_schema()
    assert cli("policy", "schema", "--check", SCHEMA_FILE).code == 0


def test_schema_check_flags_a_stale_file(tmp_path, cli):
    stale = tmp_path / "schema.json"
    stale.write_text(render_schema().replace('"GPUPolicy"', '"Other"', 1))
    run = cli("policy", "schema", "--check", stale)
    assert run.code == 1 and "out of date" in run.err
    assert cli("policy", "schema", "--check", tmp_path / "missing.json").code == 2


def test_schema_head_and_descriptions():
    schema = policy_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema" and schema["title"] == "GPUPolicy"
    assert schema["properties"]["apiVersion"]["const"] == m.API_VERSION
    assert schema["$defs"]["PolicySpec"]["properties"]["rules"]["propertyNames"]["enum"] == sorted(RULES)
    for name, definition in schema["$defs"].items():
        for alias, prop in definition.get("properties", {}).items():
            assert prop.get("description"), f"{name}.{alias} has no description"


def test_default_policy_validates_and_is_linked(validator):
    text = (POLICIES / "default.yaml").read_text(encoding="utf-8")
    assert text.splitlines()[0] == "# yaml-language-server: $schema=./schema.json"
    assert list(validator.iter_errors(yaml.safe_load(text))) == []


@pytest.mark.parametrize(
    ("edit", "error"),
    [
        (lambda d: d["spec"]["pools"]["dev-cgpu"].update(gpusPerNod=4), "Additional properties"),
        (lambda d: d["spec"]["pools"].update(Bad_Name=d["spec"]["pools"]["dev-cgpu"]), "does not match"),
        (lambda d: d["spec"]["rules"].update({"no-such-rule": {}}), "is not one of"),
        (lambda d: d["spec"]["classes"]["dev"].update(maxGPUMemory="24 gigs"), "is not valid under any"),
        (lambda d: d["spec"].update(gpuModels={"X": {"memory": "8Gi", "mig": [["9x.1gb", 1]]}}), "not valid"),
        (lambda d: d["spec"].setdefault("settings", {}).update(inTree={"kubeVersion": "1.36.2"}), "not valid"),
    ],
)
def test_schema_rejects_what_the_loader_rejects(validator, edit, error):
    doc = yaml.safe_load((POLICIES / "default.yaml").read_text(encoding="utf-8"))
    edit(doc)
    messages = [e.message for e in validator.iter_errors(doc)]
    assert any(error in msg for msg in messages), messages


def test_schema_accepts_both_mig_forms(validator):
    doc = yaml.safe_load((POLICIES / "default.yaml").read_text(encoding="utf-8"))
    doc["spec"]["gpuModels"] = {"X": {"memory": "8Gi", "mig": [["1g.5gb", 7], {"name": "2g.10gb", "max": 3}]}}
    assert list(validator.iter_errors(doc)) == []


def test_every_model_field_is_documented():
    models = {name: getattr(m, name) for name, _ in ORDER if name != "PolicyDocument"}
    models["PolicyDocument"] = m.PolicyDocument
    for name, model in models.items():
        aliases = {f.alias or n for n, f in model.model_fields.items()}
        assert set(FIELDS[name]) - {""} == aliases, f"FIELDS[{name!r}] does not match the model's fields"
        for alias in aliases:
            snippet = yaml.safe_load(FIELDS[name][alias][1])
            assert list(snippet) == [alias], f"the example of {name}.{alias} must set {alias}"


def test_policy_doc_generated_blocks_are_current():
    text = DOC.read_text(encoding="utf-8")
    assert render_doc(text) == text, "docs/policy.md is stale: gpu-admission policy schema --update-docs docs/policy.md"
    for rule_id in RULES:
        assert f"| `{rule_id}` |" in text
    for field_doc in FIELDS["Pool"].values():
        if isinstance(field_doc, tuple):
            assert field_doc[0].replace("|", "\\|") in text


def test_policy_doc_has_the_required_sections():
    text = DOC.read_text(encoding="utf-8")
    for heading in (
        "## 2. What users write: the intent keys",
        "## 3. How a request is resolved",
        "### Rule catalogue",
        "### Changing an action",
        "### Exceptions",
        "#### The trust chain through controllers",
        "## 7. Change a policy safely",
    ):
        assert heading in text
    for key in (
        "workload",
        "gpus",
        "gpu-memory",
        "isolation",
        "gpu-model",
        "pool",
        "rdma",
        "gang",
        "gang-size",
        "topology",
        "container",
    ):
        assert f"`gpu-admission.io/{key}`" in text
    for step in ("policy lint", "policy test", "ConfigMap", "Hot reload", "gpu_admission_policy_reload_error"):
        assert step in text


def test_suite_schema_is_printable(cli):
    run = cli("policy", "schema", "--kind", "PolicyTest")
    schema = json.loads(run.out)
    assert schema["title"] == "PolicyTest" and "cases" in schema["properties"]
