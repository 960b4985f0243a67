"""Load ``policies/*.yaml`` into one compiled ``Policy``, or fail with every problem at file:line:column.

A policy either loads completely or not at all: the caller (server reload, ``check``, ``policy lint``)
keeps the previous policy on failure, so a half-read policy can never be served.
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from webhook import yamlpos
from webhook.actions import ENGINE_ERROR
from webhook.policy.compiled import Policy
from webhook.policy.model import API_VERSION, KIND, Isolation, PolicyDocument, PolicySpec
from webhook.validation_errors import dotted as _dotted
from webhook.validation_errors import field_errors
from webhook.yamlpos import Position


@dataclass(frozen=True, slots=True)
class PolicyIssue:
    file: str
    line: int
    column: int
    path: str
    message: str
    hint: str = ""
    severity: str = "error"

    def render(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}"
        field_path = f" {self.path}:" if self.path else ""
        hint = f" (hint: {self.hint})" if self.hint else ""
        return f"{where}: {self.severity}:{field_path} {self.message}{hint}"


class PolicyError(Exception):
    """Raised with *all* issues found, so one lint run shows everything to fix."""

    def __init__(self, issues: Sequence[PolicyIssue]):
        self.issues = tuple(issues)
        super().__init__("\n".join(i.render() for i in self.issues))


@dataclass
class _Source:
    file: str
    doc: yamlpos.Document


@dataclass
class _Merge:
    spec: dict[str, Any] = field(default_factory=dict)
    origin: dict[tuple[str, str], _Source] = field(default_factory=dict)  # (section, name) -> source
    namespaces: list[tuple[_Source, int]] = field(default_factory=list)
    workload_kinds: list[tuple[_Source, int]] = field(default_factory=list)
    exceptions: list[tuple[_Source, int]] = field(default_factory=list)
    settings_source: _Source | None = None


def policy_files(path: str | Path) -> list[Path]:
    """The files a policy directory contributes: top-level ``*.yaml``/``*.yml``, sorted by name.

    Sub-directories (``policies/tests``) and Kubernetes ConfigMap internals (``..data``) are skipped.
    """
    root = Path(path)
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise PolicyError(
            [
                PolicyIssue(
                    str(root),
                    0,
                    0,
                    "",
                    "policy path does not exist",
                    "pass --policy DIR, or create one with `gpu-admission policy init`",
                )
            ]
        )
    files = sorted(
        p
        for p in root.iterdir()
        if p.suffix in (".yaml", ".yml") and not p.name.startswith(".") and p.is_file()
    )
    if not files:
        raise PolicyError(
            [
                PolicyIssue(
                    str(root), 0, 0, "", "no *.yaml policy files in this directory", "add a GPUPolicy file"
                )
            ]
        )
    return files


def load_policy(path: str | Path) -> Policy:
    files = policy_files(path)
    texts: list[tuple[str, str]] = []
    issues: list[PolicyIssue] = []
    for file in files:
        try:
            texts.append((str(file), file.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError) as exc:
            issues.append(PolicyIssue(str(file), 0, 0, "", f"cannot read: {exc}"))
    if issues:
        raise PolicyError(issues)
    return load_policy_texts(texts)


def load_policy_texts(texts: Iterable[tuple[str, str]]) -> Policy:
    """Parse, validate, merge and cross-check; the one entry point for every caller and test."""
    issues: list[PolicyIssue] = []
    documents: list[tuple[_Source, PolicyDocument]] = []
    digest = hashlib.sha256()
    names: list[str] = []
    for file, text in texts:
        names.append(file)
        digest.update(file.encode() + b"\0" + text.encode() + b"\0")
        for item in yamlpos.iter_documents(text, with_nodes=True):
            if isinstance(item, yamlpos.SyntaxProblem):
                issues.append(
                    PolicyIssue(file, item.line, item.column, "", f"YAML syntax error: {item.problem}")
                )
                continue
            source = _Source(file, item)
            for dup_path, pos in yamlpos.duplicate_keys(item.node):
                issues.append(
                    PolicyIssue(
                        file, pos.line, pos.column, _dotted(dup_path), "duplicate key", "keep one of them"
                    )
                )
            if not isinstance(item.data, dict):
                issues.append(
                    PolicyIssue(
                        file, item.line, 1, "", "a policy document must be a mapping (apiVersion, kind, spec)"
                    )
                )
                continue
            if item.data.get("kind") != KIND or item.data.get("apiVersion") != API_VERSION:
                pos = item.position(("kind",))
                issues.append(
                    PolicyIssue(
                        file,
                        pos.line,
                        pos.column,
                        "kind",
                        f"expected apiVersion {API_VERSION} and kind {KIND}, got "
                        f"{item.data.get('apiVersion')!r}/{item.data.get('kind')!r}",
                        "policy directories hold only GPUPolicy documents; tests go in policies/tests/",
                    )
                )
                continue
            try:
                documents.append((source, PolicyDocument.model_validate(item.data)))
            except ValidationError as exc:
                issues.extend(_validation_issues(source, exc))
    if not documents and not issues:
        issues.append(PolicyIssue(names[0] if names else "", 0, 0, "", "no GPUPolicy document found"))
    if issues:
        raise PolicyError(issues)
    merged = _merge(documents, issues)
    if issues:
        raise PolicyError(issues)
    spec = _validate_merged(merged, issues)
    if spec is None or issues:
        raise PolicyError(issues)
    _cross_check(spec, merged, issues)
    if any(i.severity == "error" for i in issues):
        raise PolicyError(issues)
    return Policy.compile(spec, tuple(names), digest.digest())


# --- merge ---------------------------------------------------------------------------------------

# spec sections whose entries are merged by name across files (a name defined twice is an error)
_NAMED_SECTIONS = ("gpuModels", "deviceClasses", "deviceTaints", "pools", "classes", "rules", "priorityClasses")
_SECTION_NOUN = {
    "gpuModels": "GPU model", "deviceClasses": "device class", "pools": "pool", "classes": "class", "rules": "rule",
    "priorityClasses": "priority class", "deviceTaints": "device taint",
}  # fmt: skip


def _merge(documents: list[tuple[_Source, PolicyDocument]], issues: list[PolicyIssue]) -> _Merge:
    merge = _Merge()
    spec: dict[str, Any] = {
        "gpuModels": {}, "deviceClasses": {}, "deviceTaints": {}, "pools": {}, "classes": {}, "namespaces": [],
        "rules": {}, "priorityClasses": {},
    }  # fmt: skip
    for source, doc in documents:
        raw_spec = source.doc.data.get("spec") or {}
        if "settings" in raw_spec:
            if merge.settings_source is not None:
                pos = source.doc.position(("spec", "settings"))
                first = merge.settings_source
                issues.append(
                    PolicyIssue(
                        source.file,
                        pos.line,
                        pos.column,
                        "spec.settings",
                        f"settings are already set in {first.file}:{first.doc.position(('spec', 'settings')).line}",
                        "keep settings in one file",
                    )
                )
            else:
                merge.settings_source = source
                spec["settings"] = raw_spec["settings"]
        for section in _NAMED_SECTIONS:
            for name, value in (raw_spec.get(section) or {}).items():
                key = (section, name)
                if key in merge.origin:
                    pos = source.doc.position(("spec", section, name))
                    first = merge.origin[key]
                    issues.append(
                        PolicyIssue(
                            source.file,
                            pos.line,
                            pos.column,
                            f"spec.{section}.{name}",
                            f"{_SECTION_NOUN[section]} {name!r} is already defined "
                            f"in {first.file}:{first.doc.position(('spec', section, name)).line}",
                            "names must be unique across all policy files",
                        )
                    )
                    continue
                merge.origin[key] = source
                spec[section][name] = value
        for index, value in enumerate(raw_spec.get("namespaces") or []):
            merge.namespaces.append((source, index))
            spec["namespaces"].append(value)
        for index, value in enumerate(raw_spec.get("workloadKinds") or []):
            merge.workload_kinds.append((source, index))
            spec.setdefault("workloadKinds", []).append(value)
        for index, value in enumerate(raw_spec.get("exceptions") or []):
            merge.exceptions.append((source, index))
            spec.setdefault("exceptions", []).append(value)
        del doc  # validated per document already; the merged dict is validated again as a whole
    merge.spec = spec
    return merge


def _validate_merged(merge: _Merge, issues: list[PolicyIssue]) -> PolicySpec | None:
    try:
        return PolicySpec.model_validate(merge.spec)
    except ValidationError as exc:  # only reachable through merge-level interactions
        for err in exc.errors():
            source, path = _merged_origin(merge, tuple(err["loc"]))
            pos = source.doc.position(path) if source else Position(0, 0)
            issues.append(
                PolicyIssue(source.file if source else "", pos.line, pos.column, _dotted(path), err["msg"])
            )
        return None


def _merged_origin(merge: _Merge, loc: tuple[Any, ...]) -> tuple[_Source | None, tuple[Any, ...]]:
    if loc and loc[0] in _NAMED_SECTIONS and len(loc) > 1:
        source = merge.origin.get((loc[0], loc[1]))
        return source, ("spec", *loc)
    if loc and loc[0] == "namespaces" and len(loc) > 1 and isinstance(loc[1], int):
        source, index = merge.namespaces[loc[1]]
        return source, ("spec", "namespaces", index, *loc[2:])
    if loc and loc[0] == "workloadKinds" and len(loc) > 1 and isinstance(loc[1], int):
        source, index = merge.workload_kinds[loc[1]]
        return source, ("spec", "workloadKinds", index, *loc[2:])
    if loc and loc[0] == "exceptions" and len(loc) > 1 and isinstance(loc[1], int):
        source, index = merge.exceptions[loc[1]]
        return source, ("spec", "exceptions", index, *loc[2:])
    if loc and loc[0] == "settings":
        return merge.settings_source, ("spec", *loc)
    return None, ("spec", *loc)


def _issue_at(
    merge: _Merge, loc: tuple[Any, ...], message: str, hint: str = "", severity: str = "error"
) -> PolicyIssue:
    source, path = _merged_origin(merge, loc)
    pos = source.doc.position(path) if source else Position(0, 0)
    return PolicyIssue(
        source.file if source else "", pos.line, pos.column, _dotted(path), message, hint, severity
    )


# --- cross references ------------------------------------------------------------------------------


def _cross_check(spec: PolicySpec, merge: _Merge, issues: list[PolicyIssue]) -> None:
    from webhook.policy.rule_catalog import catalog

    RULES = catalog()
    from webhook.policy.catalog import BUILTIN_GPU_MODELS

    models = set(BUILTIN_GPU_MODELS) | set(spec.gpu_models)
    catalog = {
        **{k: [p[0] for p in v["mig"]] for k, v in BUILTIN_GPU_MODELS.items()},  # type: ignore[index, union-attr]
        **{k: [p.name for p in m.mig] for k, m in spec.gpu_models.items()},
    }
    maxima = {
        **{k: {p[0]: p[1] for p in v["mig"]} for k, v in BUILTIN_GPU_MODELS.items()},  # type: ignore[index, union-attr]
        **{k: {p.name: p.max for p in m.mig} for k, m in spec.gpu_models.items()},
    }
    layouts: dict[str, dict[str, Any]] = {
        **{k: dict(v.get("layouts") or {}) for k, v in BUILTIN_GPU_MODELS.items()},  # type: ignore[union-attr]
        **{k: dict(m.layouts) for k, m in spec.gpu_models.items()},
    }

    def near(word: str, options: Iterable[str]) -> str:
        match = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
        return f"did you mean {match[0]!r}?" if match else f"known: {', '.join(sorted(options))}"

    seen_kinds: dict[tuple[str, str], int] = {}
    for index, declared in enumerate(spec.workload_kinds):
        key = (declared.api_version, declared.kind)
        if key in seen_kinds:
            first = _issue_at(merge, ("workloadKinds", seen_kinds[key]), "")
            issues.append(
                _issue_at(
                    merge,
                    ("workloadKinds", index, "kind"),
                    f"workload kind {declared.api_version} {declared.kind} is declared twice "
                    f"(first at {first.file}:{first.line})",
                    "keep one entry per apiVersion and kind",
                )
            )
        else:
            seen_kinds[key] = index

    for name, pool in spec.pools.items():
        if pool.gpu_model not in models:
            issues.append(
                _issue_at(
                    merge,
                    ("pools", name, "gpuModel"),
                    f"unknown GPU model {pool.gpu_model!r}",
                    near(pool.gpu_model, models),
                )
            )
            continue
        offered = catalog[pool.gpu_model]
        if pool.mig is not None:
            if not offered:
                issues.append(
                    _issue_at(
                        merge,
                        ("pools", name, "mig"),
                        f"{pool.gpu_model} has no MIG profiles",
                        "remove the mig section or pick a MIG-capable model",
                    )
                )
            written = pool.mig.profiles or ()
            for i, profile in enumerate(written):
                where: tuple[Any, ...] = ("pools", name, "mig", "profiles", profile if isinstance(written, dict) else i)
                if profile not in offered:
                    issues.append(
                        _issue_at(
                            merge,
                            where,
                            f"{pool.gpu_model} has no MIG profile {profile!r}",
                            f"valid: {', '.join(offered)}",
                        )
                    )
                elif isinstance(written, dict) and written[profile] > maxima[pool.gpu_model][profile]:
                    issues.append(
                        _issue_at(
                            merge,
                            where,
                            f"{written[profile]} x {profile} per GPU: a {pool.gpu_model} holds at most "
                            f"{maxima[pool.gpu_model][profile]}",
                            f"lower it to {maxima[pool.gpu_model][profile]}",
                        )
                    )
            known = layouts.get(pool.gpu_model, {})
            if pool.mig.layout is not None and pool.mig.layout not in known:
                issues.append(
                    _issue_at(
                        merge,
                        ("pools", name, "mig", "layout"),
                        f"{pool.gpu_model} has no mig-parted layout {pool.mig.layout!r}",
                        (f"{near(pool.mig.layout, known)}" if known else "the model lists no layouts")
                        + "; or write the profiles with their counts (mig.profiles: {1g.5gb: 2, ...})",
                    )
                )
        if pool.adopt_as is not None and pool.adopt_as not in spec.classes:
            issues.append(
                _issue_at(
                    merge,
                    ("pools", name, "adoptAs"),
                    f"unknown class {pool.adopt_as!r}",
                    near(pool.adopt_as, spec.classes),
                )
            )
    for name, cls in spec.classes.items():
        for i, pool_name in enumerate(cls.pools):
            if pool_name not in spec.pools:
                issues.append(
                    _issue_at(
                        merge,
                        ("classes", name, "pools", i),
                        f"unknown pool {pool_name!r}",
                        near(pool_name, spec.pools),
                    )
                )
                continue
            pool = spec.pools[pool_name]
            if not set(cls.isolation.permitted) & set(pool.isolation):
                issues.append(
                    _issue_at(
                        merge,
                        ("classes", name, "pools", i),
                        f"pool {pool_name!r} serves {_names(pool.isolation)} but class {name!r} allows only "
                        f"{_names(cls.isolation.permitted)}",
                        "add a matching isolation to the pool or the class",
                    )
                )
    for index, ent in enumerate(spec.namespaces):
        for i, cname in enumerate(ent.classes):
            if cname not in spec.classes:
                issues.append(
                    _issue_at(
                        merge,
                        ("namespaces", index, "classes", i),
                        f"unknown class {cname!r}",
                        near(cname, spec.classes),
                    )
                )
        for cname, iso in ent.default_isolation.items():
            cls_of = spec.classes.get(cname)
            if cls_of is None or cname not in ent.classes:
                issues.append(
                    _issue_at(
                        merge,
                        ("namespaces", index, "defaultIsolation", cname),
                        f"unknown class {cname!r}"
                        if cls_of is None
                        else f"class {cname!r} is not granted by this rule",
                        near(cname, spec.classes) if cls_of is None else f"add {cname!r} to the rule's classes",
                    )
                )
            elif iso not in cls_of.isolation.permitted:
                issues.append(
                    _issue_at(
                        merge,
                        ("namespaces", index, "defaultIsolation", cname),
                        f"class {cname!r} allows isolation {_names(cls_of.isolation.permitted)}, not {iso.value!r}",
                        f"pick one of {_names(cls_of.isolation.permitted)}, or allow {iso.value!r} in the class",
                    )
                )
        for i, pname in enumerate(ent.pools or ()):
            if pname not in spec.pools:
                issues.append(
                    _issue_at(
                        merge,
                        ("namespaces", index, "pools", i),
                        f"unknown pool {pname!r}",
                        near(pname, spec.pools),
                    )
                )
    _check_exceptions(spec, merge, issues, near)
    for path, message, hint in _dra_problems(spec, models):
        issues.append(_issue_at(merge, path, message, hint))
    for rule_id, settings in spec.rules.items():
        if rule_id == ENGINE_ERROR:
            issues.append(
                _issue_at(
                    merge,
                    ("rules", rule_id),
                    "engine-error cannot be configured: /validate denies every object the engine failed to "
                    "judge (settings.failure decides only what /mutate does)",
                    "remove rules.engine-error from the policy",
                )
            )
            continue
        if rule_id not in RULES:
            issues.append(
                _issue_at(merge, ("rules", rule_id), f"unknown rule id {rule_id!r}", near(rule_id, RULES))
            )
            continue
        for cname in settings.classes:
            if cname not in spec.classes:
                issues.append(
                    _issue_at(
                        merge,
                        ("rules", rule_id, "classes", cname),
                        f"unknown class {cname!r}",
                        near(cname, spec.classes),
                    )
                )


def _check_exceptions(
    spec: PolicySpec, merge: _Merge, issues: list[PolicyIssue], near: Callable[[str, Iterable[str]], str]
) -> None:
    """Exceptions that name no rule, an unknown rule, a rule that cannot be excepted, or nobody; and names
    given twice (a grant and an audit entry name the exception, so the name must say which one)."""
    from webhook.policy.rule_catalog import catalog

    RULES = catalog()

    seen: dict[str, int] = {}
    for index, exc in enumerate(spec.exceptions):
        if exc.name in seen:
            first = _issue_at(merge, ("exceptions", seen[exc.name]), "")
            issues.append(
                _issue_at(
                    merge,
                    ("exceptions", index, "name"),
                    f"exception {exc.name!r} is already defined in {first.file}:{first.line}",
                    "names must be unique across all policy files",
                )
            )
        else:
            seen[exc.name] = index
        if not exc.rules:
            issues.append(
                _issue_at(
                    merge, ("exceptions", index), f"exception {exc.name!r} names no rule", "list rule ids under rules:"
                )
            )
        for i, rule_id in enumerate(exc.rules):
            if rule_id in NOT_EXCEPTABLE:
                issues.append(
                    _issue_at(merge, ("exceptions", index, "rules", i), NOT_EXCEPTABLE[rule_id], "remove it from rules")
                )
            elif rule_id not in RULES:
                issues.append(
                    _issue_at(
                        merge, ("exceptions", index, "rules", i), f"unknown rule id {rule_id!r}", near(rule_id, RULES)
                    )
                )
        if not exc.subjects:
            issues.append(
                _issue_at(
                    merge,
                    ("exceptions", index),
                    f"exception {exc.name!r} names no subject: it would apply to nobody, or be read as everybody",
                    "add subjects: [{kind: User|Group|ServiceAccount, name: ..., namespace: ...}]",
                )
            )


NOT_EXCEPTABLE: dict[str, str] = {
    ENGINE_ERROR: "engine-error cannot be excepted: /validate never admits an object the engine did not judge",
    "placement-missing": "placement-missing cannot be excepted: it catches the webhook's own mutation failing "
    "open (or being undone), which no subject chooses; exempt namespaces with rules.placement-missing.exempt",
    "malformed-object": "malformed-object cannot be excepted: an object the engine cannot read was not judged, "
    "so nothing says which finding the exception would cover",
}
"""Rules no exception may name, and why (docs/policy.md "Exceptions" lists them)."""


def _dra_problems(spec: PolicySpec, models: set[str]) -> list[tuple[tuple[Any, ...], str, str]]:
    """DRA blocks that name unknown or unfit DeviceClasses, or templates two pools name differently."""
    if not any(p.dra is not None for p in spec.pools.values()):
        return []
    from webhook.policy.dra import build

    compiled = Policy.compile(
        spec.model_copy(update={"pools": {n: p for n, p in spec.pools.items() if p.gpu_model in models}})
    )
    cards = {
        n: (p.gpu.memory, tuple((pr.name, pr.memory) for pr in p.profiles if pr.plain))
        for n, p in compiled.pools.items()
    }
    return build(spec, cards)[1]


def _names(items: Iterable[Isolation]) -> str:
    return "/".join(i.value for i in items)


# --- pydantic errors -> file:line:column with hints -------------------------------------------------


def _validation_issues(source: _Source, exc: ValidationError) -> list[PolicyIssue]:
    out: list[PolicyIssue] = []
    for err in field_errors(PolicyDocument, exc):
        pos = source.doc.position(err.loc)
        out.append(PolicyIssue(source.file, pos.line, pos.column, _dotted(err.loc), err.message, err.hint))
    return out
