"""``gpu-admission check PATH… | -``: the admission engine over manifests, offline, for CI."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import yaml

from webhook.check.formats import WRITERS, Options, exit_code
from webhook.check.inputs import read_sources
from webhook.check.runner import Namespaces, check_sources
from webhook.namespace_labels import read_namespace_file
from webhook.policy import PolicyError, load_policy

EXIT_BAD_INPUT = 2


def register(sub: Any) -> None:
    p = sub.add_parser(
        "check",
        help="check manifests against the policy (same engine as admission)",
        description="Run Pods, Jobs, Volcano Jobs and pod controllers through the admission engine offline. "
        "Exit 0 admitted, 1 denied (or warned with --fail-on warn), 2 bad input or bad policy.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="files, directories (recursive) or - for stdin")
    p.add_argument("--policy", default="policies", metavar="DIR", help="policy directory (default: policies)")
    p.add_argument(
        "--namespace",
        "-n",
        default="default",
        metavar="NS",
        help="namespace for objects that do not set one (default: default)",
    )
    p.add_argument(
        "--namespaces",
        metavar="FILE",
        help="namespace labels: a YAML map {namespace: {label: value}} or Namespace objects "
        "(e.g. `kubectl get ns -o yaml`)",
    )
    p.add_argument("-o", "--output", choices=sorted(WRITERS), default="text")
    p.add_argument("--diff", action="store_true", help="show what the webhook would change (text output)")
    p.add_argument("--explain", action="store_true", help="show the decision trace for each object")
    p.add_argument(
        "--fail-on",
        choices=("deny", "warn"),
        default="deny",
        help="exit 1 on denials (default) or also on warnings",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="also list skipped documents (text output)")
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
        namespaces = load_namespaces(args.namespaces, args.namespace)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        print(f"gpu-admission: --namespaces: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    results = list(
        check_sources(policy, read_sources(args.paths), namespaces=namespaces, explain=args.explain)
    )
    options = Options(diff=args.diff, explain=args.explain, fail_on=args.fail_on, verbose=args.verbose)
    WRITERS[args.output](results, sys.stdout, options)
    if args.output == "yaml":  # keep stdout applyable; problems go to stderr
        for r in results:
            if r.status.value in ("error", "invalid"):
                print(f"{r.file}:{r.line}: {r.status.value}: {r.message}", file=sys.stderr)
            elif r.decision is not None:
                for v in r.decision.violations:
                    print(f"{r.file}:{r.line_of(v.path)}: {v.action.value} {v.render()}", file=sys.stderr)
    return exit_code(results, args.fail_on)
