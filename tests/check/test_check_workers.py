"""``check --workers N`` reports exactly what one worker reports: same bytes, same exit code.

The corpus mixes everything the serial loop decides on its own (missing files, empty files, bad UTF-8
lines, YAML syntax errors, non-objects, Lists, skipped kinds) with admitted, warned, denied and
mutated workloads, spread over several files; the batch size is shrunk so that a few dozen documents
really cross the process pool. No timing is measured here (``bench/check_throughput.py`` does).
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from tests.check.test_check_cli import DENIED, INFER, RAW, SERVICE
from webhook import pool
from webhook.check import runner
from webhook.cli import main

LIST = """apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Pod, metadata: {name: in-list}, spec: {containers: [{name: c, image: i,
   resources: {limits: {nvidia.com/gpu: 2}}}]}}
- {apiVersion: v1, kind: ConfigMap, metadata: {name: cm}}
"""
BROKEN = "apiVersion: v1\nkind: Pod\nmetadata: {name: [broken\n"
NOT_AN_OBJECT = "- just\n- a list\n"
CRD = """apiVersion: example.com/v1
kind: Trainer
metadata: {name: t}
spec: {template: {spec: {containers: [{name: c, resources: {limits: {nvidia.com/gpu: 1}}}]}}}
"""


def corpus(root: Path) -> list[str]:
    docs = [INFER, RAW, DENIED, SERVICE, LIST, BROKEN, NOT_AN_OBJECT, CRD, "# only a comment\n"]
    big = root / "big.yaml"
    big.write_text("---\n".join(docs[i % len(docs)] for i in range(45)))
    utf = root / "latin1.yaml"
    utf.write_bytes(INFER.encode() + b"---\n" + RAW.encode().replace(b"name: raw", b"name: caf\xe9") + b"---\n"
                    + DENIED.encode())
    (root / "empty.yaml").write_text("")
    (root / "dir").mkdir()
    (root / "dir" / "a.yaml").write_text("---\n".join([RAW, SERVICE] * 5))
    (root / "dir" / "b.yml").write_text("---\n".join([INFER, BROKEN] * 4))
    return [str(big), str(utf), str(root / "empty.yaml"), str(root / "missing.yaml"), str(root / "dir")]


def run(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Batches of 3 documents, and a record of every pool started (so the test knows one was)."""
    monkeypatch.setattr(runner, "BATCH_DOCUMENTS", 3)
    started: list[int] = []
    real = pool.ProcessPoolExecutor

    def spy(workers: int, **kwargs: object) -> pool.ProcessPoolExecutor:
        started.append(workers)
        return real(workers, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pool, "ProcessPoolExecutor", spy)
    return started


@pytest.mark.parametrize("output", ["text", "json", "jsonl", "junit", "yaml", "github"])
def test_n_workers_report_what_one_worker_reports(tmp_path: Path, small_batches: list[int], output: str) -> None:
    paths = corpus(tmp_path)
    args = ["check", *paths, "-o", output, "--explain"] + (["--diff", "-v", "--expand"] if output == "text" else [])
    one = run([*args, "--workers", "1"])
    assert not small_batches, "one worker judges in this process"
    three = run([*args, "--workers", "3"])
    assert small_batches == [3]
    if output == "github":  # the stop-commands token is random per run
        one, three = (_untokened(one), _untokened(three))
    assert one == three
    assert one[0] == 2  # the missing file, syntax errors and bad UTF-8: bad input
    assert "Traceback" not in one[2]


def _untokened(result: tuple[int, str, str]) -> tuple[int, str, str]:
    code, out, err = result
    return code, re.sub(r"[0-9a-f]{32}", "TOKEN", out), err


def test_the_verdicts_exit_code_is_the_same(tmp_path: Path, small_batches: list[int]) -> None:
    """Only judgeable documents: exit 1 for the denials, whatever the worker count."""
    path = tmp_path / "ok.yaml"
    path.write_text("---\n".join([INFER, RAW, DENIED, SERVICE] * 6))
    one = run(["check", str(path), "-o", "json", "--workers", "1"])
    two = run(["check", str(path), "-o", "json", "--workers", "2"])
    assert small_batches == [2]
    assert one == two and one[0] == 1


def test_bad_worker_counts_are_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["check", str(tmp_path), "--workers", "many"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--workers" in err and "expected a number of processes or 'auto'" in err and "Traceback" not in err


@pytest.mark.parametrize("output", ["text", "json", "jsonl", "junit", "github", "yaml"])
def test_a_worker_sends_back_the_report_text_not_the_result(policy, output: str) -> None:
    """What crosses the pipe: for every format but yaml (which reprints the documents), each result's
    part of the report already written, and no decision or object (pickling those cost more than
    writing the text, and the main process then formatted it all alone)."""
    from webhook.check.formats import Options, renderer

    render = renderer(output, Options())
    judge = runner._Judge(policy, runner.Namespaces("default", {}), False, runner.EMPTY_CLUSTER, render=render)
    runner._init_worker(judge)
    try:
        sent = runner._judge_batch("f.yaml", [(1, INFER), (8, DENIED), (20, SERVICE)])
    finally:
        runner._init_worker(None)  # type: ignore[arg-type]
    if output == "yaml":
        assert render is None and all(isinstance(r, runner.CheckResult) for r in sent)
        return
    assert [type(r) for r in sent] == [runner.Rendered] * 3
    assert [r.status for r in sent] == [runner.Status.ADMITTED, runner.Status.DENIED, runner.Status.SKIPPED]
    assert all(not hasattr(r, "decision") and not hasattr(r, "obj") for r in sent)
