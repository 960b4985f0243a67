"""Report a test run: go-test style text for people, JUnit XML for CI dashboards, JSON for tools.

The text follows ``go test`` / ``gator verify``: ``--- PASS: suite/case (0.00s)``, ``--- FAIL:`` with
each unmet expectation at ``file:line`` and a diff, ``ok``/``FAIL`` per suite file, so platform
engineers read it the way they read every other test output.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TextIO
from xml.etree import ElementTree as ET

from webhook.check import explain
from webhook.policytest.coverage import Coverage
from webhook.policytest.run import CaseResult, SuiteResult, fired_rules, verdict


def totals(results: Sequence[SuiteResult]) -> dict[str, int]:
    cases = [c for s in results for c in s.cases]
    return {
        "suites": len(results),
        "cases": len(cases),
        "passed": sum(1 for c in cases if c.passed),
        "failed": sum(1 for c in cases if c.failures and c.error is None),
        "errors": sum(1 for c in cases if c.error is not None),
    }


def summary_line(results: Sequence[SuiteResult]) -> str:
    t = totals(results)
    if t["passed"] == t["cases"]:
        return f"PASS: {t['cases']} case(s) in {t['suites']} suite(s)"
    return f"FAIL: {t['cases'] - t['passed']} of {t['cases']} case(s) failed in {t['suites']} suite(s)"


def _decision_lines(result: CaseResult, *, trace: bool) -> list[str]:
    d = result.decision
    if d is None:
        return []
    lines = [f"decision: {verdict(d, detail=False)}"]
    for v in d.violations:
        lines.append(f"  {v.action.value}: {v.render()}")
    if d.patch:
        lines.append(f"  patch: {len(d.patch)} operation(s)")
    if trace and d.explanation:
        lines.extend(explain.render(d.explanation, indent=""))
    return lines


def write_text(
    results: Sequence[SuiteResult],
    out: TextIO,
    *,
    verbose: bool = False,
    coverage: Sequence[Coverage] = (),
) -> None:
    """Failures (with their diff and decision) and a line per suite, then the summary; ``verbose`` adds
    every case (``=== RUN``, ``--- PASS``) and decision traces, as ``go test -v`` does."""
    for suite in results:
        for r in suite.cases:
            if r.passed and not verbose:  # a passing case is one number in the summary
                continue
            if verbose:
                out.write(f"=== RUN   {r.case.id}\n")
            status = "PASS" if r.passed else "FAIL"
            out.write(f"--- {status}: {r.case.id} ({r.seconds:.2f}s)\n")
            if r.error is not None:
                out.write(f"    {r.case.file}:{r.case.line}: the engine raised an exception:\n")
                out.write("".join(f"        {line}\n" for line in r.error.splitlines()))
                continue
            for f in r.failures:
                first, *rest = f.message.splitlines()
                out.write(f"    {r.case.file}:{f.line}: {first}\n")
                out.write("".join(f"    {line}\n" for line in rest))
                out.write("".join(f"        {line}\n" for line in f.diff))
            if not r.passed or verbose:
                out.write("".join(f"    {line}\n" for line in _decision_lines(r, trace=verbose)))
                if not r.passed and not verbose:
                    out.write("    (run with -v for the decision trace)\n")
        mark = "ok  " if not suite.failed else "FAIL"
        out.write(f"{mark}\t{suite.suite.file}\t{suite.seconds:.3f}s\n")
    for cov in coverage:
        out.write("\n".join(cov.lines()) + "\n")
    out.write(summary_line(results) + "\n")


def case_dict(r: CaseResult) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": r.case.case.name,
        "id": r.case.id,
        "line": r.case.line,
        "passed": r.passed,
        "seconds": round(r.seconds, 6),
        "failures": [{"key": f.key, "line": f.line, "message": f.message, "diff": list(f.diff)} for f in r.failures],
    }
    if r.error is not None:
        out["error"] = r.error
    d = r.decision
    if d is not None:
        out["decision"] = {
            "allowed": d.allowed,
            "relevant": d.relevant,
            "rules": fired_rules(d),
            "violations": [
                {"rule": v.rule, "action": v.action.value, "path": v.path, "message": v.message} for v in d.violations
            ],
            "warnings": list(d.warnings),
            "patchOperations": len(d.patch),
            "explanation": list(d.explanation),
        }
    return out


def write_json(
    results: Sequence[SuiteResult], out: TextIO, *, verbose: bool = False, coverage: Sequence[Coverage] = ()
) -> None:
    payload: dict[str, Any] = {
        "suites": [
            {
                "name": s.suite.name,
                "file": s.suite.file,
                "policy": str(s.suite.policy_dir),
                "seconds": round(s.seconds, 6),
                "failed": s.failed,
                "cases": [case_dict(c) for c in s.cases],
            }
            for s in results
        ],
        "summary": totals(results),
    }
    if coverage:
        payload["coverage"] = [c.as_dict() for c in coverage]
    json.dump(payload, out, indent=2)
    out.write("\n")


def write_junit(
    results: Sequence[SuiteResult], out: TextIO, *, verbose: bool = False, coverage: Sequence[Coverage] = ()
) -> None:
    """JUnit XML as Jenkins, GitLab and GitHub test reporters read it (testsuites > testsuite > testcase)."""
    t = totals(results)
    root = ET.Element(
        "testsuites",
        name="gpu-admission policy test",
        tests=str(t["cases"]),
        failures=str(t["failed"]),
        errors=str(t["errors"]),
        time=f"{sum(s.seconds for s in results):.3f}",
    )
    for s in results:
        suite = ET.SubElement(
            root,
            "testsuite",
            name=s.suite.name,
            file=s.suite.file,
            tests=str(len(s.cases)),
            failures=str(sum(1 for c in s.cases if c.failures and c.error is None)),
            errors=str(sum(1 for c in s.cases if c.error is not None)),
            skipped="0",
            time=f"{s.seconds:.3f}",
        )
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", name="policy", value=str(s.suite.policy_dir))
        for r in s.cases:
            case = ET.SubElement(
                suite,
                "testcase",
                name=r.case.case.name,
                classname=s.suite.name,
                file=r.case.file,
                line=str(r.case.line),
                time=f"{r.seconds:.3f}",
            )
            if r.error is not None:
                ET.SubElement(
                    case, "error", message="the engine raised an exception", type="EngineError"
                ).text = r.error
            elif r.failures:
                body = []
                for f in r.failures:
                    body.append(f"{r.case.file}:{f.line}: {f.message}")
                    body.extend(f"    {line}" for line in f.diff)
                ET.SubElement(
                    case, "failure", message=r.failures[0].message.splitlines()[0], type=r.failures[0].key
                ).text = "\n".join(body)
            lines = _decision_lines(r, trace=verbose or not r.passed)
            if lines:
                ET.SubElement(case, "system-out").text = "\n".join(lines)
    out.write(ET.tostring(root, encoding="unicode", xml_declaration=True))
    out.write("\n")


WRITERS = {"text": write_text, "json": write_json, "junit": write_junit}
