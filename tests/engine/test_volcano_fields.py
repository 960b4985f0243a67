"""The product's own description of Volcano Job fields matches the real CRD, level by level."""

from __future__ import annotations

import yaml

from tests.conftest import CRDS, need_shared
from webhook.engine.model.tasks import VOLCANO_JOB, unknown_fields


def _props(schema: dict) -> dict:
    if schema.get("type") == "array":
        schema = schema["items"]
    return schema.get("properties", {})


def _compare(description, schema: dict, path: str, mismatches: list[str]) -> None:
    if isinstance(description, list):
        description = description[0]
    if not isinstance(description, dict):
        return
    props = _props(schema)
    for key in description:
        if key not in props:
            mismatches.append(f"{path}.{key}: described but not in the CRD")
    for key in props:
        if key not in description:
            mismatches.append(f"{path}.{key}: in the CRD but not described")
    for key, sub in description.items():
        if key in props and sub is not None:
            _compare(sub, props[key], f"{path}.{key}", mismatches)


def test_description_matches_the_volcano_crd():
    crd = yaml.safe_load(need_shared(CRDS / "batch.volcano.sh_jobs.yaml").read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    mismatches: list[str] = []
    _compare(VOLCANO_JOB, version["schema"]["openAPIV3Schema"], "", mismatches)
    assert mismatches == []


def test_unknown_fields_are_found_at_every_level():
    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"anything": 1},
        "spec": {
            "minMember": 8,
            "tasks": [{"replicas": 1, "template": {"whatever": 1}, "policies": [{"evnt": "PodFailed"}]}],
        },
    }
    found = [(path, key) for path, key, _ in unknown_fields(job)]
    assert found == [(("spec", "minMember"), "minMember"), (("spec", "tasks", 0, "policies", 0, "evnt"), "evnt")]
