"""Find and load ``PolicyTest`` suites; every problem becomes a ``file:line:column`` issue, all at once.

Everything a run needs is read and checked here — suite schema, rule ids, object files, document
indexes, duplicate case names — so a broken suite is reported as such (exit 2) before any case
runs, instead of showing up as a confusing test failure.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from webhook import yamlpos
from webhook.check.context import ClusterObjects
from webhook.engine.model.cluster import EMPTY_CLUSTER, Cluster
from webhook.engine.model.requester import Requester
from webhook.policy.suite import API_VERSION, KIND, Case, Suite
from webhook.validation_errors import dotted as _dotted
from webhook.validation_errors import field_errors

SUITE_SUFFIXES = (".test.yaml", ".test.yml")
YAML_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True, slots=True)
class SuiteIssue:
    file: str
    line: int
    column: int
    path: str
    message: str
    hint: str = ""

    def render(self) -> str:
        field_path = f" {self.path}:" if self.path else ""
        hint = f" (hint: {self.hint})" if self.hint else ""
        return f"{self.file}:{self.line}:{self.column}: error:{field_path} {self.message}{hint}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "path": self.path,
            "message": self.message,
            "hint": self.hint,
        }


class SuiteError(Exception):
    """Raised with every issue of every suite, so one run lists all that needs fixing."""

    def __init__(self, issues: Sequence[SuiteIssue]):
        self.issues = tuple(issues)
        super().__init__("\n".join(i.render() for i in self.issues))


@dataclass(slots=True)
class LoadedCase:
    case: Case
    suite: str  # suite name
    file: str  # suite file
    line: int  # line of the case in the suite file
    obj: dict[str, Any]
    old: dict[str, Any] | None
    namespace_labels: dict[str, str] | None
    lines: dict[str, int] = field(default_factory=dict)  # expectation key -> line in the suite file
    cluster: Cluster = EMPTY_CLUSTER  # the suite's context objects
    requester: Requester | None = None

    @property
    def id(self) -> str:
        return f"{self.suite}/{self.case.name}"

    def line_of(self, key: str) -> int:
        return self.lines.get(key, self.line)


@dataclass(slots=True)
class LoadedSuite:
    file: str
    name: str
    policy_dir: Path
    cases: list[LoadedCase]


# --- discovery ---------------------------------------------------------------------------------------


def discover(paths: Iterable[str | Path]) -> tuple[list[Path], list[SuiteIssue]]:
    """Candidate suite files: files as given; for a directory, YAML under its ``tests/`` (else itself).

    Object files live beside suites, so a directory walk keeps only files that mention ``PolicyTest``
    or are named ``*.test.yaml``; a file passed explicitly must be a suite.
    """
    found: list[Path] = []
    issues: list[SuiteIssue] = []
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            found.append(path)
            continue
        if not path.is_dir():
            issues.append(SuiteIssue(str(path), 0, 0, "", "no such file or directory"))
            continue
        root = path / "tests" if (path / "tests").is_dir() else path
        for file in sorted(p for p in root.rglob("*") if p.suffix in YAML_SUFFIXES and p.is_file()):
            if file.name.endswith(SUITE_SUFFIXES):
                found.append(file)
                continue
            try:
                head = file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            if KIND in head:
                found.append(file)
    return list(dict.fromkeys(found)), issues


def default_policy_dir(suite_file: Path) -> Path:
    """The directory holding the ``tests/`` directory the suite lives in; else the suite's own directory.

    Relative paths stay relative (reports then read ``policies``, not ``/home/ci/…/policies``).
    """
    for candidates in (suite_file.parents, suite_file.resolve().parents):
        for parent in candidates:
            if parent.name == "tests":
                return parent.parent
    return suite_file.parent


# --- loading -------------------------------------------------------------------------------------------


def load_suites(
    files: Sequence[Path], *, explicit: Sequence[Path] = (), policy: str | None = None
) -> list[LoadedSuite]:
    """Parse and check every suite; raises ``SuiteError`` with all issues if any suite is broken."""
    from webhook.engine.rules import RULES

    suites: list[LoadedSuite] = []
    issues: list[SuiteIssue] = []
    explicit_set = {p.resolve() for p in explicit}
    for file in files:
        name = str(file)
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            issues.append(SuiteIssue(name, 0, 0, "", f"cannot read: {exc}"))
            continue
        # Named like a suite, passed by name, or mentioning the kind: a problem here is a broken suite,
        # not an object file to skip (a typo like `kind: PolicyTests` must not hide a whole suite).
        must_be_suite = file.name.endswith(SUITE_SUFFIXES) or file.resolve() in explicit_set or KIND in text
        found = 0
        for doc in yamlpos.iter_documents(text, with_nodes=True):
            if isinstance(doc, yamlpos.SyntaxProblem):
                if must_be_suite:
                    issues.append(SuiteIssue(name, doc.line, doc.column, "", f"YAML syntax error: {doc.problem}"))
                continue
            if not isinstance(doc.data, dict) or doc.data.get("kind") != KIND:
                continue
            found += 1
            suite = _load_suite(file, doc, found, policy, set(RULES), issues)
            if suite is not None:
                suites.append(suite)
        if not found and must_be_suite and not any(i.file == name for i in issues):
            issues.append(
                SuiteIssue(
                    name,
                    1,
                    1,
                    "kind",
                    f"no {KIND} document in this file",
                    f"a suite starts with apiVersion: {API_VERSION} and kind: {KIND}",
                )
            )
    names: dict[str, str] = {}
    for suite in suites:
        if suite.name in names:
            issues.append(
                SuiteIssue(
                    suite.file,
                    1,
                    1,
                    "metadata.name",
                    f"suite name {suite.name!r} is already used by {names[suite.name]}",
                    "set a unique metadata.name (--run and reports use it)",
                )
            )
        names[suite.name] = suite.file
    if issues:
        raise SuiteError(issues)
    return suites


def _load_suite(
    file: Path,
    doc: yamlpos.Document,
    ordinal: int,
    policy: str | None,
    rule_ids: set[str],
    issues: list[SuiteIssue],
) -> LoadedSuite | None:
    name = str(file)
    try:
        suite = Suite.model_validate(doc.data)
    except ValidationError as exc:
        issues.extend(_validation_issues(name, doc, exc))
        return None
    before = len(issues)

    def issue(path: tuple[str | int, ...], message: str, hint: str = "") -> None:
        pos = doc.position(path)
        issues.append(SuiteIssue(name, pos.line, pos.column, _dotted(path), message, hint))

    base = file.parent
    if policy is not None:
        policy_dir = Path(policy)
    elif suite.policy is not None:
        policy_dir = Path(os.path.normpath(base / suite.policy))
        if not policy_dir.exists():
            issue(("policy",), f"policy directory {suite.policy!r} does not exist (relative to the suite file)")
    else:
        policy_dir = default_policy_dir(file)
    stem = file.name
    for suffix in (*SUITE_SUFFIXES, *YAML_SUFFIXES):
        stem = stem.removesuffix(suffix)
    suite_name = suite.metadata.name or (stem if ordinal == 1 else f"{stem}#{ordinal}")
    cases: list[LoadedCase] = []
    seen: dict[str, int] = {}
    context = ClusterObjects()
    for index, item in enumerate(suite.context):
        problem = context.add(item)
        if problem:
            issue(("context", index), problem, "give each context object apiVersion, kind and metadata.name")
    cluster = context.cluster() if suite.context else EMPTY_CLUSTER
    for index, case in enumerate(suite.cases):
        at = ("cases", index)
        line = doc.position((*at, "name")).line
        if case.name in seen:
            issue(
                (*at, "name"),
                f"case name {case.name!r} is already used on line {seen[case.name]}",
                "names must be unique",
            )
        seen.setdefault(case.name, line)
        for key in ("rules", "notRules"):
            for k, rule_id in enumerate(getattr(case.expect, "rules" if key == "rules" else "not_rules")):
                if rule_id not in rule_ids:
                    issue((*at, "expect", key, k), f"unknown rule id {rule_id!r}", _near(rule_id, rule_ids))
        obj = _object(base, case.object, case.file, case.document, (*at, "file"), issue)
        old = None
        if case.operation == "UPDATE":
            old = _object(base, case.old_object, case.old_file, case.old_document, (*at, "oldFile"), issue)
        labels = case.namespace_labels
        if labels is None:
            ns = case.namespace or _object_namespace(obj) or "default"
            labels = suite.namespaces.get(ns)
        lines = {key: doc.position((*at, "expect", key)).line for key in _aliases(case)}
        who = Requester(case.user_info.username, case.user_info.groups) if case.user_info is not None else None
        cases.append(LoadedCase(case, suite_name, name, line, obj or {}, old, labels, lines, cluster, who))
    if len(issues) > before:
        return None
    return LoadedSuite(name, suite_name, policy_dir, cases)


def _aliases(case: Case) -> list[str]:
    fields = type(case.expect).model_fields
    return [fields[f].alias or f for f in case.expect.model_fields_set]


def _object_namespace(obj: dict[str, Any] | None) -> str | None:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    ns = meta.get("namespace") if isinstance(meta, dict) else None
    return ns if isinstance(ns, str) else None


def _object(
    base: Path,
    inline: dict[str, Any] | None,
    file: str | None,
    document: int | None,
    at: tuple[str | int, ...],
    issue: Any,
) -> dict[str, Any] | None:
    if inline is not None:
        obj = inline
    else:
        assert file is not None
        path = base / file
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            issue(at, f"cannot read {file!r} (relative to the suite file): {exc.__class__.__name__}")
            return None
        docs: list[Any] = []
        for item in yamlpos.iter_documents(text, with_nodes=False):
            if isinstance(item, yamlpos.SyntaxProblem):
                issue(at, f"{file}:{item.line}:{item.column}: YAML syntax error: {item.problem}")
                return None
            if item.data is not None:
                docs.append(item.data)
        if not docs:
            issue(at, f"{file!r} holds no YAML document")
            return None
        if document is None and len(docs) > 1:
            issue(at, f"{file!r} holds {len(docs)} documents", f"choose one with document: 0..{len(docs) - 1}")
            return None
        index = document or 0
        if index >= len(docs):
            issue((*at[:-1], "document"), f"{file!r} holds {len(docs)} document(s); there is no document {index}")
            return None
        obj = docs[index]
    if not isinstance(obj, dict) or not obj.get("apiVersion") or not obj.get("kind"):
        issue(at if inline is None else (*at[:-1], "object"), "not a Kubernetes object (needs apiVersion and kind)")
        return None
    return obj


def _near(word: str, options: Iterable[str]) -> str:
    match = difflib.get_close_matches(word, sorted(options), n=1, cutoff=0.6)
    return f"did you mean {match[0]!r}?" if match else ""


# --- pydantic errors -> file:line -------------------------------------------------------------------------


def _validation_issues(file: str, doc: yamlpos.Document, exc: ValidationError) -> list[SuiteIssue]:
    out: list[SuiteIssue] = []
    for err in field_errors(Suite, exc):
        pos = doc.position(err.loc)
        out.append(SuiteIssue(file, pos.line, pos.column, _dotted(err.loc), err.message, err.hint))
    return out


