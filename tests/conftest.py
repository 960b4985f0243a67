"""Shared fixtures: the repository, the read-only ../shared material, and the policies tests use.

Two policy directories, two owners:

- ``DEFAULT_POLICY_DIR`` (alias ``POLICIES``) is the product's shipped default, the packaged copy in
  ``webhook/policy/scaffold/`` that ``gpu-admission policy init`` writes. The product's tests judge
  the engine, the server and the renderer on it (or on policies of their own), so they do not change
  when a platform team edits its policy.
- ``USER_POLICIES`` is the repository's ``policies/``: the platform team's own policy. Only the checks
  that are about that policy read it: its render equals ``manifests/base/rendered.yaml``, it lints, its
  own ``policy test`` suites pass (tests/workflow/test_user_policy.py).

A command run without ``--policy`` reads ``$GPU_ADMISSION_POLICY`` before ``policies/``; the session
sets it to the shipped default, so a test (or a server it starts) that leaves the policy out judges
the product's default, never the checkout's ``policies/``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tests.bytecode_cache  # noqa: F401  (first: bytecode cached outside the checkout for the run)
import webhook.policy

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
REALWORLD = SHARED / "realworld"
CORPUS = REALWORLD / "corpus"
CRDS = REALWORLD / "crds"
SEED = SHARED / "seed" / "gpu-scheduling-chapter.txt"
# the product's default policy as the package ships it (what `policy init` writes)
DEFAULT_POLICY_DIR = Path(webhook.policy.__file__).resolve().parent / "scaffold"
POLICIES = DEFAULT_POLICY_DIR  # the name older tests import
# the platform team's policy directory in this repository (started as a copy of the default)
USER_POLICIES = ROOT / "policies"
RENDERED = ROOT / "manifests" / "base" / "rendered.yaml"

TRAINING_NS = {"gpu-admission.io/tier": "training"}
# the default policy restricts labelled namespaces: serving-only teams get inference and batch
SERVING_NS = {"gpu-admission.io/tier": "serving"}


def need_shared(path: Path) -> Path:
    """Skip cleanly where ../shared is absent (e.g. a clone outside the workplace)."""
    if not path.exists():
        pytest.skip(f"{path} is not available")
    return path


@pytest.fixture(scope="session", autouse=True)
def _default_policy_for_commands() -> Iterator[None]:
    """``gpu-admission check|policy|serve`` without a policy directory read the shipped default."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GPU_ADMISSION_POLICY", str(DEFAULT_POLICY_DIR))
        yield


@pytest.fixture(scope="session")
def policy():
    """The shipped default policy (the packaged copy), loaded once."""
    from webhook.policy import load_policy

    return load_policy(DEFAULT_POLICY_DIR)


# The fast subset (README, "Development"): `pytest -m "not slow and not server and not reliability"`.
# Besides the tests marked ``slow`` by hand, these are slow by nature and marked here, so a new one is
# covered without anyone remembering to: property-based searches (hypothesis), the scheduler oracle, and
# the few measured at several seconds each (`pytest --durations=20`).
SLOW_DIRECTORIES = frozenset({"oracle", "reliability"})
KNOWN_SLOW = frozenset({
    "tests/engine/test_shape.py::test_fast_check_and_reporting_walk_agree",
    "tests/engine/test_patch_builder.py::test_ops_replayed_with_jsonpatch_equal_doc_and_the_source_never_changes",
    "tests/engine/test_model_values.py::test_no_memo_key_is_an_address",
    "tests/engine/test_big_objects.py::test_a_one_mib_pod_mutates_in_linear_work",
    "tests/deploy/test_match_conditions.py::test_the_cel_forwards_every_cpu_template_the_engine_judges",
    "tests/workflow/test_ci_examples.py::test_examples_install_a_pinned_revision_from_source",
    "tests/server/test_unknown_namespace.py::test_unknown_namespaces_in_a_gunicorn_worker",
    "tests/server/test_burst.py::test_a_small_burst_is_answered_without_error_and_with_the_engines_verdicts",
})
# whole modules: a real kube-apiserver (the in-tree differential), a CEL evaluation per kind and trigger
SLOW_MODULES = frozenset({"tests/intree/test_differential.py", "tests/deploy/test_cel_forwards_every_trigger.py"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        hypothesis = getattr(getattr(item, "obj", None), "is_hypothesis_test", False)
        known = item.nodeid.split("[")[0] in KNOWN_SLOW or item.nodeid.split("::")[0] in SLOW_MODULES
        if hypothesis or known or item.path.parent.name in SLOW_DIRECTORIES:
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: absent without it
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``pytest -n 2``: the work shared out by ``tests/parallel.py`` (a module per worker, a tier per worker)."""
    from tests.parallel import scheduler

    return scheduler(config, log)
