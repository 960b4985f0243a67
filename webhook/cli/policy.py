"""``gpu-admission policy lint|test|schema|render|init``: the platform team's loop before a policy ships.

lint   — does the policy load, and does it say what its authors meant? (errors, then warnings)
test   — does it still do what the suites promise for concrete objects?
schema — the JSON Schema editors validate policy files with.
render — the cluster objects the policy depends on (PriorityClasses, webhook configurations, …).
init   — a new policy directory (the shipped default and a test suite) to start from.

Exit codes follow ``check``: 0 clean, 1 findings (lint errors or, with --strict, warnings; failed test
cases), 2 nothing could be judged (unreadable directory, broken suite or policy, bad arguments).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import UTC, datetime
from io import StringIO
from pathlib import Path
from typing import Any

from webhook.cli.policy_dir import HELP as POLICY_HELP
from webhook.cli.policy_dir import default_policy_dir
from webhook.cli.spelling import old_spelling

EXIT_OK, EXIT_FINDINGS, EXIT_UNUSABLE = 0, 1, 2


def register(sub: Any) -> None:
    policy = sub.add_parser(
        "policy",
        help="lint, test and describe policy files",
        description="Work on the policy directory: lint it, run its test suites, print its JSON Schema.",
    )
    verbs = policy.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True

    lint = verbs.add_parser(
        "lint",
        help="report policy errors and warnings at file:line:column",
        description="Load the policy like the server does and report every error, then warnings about "
        "policies that load but mislead (unreachable classes, shadowed namespace rules, unused pools, …). "
        "Exit 0 clean (warnings allowed unless --strict), 1 errors (or warnings with --strict), "
        "2 unreadable directory.",
    )
    lint.add_argument(
        "dir", nargs="?", default=default_policy_dir(), metavar="DIR", help=f"policy directory (default: {POLICY_HELP})"
    )
    lint.add_argument("--strict", action="store_true", help="warnings fail too (exit 1)")
    lint.add_argument("-o", "--output", choices=("text", "json", "github"), default="text")
    lint.add_argument(
        "--cluster-objects",
        dest="context",
        action="append",
        default=[],
        metavar="FILE",
        help="Node objects (e.g. `kubectl get nodes -o yaml`): report pools whose nodes advertise other MIG "
        "devices or another nvidia.com/mig.config than the policy states; DeviceClass objects: report extended "
        "resources they map that the rendered webhooks do not know; a file or directory, repeatable",
    )
    old_spelling(lint, "--context", "--cluster-objects", dest="context", command="policy lint", append=True,
                 metavar="FILE")
    lint.set_defaults(handler=run_lint)

    test = verbs.add_parser(
        "test",
        help="run PolicyTest suites against the policy",
        description="Run the PolicyTest suites under DIR/tests/ (or the suite files given) through the "
        "admission engine. Exit 0 all passed, 1 a case failed, 2 a suite or its policy is broken.",
    )
    test.add_argument(
        "paths",
        nargs="*",
        default=[default_policy_dir()],
        metavar="PATH",
        help=f"policy directories (suites under PATH/tests/) or suite files (default: {POLICY_HELP})",
    )
    test.add_argument("--policy", metavar="DIR", help="test this policy directory instead of each suite's own")
    test.add_argument("--run", metavar="REGEX", help="only cases whose 'suite/case' name matches REGEX")
    test.add_argument("-o", "--output", choices=("text", "json", "junit"), default="text")
    test.add_argument(
        "-v", "--verbose", action="store_true", help="every case (=== RUN, --- PASS), every decision and trace"
    )
    test.add_argument(
        "--coverage", action="store_true", help="list the rules, classes and pools no passing case exercises"
    )
    test.add_argument(
        "--require-coverage",
        action="store_true",
        help="like --coverage, and exit 1 unless every rule, class and pool is covered",
    )
    test.set_defaults(handler=run_test)

    schema = verbs.add_parser(
        "schema",
        help="print the JSON Schema of the policy format",
        description="Print the JSON Schema (draft 2020-12) generated from the policy model. "
        "--check FILE exits 1 when FILE differs (for CI); --markdown prints the field reference; "
        "--update-docs FILE refreshes the generated tables of a document such as docs/policy.md.",
    )
    schema.add_argument("--kind", choices=("GPUPolicy", "PolicyTest"), default="GPUPolicy")
    mode = schema.add_mutually_exclusive_group()
    mode.add_argument("--check", metavar="FILE", help="compare with FILE instead of printing; exit 1 if stale")
    mode.add_argument("--markdown", action="store_true", help="print the field reference tables (docs)")
    mode.add_argument(
        "--update-docs",
        metavar="FILE",
        help="rewrite the generated blocks (field tables, rule catalogue) of FILE, e.g. docs/policy.md",
    )
    schema.set_defaults(handler=run_schema)

    init = verbs.add_parser(
        "init",
        help="create a policy directory from the shipped default (policy, schema, test suite)",
        description="Write the shipped default policy, its JSON Schema and its PolicyTest suite into DIR "
        "(default: policies), so a pip-installed CLI has a policy to adapt and test. Refuses a DIR that "
        "already has files unless --force. Exit 0 written, 2 refused.",
    )
    init.add_argument("dir", nargs="?", default="policies", metavar="DIR", help="directory to create")
    init.add_argument("--force", action="store_true", help="overwrite files of the same name in DIR")
    init.set_defaults(handler=run_init)

    render = verbs.add_parser(
        "render",
        help="print the cluster objects the policy depends on (PriorityClasses, webhook configurations, ...)",
        description="Render the Kubernetes objects the policy depends on, so they cannot drift from it: the "
        "policy ConfigMap, the PriorityClasses its classes name, a NetworkPolicy for the webhook, the "
        "ValidatingAdmissionPolicy that lets only settings.platformGroup set the namespace labels the policy "
        "selects on, and the Mutating/Validating webhook configurations whose rules and matchConditions "
        "follow the policy's prefix and GPU resource names. Apply the output after every policy change (the shipped "
        "manifests carry it as manifests/base/rendered.yaml). Exit 0 rendered, 2 the policy does not load.",
    )
    render.add_argument("dir", nargs="?", metavar="DIR", help=f"policy directory (default: {POLICY_HELP})")
    render.add_argument("--policy", dest="policy_dir", metavar="DIR", help="policy directory (same as DIR)")
    render.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    render.add_argument(
        "--namespace",
        "-n",
        dest="namespaces",
        action="append",
        default=[],
        metavar="NS[,NS...]",
        help="namespaces that get per-namespace objects (e.g. claim templates), by name; repeatable",
    )
    old_spelling(render, "--namespaces", "--namespace", dest="namespaces", command="policy render", append=True,
                 metavar="NS[,NS...]")
    render.add_argument(
        "--cluster-objects",
        dest="context",
        action="append",
        default=[],
        metavar="FILE",
        help="Namespace objects (e.g. `kubectl get ns -o yaml`): each gets its per-namespace objects, its "
        "entitlement judged from its labels; DeviceClass objects (`kubectl get deviceclasses -o yaml`): the "
        "extended resources they map (spec.extendedResourceName) reach the webhooks like the policy's own; "
        "repeatable",
    )
    old_spelling(render, "--context", "--cluster-objects", dest="context", command="policy render", append=True,
                 metavar="FILE")
    render.add_argument("--webhook-namespace", default="gpu-admission", metavar="NS", help="where the webhook runs")
    render.add_argument(
        "--control-plane-cidr",
        action="append",
        default=[],
        metavar="CIDR",
        help="the API server's addresses, the only sources the NetworkPolicy admits to the webhook port "
        "and, with the monitoring namespace, to the metrics port (repeatable; none: the webhook port admits any "
        "address, and the render says so)",
    )
    render.add_argument(
        "--monitoring-namespace",
        default="monitoring",
        metavar="NS",
        help="namespace whose pods may scrape the metrics port ('' for none; default: monitoring)",
    )
    render.add_argument(
        "--in-tree",
        action="store_true",
        help="print only the in-tree policies (ValidatingAdmissionPolicies and bindings labelled "
        "gpu-admission.io/in-tree, and MutatingAdmissionPolicies with --kube-version 1.36 or later): what the "
        "apiserver enforces itself while the webhook is down (manifests/in-tree/)",
    )
    render.add_argument(
        "--kube-version",
        default=None,
        metavar="X.Y",
        help="the cluster's Kubernetes version (default: settings.inTree.kubeVersion, else 1.30); 1.36 and later "
        "also get MutatingAdmissionPolicies",
    )
    render.add_argument(
        "--mutating",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="emit the MutatingAdmissionPolicies where the cluster serves them (default: settings.inTree.mutating, "
        "else yes); --no-mutating: validating policies only",
    )
    render.add_argument(
        "--availability",
        choices=("webhook", "in-tree"),
        default=None,
        help="webhook: the validating webhook fails closed; in-tree: it fails open, for clusters with the in-tree "
        "policies installed (the webhook configurations carry the mode; default: settings.inTree.availability, "
        "else webhook)",
    )
    render.add_argument(
        "--explain",
        action="store_true",
        help="print, rule by rule, what holds while the webhook is down (in-tree), partly, or not at all, and why",
    )
    helm = render.add_mutually_exclusive_group()
    helm.add_argument(
        "--chart",
        metavar="CHART_DIR",
        help="write the policy-dependent half of the Helm chart (the policy files, PriorityClasses, label guard, "
        "webhook configurations, in-tree policies) to CHART_DIR/files/policy-bundle.json instead of printing",
    )
    helm.add_argument(
        "--helm-values",
        action="store_true",
        help="print the same bundle as a Helm values file (policy.bundle): install your own policy with "
        "`helm install -f` without editing the chart",
    )
    render.set_defaults(handler=run_render)


# --- init --------------------------------------------------------------------------------------------


def run_init(args: argparse.Namespace) -> int:
    """Copy the packaged scaffold: the product's shipped default policy, its schema and its test suite
    (the policy the product's own tests judge; a platform team's copy is theirs to change)."""
    from importlib.resources import as_file, files

    target = Path(args.dir)
    if target.exists() and not target.is_dir():
        print(f"gpu-admission: {target} exists and is not a directory", file=sys.stderr)
        return EXIT_UNUSABLE
    if target.is_dir() and any(target.iterdir()) and not args.force:
        print(
            f"gpu-admission: {target} already has files; pick an empty directory or pass --force to overwrite "
            "files of the same name",
            file=sys.stderr,
        )
        return EXIT_UNUSABLE
    with as_file(files("webhook.policy") / "scaffold") as scaffold:
        written = []
        for source in sorted(p for p in Path(scaffold).rglob("*") if p.is_file()):
            relative = source.relative_to(scaffold)
            destination = target / relative
            destination.parent.mkdir(parents=True, exist_ok=True)
            destination.write_bytes(source.read_bytes())
            written.append(str(relative))
    print(f"wrote {len(written)} file(s) to {target}/: {', '.join(written)}")
    print(
        f"next: adapt {target}/default.yaml to your nodes (pools, namespaces), then\n"
        f"  gpu-admission policy lint {target} && gpu-admission policy test {target}\n"
        f"  gpu-admission check --policy {target} <manifests>"
    )
    return EXIT_OK


# --- lint --------------------------------------------------------------------------------------------


def run_lint(args: argparse.Namespace) -> int:
    from webhook.check.github import annotation, inert_group
    from webhook.lint.checks import lint_path

    nodes: tuple[Any, ...] = ()
    classes: dict[str, Any] = {}
    if args.context:
        from webhook.check.context import ContextError, from_files
        from webhook.check.inputs import read_sources

        try:
            cluster = from_files(read_sources(args.context), "default")
        except ContextError as exc:
            print(f"gpu-admission: --cluster-objects: {exc}", file=sys.stderr)
            return 2
        nodes, classes = tuple(cluster.nodes.values()), dict(cluster.device_classes)
    report = lint_path(args.dir, nodes, datetime.now(UTC).date())
    if classes and not report.unreadable:
        from webhook.lint import device_classes

        report.findings.extend(device_classes.findings(args.dir, classes))
    out = sys.stdout
    if args.output == "json":
        json.dump({**report.as_dict(), "strict": args.strict, "exitCode": report.exit_code(args.strict)}, out, indent=2)
        out.write("\n")
        return report.exit_code(args.strict)
    text = StringIO()
    for finding in report.findings:
        if args.output == "github":
            i = finding.issue
            level = "error" if i.severity == "error" or args.strict else "warning"
            title = f"[{finding.code}]" if finding.code else "policy error"
            message = f"{i.path}: {i.message}" + (f" (hint: {i.hint})" if i.hint else "")
            out.write(annotation(level, message, file=i.file, line=i.line or None, col=i.column or None, title=title))
        text.write(finding.render() + "\n")
    if report.unreadable:
        text.write(f"{report.path}: cannot lint: the policy cannot be read\n")
    elif report.errors:
        text.write(f"{report.path}: {report.errors} error(s), {report.warnings} warning(s): the policy does not load\n")
    else:
        verdict = "fails --strict" if args.strict and report.warnings else "loads"
        files = len(report.files)
        text.write(f"{report.path}: {files} file(s), 0 errors, {report.warnings} warning(s): the policy {verdict}\n")
    # policy files come from pull requests too: in a GitHub log the text must not carry workflow commands
    out.write(inert_group("gpu-admission policy lint", text.getvalue()) if args.output == "github" else text.getvalue())
    return report.exit_code(args.strict)


# --- test --------------------------------------------------------------------------------------------


def run_test(args: argparse.Namespace) -> int:
    from webhook.policytest.coverage import coverage as compute_coverage
    from webhook.policytest.load import SuiteError, discover, load_suites
    from webhook.policytest.report import WRITERS
    from webhook.policytest.run import PolicyLoadError, load_policies, rollout_notes, run_suites, select

    err = sys.stderr
    if args.run is not None:
        try:
            re.compile(args.run)
        except re.error as exc:
            print(f"gpu-admission: --run {args.run!r}: invalid regular expression: {exc}", file=err)
            return EXIT_UNUSABLE
    files, missing = discover(args.paths)
    explicit = [Path(p) for p in args.paths if Path(p).is_file()]
    try:
        if missing:
            raise SuiteError(missing)
        suites = load_suites(files, explicit=explicit, policy=args.policy)
    except SuiteError as exc:
        print("gpu-admission: broken test suite(s); no case was run:", file=err)
        for issue in exc.issues:
            print(f"  {issue.render()}", file=err)
        return EXIT_UNUSABLE
    if not suites:
        print(
            f"gpu-admission: no PolicyTest suites found in {', '.join(args.paths)} "
            "(looked in <dir>/tests/ for kind: PolicyTest and *.test.yaml)",
            file=err,
        )
        return EXIT_UNUSABLE
    try:
        policies = load_policies(suites)
    except PolicyLoadError as exc:
        print(
            f"gpu-admission: the policy in {exc.policy_dir} (used by {', '.join(exc.suites)}) does not load:", file=err
        )
        for issue in exc.error.issues:
            print(f"  {issue.render()}", file=err)
        return EXIT_UNUSABLE
    selected = select(suites, args.run)
    if not selected:
        print(f"gpu-admission: warning: no case matches --run {args.run!r}", file=err)
    results = run_suites(selected, policies)
    for note in rollout_notes(policies):
        print(f"gpu-admission policy test: note: {note}", file=err)
    wants_coverage = args.coverage or args.require_coverage
    coverage = compute_coverage(results, policies) if wants_coverage else []
    WRITERS[args.output](results, sys.stdout, verbose=args.verbose, coverage=coverage)
    if any(s.failed for s in results):
        return EXIT_FINDINGS
    if args.require_coverage and not all(c.complete for c in coverage):
        print("gpu-admission: coverage is incomplete (see above)", file=err)
        return EXIT_FINDINGS
    return EXIT_OK


# --- schema ------------------------------------------------------------------------------------------


def run_schema(args: argparse.Namespace) -> int:
    from webhook.policy.schema import field_reference, render_doc, render_schema, suite_schema

    if args.markdown:
        sys.stdout.write(field_reference())
        return EXIT_OK
    if args.update_docs:
        path = Path(args.update_docs)
        try:
            old = path.read_text(encoding="utf-8")
            new = render_doc(old)
        except (OSError, ValueError) as exc:
            print(f"gpu-admission: {path}: {exc}", file=sys.stderr)
            return EXIT_UNUSABLE
        if new != old:
            path.write_text(new, encoding="utf-8")
        print(f"{path}: {'updated' if new != old else 'up to date'}")
        return EXIT_OK
    text = render_schema() if args.kind == "GPUPolicy" else json.dumps(suite_schema(), indent=2) + "\n"
    if args.check is None:
        sys.stdout.write(text)
        return EXIT_OK
    try:
        current = Path(args.check).read_text(encoding="utf-8")
    except OSError as exc:
        print(f"gpu-admission: {args.check}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_UNUSABLE
    if current == text:
        print(f"{args.check}: up to date")
        return EXIT_OK
    print(
        f"{args.check}: out of date with the policy model; regenerate it with "
        f"`gpu-admission policy schema > {args.check}`",
        file=sys.stderr,
    )
    return EXIT_FINDINGS


# --- render ------------------------------------------------------------------------------------------


def _options_the_chart_takes(args: argparse.Namespace) -> list[str]:
    """Render options given with ``--chart``/``--helm-values``, each with the chart value that replaces it:
    refused rather than dropped, so nobody believes a NetworkPolicy narrowed that the chart left open."""
    given = [
        (bool(args.control_plane_cidr), "--control-plane-cidr: set networkPolicy.controlPlaneCIDRs"),
        (args.webhook_namespace != "gpu-admission", "--webhook-namespace: the release namespace (helm -n NS)"),
        (args.monitoring_namespace != "monitoring", "--monitoring-namespace: set networkPolicy.monitoringNamespace"),
        (args.in_tree, "--in-tree: set inTree.enabled"),
        (args.kube_version is not None, "--kube-version: inTree.mutating (auto follows the cluster)"),
        (args.mutating is not None, "--mutating/--no-mutating: set inTree.mutating"),
        (args.availability is not None, "--availability: set inTree.availability"),
        (bool(args.namespaces or args.context), "--namespaces/--cluster-objects: apply `policy render --namespaces` "
         "output next to the release"),
        (args.explain, "--explain: run it without --chart"),
        (args.output != "yaml", "-o: the bundle has one format"),
    ]  # fmt: skip
    return [text for on, text in given if on]


def _render_helm(policy: Any, files: tuple[tuple[str, str], ...], chart: str | None) -> int:
    """``--chart DIR``: write the chart's bundle; ``--helm-values``: print it as a values file."""
    from webhook.render.chart import BUNDLE_PATH, bundle, bundle_text
    from webhook.render.intree.runtimecost import TooLarge
    from webhook.render.output import to_yaml

    err = sys.stderr
    try:
        content = bundle(policy, files)
    except TooLarge as exc:
        print(f"gpu-admission: nothing rendered: {exc}", file=err)
        return EXIT_UNUSABLE
    if chart is None:
        header = (
            "# Generated by `gpu-admission policy render --helm-values` from the policy: do not edit by hand.\n"
            "# helm install/upgrade ... -f THIS_FILE; re-render after every policy change.\n"
        )
        sys.stdout.write(to_yaml([{"policy": {"bundle": content}}], header).replace("---\n", "", 1))
        return EXIT_OK
    target = Path(chart)
    if not (target / "Chart.yaml").is_file():
        print(f"gpu-admission: --chart {chart}: no Chart.yaml there; give the chart directory (charts/gpu-admission)",
              file=err)  # fmt: skip
        return EXIT_UNUSABLE
    path = target / BUNDLE_PATH
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(bundle_text(content), encoding="utf-8")
    except OSError as exc:
        print(f"gpu-admission: --chart {chart}: cannot write {path}: {exc}", file=err)
        return EXIT_UNUSABLE
    print(f"gpu-admission policy render: wrote {path}", file=err)
    return EXIT_OK


def run_render(args: argparse.Namespace) -> int:
    import ipaddress

    from webhook.policy import PolicyError, load_policy
    from webhook.policy.loader import policy_files
    from webhook.render import RenderOptions, render
    from webhook.render.core import in_tree_choice, parse_kube_version
    from webhook.render.output import rendered_yaml, to_json

    err = sys.stderr
    if args.dir and args.policy_dir and args.dir != args.policy_dir:
        print(
            f"gpu-admission: give the policy directory once (DIR {args.dir!r} or --policy {args.policy_dir!r})",
            file=err,
        )
        return EXIT_UNUSABLE
    directory = args.dir or args.policy_dir or default_policy_dir()
    if (args.chart is not None or args.helm_values) and (refused := _options_the_chart_takes(args)):
        print(
            f"gpu-admission: --chart/--helm-values render the policy-dependent objects only; the chart takes "
            f"the rest from its values, so these options would be ignored: {'; '.join(refused)}",
            file=err,
        )
        return EXIT_UNUSABLE
    for cidr in args.control_plane_cidr:
        try:
            ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            print(f"gpu-admission: --control-plane-cidr {cidr!r} is not a CIDR like 10.0.0.0/24", file=err)
            return EXIT_UNUSABLE
    try:
        policy = load_policy(directory)
        files = tuple((p.name, p.read_text(encoding="utf-8")) for p in policy_files(directory))
    except PolicyError as exc:
        print(f"gpu-admission: the policy in {directory} does not load; nothing rendered:", file=err)
        for issue in exc.issues:
            print(f"  {issue.render()}", file=err)
        return EXIT_UNUSABLE
    except (OSError, UnicodeDecodeError) as exc:
        print(f"gpu-admission: {directory}: cannot read: {exc}", file=err)
        return EXIT_UNUSABLE
    namespaces = tuple(dict.fromkeys(n.strip() for arg in args.namespaces for n in arg.split(",") if n.strip()))
    labels: dict[str, dict[str, str]] = {}
    mapped: tuple[str, ...] = ()
    if args.context:
        from webhook.check.context import ContextError, from_files
        from webhook.check.inputs import read_sources
        from webhook.policy.dra import cluster_extended

        try:
            cluster = from_files(read_sources(args.context), "default")
        except ContextError as exc:
            print(f"gpu-admission: --cluster-objects: {exc}", file=err)
            return EXIT_UNUSABLE
        labels = cluster.namespaces
        mapped = tuple(sorted(cluster_extended(cluster.device_classes)))
    version = parse_kube_version(args.kube_version) if args.kube_version is not None else None
    if args.kube_version is not None and version is None:
        print(f"gpu-admission: --kube-version {args.kube_version!r} is not a version like 1.36", file=err)
        return EXIT_UNUSABLE
    choice = in_tree_choice(policy, kube_version=version, mutating=args.mutating, availability=args.availability)
    if args.explain:
        from webhook.render.intree.explain import enforcement, exceptions, table

        sys.stdout.write(enforcement(policy) + "\n" + table(policy) + "\n" + exceptions(policy))
        return EXIT_OK
    if args.chart is not None or args.helm_values:
        return _render_helm(policy, files, args.chart)
    options = RenderOptions(
        namespace=args.webhook_namespace,
        policy_files=files,
        namespaces=namespaces,
        namespace_labels=labels,
        mapped_resources=mapped,
        control_plane_cidrs=tuple(args.control_plane_cidr),
        monitoring_namespace=args.monitoring_namespace,
        availability=choice.availability,
        kube_version=choice.kube_version,
        mutating=choice.mutating,
    )
    from webhook.render import intree
    from webhook.render.intree.runtimecost import TooLarge

    try:
        objects = intree.render(policy, options) if args.in_tree else render(policy, options)
    except TooLarge as exc:
        print(f"gpu-admission: nothing rendered: {exc}", file=err)
        return EXIT_UNUSABLE
    if not args.in_tree:
        from webhook.render.networkpolicy import open_webhook_port_note

        if (note := open_webhook_port_note(options)) is not None:
            print(f"gpu-admission policy render: note: {note}", file=err)
    sys.stdout.write(to_json(objects) if args.output == "json" else rendered_yaml(policy, objects))
    return EXIT_OK
