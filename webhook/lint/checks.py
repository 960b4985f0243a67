"""``gpu-admission policy lint``: the loader's errors plus warnings about policies that load but mislead.

The loader already rejects everything that makes a policy unusable (syntax, unknown fields, types,
cross references) at ``file:line:column``; lint reuses it unchanged. What it adds are *warnings*:
policies that load fine and still do something the platform team almost certainly did not mean —
a class no namespace can reach, a namespace rule that can never match because an earlier one always
wins, a pool nobody uses, an isolation a class allows but no pool serves, a sharing stack whose
scheduler the class overrides. Each warning is computed on the loaded policy and pointed back at the
line that causes it, with a hint that says what to change.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import Any

from webhook import yamlpos
from webhook.lint.memory import CODES as MEMORY_CODES
from webhook.lint.memory import warnings as memory_warnings
from webhook.policy import sizes
from webhook.policy.compiled import Policy
from webhook.policy.dra import memory_quantity
from webhook.policy.loader import PolicyError, PolicyIssue, load_policy_texts, policy_files
from webhook.policy.model import (
    API_VERSION,
    KIND,
    TOPOLOGY_ORDER,
    GangBackend,
    Isolation,
    LabelSelector,
    Settings,
)
from webhook.policy.stacks import stack
from webhook.quantity import parse_quantity
from webhook.validation_errors import dotted as _dotted

# Every warning lint can give: code -> what it means (docs/policy.md lists them; a test keeps both in step).
WARNING_CODES: dict[str, str] = {
    "unreachable-class": "no namespace rule that can match grants the class: every request for it is denied",
    "shadowed-namespace-rule": "an earlier spec.namespaces rule matches every namespace this one matches (first wins)",
    "entitlement-without-pool": "a namespace rule grants a class but its `pools` exclude every pool of the class",
    "entitlement-default-unserved": "a namespace rule's `pools` leave a class no pool that serves the isolation "
    "its pods get by default: every pod of the class there that names no isolation is denied",
    "unused-pool": "no class lists the pool: nothing can be placed on it",
    "isolation-unserved": "a class's default or allowed isolation is served by none of its pools",
    "sharing-scheduler": "the class sends pods to a scheduler the pool's sharing stack does not work with "
    "(volcano-vgpu needs volcano, HAMi hami-scheduler, cGPU/qGPU kube-scheduler)",
    "mig-product-missing": "a single-strategy MIG pool whose GPU model has no `product` to select nodes by",
    "adopt-outside-class": "`adoptAs` names a class that does not list the pool: adopted pods are always denied",
    "gang-without-backend": "`gang.required` with backend none: every multi-pod workload of the class is denied",
    "kueue-queue-missing": "kueue gang backend but no Kueue queue on the class or its namespace rules",
    "rdma-unserved": "`rdma: true` on a class none of whose pools has RDMA",
    "topology-unmapped": "the class's topology level has no node label in one of its pools",
    "max-gpus-unschedulable": "`maxGPUs` above the GPUs per node of every pool of the class",
    "default-memory-too-large": "`defaultGPUMemory` above `maxGPUMemory` or above every device of the pools",
    "shadowed-rule-override": "a rule's namespace override can never apply (an exemption or earlier override wins)",
    "render-needed": "the manifests beside the policy (manifests/base, manifests/in-tree) are not what it renders, "
    "or, with no rendered manifest beside it, a setting the webhook configurations are rendered from (or an "
    "exception) differs from the shipped manifests: re-run `gpu-admission policy render` (`--in-tree`) and apply it",
    "priority-class-undefined": "a class names a priorityClassName that `spec.priorityClasses` does not define: "
    "unless it exists in the cluster, the API server rejects the class's pods",
    "builtin-kind-overridden": "a `workloadKinds` entry replaces a built-in kind's description",
    "kind-path-unmatched": "a `workloadKinds` template path matches nothing in the entry's `sample`",
    "device-taint-unknown": "`allowedDeviceTaints` names a device taint that is neither built in nor in "
    "`spec.deviceTaints`: likely a typo, and the key it meant stays denied",
    "exception-expired": "an exception's `expires` date has passed: it no longer applies; remove it or renew it",
    "exception-expiring": "an exception expires within a week: what it allows will be denied again from that day",
    "exception-every-namespace": "an exception's `namespaces` selector is `{}`: it applies in every namespace",
    "exception-subject-exposed": "a ServiceAccount subject lives in a namespace the exception applies in: whoever "
    "can create pods there can run one as it and use its token",
    "device-class-unrendered": "with `--context`: a cluster DeviceClass maps an extended resource "
    "(`extendedResourceName`) that neither the GPU prefixes nor `spec.deviceClasses` name: a render of the "
    "policy alone does not send pods asking for it to the webhooks",
    "system-critical-allowed": "a class or namespace rule allows `system-node-critical`/`system-cluster-critical`: "
    "scheduling-not-allowed denies them on every GPU pod whatever the list says",
    "mutation-off-enforced": "`settings.mutation: off` under `enforcement: enforce`: nothing places a class pod, "
    "so every one a user does not place by hand is denied (placement-missing)",
    **MEMORY_CODES,
}


@dataclass(frozen=True, slots=True)
class LintFinding:
    """One line of lint output: an error from the loader or a warning computed here (with its code)."""

    issue: PolicyIssue
    code: str = ""

    @property
    def severity(self) -> str:
        return self.issue.severity

    def render(self) -> str:
        """``file:line:col: warning: path: [code] message (hint: …)`` — the loader's shape plus the code."""
        i = self.issue
        where = f"{i.file}:{i.line}:{i.column}"
        field_path = f" {i.path}:" if i.path else ""
        code = f" [{self.code}]" if self.code else ""
        hint = f" (hint: {i.hint})" if i.hint else ""
        return f"{where}: {i.severity}:{field_path}{code} {i.message}{hint}"

    def as_dict(self) -> dict[str, Any]:
        i = self.issue
        return {
            "file": i.file,
            "line": i.line,
            "column": i.column,
            "severity": i.severity,
            "code": self.code or None,
            "path": i.path,
            "message": i.message,
            "hint": i.hint,
        }


@dataclass(slots=True)
class LintReport:
    path: str
    files: list[str] = field(default_factory=list)
    findings: list[LintFinding] = field(default_factory=list)
    unreadable: bool = False  # the directory or a file could not be read at all (exit 2)

    @property
    def errors(self) -> int:
        return sum(1 for f in self.findings if f.severity == "error")

    @property
    def warnings(self) -> int:
        return sum(1 for f in self.findings if f.severity == "warning")

    def exit_code(self, strict: bool = False) -> int:
        if self.unreadable:
            return 2
        if self.errors or (strict and self.warnings):
            return 1
        return 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "files": self.files,
            "errors": self.errors,
            "warnings": self.warnings,
            "issues": [f.as_dict() for f in self.findings],
        }


def lint_path(path: str | Path, nodes: Sequence[Mapping[str, Any]] = (), today: date | None = None) -> LintReport:
    """Read, load and lint a policy directory (or a single file); ``nodes`` from ``--context``, ``today``
    dates the exception checks."""
    report = LintReport(str(path))
    try:
        files = policy_files(path)
    except PolicyError as exc:
        report.unreadable = True
        usage = "usage: gpu-admission policy lint DIR (default: policies)"
        report.findings.extend(LintFinding(replace(i, hint=usage) if "--policy" in i.hint else i) for i in exc.issues)
        return report
    texts: list[tuple[str, str]] = []
    for file in files:
        report.files.append(str(file))
        try:
            texts.append((str(file), file.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError) as exc:
            report.unreadable = True
            report.findings.append(LintFinding(PolicyIssue(str(file), 0, 0, "", f"cannot read: {exc}")))
    if report.unreadable:
        return report
    base = _beside(Path(path), BASE_MANIFEST)
    report.findings.extend(lint_texts(texts, nodes, today, shipped=base is None))
    if base is not None:
        report.findings.extend(_base_stale(Path(path), base, texts))
    report.findings.extend(_in_tree_stale(Path(path), texts))
    return report


IN_TREE_MANIFEST = Path("manifests") / "in-tree" / "rendered.yaml"
BASE_MANIFEST = Path("manifests") / "base" / "rendered.yaml"


def _beside(path: Path, manifest: Path) -> Path | None:
    """``manifest`` beside the policy directory (``policies/`` next to ``manifests/``, the shipped layout)."""
    root = path.parent if path.is_dir() else path.parent.parent
    found = root / manifest
    return found if found.is_file() else None


def _base_stale(path: Path, manifest: Path, texts: Sequence[tuple[str, str]]) -> list[LintFinding]:
    """``render-needed`` for the manifest the cluster is installed from: beside the policy directory,
    ``manifests/base/rendered.yaml`` is what ``policy render`` printed, and is compared with what it prints
    now (exceptions header, webhook rules, failure policies, label guard and ConfigMap included). With it
    there, this one comparison replaces the comparisons with the shipped manifests: a policy with
    exceptions, another prefix or platform group is fine once rendered, and only until it changes."""
    from webhook.render.output import documented_render

    try:
        policy = load_policy_texts(texts)
        current = manifest.read_text(encoding="utf-8")
    except (PolicyError, OSError, UnicodeDecodeError):
        return []
    files = tuple((Path(name).name, text) for name, text in texts)
    from webhook.render.intree.runtimecost import TooLarge

    try:
        if documented_render(policy, files) == current:
            return []
    except TooLarge as exc:  # the render refuses: say why, not only that the manifest is stale
        refused = PolicyIssue(
            str(manifest), 1, 1, "", f"{BASE_MANIFEST} cannot be rendered from this policy: it is {exc}",
            "shrink the policy until `gpu-admission policy render` succeeds", "warning",
        )
        return [LintFinding(refused, "render-needed")]
    issue = PolicyIssue(
        str(manifest), 1, 1, "",
        f"{BASE_MANIFEST} is not what the policy renders: the cluster installed from it runs the old policy "
        "ConfigMap, webhook rules and failure policies (a new exception's grants, prefix or platform group "
        "are not intercepted or guarded)",
        f"re-run `gpu-admission policy render {path} > {manifest}` and apply it",
        "warning",
    )
    return [LintFinding(issue, "render-needed")]


def _in_tree_stale(path: Path, texts: Sequence[tuple[str, str]]) -> list[LintFinding]:
    """``render-needed`` for the in-tree policies: beside the policy directory (``policies/`` next to
    ``manifests/``, the shipped layout) the rendered in-tree manifest is what the cluster enforces while
    the webhook is down; a policy whose in-tree render differs from it needs a re-render, or the apiserver
    keeps enforcing the old pools, classes and entitlements."""
    root = path.parent if path.is_dir() else path.parent.parent
    manifest = root / IN_TREE_MANIFEST
    if not manifest.is_file():
        return []
    from webhook.render import RenderOptions, intree
    from webhook.render.core import in_tree_choice
    from webhook.render.intree.runtimecost import TooLarge
    from webhook.render.output import rendered_yaml

    try:
        policy = load_policy_texts(texts)
        current = manifest.read_text(encoding="utf-8")
    except (PolicyError, OSError, UnicodeDecodeError):
        return []
    # a policy whose settings.inTree says what the cluster serves (kubeVersion, mutating) is held to it; one
    # that does not is compared with a render like the manifest (with MutatingAdmissionPolicies or without)
    choice = in_tree_choice(policy)
    recorded = policy.settings.in_tree.model_fields_set & {"kube_version", "mutating"}
    mutated = "kind: MutatingAdmissionPolicy\n" in current
    version, mutating = (choice.kube_version, choice.mutating) if recorded else ((1, 36) if mutated else (1, 30), True)
    try:
        options = RenderOptions(kube_version=version, mutating=mutating, availability=choice.availability)
        fresh = rendered_yaml(policy, intree.render(policy, options))
    except TooLarge as exc:  # the render refuses: say why, not only that the manifest is stale
        issue = PolicyIssue(
            str(manifest), 1, 1, "",
            f"{IN_TREE_MANIFEST} cannot be rendered from this policy: the in-tree policies are {exc}",
            "shrink the policy until `gpu-admission policy render --in-tree` succeeds, or remove "
            f"{IN_TREE_MANIFEST} and rely on the webhook alone",
            "warning",
        )
        return [LintFinding(issue, "render-needed")]
    if fresh == current:
        return []
    flag = " --kube-version 1.36" if not recorded and version >= (1, 36) else ""
    issue = PolicyIssue(
        str(manifest), 1, 1, "",
        f"{IN_TREE_MANIFEST} is not what the policy renders: while the webhook is down the apiserver would "
        "enforce the old pools, classes and entitlements",
        f"re-run `gpu-admission policy render --in-tree{flag} {path} > {manifest}` and apply it",
        "warning",
    )
    return [LintFinding(issue, "render-needed")]


def lint_texts(
    texts: Sequence[tuple[str, str]],
    nodes: Sequence[Mapping[str, Any]] = (),
    today: date | None = None,
    *,
    shipped: bool = True,
) -> list[LintFinding]:
    """Loader errors if the policy does not load; otherwise the warnings on the loaded policy. Without
    ``today`` the exceptions' dates are not judged (the CLI passes the UTC date). ``shipped``: the cluster
    is taken to run the shipped manifests (no rendered manifest beside the policy), so the settings they
    are rendered from are compared with the shipped defaults."""
    try:
        policy = load_policy_texts(texts)
    except PolicyError as exc:
        return [LintFinding(i) for i in exc.issues]
    locator = Locator(texts)
    found = policy_warnings(policy, nodes, today, shipped=shipped)
    findings = [LintFinding(w.at(locator), w.code) for w in found]
    return sorted(findings, key=lambda f: (f.issue.file, f.issue.line, f.issue.column, f.code))


# --- positions -------------------------------------------------------------------------------------


class Locator:
    """Maps a merged-spec path (``("classes", "dev", "pools", 0)``) back to file:line:column.

    The loader merges all files into one spec; warnings are computed on that merge, so each named
    entry is looked up in the file that defined it, and ``namespaces[i]`` in the file and index that
    contributed the i-th rule (files in load order, like the loader).
    """

    def __init__(self, texts: Sequence[tuple[str, str]]):
        self._named: dict[tuple[str, str], tuple[str, yamlpos.Document]] = {}
        self._namespaces: list[tuple[str, yamlpos.Document, int]] = []
        self._exceptions: list[tuple[str, yamlpos.Document, int]] = []
        self._settings: tuple[str, yamlpos.Document] | None = None
        self._first: tuple[str, yamlpos.Document] | None = None
        for file, text in texts:
            for doc in yamlpos.iter_documents(text, with_nodes=True):
                if not isinstance(doc, yamlpos.Document) or not isinstance(doc.data, dict):
                    continue
                if doc.data.get("kind") != KIND or doc.data.get("apiVersion") != API_VERSION:
                    continue
                self._first = self._first or (file, doc)
                spec = doc.data.get("spec") or {}
                if "settings" in spec and self._settings is None:
                    self._settings = (file, doc)
                for section in ("gpuModels", "pools", "classes", "rules", "priorityClasses"):
                    for name in spec.get(section) or {}:
                        self._named.setdefault((section, str(name)), (file, doc))
                for index, _ in enumerate(spec.get("namespaces") or []):
                    self._namespaces.append((file, doc, index))
                for index, _ in enumerate(spec.get("exceptions") or []):
                    self._exceptions.append((file, doc, index))

    def locate(self, loc: Sequence[str | int]) -> tuple[str, yamlpos.Position, str]:
        """(file, position, dotted path as written in that file)."""
        source: tuple[str, yamlpos.Document] | None = None
        path: tuple[str | int, ...] = ("spec", *loc)
        if len(loc) > 1 and loc[0] in ("gpuModels", "pools", "classes", "rules", "priorityClasses"):
            source = self._named.get((str(loc[0]), str(loc[1])))
        elif len(loc) > 1 and loc[0] == "namespaces" and isinstance(loc[1], int):
            if loc[1] < len(self._namespaces):
                file, doc, index = self._namespaces[loc[1]]
                source, path = (file, doc), ("spec", "namespaces", index, *loc[2:])
        elif len(loc) > 1 and loc[0] == "exceptions" and isinstance(loc[1], int):
            if loc[1] < len(self._exceptions):
                file, doc, index = self._exceptions[loc[1]]
                source, path = (file, doc), ("spec", "exceptions", index, *loc[2:])
        elif loc and loc[0] == "settings":
            source = self._settings
        source = source or self._first
        if source is None:
            return "", yamlpos.Position(0, 0), _dotted(path)
        file, doc = source
        return file, doc.position(path), _dotted(path)


# --- warnings ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Warning_:
    code: str
    loc: tuple[str | int, ...]  # path in the merged spec, without the leading "spec"
    message: str
    hint: str

    def __post_init__(self) -> None:
        assert self.code in WARNING_CODES, f"undocumented lint warning code {self.code!r}"

    def at(self, locator: Locator) -> PolicyIssue:
        file, pos, path = locator.locate(self.loc)
        return PolicyIssue(file, pos.line, pos.column, path, self.message, self.hint, "warning")


def policy_warnings(
    policy: Policy, nodes: Sequence[Mapping[str, Any]] = (), today: date | None = None, *, shipped: bool = True
) -> list[Warning_]:
    """Every check, in a stable order; each is a generator so adding one is one function. ``nodes``
    (``policy lint --cluster-objects``) lets the pools be compared with what their nodes advertise; ``today``
    dates the exceptions; ``shipped`` compares the render settings with the shipped manifests (False: a
    rendered manifest beside the policy is compared instead, ``_base_stale``)."""
    checks = (
        _unreachable_classes,
        _shadowed_namespace_rules,
        _entitlement_pools,
        _entitlement_default_unserved,
        _unused_pools,
        _isolation_unserved,
        _sharing_schedulers,
        _mig_single_without_product,
        _adopt_as_outside_class,
        _gang_without_backend,
        _kueue_without_queue,
        _rdma_unserved,
        _topology_unmapped,
        _max_gpus_unschedulable,
        _default_memory_unservable,
        _shadowed_rule_overrides,
        _render_needed,
        _priority_class_undefined,
        _system_critical_allowed,
        _workload_kinds,
        _device_taint_unknown,
        _mutation_off_enforced,
    )
    out: list[Warning_] = []
    for check in checks:
        if check is _render_needed and not shipped:
            continue
        out.extend(check(policy))
    out.extend(Warning_(code, loc, message, hint) for code, loc, message, hint in memory_warnings(policy, nodes))
    out.extend(_exceptions(policy, today))
    return out


EXPIRY_WARNING_DAYS = 7


def _exceptions(policy: Policy, today: date | None) -> Iterator[Warning_]:
    """Exceptions that stopped applying, stop within a week, or apply in every namespace."""
    for index, exc in enumerate(policy.spec.exceptions):
        if exc.namespaces == LabelSelector():
            yield Warning_(
                "exception-every-namespace",
                ("exceptions", index, "namespaces"),
                f"exception {exc.name!r} applies in every namespace ({{}}): its subjects may break "
                f"{', '.join(exc.rules)} anywhere they can create objects",
                "select the namespaces it is for, e.g. matchLabels: {kubernetes.io/metadata.name: NS}",
            )
        for s_index, subject in enumerate(exc.subjects):
            if subject.namespace and exc.namespaces.matches({"kubernetes.io/metadata.name": subject.namespace}):
                yield Warning_(
                    "exception-subject-exposed",
                    ("exceptions", index, "subjects", s_index),
                    f"exception {exc.name!r} names ServiceAccount {subject.namespace}/{subject.name}, and its "
                    f"namespace is one the exception applies in: anyone who may create pods in "
                    f"{subject.namespace} can run a pod as that service account and send requests with its token",
                    "keep the pipeline's service account in a namespace only the platform can create pods in",
                )
        if today is None:
            continue
        left = (exc.expires - today).days
        if left <= 0:
            yield Warning_(
                "exception-expired",
                ("exceptions", index, "expires"),
                f"exception {exc.name!r} expired on {exc.expires.isoformat()} and no longer applies",
                "remove it, or set a new expires date if it is still needed (and say why in reason)",
            )
        elif left <= EXPIRY_WARNING_DAYS:
            yield Warning_(
                "exception-expiring",
                ("exceptions", index, "expires"),
                f"exception {exc.name!r} expires on {exc.expires.isoformat()} (in {left} day{'s' * (left != 1)}): "
                f"from that day {', '.join(exc.rules)} applies to {exc.owner}'s workloads again",
                "fix the workloads it covers, or renew it with a new expires date",
            )


def _render_needed(policy: Policy) -> Iterator[Warning_]:
    """Settings the webhook configurations' rules and matchConditions are rendered from: the shipped
    manifests carry the defaults, so a cluster installed from them stops intercepting on a change."""
    settings, shipped = policy.settings, Settings()
    changed = [
        (field, value)
        for field, value, default in (
            ("prefix", settings.prefix, shipped.prefix),
            ("gpuResourcePrefixes", settings.gpu_resource_prefixes, shipped.gpu_resource_prefixes),
        )
        if value != default
    ]
    for field_name, value in changed:
        shown = value if isinstance(value, str) else ", ".join(value)
        yield Warning_(
            "render-needed",
            ("settings", field_name),
            f"settings.{field_name} ({shown}) is not the default the shipped webhook configurations "
            "match on: without a re-render, objects using it never reach the webhook",
            "re-run `gpu-admission policy render` and apply its output",
        )
    if policy.spec.exceptions:
        yield Warning_(
            "render-needed",
            ("exceptions", 0, "name"),  # the file that holds them (spec.exceptions merges several)
            "the policy has exceptions: the webhook writes their grants at /mutate of Deployments, Jobs and the "
            "other controller kinds, which the shipped webhook configurations do not send there; without a "
            "re-render the subjects' controller objects are denied (their pod templates lack the grant)",
            "re-run `gpu-admission policy render` and apply its output; serve with --grant-key",
        )
    if settings.in_tree.availability != shipped.in_tree.availability:
        yield Warning_(
            "render-needed",
            ("settings", "inTree", "availability"),
            f"settings.inTree.availability ({settings.in_tree.availability}) is not the mode the shipped webhook "
            "configurations run in (webhook: the validating webhook fails closed): without a re-render the "
            "cluster keeps the shipped failure policies",
            "re-run `gpu-admission policy render` and apply its output (with the in-tree policies installed)",
        )
    if settings.enforcement != shipped.enforcement:
        yield Warning_(
            "render-needed",
            ("settings", "enforcement"),
            f"settings.enforcement ({settings.enforcement}) is not the mode the shipped configurations are "
            "rendered for (enforce): without a re-render the validating webhook still fails closed and the "
            "in-tree policies' deny binding still denies",
            "re-run `gpu-admission policy render` (and `--in-tree`) and apply its output",
        )
    if settings.mutation != shipped.mutation:
        yield Warning_(
            "render-needed",
            ("settings", "mutation"),
            "settings.mutation is off: without a re-render the mutating webhook is still called (it answers with "
            "no patch) and the in-tree MutatingAdmissionPolicies still place pods",
            "re-run `gpu-admission policy render` (and `--in-tree`) and apply its output",
        )
    if settings.platform_group != shipped.platform_group:
        yield Warning_(
            "render-needed",
            ("settings", "platformGroup"),
            f"settings.platformGroup ({settings.platform_group}) is not the group the shipped "
            "ValidatingAdmissionPolicy lets change the namespace labels: without a re-render, members of "
            f"{settings.platform_group} are denied and {shipped.platform_group} keeps the right",
            "re-run `gpu-admission policy render` and apply its output",
        )


def _mutation_off_enforced(policy: Policy) -> Iterator[Warning_]:
    """Mutation off is an observe-first setting: under enforce, /validate judges the unplaced pod as stored."""
    if policy.settings.mutation == "off" and policy.settings.enforcement == "enforce" and policy.classes:
        yield Warning_(
            "mutation-off-enforced",
            ("settings", "mutation"),
            "settings.mutation is off and settings.enforcement is enforce: nothing places a class pod, so every "
            "pod of a class that does not carry its pool's nodeSelector, tolerations and resources is denied "
            "(placement-missing)",
            "set mutation: apply before enforcing, or observe first (enforcement: audit or warn)",
        )


def _workload_kinds(policy: Policy) -> Iterator[Warning_]:
    from webhook.policy.kinds import CompiledKind, builtin_table

    builtins = builtin_table()
    for index, spec in enumerate(policy.spec.workload_kinds):
        if (spec.api_version, spec.kind) in builtins:
            yield Warning_(
                "builtin-kind-overridden",
                ("workloadKinds", index, "kind"),
                f"{spec.api_version} {spec.kind} is a built-in kind: this entry replaces its templates, counts "
                "and gang keys",
                "remove the entry to keep the shipped description, or keep it on purpose (a fork of the operator)",
            )
        if spec.sample is None:
            continue
        from webhook.engine.model.workload import templates

        for t_index, tpl in enumerate(spec.templates):
            single = CompiledKind.build(spec.model_copy(update={"templates": (tpl,)}))
            if not templates(spec.sample, single):
                yield Warning_(
                    "kind-path-unmatched",
                    ("workloadKinds", index, "templates", t_index, "path"),
                    f"template path {tpl.path!r} matches nothing in the sample {spec.kind}",
                    "fix the path (wildcards: [*] for list items, * for map values) or the sample",
                )


def _priority_class_undefined(policy: Policy) -> Iterator[Warning_]:
    defined = policy.spec.priority_classes
    for name, cls in policy.classes.items():
        pc = cls.priority_class_name
        if pc and pc not in defined and not pc.startswith("system-"):
            yield Warning_(
                "priority-class-undefined",
                ("classes", name, "priorityClassName"),
                f"class {name!r} sets priorityClassName {pc!r}, which spec.priorityClasses does not define: "
                "pods of the class are rejected unless it exists in the cluster",
                f"add {pc}: {{value: ...}} under spec.priorityClasses so `policy render` creates it",
            )


_SYSTEM_CRITICAL = ("system-node-critical", "system-cluster-critical")


def _system_critical_allowed(policy: Policy) -> Iterator[Warning_]:
    """The cluster-critical classes preempt anything on a node; the rule never lets a GPU pod have them."""
    places: list[tuple[tuple[str | int, ...], str, tuple[str, ...]]] = []
    for name, cls in policy.classes.items():
        if cls.priority_class_name:
            places.append((("classes", name, "priorityClassName"), f"class {name!r}", (cls.priority_class_name,)))
        places.append((("classes", name, "allowedPriorityClasses"), f"class {name!r}", cls.allowed_priority_classes))
    for index, ent in enumerate(policy.namespaces):
        places.append((("namespaces", index, "allowedPriorityClasses"), _ns_label(policy, index),
                       ent.allowed_priority_classes))
    for loc, who, values in places:
        for value in values:
            if value in _SYSTEM_CRITICAL:
                yield Warning_(
                    "system-critical-allowed",
                    loc,
                    f"{who} names {value!r}: scheduling-not-allowed denies it on every GPU pod whatever "
                    "this list says (it outranks and preempts every workload on the node)",
                    "remove it; exempt the namespaces that must run such pods from scheduling-not-allowed "
                    "(rules.scheduling-not-allowed.exempt)",
                )


def _ns_label(policy: Policy, index: int) -> str:
    name = policy.namespaces[index].name
    return f"namespaces[{index}]" + (f" ({name})" if name else "")


def _live_entitlements(policy: Policy) -> list[int]:
    """Indexes of namespace rules that some namespace can reach (not shadowed by an earlier rule)."""
    live: list[int] = []
    for i, ent in enumerate(policy.namespaces):
        if not any(implies(ent.selector, policy.namespaces[j].selector) for j in live):
            live.append(i)
    return live


def _unreachable_classes(policy: Policy) -> Iterator[Warning_]:
    live = _live_entitlements(policy)
    granted = {c for i in live for c in policy.namespaces[i].classes}
    granted_anywhere = {c for ent in policy.namespaces for c in ent.classes}
    for name in policy.classes:
        if name in granted:
            continue
        if name in granted_anywhere:
            yield Warning_(
                "unreachable-class",
                ("classes", name),
                f"class {name!r} is granted only by namespace rules that can never match (an earlier rule always wins)",
                "grant it in a rule that can match, or reorder spec.namespaces",
            )
        else:
            yield Warning_(
                "unreachable-class",
                ("classes", name),
                f"class {name!r} is not granted to any namespace: every request for it is denied [class-not-allowed]",
                "add it to the classes of a spec.namespaces rule, or remove the class",
            )


def _shadowed_namespace_rules(policy: Policy) -> Iterator[Warning_]:
    for i, ent in enumerate(policy.namespaces):
        for j in range(i):
            earlier = policy.namespaces[j]
            if implies(ent.selector, earlier.selector):
                yield Warning_(
                    "shadowed-namespace-rule",
                    ("namespaces", i, "selector"),
                    f"{_ns_label(policy, i)} never applies: {_ns_label(policy, j)} selects "
                    f"{describe(earlier.selector)}, which includes every namespace this rule selects, "
                    "and the first matching rule wins",
                    f"move it above {_ns_label(policy, j)}, or narrow that rule's selector",
                )
                break


def _entitlement_pools(policy: Policy) -> Iterator[Warning_]:
    for i, ent in enumerate(policy.namespaces):
        if ent.pools is None:
            continue
        for k, cname in enumerate(ent.classes):
            cls = policy.classes.get(cname)
            if cls is None or set(cls.pools) & set(ent.pools):
                continue
            yield Warning_(
                "entitlement-without-pool",
                ("namespaces", i, "classes", k),
                f"{_ns_label(policy, i)} grants class {cname!r} but its pools {list(ent.pools)} exclude "
                f"every pool of the class ({', '.join(cls.pools)}): the grant can never be used",
                f"add one of {', '.join(cls.pools)} to the rule's pools, or drop the class from it",
            )


def _entitlement_default_unserved(policy: Policy) -> Iterator[Warning_]:
    """A rule whose pools serve a class, but not the isolation its pods get when they name none (the rule's
    ``defaultIsolation``, else the class default): lint was clean and every such pod was denied there."""
    for i, ent in enumerate(policy.namespaces):
        if ent.pools is None:
            continue
        for k, cname in enumerate(ent.classes):
            cls = policy.classes.get(cname)
            if cls is None:
                continue
            left = [policy.pools[p] for p in cls.pools if p in ent.pools and p in policy.pools]
            if not left:
                continue  # entitlement-without-pool says so
            default = ent.default_isolation.get(cname, cls.isolation.default)
            if any(default in p.isolation for p in left):
                continue
            served = [iso for p in left for iso in p.isolation if iso in cls.isolation.permitted]
            names = ", ".join(p.name for p in left)
            yield Warning_(
                "entitlement-default-unserved",
                ("namespaces", i, "defaultIsolation", cname) if cname in ent.default_isolation
                else ("namespaces", i, "classes", k),
                f"{_ns_label(policy, i)} leaves class {cname!r} only pools {names}, none of which serves its "
                f"default isolation {default.value!r}: every pod of the class there that names no isolation is denied",
                f"set defaultIsolation: {{{cname}: {served[0].value}}} on the rule" if served
                else f"add a pool of class {cname!r} that serves {default.value!r} to the rule's pools",
            )


def _unused_pools(policy: Policy) -> Iterator[Warning_]:
    used = {p for cls in policy.classes.values() for p in cls.pools}
    for name in policy.pools:
        if name not in used:
            yield Warning_(
                "unused-pool",
                ("pools", name),
                f"pool {name!r} is not listed by any class: no workload can be placed on it",
                "add it to a class's pools, or remove the pool",
            )


def _isolation_unserved(policy: Policy) -> Iterator[Warning_]:
    for name, cls in policy.classes.items():
        served = {iso for p in cls.pools if p in policy.pools for iso in policy.pools[p].isolation}
        pools = ", ".join(cls.pools)
        if cls.isolation.default not in served:
            yield Warning_(
                "isolation-unserved",
                ("classes", name, "isolation", "default"),
                f"default isolation {cls.isolation.default.value!r} of class {name!r} is served by none of "
                f"its pools ({pools}): every request without an isolation annotation is denied",
                f"pick a default its pools serve ({', '.join(sorted(i.value for i in served)) or 'none'})",
            )
        for k, iso in enumerate(cls.isolation.allowed or ()):
            if iso not in served and iso is not cls.isolation.default:
                yield Warning_(
                    "isolation-unserved",
                    ("classes", name, "isolation", "allowed", k),
                    f"class {name!r} allows isolation {iso.value!r} but none of its pools ({pools}) serves it",
                    f"add {iso.value!r} (and its {'mig' if iso is Isolation.MIG else 'sharing'} section) to "
                    "a pool's isolation, or remove it from allowed"
                    if iso is not Isolation.EXCLUSIVE
                    else "add 'exclusive' to a pool's isolation, or remove it from allowed",
                )


def _scheduler_of(cls: Any) -> tuple[str | None, tuple[str, ...]]:
    """The scheduler a class's pods end up with when the user sets none, and the field that sets it."""
    if cls.scheduler_name:
        return cls.scheduler_name, ("schedulerName",)
    if cls.gang.backend is GangBackend.VOLCANO:
        return cls.gang.scheduler_name or "volcano", ("gang", "backend")
    if cls.gang.backend is GangBackend.KAI:
        return cls.gang.scheduler_name or "kai-scheduler", ("gang", "backend")
    if cls.gang.backend is GangBackend.COSCHEDULING and cls.gang.scheduler_name:
        return cls.gang.scheduler_name, ("gang", "schedulerName")
    return None, ()


def _sharing_schedulers(policy: Policy) -> Iterator[Warning_]:
    for name, cls in policy.classes.items():
        if Isolation.SHARED not in cls.isolation.permitted:
            continue
        scheduler, where = _scheduler_of(cls)
        for pool_name in cls.pools:
            pool = policy.pools.get(pool_name)
            if pool is None or pool.spec.sharing is None or Isolation.SHARED not in pool.isolation:
                continue
            # the scheduler the stack's resources are only understood by (sharing_stacks.yaml): HAMi's own
            # webhook sets hami-scheduler when the pod names none; cGPU and qGPU are kube-scheduler extenders
            provider = stack(pool.spec.sharing.provider)
            needed = provider.scheduler
            if needed is None:
                continue
            if scheduler is None:
                # nothing to warn about by construction: the engine sets a setsScheduler stack's scheduler,
                # and /validate admits the scheduler a stack's own webhook writes on a pod that has the
                # default one (sharing_stacks.yaml `webhook`: HAMi's hami-scheduler)
                continue
            if scheduler != needed:
                yield Warning_(
                    "sharing-scheduler",
                    ("classes", name, *where),
                    f"class {name!r} sends pods to scheduler {scheduler!r}, but pool {pool_name!r} shares "
                    f"GPUs with {provider.id}, whose resources only {needed!r} schedules: "
                    "its pods would stay Pending",
                    f"use schedulerName {needed!r} for this class, or a pool with another sharing provider"
                    if needed != "default-scheduler"
                    else f"{provider.id} is a kube-scheduler extender: leave schedulerName unset "
                    "(and use no volcano gang) for this class",
                )


def _mig_single_without_product(policy: Policy) -> Iterator[Warning_]:
    for name, pool in policy.pools.items():
        mig = pool.spec.mig
        if mig is None or mig.strategy != "single" or pool.gpu.product:
            continue
        yield Warning_(
            "mig-product-missing",
            ("pools", name, "mig", "strategy"),
            f"pool {name!r} uses the single MIG strategy, which selects nodes by nvidia.com/gpu.product, "
            f"but GPU model {pool.spec.gpu_model!r} has no product",
            f"set spec.gpuModels.{pool.spec.gpu_model}.product to the GFD label value (e.g. NVIDIA-A100-SXM4-40GB)",
        )


def _device_taint_unknown(policy: Policy) -> Iterator[Warning_]:
    owners = [("pools", n, p.spec.allowed_device_taints) for n, p in policy.pools.items()]
    owners += [("classes", n, c.allowed_device_taints) for n, c in policy.classes.items()]
    for section, name, keys in owners:
        for index, key in enumerate(keys):
            if key == "*" or key in policy.device_taints:
                continue
            yield Warning_(
                "device-taint-unknown",
                (section, name, "allowedDeviceTaints", index),
                f"{section[:-1].replace('classe', 'class')} {name!r} allows device taint {key!r}, which is neither "
                "built in nor declared: a typo here leaves the taint it meant denied",
                f"declare it under spec.deviceTaints ({key}: {{effect: NoSchedule}}) or fix the key",
            )


def _adopt_as_outside_class(policy: Policy) -> Iterator[Warning_]:
    for name, pool in policy.pools.items():
        cname = pool.spec.adopt_as
        if cname is None or cname not in policy.classes or name in policy.classes[cname].pools:
            continue
        yield Warning_(
            "adopt-outside-class",
            ("pools", name, "adoptAs"),
            f"pool {name!r} adopts raw requests as class {cname!r}, but that class's pools "
            f"({', '.join(policy.classes[cname].pools)}) do not include {name!r}: adopted pods are always denied",
            f"add {name!r} to spec.classes.{cname}.pools, or adopt into a class that uses this pool",
        )


def _gang_without_backend(policy: Policy) -> Iterator[Warning_]:
    for name, cls in policy.classes.items():
        if cls.gang.required and cls.gang.backend is GangBackend.NONE:
            yield Warning_(
                "gang-without-backend",
                ("classes", name, "gang", "required"),
                f"class {name!r} requires a gang but has no gang backend: every multi-pod workload of "
                "the class is denied [gang-required]",
                "set gang.backend to volcano, kueue, coscheduling or kai, or gang.required: false",
            )


def _kueue_without_queue(policy: Policy) -> Iterator[Warning_]:
    for name, cls in policy.classes.items():
        if cls.gang.backend is not GangBackend.KUEUE or cls.kueue_queue or cls.gang.queue:
            continue
        granting = [ent for ent in policy.namespaces if name in ent.classes]
        if granting and all(ent.kueue_queue or ent.queue for ent in granting):
            continue
        yield Warning_(
            "kueue-queue-missing",
            ("classes", name, "gang", "backend"),
            f"class {name!r} uses the kueue gang backend but neither the class nor every namespace rule "
            "granting it names a Kueue queue: those workloads get no queue label",
            "set kueueQueue on the class (default) or on each granting spec.namespaces rule",
        )


def _rdma_unserved(policy: Policy) -> Iterator[Warning_]:
    for name, cls in policy.classes.items():
        if not cls.rdma:
            continue
        if any(policy.pools[p].spec.rdma is not None for p in cls.pools if p in policy.pools):
            continue
        yield Warning_(
            "rdma-unserved",
            ("classes", name, "rdma"),
            f"class {name!r} wants RDMA but none of its pools ({', '.join(cls.pools)}) has an rdma section: "
            "it is silently skipped",
            "add rdma (networks, resource) to the pool, or set rdma: false on the class",
        )


def _topology_unmapped(policy: Policy) -> Iterator[Warning_]:
    for name, cls in policy.classes.items():
        level_name = cls.topology.partition(":")[0]
        if level_name == "none":
            continue
        level = next(t for t in TOPOLOGY_ORDER if t.value == level_name)
        for pool_name in cls.pools:
            pool = policy.pools.get(pool_name)
            if pool is None or level in pool.spec.topology:
                continue
            mapped = [t.value for t in TOPOLOGY_ORDER if t in pool.spec.topology]
            yield Warning_(
                "topology-unmapped",
                ("classes", name, "topology"),
                f"class {name!r} packs gangs by {level_name!r} but pool {pool_name!r} maps no node label to "
                f"that level (mapped: {', '.join(mapped) or 'none'}): only finer levels are used",
                f"add topology.{level_name}: <node label key> to pool {pool_name!r}, or lower the class's topology",
            )


def _max_gpus_unschedulable(policy: Policy) -> Iterator[Warning_]:
    for name, cls in policy.classes.items():
        if cls.max_gpus is None:
            continue
        biggest = max((policy.pools[p].spec.gpus_per_node for p in cls.pools if p in policy.pools), default=0)
        if biggest and cls.max_gpus > biggest:
            yield Warning_(
                "max-gpus-unschedulable",
                ("classes", name, "maxGPUs"),
                f"class {name!r} allows {cls.max_gpus} GPUs per pod but its largest pool node has {biggest}: "
                "pods between the two are denied [gpu-count-exceeded] with a confusing message",
                f"lower maxGPUs to {biggest}",
            )


def _default_memory_unservable(policy: Policy) -> Iterator[Warning_]:
    for name, cls in policy.classes.items():
        if cls.default_gpu_memory is None:
            continue
        memory = parse_quantity(cls.default_gpu_memory)
        if cls.max_gpu_memory is not None and memory > parse_quantity(cls.max_gpu_memory):
            yield Warning_(
                "default-memory-too-large",
                ("classes", name, "defaultGPUMemory"),
                f"defaultGPUMemory {cls.default_gpu_memory} of class {name!r} exceeds its maxGPUMemory "
                f"{cls.max_gpu_memory}: every request without gpu-memory is denied [gpu-memory-exceeded]",
                f"lower defaultGPUMemory to at most {cls.max_gpu_memory}",
            )
            continue
        isolation = cls.isolation.default
        largest = [
            pool.largest_slice
            if isolation is Isolation.MIG
            else sizes.capacity(pool.spec, pool.gpu.memory, isolation).bytes
            for pool in (policy.pools.get(p) for p in cls.pools)
            if pool is not None and isolation in pool.isolation
        ]
        if largest and all(memory > size for size in largest):
            biggest = max(largest)
            yield Warning_(
                "default-memory-too-large",
                ("classes", name, "defaultGPUMemory"),
                f"defaultGPUMemory {cls.default_gpu_memory} of class {name!r} fits no {isolation.value} device "
                f"of its pools (largest {memory_quantity(biggest)}): requests without gpu-memory are denied",
                f"lower defaultGPUMemory to at most {memory_quantity(biggest)}",
            )


def _shadowed_rule_overrides(policy: Policy) -> Iterator[Warning_]:
    for rule_id, settings in policy.rules.items():
        for i, override in enumerate(settings.namespaces):
            shadow = _first_superset(
                override.selector,
                [(f"exempt[{k}]", s) for k, s in enumerate(settings.exempt)]
                + [(f"namespaces[{k}]", o.selector) for k, o in enumerate(settings.namespaces[:i])],
            )
            if shadow is None:
                continue
            label, selector = shadow
            hint = (
                "exemptions always win: narrow the exemption, or drop this override"
                if label.startswith("exempt")
                else f"move it above {label}, or narrow that selector"
            )
            yield Warning_(
                "shadowed-rule-override",
                ("rules", rule_id, "namespaces", i, "selector"),
                f"this override of rule {rule_id!r} never applies: {label} selects {describe(selector)}, "
                "which includes every namespace it selects and is checked first (exemptions, then overrides "
                "in order)",
                hint,
            )


def _first_superset(
    selector: LabelSelector, earlier: Iterable[tuple[str, LabelSelector]]
) -> tuple[str, LabelSelector] | None:
    for label, other in earlier:
        if implies(selector, other):
            return label, other
    return None


# --- label selector containment ------------------------------------------------------------------------


@dataclass(slots=True)
class _Constraints:
    """What a selector demands of one label key, folded from matchLabels and matchExpressions."""

    present: bool = False
    absent: bool = False
    allowed: set[str] | None = None  # the value must be one of these (None: any)
    excluded: set[str] = field(default_factory=set)


def _constraints(selector: LabelSelector) -> dict[str, _Constraints]:
    out: dict[str, _Constraints] = {}
    for key, value in selector.match_labels.items():
        c = out.setdefault(key, _Constraints())
        c.present = True
        c.allowed = {value} if c.allowed is None else c.allowed & {value}
    for req in selector.match_expressions:
        c = out.setdefault(req.key, _Constraints())
        if req.operator == "In":
            c.present = True
            c.allowed = set(req.values) if c.allowed is None else c.allowed & set(req.values)
        elif req.operator == "NotIn":
            c.excluded |= set(req.values)
        elif req.operator == "Exists":
            c.present = True
        else:
            c.absent = True
    return out


def implies(narrow: LabelSelector, broad: LabelSelector) -> bool:
    """True when every label set ``narrow`` matches is also matched by ``broad`` (provably; else False).

    Sound, not complete: a False may still be a containment too subtle to prove, so a warning built on
    it can be missed but never invented. The empty selector matches everything, so it contains all.
    """
    have = _constraints(narrow)
    for key, need in _constraints(broad).items():
        got = have.get(key, _Constraints())
        values = got.allowed - got.excluded if got.allowed is not None else None
        if need.present and not got.present:
            return False
        if need.absent and not got.absent:
            return False
        if need.allowed is not None and (values is None or not values <= need.allowed):
            return False
        if need.excluded and not (
            got.absent or (values is not None and not values & need.excluded) or need.excluded <= got.excluded
        ):
            return False
    return True


def describe(selector: LabelSelector) -> str:
    """A selector in ``kubectl -l`` syntax, for messages: ``tier=training,team in (a,b)``."""
    parts = [f"{k}={v}" for k, v in selector.match_labels.items()]
    for req in selector.match_expressions:
        if req.operator in ("In", "NotIn"):
            parts.append(f"{req.key} {req.operator.lower()} ({','.join(req.values)})")
        elif req.operator == "Exists":
            parts.append(req.key)
        else:
            parts.append(f"!{req.key}")
    return ",".join(parts) if parts else "every namespace ({})"
