"""Real Helm 4 for the chart tests, built from the Go module proxy once per machine.

``tests/helm/tool`` is a Go module of our own whose only job is to pin Helm (``tool
helm.sh/helm/v4/cmd/helm``, go.sum committed). The binary is built with ``CGO_ENABLED=0`` into a cache
outside the tree keyed by the version (``~/.cache/gpu-admission/helm-v4.3.2/helm``, or under
``$XDG_CACHE_HOME``), so every checkout on the machine reuses it. No ``go``: the tier is skipped with
the reason, except under ``CI=true`` where a skipped tier is a failure.

The chart tests judge the product's chart with the product's default policy: like tests/deploy, they
work on a copy of ``charts/gpu-admission`` whose bundle is rendered from the shipped default, so a
platform team's ``policies/`` never changes what they see (tests/workflow/test_user_policy.py checks
the repository's own bundle against ``policies/``).
"""

from __future__ import annotations

import atexit
import copy
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import DEFAULT_POLICY_DIR, ROOT

HELM_VERSION = "v4.3.2"
TOOL = Path(__file__).resolve().parent / "tool"
CHART = ROOT / "charts" / "gpu-admission"
NAMESPACE = "gpu-admission"


def helm_cache() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "gpu-admission" / f"helm-{HELM_VERSION}" / "helm"


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"the Helm tier cannot run under CI: {reason}")
    pytest.skip(reason)


def build_helm() -> Path:
    """The cached Helm binary, built from tests/helm/tool when missing (one build at a time, under a lock)."""
    binary = helm_cache()
    if binary.is_file():
        return binary
    go = shutil.which("go")
    if go is None:
        _unavailable(f"go is not installed: Helm {HELM_VERSION} is built from the Go module proxy (tests/helm/tool)")
    binary.parent.mkdir(parents=True, exist_ok=True)
    with open(binary.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.is_file():  # another process built it while this one waited
            return binary
        partial = binary.with_name("helm.partial")
        env = dict(os.environ, CGO_ENABLED="0")
        proc = subprocess.run(
            [go, "build", "-trimpath", "-ldflags", f"-X helm.sh/helm/v4/internal/version.version={HELM_VERSION}",
             "-o", str(partial), "helm.sh/helm/v4/cmd/helm"],
            cwd=TOOL, env=env, capture_output=True, text=True, timeout=7200,
        )  # fmt: skip
        if proc.returncode != 0:
            _unavailable(f"building Helm {HELM_VERSION} failed (go build in {TOOL}):\n{proc.stderr[-3000:]}")
        partial.rename(binary)
    return binary


@dataclass(frozen=True)
class Helm:
    binary: Path
    chart: Path

    def run(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        home = Path(tempfile.mkdtemp(prefix="gpu-admission-helm-home-"))
        atexit.register(shutil.rmtree, home, True)
        base = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(home),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
            "KUBECONFIG": str(home / "no-cluster"),
        }
        return subprocess.run(
            [str(self.binary), *args], capture_output=True, text=True, timeout=300, env=base | (env or {})
        )

    def template(self, values: dict[str, Any] | None = None, *extra: str) -> list[dict[str, Any]]:
        """``helm template`` of the chart in namespace gpu-admission; the objects, or the test fails with stderr.
        One render per distinct input for the session (a fresh copy each call): the chart's output depends on
        nothing else, generated certificates aside."""
        return copy.deepcopy(list(_template(self, json.dumps(values or {}, sort_keys=True), extra)))

    def template_proc(self, values: dict[str, Any] | None = None, *extra: str) -> subprocess.CompletedProcess[str]:
        args = ["template", "gpu-admission", str(self.chart), "--namespace", NAMESPACE, *extra]
        if values:
            path = Path(tempfile.mkdtemp(prefix="gpu-admission-values-")) / "values.yaml"
            atexit.register(shutil.rmtree, path.parent, True)
            path.write_text(json.dumps(values), encoding="utf-8")
            args += ["-f", str(path)]
        return self.run(*args)


@cache
def _template(helm: Helm, values: str, extra: tuple[str, ...]) -> tuple[dict[str, Any], ...]:
    proc = helm.template_proc(json.loads(values), *extra)
    if proc.returncode != 0:
        raise AssertionError(f"helm template failed:\n{proc.stderr}")
    return tuple(d for d in yaml.safe_load_all(proc.stdout) if d)


@cache
def product_chart() -> Path:
    """A copy of the chart with its bundle rendered from the shipped default policy."""
    from webhook.policy import load_policy
    from webhook.policy.loader import policy_files
    from webhook.render.chart import BUNDLE_PATH, bundle, bundle_text

    root = Path(tempfile.mkdtemp(prefix="gpu-admission-chart-"))
    atexit.register(shutil.rmtree, root, True)
    shutil.copytree(CHART, root / "gpu-admission")
    files = tuple((p.name, p.read_text(encoding="utf-8")) for p in policy_files(DEFAULT_POLICY_DIR))
    content = bundle(load_policy(DEFAULT_POLICY_DIR), files)
    (root / "gpu-admission" / BUNDLE_PATH).write_text(bundle_text(content), encoding="utf-8")
    return root / "gpu-admission"


@pytest.fixture(scope="session")
def helm() -> Helm:
    return Helm(build_helm(), product_chart())
