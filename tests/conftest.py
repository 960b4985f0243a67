"""Shared fixtures: the repository, the read-only ../shared material, and the default policy."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
REALWORLD = SHARED / "realworld"
CORPUS = REALWORLD / "corpus"
CRDS = REALWORLD / "crds"
SEED = SHARED / "seed" / "gpu-scheduling-chapter.txt"
POLICIES = ROOT / "policies"

TRAINING_NS = {"gpu-admission.io/tier": "training"}
# the default policy restricts labelled namespaces: serving-only teams get inference and batch
SERVING_NS = {"gpu-admission.io/tier": "serving"}


def need_shared(path: Path) -> Path:
    """Skip cleanly where ../shared is absent (e.g. a clone outside the workplace)."""
    if not path.exists():
        pytest.skip(f"{path} is not available")
    return path


@pytest.fixture(scope="session")
def policy():
    from webhook.policy import load_policy

    return load_policy(POLICIES)
