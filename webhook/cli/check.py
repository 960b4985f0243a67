"""``gpu-admission check PATH… | -``: the admission engine over manifests, offline, for CI."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, date, datetime
from typing import Any

import yaml

from webhook.check.context import ContextError, from_files, from_inputs
from webhook.check.formats import WRITERS, Options, Tally, renderer
from webhook.check.inputs import read_sources
from webhook.check.old import OldError, read_old
from webhook.check.progress import Progress
from webhook.check.runner import FAIL_ON, Namespaces, check_sources
from webhook.cli.policy_dir import HELP as POLICY_HELP
from webhook.cli.policy_dir import default_policy_dir
from webhook.cli.spelling import old_spelling
from webhook.engine.model.requester import Requester
from webhook.namespace_labels import read_namespace_file
from webhook.policy import PolicyError, load_policy
from webhook.pool import usable_cores, workers_option

EXIT_BAD_INPUT = 2


def register(sub: Any) -> None:
    p = sub.add_parser(
        "check",
        help="check manifests against the policy (same engine as admission)",
        description="Run Pods, Jobs, Volcano Jobs and pod controllers through the admission engine offline. "
        "Exit 0 admitted, 1 denied (or would be under enforce with --fail-on would-deny; or warned with --fail-on "
        "warn), 2 bad input, bad policy, an engine "
        "error or nothing to check.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="files, directories (recursive) or - for stdin")
    p.add_argument(
        "--policy", default=default_policy_dir(), metavar="DIR", help=f"policy directory (default: {POLICY_HELP})"
    )
    p.add_argument(
        "--namespace",
        "-n",
        default="default",
        metavar="NS",
        help="namespace for objects that do not set one (default: default)",
    )
    p.add_argument(
        "--namespace-labels",
        dest="namespaces",
        metavar="FILE",
        help="namespace labels: a YAML map {namespace: {label: value}} or Namespace objects "
        "(e.g. `kubectl get ns -o yaml`); wins over --cluster-objects and the inputs",
    )
    # the old spelling was one letter from --namespace, and meant other things in serve and policy render
    old_spelling(p, "--namespaces", "--namespace-labels", dest="namespaces", command="check", metavar="FILE")
    p.add_argument(
        "--cluster-objects",
        dest="context",
        action="append",
        default=[],
        metavar="FILE",
        help="cluster objects the webhook would look up: Namespaces, Nodes, ResourceClaimTemplates, "
        "ResourceClaims, DeviceClasses, ResourceSlices, ComputeDomains (e.g. `kubectl get ns,nodes,"
        "resourceclaimtemplates,deviceclasses,resourceslices,computedomains -A -o yaml`); a file or directory, "
        "repeatable; wins over the inputs' own such objects",
    )
    # the old spelling reads like a kubeconfig context, which is what --context means to kubectl and `audit`
    old_spelling(p, "--context", "--cluster-objects", dest="context", command="check", append=True, metavar="FILE")
    p.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="GLOB",
        help="skip files and directories whose path or name matches GLOB (shell-style; repeatable)",
    )
    p.add_argument(
        "--old",
        action="append",
        default=[],
        metavar="FILE",
        help="the objects being replaced: a checked document with the same apiVersion, kind, namespace and "
        "name is judged as an UPDATE of it (as /validate judges it); a file or directory, repeatable",
    )
    p.add_argument(
        "--as",
        dest="as_user",
        metavar="USER[,GROUP…]",
        help="judge the manifests as this requester would be at admission (the pipeline that applies them): "
        "policy exceptions for the user or its groups apply; ServiceAccounts as "
        "system:serviceaccount:NS:NAME",
    )
    p.add_argument(
        "--date",
        metavar="YYYY-MM-DD",
        help="the day exceptions are judged on (default: today, UTC): see what an expiry will change",
    )
    p.add_argument("-o", "--output", choices=sorted(WRITERS), default="text")
    p.add_argument("--diff", action="store_true", help="show what the webhook would change (text output)")
    p.add_argument("--explain", action="store_true", help="show the decision trace for each object")
    p.add_argument(
        "--expand",
        action="store_true",
        help="also show the pods each workload's controller will create (Deployment, Job, ...), as the webhook "
        "admits them: resources, pool, scheduling, and what it says of them (text, json, jsonl)",
    )
    p.add_argument(
        "--fail-on",
        choices=FAIL_ON,
        default="deny",
        help="exit 1 on denials (default: what the cluster denies, so nothing under an observe "
        "settings.enforcement), also on what enforce would deny (would-deny), or also on warnings (warn)",
    )
    p.add_argument(
        "--workers",
        "-j",
        type=workers_option,
        default=None,
        metavar="N",
        help="processes that parse and judge documents (default: the usable cores, capped by the CPU limit; "
        "1: in this process); "
        "the output is the same for any N. With --old, 1",
    )
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("-v", "--verbose", action="store_true", help="also list skipped documents (text output)")
    shown.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="only denied and warned documents, problems and the summary (text output): for large repositories",
    )
    p.set_defaults(handler=run)


def load_namespaces(path: str | None, default: str) -> Namespaces:
    return Namespaces(default, read_namespace_file(path) if path is not None else {})


def run(args: argparse.Namespace) -> int:
    try:
        policy = load_policy(args.policy)
    except PolicyError as exc:
        print(f"gpu-admission: the policy in {args.policy} does not load:", file=sys.stderr)
        for issue in exc.issues:
            print(f"  {issue.render()}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        requester = Requester.parse(args.as_user) if args.as_user is not None else None
    except ValueError as exc:
        print(f"gpu-admission: --as: {exc} (e.g. --as system:serviceaccount:ci:deployer,ci-group)", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        today = date.fromisoformat(args.date) if args.date else datetime.now(UTC).date()
    except ValueError:
        print(f"gpu-admission: --date: expected YYYY-MM-DD, got {args.date!r}", file=sys.stderr)
        return EXIT_BAD_INPUT
    args.requester, args.today = requester, today
    try:
        labels = read_namespace_file(args.namespaces) if args.namespaces is not None else {}
    except (OSError, ValueError, yaml.YAMLError) as exc:
        print(f"gpu-admission: --namespace-labels: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        context = from_files(read_sources(args.context), args.namespace)
    except ContextError as exc:
        print(f"gpu-admission: --cluster-objects: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        old = read_old(read_sources(args.old), args.namespace) if args.old else None
    except OldError as exc:
        print(f"gpu-admission: --old: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        return _check(args, policy, labels, context, old)
    except BrokenPipeError:  # `check … | head`: the reader has what it wanted
        sys.stderr.close()
        return 1
    except Exception as exc:  # a CI step gets a line and exit 2, never a traceback
        print(
            f"gpu-admission check: internal error ({type(exc).__name__}: {exc}); nothing was judged: please report it",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT


def _check(
    args: argparse.Namespace, policy: Any, labels: dict[str, dict[str, str]], context: Any, old: Any = None
) -> int:
    sources = list(read_sources(args.paths, exclude=args.exclude))
    found = from_inputs(sources, args.namespace)  # the inputs' own Namespaces etc., least authoritative
    found.update(context)
    found.complete = bool(args.context)  # a cluster dump: a claim template it lacks does not exist
    found.namespaces.update(labels)
    namespaces = Namespaces(args.namespace, found.namespaces)
    if args.verbose:
        counts = ", ".join(f"{v} {k}" for k, v in found.counts().items() if v)
        print(f"gpu-admission check: cluster context: {counts or 'none'}", file=sys.stderr)
    options = Options(
        diff=args.diff,
        explain=args.explain,
        fail_on=args.fail_on,
        verbose=args.verbose,
        quiet=args.quiet,
        err=sys.stderr,
    )
    results = check_sources(
        policy,
        sources,
        namespaces=namespaces,
        explain=args.explain,
        expand=args.expand,
        cluster=found.cluster(),
        old=old,
        requester=args.requester,
        today=args.today,
        workers=args.workers if args.workers is not None else usable_cores(),
        render=renderer(args.output, options),  # the workers write each result's part of the report
    )
    tally = Tally()
    stream = Progress(sys.stderr, report=sys.stdout).observe(tally.observe(results))
    WRITERS[args.output](stream, sys.stdout, options, tally)
    if not tally.summary.documents:
        print(
            f"gpu-admission check: nothing to check: no Kubernetes documents in {' '.join(args.paths)}",
            file=sys.stderr,
        )
    code = tally.exit_code(args.fail_on)
    for problem in old.unused() if old is not None else ():
        print(f"gpu-admission: --old: {problem}", file=sys.stderr)
        code = EXIT_BAD_INPUT
    return code
