"""A release has one version everywhere, a chart package anyone can rebuild byte for byte from the tag,
and install docs that describe the chart's values as its schema enforces them."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT
from tests.helm import values_reference
from tests.helm.conftest import CHART, Helm


def _package_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]


def test_one_version_everywhere():
    import webhook

    version = _package_version()
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    image = yaml.safe_load((ROOT / "manifests" / "image" / "kustomization.yaml").read_text(encoding="utf-8"))
    (entry,) = image["images"]
    found = {
        "pyproject.toml project.version": version,
        "webhook.__version__": webhook.__version__,
        "Chart.yaml version": chart["version"],
        "Chart.yaml appVersion": chart["appVersion"],
        "manifests/image newTag": str(entry["newTag"]),
    }
    assert set(found.values()) == {version}, f"versions differ: {found}"


def test_the_default_image_is_the_kustomize_image():
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    image = yaml.safe_load((ROOT / "manifests" / "image" / "kustomization.yaml").read_text(encoding="utf-8"))
    (entry,) = image["images"]
    assert values["image"]["repository"] == entry["newName"]
    assert values["image"]["tag"] == ""  # the chart's appVersion, so a release bump is one edit per file


def test_the_values_reference_in_the_install_docs_is_current():
    doc = values_reference.DOC.read_text(encoding="utf-8")
    assert doc == values_reference.current(doc), (
        "docs/install.md is stale: python -m tests.helm.values_reference --write"
    )


def test_the_values_reference_names_every_value_of_values_yaml():
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    table = values_reference.render()

    def leaves(node, path=""):
        for key, value in node.items():
            here = f"{path}.{key}" if path else key
            if isinstance(value, dict) and value and not here.endswith(("resources", "labels", "issuerRef")):
                yield from leaves(value, here)
            else:
                yield here

    missing = [p for p in leaves(values) if f"| `{p}` |" not in table]
    assert not missing, f"values without a schema entry: {missing}"


def _package(helm: Helm, source: Path, out: Path, epoch: str) -> str:
    out.mkdir()
    proc = helm.run("package", str(source), "--destination", str(out), env={"SOURCE_DATE_EPOCH": epoch})
    assert proc.returncode == 0, proc.stderr
    (archive,) = out.glob("gpu-admission-*.tgz")
    assert re.fullmatch(rf"gpu-admission-{re.escape(_package_version())}\.tgz", archive.name)
    return hashlib.sha256(archive.read_bytes()).hexdigest()


def test_helm_package_is_reproducible(helm: Helm, tmp_path):
    """Two checkouts of one tag (files with different times) package to the same bytes (docs/install.md)."""
    first, second = tmp_path / "a" / "gpu-admission", tmp_path / "b" / "gpu-admission"
    shutil.copytree(CHART, first)
    shutil.copytree(CHART, second)
    for path in second.rglob("*"):
        os.utime(path, (1_000_000_000, 1_000_000_000))
    epoch = "1767225600"
    assert _package(helm, first, tmp_path / "out-a", epoch) == _package(helm, second, tmp_path / "out-b", epoch)


def test_without_go_the_tier_skips_with_the_reason_and_fails_under_ci(monkeypatch, tmp_path):
    from tests.helm import conftest

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # no cached binary
    monkeypatch.setattr(conftest.shutil, "which", lambda name: None)
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception, match="go is not installed"):
        conftest.build_helm()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="the Helm tier cannot run under CI: go is not installed"):
        conftest.build_helm()
