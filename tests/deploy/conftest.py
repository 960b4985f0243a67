"""Rendered manifests, shared by the deploy tests: `kubectl kustomize` runs once per directory."""

from __future__ import annotations

import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT

MANIFESTS = ROOT / "manifests"
TARGETS = {
    "root": MANIFESTS,
    "base": MANIFESTS / "base",
    "cert-manager": MANIFESTS / "overlays" / "cert-manager",
    "self-signed": MANIFESTS / "overlays" / "self-signed",
}
NAMESPACE = "gpu-admission"
MUTATING = "gpu-admission-mutating"
VALIDATING = "gpu-admission-validating"


@cache
def _render(path: Path) -> tuple[dict[str, Any], ...]:
    proc = subprocess.run(["kubectl", "kustomize", str(path)], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise AssertionError(f"kubectl kustomize {path} failed:\n{proc.stderr}")
    return tuple(d for d in yaml.safe_load_all(proc.stdout) if d)


def render(name: str) -> list[dict[str, Any]]:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed")
    return list(_render(TARGETS[name]))


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


@pytest.fixture(params=["base", "cert-manager", "self-signed"])
def rendered(request) -> tuple[str, list[dict[str, Any]]]:
    """Each installable variant: the bare base and both TLS overlays."""
    return request.param, render(request.param)
