"""``check`` at the edges of its input: empty inputs, YAML errors at line and column, files that are not
Kubernetes objects or cannot be read, ``--exclude``, documents it skips although they reach GPUs, engine
errors, and the exit code of each (docs/ci.md, "Exit codes" and "Inputs")."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest
import yaml

from tests.check.test_check_cli import INFER, SERVICE
from tests.conftest import ROOT
from webhook.check import runner
from webhook.check.formats import Options, write_text
from webhook.check.inputs import Source, read_sources
from webhook.check.progress import Progress
from webhook.check.runner import Namespaces, Status, check_sources
from webhook.cli import main

CRD_WITH_GPU = """apiVersion: example.com/v1
kind: Trainer
metadata: {name: t}
spec:
  worker:
    template:
      spec:
        containers:
        - name: c
          image: i
          resources:
            limits: {nvidia.com/gpu: 8}
"""
CRD_WITH_INTENT = """apiVersion: example.com/v1
kind: Trainer
metadata:
  name: t2
  labels: {gpu-admission.io/workload: training}
spec: {}
"""
CRD_PLAIN = """apiVersion: example.com/v1
kind: Trainer
metadata: {name: quiet}
spec: {image: nvidia.com/not-a-resource}
"""


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        code = main(["check", *args])
    finally:
        sys.stdout, sys.stderr = saved
    return code, out.getvalue(), err.getvalue()


# --- empty inputs ---------------------------------------------------------------------------------


def test_an_empty_file_and_a_directory_without_manifests_agree(tmp_path):
    """Both say "empty" on their own line; alone, nothing was checked: exit 2 (a mis-pointed CI step
    must not pass silently); next to a real manifest they do not change its verdict."""
    empty_file = tmp_path / "empty.yaml"
    empty_file.write_text("# only a comment\n---\n")
    empty_dir = tmp_path / "charts"
    empty_dir.mkdir()
    (empty_dir / "README.md").write_text("not a manifest")
    good = tmp_path / "pod.yaml"
    good.write_text(INFER)
    for path, why in ((empty_file, "no documents"), (empty_dir, "a directory with no *.yaml")):
        code, out, err = run(str(path))
        assert code == 2, out
        assert f"{path}: empty: {why}" in out
        assert "nothing to check" in out and "nothing to check" in err
        code, out, _ = run(str(path), str(good))
        assert code == 0 and f"{path}: empty:" in out and "1 admitted" in out
    code, out, _ = run(str(empty_file), "-o", "json")
    report = json.loads(out)
    assert report["results"][0]["status"] == "empty" and report["summary"]["empty"] == 1
    assert report["summary"]["documents"] == 0


def test_empty_stdin_is_empty_too():
    proc = subprocess.run(
        [sys.executable, "-m", "webhook", "check", "-"], cwd=ROOT, input="", capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and "<stdin>: empty: no documents" in proc.stdout


# --- YAML errors, non-objects, unreadable files ---------------------------------------------------


def test_yaml_error_names_line_and_column_in_a_later_document(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(SERVICE + "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: a: b\n")
    code, out, _ = run(str(path))
    assert code == 2
    assert f"{path}:10:10: error: YAML syntax error: mapping values are not allowed" in out
    assert "1 skipped" in out  # the good document before it still counts
    report = json.loads(run(str(path), "-o", "json")[1])
    error = next(r for r in report["results"] if r["status"] == "error")
    assert (error["line"], error["column"]) == (10, 10)
    github = run(str(path), "-o", "github")[1]
    assert f"::error file={path},line=10,col=10,title=gpu-admission error::" in github


def test_tab_indentation_and_control_characters_are_located(tmp_path):
    tabs = tmp_path / "tabs.yaml"
    tabs.write_text("apiVersion: v1\nkind: Pod\nmetadata:\n\tname: x\n")
    assert run(str(tabs))[0] == 2
    assert f"{tabs}:4:1: error: YAML syntax error: found" in run(str(tabs))[1]
    nul = tmp_path / "nul.yaml"
    nul.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: a\x00b}\n")
    code, out, _ = run(str(nul))
    assert code == 2 and f"{nul}:3:19: error: YAML syntax error: control characters are not allowed" in out


def test_not_utf8_names_the_line_and_exits_2(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(SERVICE.encode() + b"---\nkind: ConfigMap\ndata: {a: caf\xe9}\n")
    code, out, _ = run(str(path))
    assert code == 2
    line = SERVICE.count("\n") + 3
    assert f"{path}:{line}: error: not UTF-8 (byte 0xe9 at column 14); save the file as UTF-8" in out


@pytest.mark.parametrize("stdin", [False, True])
def test_a_bad_byte_deep_in_a_file_keeps_the_good_documents(tmp_path, monkeypatch, stdin):
    """The bad byte's own line (not line 1: the decoder reads ahead in blocks), and the documents
    before and after it are still judged."""
    padding = "".join(f"# {'x' * 70}\n" for _ in range(200))  # past any read-ahead block
    bad = b"---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: b\n  annotations: {note: \"caf\xe9\"}\n"
    data = padding.encode() + INFER.encode() + bad + b"---\n" + INFER.replace("name: infer", "name: again").encode()
    path = tmp_path / "mixed.yaml"
    path.write_bytes(data)
    bad_line = data[: data.index(b"\xe9")].count(b"\n") + 1
    if stdin:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="latin-1"))
        code, out, _ = run("-")
        name = "<stdin>"
    else:
        code, out, _ = run(str(path))
        name = str(path)
    assert code == 2
    assert f"{name}:{bad_line}: error: not UTF-8 (byte 0xe9 at column 27); save the file as UTF-8" in out
    assert "Pod/infer" in out and "Pod/again" in out, out
    assert "2 admitted" in out.splitlines()[-1] and "1 unreadable" in out.splitlines()[-1]


def test_a_byte_order_mark_is_read_as_kubectl_reads_it(tmp_path):
    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + INFER.encode())
    code, out, _ = run(str(path))
    assert code == 0 and f"{path}:1: Pod/infer" in out


def test_missing_file_and_directory_named_as_file_exit_2(tmp_path):
    code, out, _ = run(str(tmp_path / "nope.yaml"))
    assert code == 2 and f"{tmp_path / 'nope.yaml'}: error: no such file" in out


def test_yaml_that_is_not_a_kubernetes_object_exits_2_in_every_format(tmp_path):
    path = tmp_path / "values.yaml"
    path.write_text("replicaCount: 2\nimage: {tag: latest}\n")
    for fmt in ("text", "json", "jsonl", "junit", "github", "yaml"):
        code, out, err = run(str(path), "-o", fmt)
        assert code == 2, fmt
        assert "not a Kubernetes object" in (out + err), fmt


# --- --exclude ------------------------------------------------------------------------------------


def test_exclude_is_repeatable_and_prunes_directories(tmp_path):
    (tmp_path / "deploy" / "charts" / "x").mkdir(parents=True)
    (tmp_path / "deploy" / "charts" / "x" / "values.yaml").write_text("replicaCount: 1\n")
    (tmp_path / "deploy" / "kustomization.yaml").write_text("resources: [pod.yaml]\n")
    (tmp_path / "deploy" / "pod.yaml").write_text(INFER)
    deploy = str(tmp_path / "deploy")
    assert run(deploy)[0] == 2  # values.yaml without a Chart.yaml beside it is no chart: not an object
    code, out, _ = run(deploy, "--exclude", "*/charts/*", "--exclude", "kustomization.yaml", "-o", "json")
    assert code == 0
    assert [r["file"] for r in json.loads(out)["results"]] == [str(tmp_path / "deploy" / "pod.yaml")]
    code, out, _ = run(deploy, "--exclude", "charts", "--exclude", "kustomization.*", "-o", "json")
    assert code == 0 and len(json.loads(out)["results"]) == 1
    # a file named on the command line is excluded too (pre-commit passes staged files)
    named = str(tmp_path / "deploy" / "pod.yaml")
    assert run(named, deploy, "--exclude", "pod.yaml", "--exclude", "charts", "--exclude", "kustom*")[0] == 2


def test_excluding_everything_is_empty_not_a_pass(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "pod.yaml").write_text(INFER)
    code, out, _ = run(str(tmp_path / "d"), "--exclude", "*.yaml")
    assert code == 2 and "outside --exclude" in out


# --- documents skipped although they reach GPUs ---------------------------------------------------


def test_skipped_document_with_gpus_or_intent_is_always_shown(tmp_path):
    path = tmp_path / "crd.yaml"
    path.write_text("---\n".join([CRD_WITH_GPU, CRD_WITH_INTENT, CRD_PLAIN]))
    code, out, _ = run(str(path))  # no -v
    assert code == 0
    lines = out.splitlines()
    gpu = [line for line in lines if "Trainer/t:" in line]
    assert gpu == [
        f"{path}:12: Trainer/t: skipped: unknown kind: declare it in the policy's workloadKinds; example.com/v1 "
        "Trainer carries a GPU resource (spec.worker.template.spec.containers[0].resources.limits[nvidia.com/gpu]) "
        "and was not judged"
    ]
    assert any("Trainer/t2: skipped: unknown kind: declare it in the policy's workloadKinds" in line for line in lines)
    assert "quiet" not in out  # a CRD that only mentions a GPU vendor's domain stays quiet
    assert "2 skipped with GPU resources or intent keys (not judged)" in lines[-1]
    assert run(str(path), "--fail-on", "warn")[0] == 1
    report = json.loads(run(str(path), "-o", "json")[1])
    assert report["summary"]["unjudgedGpu"] == 2
    assert report["results"][0]["unjudgedPath"].endswith("limits[nvidia.com/gpu]")
    github = run(str(path), "-o", "github")[1]
    assert github.count("::warning file=") == 2
    assert run(str(path), "-o", "github", "--fail-on", "warn")[1].count("::error file=") == 2


# --- engine errors --------------------------------------------------------------------------------


def test_an_engine_exception_is_an_engine_error_result_exit_2(tmp_path, monkeypatch):
    """Fault injection: the engine raising on one object (a bug) must not become a traceback, exit 1,
    or a silent pass; the other documents are still judged."""
    real = runner.report

    def failing(policy, request):
        if request.obj["metadata"]["name"] == "infer":
            raise KeyError("boom")
        return real(policy, request)

    monkeypatch.setattr(runner, "report", failing)
    path = tmp_path / "m.yaml"
    other = INFER.replace("name: infer", "name: other")
    path.write_text(INFER + "---\n" + other)
    code, out, err = run(str(path))
    assert code == 2 and "Traceback" not in err
    assert f"{path}:1: engine-error: the engine failed on this object (KeyError: 'boom'); nothing was judged" in out
    assert "Pod/other (namespace default): admitted" in out
    report = json.loads(run(str(path), "-o", "json")[1])
    assert report["summary"]["engineErrors"] == 1 and report["results"][0]["status"] == "engine-error"
    assert run(str(path), "-o", "junit")[1].count('<error message="the engine failed') == 1


# --- streaming ------------------------------------------------------------------------------------


def _generated(documents: int, pulled: list[int]):
    text = INFER.splitlines(keepends=True)

    def lines():
        for _ in range(documents):
            for line in text:
                pulled[0] += 1
                yield line
            yield "---\n"

    return lines


def test_results_stream_one_document_at_a_time(policy, monkeypatch):
    """The runner judges a document and hands it on before reading the next, and the text writer
    prints each result before pulling the next one: nothing accumulates (flat memory). The input comes
    a line per block here (a file is read in blocks of 1 MiB of whole lines)."""
    pulled = [0]
    source = Source("<generated>", spool=None, path=None)
    monkeypatch.setattr(Source, "blocks", lambda self, errors=None, size=0: _generated(1000, pulled)())
    results = check_sources(policy, [source], namespaces=Namespaces("default", {}))
    first = next(results)
    assert first.status is Status.ADMITTED
    per_doc = len(INFER.splitlines()) + 1
    assert pulled[0] <= 2 * per_doc  # one document read ahead at most, not 1000

    written: list[tuple[int, int]] = []

    class Out(io.StringIO):
        def write(self, s):
            written.append((pulled[0], s.count("Pod/infer")))
            return super().write(s)

    pulled[0] = 0
    results = check_sources(policy, [source], namespaces=Namespaces("default", {}))
    write_text(results, Out(), Options())
    firsts = [p for p, hits in written if hits]
    assert len(firsts) == 1000 and firsts[0] <= 2 * per_doc and firsts == sorted(firsts)


def test_progress_only_on_a_terminal_and_only_when_long():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    now = [0.0]

    def clock():
        now[0] += 0.2  # every check of the clock: one "tick" of a slow run
        return now[0]

    items = [runner.CheckResult("f.yaml", i, Status.SKIPPED) for i in range(2000)]
    tty = Tty()
    assert list(Progress(tty, after=2.0, every=0.5, clock=clock).observe(items)) == items
    shown = tty.getvalue()
    assert "gpu-admission check: " in shown and "documents" in shown and "f.yaml" in shown
    assert shown.endswith("\r\x1b[2K")  # erased at the end
    piped = io.StringIO()
    list(Progress(piped, after=0.0, every=0.0, clock=clock).observe(items))
    assert piped.getvalue() == ""  # a CI log gets no progress
    short = Tty()
    list(Progress(short, after=1000.0, clock=clock).observe(items[:10]))
    assert short.getvalue() == ""
    same_terminal = Tty()
    list(Progress(same_terminal, report=Tty(), after=0.0, every=0.0, clock=clock).observe(items))
    assert same_terminal.getvalue() == ""  # the report itself shows progress there


def test_jsonl_writes_one_result_per_line_then_the_summary(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(SERVICE + "---\n" + INFER)
    code, out, _ = run(str(path), "-o", "jsonl")
    lines = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [x.get("status") for x in lines[:2]] == ["skipped", "admitted"]
    assert lines[-1]["summary"]["documents"] == 2


def test_json_output_is_one_valid_document_for_any_count(tmp_path):
    for docs in ([], [INFER], [INFER, SERVICE, INFER]):
        path = tmp_path / "m.yaml"
        path.write_text("---\n".join(docs))
        report = json.loads(run(str(path), "-o", "json")[1])
        assert report["summary"]["documents"] == len(docs)


def test_a_list_is_reprinted_once_with_its_mutated_items(tmp_path):
    listing = {"apiVersion": "v1", "kind": "List", "items": [yaml.safe_load(INFER), yaml.safe_load(SERVICE)]}
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(listing) + "---\n" + SERVICE)
    code, out, _ = run(str(path), "-o", "yaml")
    docs = list(yaml.safe_load_all(out))
    assert code == 0 and [d["kind"] for d in docs] == ["List", "Service"]
    assert "nvidia.com/mig-1g.5gb" in docs[0]["items"][0]["spec"]["containers"][0]["resources"]["limits"]


def test_read_sources_lists_without_reading(tmp_path):
    (tmp_path / "a.yaml").write_text(INFER)
    sources = list(read_sources([str(tmp_path)]))
    assert [s.name for s in sources] == [str(tmp_path / "a.yaml")] and sources[0].error is None


def test_declaring_the_kind_in_workload_kinds_gets_it_judged(tmp_path):
    """The advice on the "unknown kind" line works: with the CRD in the policy's workloadKinds, the
    same document is judged (here: a raw GPU request, a warning) and no longer reported as unjudged."""
    import shutil

    from tests.conftest import POLICIES

    policy = tmp_path / "policy"
    shutil.copytree(POLICIES, policy, ignore=shutil.ignore_patterns("tests"))
    with (policy / "default.yaml").open("a") as f:
        f.write(
            "  workloadKinds:\n"
            "    - {apiVersion: example.com/v1, kind: Trainer, mutate: false,\n"
            "       templates: [{path: spec.worker.template}]}\n"
        )
    path = tmp_path / "crd.yaml"
    path.write_text(CRD_WITH_GPU)
    assert "unknown kind" in run(str(path))[1]
    _code, out, _ = run(str(path), "--policy", str(policy))
    assert "unknown kind" not in out and "skipped" not in out.splitlines()[0], out
    assert "Trainer/t (namespace default):" in out
