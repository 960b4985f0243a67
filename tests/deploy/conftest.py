"""Rendered manifests, shared by the deploy tests: `kubectl kustomize` runs once per directory.

The deploy tests judge the product's manifests with the product's default policy: they build a copy
of ``manifests/`` whose ``base/rendered.yaml`` is rendered from the shipped default (the packaged
copy), so a platform team's own ``policies/`` and its ``rendered.yaml`` never change what they see.
The repository's ``rendered.yaml`` is checked against its own ``policies/`` by
tests/workflow/test_user_policy.py.
"""

from __future__ import annotations

import atexit
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import DEFAULT_POLICY_DIR, ROOT

MANIFESTS = ROOT / "manifests"
TARGETS = {
    "root": Path("."),
    "base": Path("base"),
    "cert-manager": Path("overlays") / "cert-manager",
    "self-signed": Path("overlays") / "self-signed",
}


def render_policy(directory: Path) -> str:
    """What ``gpu-admission policy render DIR`` prints (the command the docs give for rendered.yaml)."""
    from webhook.policy import load_policy
    from webhook.policy.loader import policy_files
    from webhook.render.output import documented_render

    files = tuple((p.name, p.read_text(encoding="utf-8")) for p in policy_files(directory))
    return documented_render(load_policy(directory), files)


@cache
def product_manifests() -> Path:
    """A copy of manifests/ with base/rendered.yaml rendered from the shipped default policy."""
    root = Path(tempfile.mkdtemp(prefix="gpu-admission-manifests-"))
    atexit.register(shutil.rmtree, root, True)
    shutil.copytree(MANIFESTS, root / "manifests")
    (root / "manifests" / "base" / "rendered.yaml").write_text(render_policy(DEFAULT_POLICY_DIR), encoding="utf-8")
    (root / "manifests" / "in-tree" / "rendered.yaml").write_text(render_in_tree(DEFAULT_POLICY_DIR), encoding="utf-8")
    return root / "manifests"


def render_in_tree(directory: Path) -> str:
    """What ``gpu-admission policy render --in-tree DIR`` prints (manifests/in-tree/rendered.yaml)."""
    from webhook.policy import load_policy
    from webhook.policy.loader import policy_files
    from webhook.render.output import documented_render

    files = tuple((p.name, p.read_text(encoding="utf-8")) for p in policy_files(directory))
    return documented_render(load_policy(directory), files, in_tree=True)
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
    return list(_render(product_manifests() / TARGETS[name]))


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


@pytest.fixture(params=["base", "cert-manager", "self-signed"])
def rendered(request) -> tuple[str, list[dict[str, Any]]]:
    """Each installable variant: the bare base and both TLS overlays."""
    return request.param, render(request.param)
