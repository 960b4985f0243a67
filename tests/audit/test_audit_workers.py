"""``audit --workers N`` reports exactly what one worker reports, from a snapshot and from the API.

The test cluster (admitted, violating, CPU-only, controller-owned and exempt objects) crosses a real
process pool in batches of two, so owners named across batches ("Deployment/x (via ReplicaSet/y)")
and the order of every listed object are checked too; a snapshot that breaks part way is exit 2 with
the same line and the same report before it. No timing is measured here (``bench/`` does).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.audit.cluster import cluster_objects
from tests.audit.conftest import POLICIES, run_cli
from webhook import pool
from webhook.audit import run as audit_run


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    monkeypatch.setattr(audit_run, "UNITS_PER_TASK", 2)
    started: list[int] = []
    real = pool.ProcessPoolExecutor

    def spy(workers: int, **kwargs: object) -> pool.ProcessPoolExecutor:
        started.append(workers)
        return real(workers, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pool, "ProcessPoolExecutor", spy)
    return started


@pytest.mark.parametrize("output", ["text", "json", "junit"])
def test_a_snapshot_audits_the_same_on_n_workers(snapshot: Path, small_batches: list[int], output: str) -> None:
    args = ("--snapshot", snapshot, "--policy", POLICIES, "-o", output, "--max-listed", "0")
    one = run_cli(*args, "--workers", "1")
    two = run_cli(*args, "--workers", "2")
    assert small_batches == [2]
    assert (one.code, one.out, one.err) == (two.code, two.out, two.err)
    assert one.code == 1 and "(via ReplicaSet/" in one.out


def test_baseline_and_namespace_audit_the_same_on_n_workers(snapshot: Path, small_batches: list[int]) -> None:
    for extra in (("--baseline", str(POLICIES)), ("--namespace", "team-a")):
        args = ("--snapshot", snapshot, "--policy", POLICIES, "-o", "json", *extra)
        one, two = run_cli(*args, "--workers", "1"), run_cli(*args, "--workers", "2")
        assert (one.code, one.out, one.err) == (two.code, two.out, two.err)
    assert small_batches == [2, 2]


def test_the_api_audits_the_same_on_n_workers(kubeconfig: Path, small_batches: list[int]) -> None:
    args = ("--kubeconfig", kubeconfig, "--policy", POLICIES, "-o", "json", "--page-size", "7")
    one = run_cli(*args, "--workers", "1")
    two = run_cli(*args, "--workers", "2")
    assert small_batches == [2]
    assert (one.code, one.out, one.err) == (two.code, two.out, two.err) and one.code == 1


def test_a_snapshot_broken_part_way_fails_at_the_same_place(policy, tmp_path: Path, small_batches: list[int]) -> None:
    items = cluster_objects(policy)
    text = yaml.safe_dump({"apiVersion": "v1", "items": items, "kind": "List"}, sort_keys=True)
    lines = text.splitlines(keepends=True)
    cut = int(len(lines) * 0.7)
    while not lines[cut].startswith("- "):
        cut += 1
    lines.insert(cut, "- apiVersion: v1\n  kind: Pod\n  metadata: {labels: {gpu-admission.io/workload: [x\n")
    path = tmp_path / "broken.yaml"
    path.write_text("".join(lines))
    args = ("--snapshot", path, "--policy", POLICIES, "-o", "json")
    one, two = run_cli(*args, "--workers", "1"), run_cli(*args, "--workers", "2")
    assert (one.code, one.out, one.err) == (two.code, two.out, two.err)
    assert one.code == 2 and "YAML syntax error" in one.err and "Traceback" not in one.err


def test_the_apis_objects_travel_as_json_and_cpu_only_pods_stay_in_the_main_process(
    kubeconfig: Path, small_batches: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pickling a decoded stored pod to a worker and back cost more than judging it (two workers were
    slower than one): the screen keeps the CPU-only pods home, and the rest go as their JSON."""
    import orjson

    from tests.audit.cluster import CPU_PODS

    sent: list[object] = []
    screened: list[None] = []
    real = pool.ordered

    def spy(jobs, *args, **kwargs):  # type: ignore[no-untyped-def]
        def seen():  # type: ignore[no-untyped-def]
            for job in jobs:
                if isinstance(job, pool.Task):
                    sent.extend(job.args[0])
                else:
                    screened.append(job.value)
                yield job

        return real(seen(), *args, **kwargs)

    monkeypatch.setattr(pool, "ordered", spy)
    two = run_cli("--kubeconfig", kubeconfig, "--policy", POLICIES, "-o", "text", "--workers", "2")
    one = run_cli("--kubeconfig", kubeconfig, "--policy", POLICIES, "-o", "text", "--workers", "1")
    assert (one.code, one.out, one.err) == (two.code, two.out, two.err)  # the counts of skipped objects too
    assert sent and all(isinstance(unit, bytes) for unit in sent)
    names = {orjson.loads(unit)["metadata"]["name"] for unit in sent}  # type: ignore[arg-type]
    assert not {f"cpu-{i:02d}" for i in range(CPU_PODS)} & names
    assert len(screened) >= CPU_PODS and screened == [None] * len(screened)
