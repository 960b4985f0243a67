"""Render check results: text for people, JSON/YAML for tools, JUnit for CI dashboards, GitHub annotations.

Every message carries ``file:line``; the line is that of the offending field when the engine gives a
field path, else the document's first line. Each placed object also gets its GPU memory line (what it
asked for against the device it lands on, ``webhook.check.waste``) and, with ``--explain``, the grouped
decision trace (``webhook.check.explain``).
"""

from __future__ import annotations

import copy
import difflib
import json
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TextIO
from xml.etree import ElementTree as ET

import orjson
import yaml

from webhook.check import explain, waste
from webhook.check.github import write_github
from webhook.check.runner import UNJUDGED, CheckResult, Rendered, Status, Summary, fails

Writer = Callable[[Iterable[CheckResult], TextIO, "Options", "Tally"], None]


class Options:
    def __init__(
        self,
        *,
        diff: bool = False,
        explain: bool = False,
        fail_on: str = "deny",
        verbose: bool = False,
        quiet: bool = False,
        err: TextIO | None = None,
    ):
        self.diff = diff
        self.explain = explain
        self.fail_on = fail_on
        self.verbose = verbose
        self.quiet = quiet  # text: admitted documents are not listed (the summary still counts them)
        self.err = err  # where ``-o yaml`` reports problems (stdout stays applyable)


class Tally:
    """What the summary and the exit code need, gathered as results stream past (no object is kept).

    Writers print each result as it comes and then the summary from here, so memory stays flat
    however many documents a run checks.
    """

    def __init__(self) -> None:
        self.summary = Summary()
        self.gpu_memory = waste.WasteTotals()

    def observe(self, results: Iterable[CheckResult]) -> Iterator[CheckResult]:
        for r in results:
            self.add(r)
            yield r

    def add(self, r: CheckResult | Rendered) -> None:
        self.summary.add(r)
        if r.status in (Status.ADMITTED, Status.WARNED) and r.waste is not None:
            self.gpu_memory.add(r.waste)

    def exit_code(self, fail_on: str) -> int:
        """0 admitted, 1 denied (or would be under enforce, with --fail-on would-deny or warn; or warned with
        --fail-on warn), 2 nothing judged or something unjudgeable."""
        s = self.summary
        if s.errors or s.invalid or s.engine_errors or not s.documents:
            return 2
        if s.denied:
            return 1
        if fail_on != "deny" and s.would_deny:
            return 1
        if fail_on == "warn" and (s.warned or s.unjudged_gpu):
            return 1
        return 0


def tallied(results: Iterable[CheckResult], tally: Tally | None) -> tuple[Iterable[CheckResult], Tally]:
    """A writer called without the caller's tally counts for itself (tests, embedding)."""
    if tally is not None:
        return results, tally
    own = Tally()
    return own.observe(results), own


def tally(results: Iterable[CheckResult]) -> Tally:
    out = Tally()
    for r in results:
        out.add(r)
    return out


def _dump(obj: Any) -> str:
    return yaml.safe_dump(obj, sort_keys=False, default_flow_style=False, allow_unicode=True, width=100)


def diff_lines(result: CheckResult) -> list[str]:
    decision = result.decision
    if decision is None or not decision.patch or decision.mutated is None:
        return []
    before, after = _dump(result.obj).splitlines(), _dump(decision.mutated).splitlines()
    name = f"{result.file}:{result.line} {result.label}"
    return list(
        difflib.unified_diff(
            before, after, fromfile=f"{name} (as written)", tofile=f"{name} (as admitted)", lineterm="", n=2
        )
    )


def waste_line(result: CheckResult) -> str | None:
    """``gpu memory: 4Gi requested on a MIG 1g.5gb of A100-40GB (5Gi): 80% used, 1Gi idle``.

    Only for objects that would run: a denied object occupies no device.
    """
    report = result.decision.waste if result.decision is not None else None
    if report is None or result.status is Status.DENIED:
        return None
    return f"gpu memory: {waste.describe(report)}"


def placed(results: Iterable[CheckResult]) -> list[CheckResult]:
    """Results whose objects would run (the ones the GPU memory totals count)."""
    return [r for r in results if r.status in (Status.ADMITTED, Status.WARNED)]


def text_lines(r: CheckResult, options: Options) -> Iterator[str]:
    """The text report's lines for one result (none for a quiet skip)."""
    if r.status is Status.SKIPPED and not options.verbose and not r.attention and not r.noted:
        return
    if options.quiet and (r.status is Status.ADMITTED or r.noted):
        return
    if r.noted:
        yield f"{r.where}: {r.message}"
        return
    if r.status is Status.EMPTY:
        yield f"{r.file}: empty: {r.message}"
        return
    if r.status in UNJUDGED:
        yield f"{r.where}: {r.status.value}: {r.message}"
        return
    if r.status is Status.SKIPPED:
        if r.attention:  # shown whatever -v says: a workload that reaches GPUs unjudged
            yield f"{r.where}: {r.label}: skipped: {r.message}"
        else:
            yield f"{r.where}: {r.label}: skipped ({r.message})"
        return
    d = r.decision
    assert d is not None
    ops = f", {len(d.patch)} patch operation(s)" if d.patch else ""
    headline = {
        Status.DENIED: "DENIED",
        Status.WARNED: "admitted with warnings",
        Status.ADMITTED: "admitted",
    }[r.status]
    update = " (UPDATE of the --old object)" if d.operation == "UPDATE" else ""
    observed = f" (enforce would deny: {len(d.would_deny)} finding(s))" if d.would_deny and d.allowed else ""
    yield f"{r.where}: {r.label} (namespace {r.namespace}){update}: {headline}{observed}{ops}"
    for v in d.violations:
        yield f"  {r.file}:{r.line_of(v.path)}: {v.action.value} {v.render()}"
    line = waste_line(r)
    if line:
        yield f"  {line}"
    if options.explain:
        yield from explain.render(d.explanation)
    if options.diff:
        for line in diff_lines(r):
            yield f"    {line}"
    yield from expanded_lines(r)


def expanded_lines(result: CheckResult) -> Iterator[str]:
    """``--expand``: each pod the workload's controller creates, judged, then printed as admitted."""
    for e in result.expanded:
        d = e.decision
        state = "DENIED" if not d.allowed else ("admitted with warnings" if d.violations else "admitted")
        ops = f", {len(d.patch)} patch operation(s)" if d.patch else ""
        yield f"  expands to {e.replicas} pod(s) from {e.template}: {state}{ops}"
        for v in d.violations:
            yield f"    {v.action.value} {v.render()}"
        for line in _dump(json.loads(json.dumps(e.pod))).splitlines():  # no YAML anchors for shared values
            yield f"    | {line}"


def text_body(r: CheckResult, options: Options) -> str:
    """The text report's lines for one result, each ending in a newline ("" for a quiet skip)."""
    return "".join(line + "\n" for line in text_lines(r, options))


def write_text(results: Iterable[CheckResult], out: TextIO, options: Options, tally: Tally | None = None) -> None:
    results, tally = tallied(results, tally)
    for r in results:
        out.write(r.body if isinstance(r, Rendered) else text_body(r, options))
    out.write(summary_line(tally) + "\n")


def summary_line(t: Tally) -> str:
    s = t.summary
    text = (
        f"checked {s.documents} document(s): {s.admitted} admitted, {s.warned} warned, {s.denied} denied, "
        f"{s.skipped} skipped, {s.invalid} invalid, {s.errors} unreadable; {s.mutated} mutated"
    )
    extra = []
    if s.unjudged_gpu:
        extra.append(f"{s.unjudged_gpu} skipped with GPU resources or intent keys (not judged)")
    if s.engine_errors:
        extra.append(f"{s.engine_errors} engine error(s)")
    if s.would_deny:
        extra.append(f"{s.would_deny} admitted that enforce would deny (settings.enforcement)")
    if s.empty:
        extra.append(f"{s.empty} empty input(s)")
    if not s.documents:
        extra.append("nothing to check")
    if extra:
        text = f"{text}; {'; '.join(extra)}"
    line = t.gpu_memory.line()
    return f"{text}; {line}" if line else text


def result_dict(r: CheckResult, options: Options) -> dict[str, Any]:
    out: dict[str, Any] = {"file": r.file, "line": r.line, "status": r.status.value}
    if r.column:
        out["column"] = r.column
    if isinstance(r.obj, dict):
        meta = r.obj.get("metadata") if isinstance(r.obj.get("metadata"), dict) else {}
        out.update(
            apiVersion=r.obj.get("apiVersion"),
            kind=r.obj.get("kind"),
            name=meta.get("name"),
            namespace=r.namespace or meta.get("namespace"),
        )
    if r.message:
        out["message"] = r.message
    if r.attention:
        out["unjudgedPath"] = r.attention
    d = r.decision
    if d is not None and d.relevant:
        out["operation"] = d.operation  # UPDATE when --old holds the object it replaces
        out["allowed"] = d.allowed
        out["violations"] = [
            {
                "rule": v.rule,
                "action": v.action.value,
                "path": v.path,
                "message": v.message,
                "line": r.line_of(v.path),
                **({"exception": v.exception} if v.exception else {}),
                **({"wouldDeny": True} if v.would_deny else {}),
            }
            for v in d.violations
        ]
        out["warnings"] = list(d.warnings)
        out["patch"] = list(d.patch)
        if d.waste is not None:
            out["gpuMemory"] = waste.as_dict(d.waste)
            if r.status is not Status.DENIED:
                out["gpuMemory"]["text"] = waste.describe(d.waste)
        if options.explain:
            out["explanation"] = list(d.explanation)
            out["trace"] = explain.parse(d.explanation).as_dict()
    if r.expanded:
        out["expanded"] = [
            {
                "template": e.template,
                "replicas": e.replicas,
                "allowed": e.decision.allowed,
                "violations": [
                    {"rule": v.rule, "action": v.action.value, "path": v.path, "message": v.message}
                    for v in e.decision.violations
                ],
                "patch": list(e.decision.patch),
                "pod": e.pod,
            }
            for e in r.expanded
        ]
    return out


def summary_dict(t: Tally) -> dict[str, Any]:
    """The runner's counters plus the GPU memory totals of the objects that would run."""
    out: dict[str, Any] = dict(t.summary.as_dict())
    out["gpuMemory"] = t.gpu_memory.as_dict()
    return out


_JSON = orjson.OPT_NON_STR_KEYS  # non-string keys (YAML ints) kept


def _json(value: Any, option: int = 0) -> str:
    # orjson: ~10x faster than json for a 10,000-document report
    return orjson.dumps(value, option=_JSON | option, default=str).decode()


def json_item(item: dict[str, Any]) -> str:
    """One result of :func:`write_json_stream`, encoded and indented as it is printed there."""
    return _json(item, orjson.OPT_INDENT_2).replace("\n", "\n    ")


def write_json_stream(
    out: TextIO, items: Iterable[dict[str, Any] | str], trailer: Callable[[], dict[str, Any]]
) -> None:
    """``{"results": [...], <trailer keys>}``, written one result at a time: the trailer (a summary)
    is asked for only once every result has been written, so it can count them. Shared by ``check``
    and ``audit``. An item is a result's dict, or a string :func:`json_item` already made of one."""
    out.write('{\n  "results": [')
    first = True
    for item in items:
        body = item if isinstance(item, str) else json_item(item)
        out.write(("\n    " if first else ",\n    ") + body)
        first = False
    out.write("\n  ]" if not first else "]")
    for key, value in trailer().items():
        out.write(f",\n  {_json(key)}: " + _json(value, orjson.OPT_INDENT_2).replace("\n", "\n  "))
    out.write("\n}\n")


def json_body(r: CheckResult, options: Options) -> str:
    return json_item(result_dict(r, options))


def write_json(results: Iterable[CheckResult], out: TextIO, options: Options, tally: Tally | None = None) -> None:
    """``{"results": [...], "summary": {...}}``, written one result at a time."""
    results, tally = tallied(results, tally)
    items = (r.body if isinstance(r, Rendered) else result_dict(r, options) for r in results)
    write_json_stream(out, items, lambda: {"summary": summary_dict(tally)})


def jsonl_body(r: CheckResult, options: Options) -> str:
    return _json(result_dict(r, options)) + "\n"


def write_jsonl(results: Iterable[CheckResult], out: TextIO, options: Options, tally: Tally | None = None) -> None:
    """JSON Lines: one result per line as it is judged, then ``{"summary": {...}}`` on the last line."""
    results, tally = tallied(results, tally)
    for r in results:
        out.write(r.body if isinstance(r, Rendered) else jsonl_body(r, options))
    out.write(_json({"summary": summary_dict(tally)}) + "\n")


def _problems(r: CheckResult) -> Iterator[str]:
    if r.status in UNJUDGED:
        yield f"{r.where}: {r.status.value}: {r.message}"
    elif r.status is Status.EMPTY:
        yield f"{r.file}: empty: {r.message}"
    elif r.attention:
        yield f"{r.where}: {r.label}: skipped: {r.message}"
    elif r.decision is not None:
        for v in r.decision.violations:
            yield f"{r.file}:{r.line_of(v.path)}: {v.action.value} {v.render()}"


def write_yaml(results: Iterable[CheckResult], out: TextIO, options: Options, tally: Tally | None = None) -> None:
    """The manifests as the cluster would store them: mutated where the webhook mutates, else verbatim.

    Items of one ``List`` arrive together; only that List's results are held until it is printed.
    """
    results, tally = tallied(results, tally)
    state = {"first": True}
    group: list[CheckResult] = []

    def emit(body: str) -> None:
        if not state["first"]:
            out.write("---\n")
        out.write(body if body.endswith("\n") or not body else body + "\n")
        state["first"] = False

    def flush() -> None:
        if not group:
            return
        if not any(x.decision is not None and x.decision.patch for x in group):
            emit(group[0].text)
        else:
            doc = yaml.safe_load(group[0].text)
            for x in group:
                if x.decision is not None and x.decision.patch and x.decision.mutated is not None:
                    doc["items"][x.item_path[1]] = x.decision.mutated
            emit(_dump(doc))
        group.clear()

    for r in results:
        if options.err is not None:
            for line in _problems(r):
                options.err.write(line + "\n")
        if group and not (r.item_path and r.file == group[0].file and r.text is group[0].text):
            flush()
        if r.status in (Status.ERROR, Status.EMPTY):
            continue
        if r.item_path:
            group.append(r)
        elif r.decision is not None and r.decision.patch and r.decision.mutated is not None:
            emit(_dump(r.decision.mutated))
        else:
            emit(r.text)
    flush()


def junit_case(r: CheckResult, options: Options) -> tuple[ET.Element, str | None]:
    """One ``<testcase>`` and how it counts (failures, errors, skipped or None)."""
    case = ET.Element("testcase", classname=r.file, name=f"{r.label} (line {r.line})")
    report = r.decision.waste if r.decision is not None else None
    if report is not None and r.status is not Status.DENIED:
        case_props = ET.SubElement(case, "properties")
        for key, value in waste.as_dict(report).items():
            ET.SubElement(case_props, "property", name=f"gpuMemory.{key}", value="" if value is None else str(value))
        ET.SubElement(case_props, "property", name="gpuMemory.summary", value=waste.describe(report))
    if r.status in UNJUDGED:
        ET.SubElement(case, "error", message=r.message, type=r.status.value).text = f"{r.where}: {r.message}"
        return case, "errors"
    if r.status is Status.EMPTY:
        case.set("name", f"{r.file} (empty)")
        ET.SubElement(case, "skipped", message=r.message)
        return case, "skipped"
    if r.status is Status.SKIPPED:
        if r.attention and options.fail_on == "warn":
            ET.SubElement(case, "failure", message=r.message, type="unjudged").text = f"{r.where}: {r.message}"
            return case, "failures"
        ET.SubElement(case, "skipped", message=r.message)
        return case, "skipped"
    if r.decision is not None:
        failing = [v for v in r.decision.violations if fails(v, options.fail_on)]
        body = "\n".join(
            [f"{r.file}:{r.line_of(v.path)}: {v.action.value} {v.render()}" for v in r.decision.violations]
            + (explain.render(r.decision.explanation, indent="") if options.explain else [])
        )
        if failing:
            ET.SubElement(
                case, "failure", message="; ".join(v.render() for v in failing), type=failing[0].rule
            ).text = body
            return case, "failures"
        if body:
            ET.SubElement(case, "system-out").text = body
    return case, None


def write_junit(results: Iterable[CheckResult], out: TextIO, options: Options, tally: Tally | None = None) -> None:
    """JUnit needs its counts before its cases: cases go to a spool file (on disk past 4 MiB) as they
    are judged, so only the counts stay in memory."""
    results, tally = tallied(results, tally)

    def properties() -> dict[str, str]:
        totals = tally.gpu_memory
        props = {f"gpuMemory.{k}": "" if v is None else str(v) for k, v in totals.as_dict().items()}
        line = totals.line()
        if line:
            props["gpuMemory.summary"] = line
        return props

    cases = (r.body if isinstance(r, Rendered) else junit_case(r, options) for r in results)
    write_junit_suite(out, "gpu-admission check", cases, properties)


def junit_body(r: CheckResult, options: Options) -> tuple[str, str | None]:
    """:func:`junit_case` as the XML it is spooled as."""
    case, counted = junit_case(r, options)
    return ET.tostring(case, encoding="unicode"), counted


def write_junit_suite(
    out: TextIO,
    name: str,
    cases: Iterable[tuple[ET.Element | str, str | None]],
    properties: Callable[[], dict[str, str]],
) -> None:
    """One ``<testsuite>`` of (case, how it counts) pairs, streamed (shared by ``check`` and ``audit``).

    The suite's counts and properties come first in the XML but are known only at the end, so the
    cases are spooled (on disk past 4 MiB) and only the counts stay in memory."""
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    with tempfile.SpooledTemporaryFile(max_size=4 << 20, mode="w+", encoding="utf-8") as spool:
        for case, counted in cases:
            counts["tests"] += 1
            if counted:
                counts[counted] += 1
            spool.write(case if isinstance(case, str) else ET.tostring(case, encoding="unicode"))
        suite = ET.Element("testsuite", name=name)
        for key, value in counts.items():
            suite.set(key, str(value))
        props = ET.SubElement(suite, "properties")
        for key, value in properties().items():
            ET.SubElement(props, "property", name=key, value=value)
        head = ET.tostring(suite, encoding="unicode", xml_declaration=True)
        assert head.endswith("</testsuite>")
        out.write(head[: -len("</testsuite>")])
        spool.seek(0)
        shutil.copyfileobj(spool, out)
        out.write("</testsuite>\n")


def _github_body(r: CheckResult, options: Options) -> tuple[str, str]:
    from webhook.check.github import annotations

    return text_body(r, options), "".join(annotations(r, options))


_BODIES: dict[str, Callable[[CheckResult, Options], Any]] = {
    "text": text_body,
    "json": json_body,
    "jsonl": jsonl_body,
    "junit": junit_body,
    "github": _github_body,
}

WRITERS: dict[str, Writer] = {
    "text": write_text,
    "json": write_json,
    "jsonl": write_jsonl,
    "yaml": write_yaml,
    "junit": write_junit,
    "github": write_github,
}


class Render:
    """What a ``check`` pool worker does to each result before sending it back (see
    :class:`webhook.check.runner.Rendered`): writes its part of the report for ``output``, the way the
    writer would have in the main process, so the bytes are the same on any number of workers."""

    def __init__(self, output: str, options: Options) -> None:
        self.body = _BODIES[output]
        self.options = copy.copy(options)
        self.options.err = None  # stderr stays the main process's (and need not pickle)

    def __call__(self, r: CheckResult) -> Rendered:
        return Rendered(r.file, r.status, self.body(r, self.options), r.attention, r.patched, r.observed, r.waste)


def renderer(output: str, options: Options) -> Render | None:
    """A worker's :class:`Render` for ``-o output``, or None where the writer needs the results whole
    (``yaml`` reprints the documents, and merges a List's items back into it)."""
    return Render(output, options) if output in _BODIES else None


def exit_code(results: Iterable[CheckResult], fail_on: str) -> int:
    """0 admitted, 1 denied (or warned with --fail-on warn), 2 nothing judged or something unjudgeable."""
    return tally(results).exit_code(fail_on)
