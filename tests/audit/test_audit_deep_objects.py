"""An object nested deeply, as a custom resource's free-form field may hold it, neither stops the
audit nor hides the objects listed after it.

The apiserver's JSON goes 10,000 levels deep; orjson reads 1,024 and writes 255. Between 256 and
1,024 levels the audit could read a page but not write the object for its screen (it crashed), and
above 1,024 a page could not be read at all and the list ended there without a word. The fake
apiserver serves such pods in the middle of a list (pages of 3), on one worker and on two."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.audit import fake_apiserver
from tests.audit.cluster import namespace, pod, stored
from tests.audit.conftest import POLICIES, run_cli
from tests.audit.fake_apiserver import FakeAPIServer


def _deep(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": "x"}
    for _ in range(depth - 1):
        value = {"x": value}
    return value


def _cluster(depth: int) -> FakeAPIServer:
    api = FakeAPIServer().start()
    api.add(namespace("team-a"))
    raw = [stored(pod(f"raw-{i}", "team-a", gpus=1), node="gpu-node-1") for i in range(6)]
    deep = stored(pod("deep", "team-a", gpus=1), node="gpu-node-1")
    deep["spec"]["x"] = _deep(depth)  # where a CRD's x-kubernetes-preserve-unknown-fields lets it be
    cpu = [stored(pod(f"cpu-{i}", "team-a"), node="cpu-node-1") for i in range(4)]
    for obj in [*raw[:3], *cpu[:2], deep, *cpu[2:], *raw[3:]]:
        api.add(obj)
    return api


@pytest.mark.parametrize("depth", [300, 1_200])  # 1,200: past orjson, within every CPython's json
def test_a_deep_object_is_reported_and_the_list_goes_on(tmp_path: Path, depth: int) -> None:
    api = _cluster(depth)
    try:
        config = api.kubeconfig(tmp_path)
        args = ("--kubeconfig", config, "--policy", POLICIES, "-o", "json", "--page-size", "3")
        one = run_cli(*args, "--workers", "1")
        two = run_cli(*args, "--workers", "2")
    finally:
        api.stop()
    assert "Traceback" not in one.err and "internal error" not in one.err, one.err
    assert (one.code, one.out, one.err) == (two.code, two.out, two.err)
    assert one.code == 1, one.err  # the raw GPU requests are denials
    results = {r["name"]: r for r in json.loads(one.out)["results"]}
    assert {f"raw-{i}" for i in range(6)} <= set(results)  # the three after the deep pod too
    assert "deep" in results and results["deep"]["status"] != "skipped"
    summary = json.loads(one.out)["summary"]
    assert summary["notGPURelevant"] == 4  # the CPU-only pods, before and after it


def test_a_page_that_is_not_json_stops_the_audit_naming_the_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 200 whose body cannot be read used to end the list as if it were the last page: exit 2 instead."""
    real = fake_apiserver._dumps
    cut = b'{"kind": "PodList", "items": ['  # a page cut short
    monkeypatch.setattr(fake_apiserver, "_dumps", lambda doc: cut if doc.get("kind") == "PodList" else real(doc))
    api = _cluster(3)
    try:
        ran = run_cli("--kubeconfig", api.kubeconfig(tmp_path), "--policy", POLICIES, "-o", "json")
    finally:
        api.stop()
    assert ran.code == 2
    last = ran.err.strip().splitlines()[-1]
    assert "GET /api/v1/pods" in last and "not JSON this audit can read" in last, ran.err
    assert "Traceback" not in ran.err
