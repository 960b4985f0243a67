"""``gpu-admission audit``: judge what already runs in a cluster (or a snapshot of one) with the policy.

Exit 0 nothing denied, 1 denials (with ``--baseline``: new denials), 2 bad input, an unreachable
cluster, rejected credentials, a bad policy or an object the engine could not judge; each failure
is one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import UTC, date, datetime
from typing import Any

from webhook.audit.exceptions import ExceptionReport
from webhook.audit.formats import WRITERS, Run
from webhook.audit.openreports import FIELD_MANAGER, MAX_RESULTS, ReportBuilder
from webhook.audit.run import WEBHOOK_NAMESPACE, Audit
from webhook.audit.snapshot import SnapshotError
from webhook.audit.tally import EXIT_BAD_INPUT, AuditTally
from webhook.check.progress import Progress
from webhook.cli.policy_dir import HELP as POLICY_HELP
from webhook.cli.policy_dir import default_policy_dir
from webhook.policy import PolicyError, load_policy
from webhook.pool import usable_cores, workers_option


def register(sub: Any) -> None:
    p = sub.add_parser(
        "audit",
        help="judge the objects already in a cluster (or a snapshot) against the policy",
        description="Read Namespaces, Nodes, DeviceClasses, claim templates, claims, Pods and every workload "
        "kind the cluster serves, and judge each GPU-relevant object as stored with the validating webhook's "
        "judgement (nothing is mutated). Exit 0 nothing denied, 1 denials (with --baseline: new denials), 2 bad "
        "input, unreachable cluster, bad credentials or bad policy.",
    )
    p.add_argument(
        "--policy", default=default_policy_dir(), metavar="DIR", help=f"policy directory (default: {POLICY_HELP})"
    )
    source = p.add_argument_group("where the objects come from (default: in-cluster inside a pod, else kubeconfig)")
    source.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    source.add_argument("--context", metavar="NAME", help="kubeconfig context (default: the current one)")
    source.add_argument("--in-cluster", action="store_true", help="use the pod's service account")
    source.add_argument(
        "--snapshot",
        action="extend",
        nargs="+",
        default=[],
        metavar="FILE|DIR",
        help="`kubectl get ns,nodes,deviceclasses,resourceclaimtemplates,resourceclaims,pods,<workload kinds> -A "
        "-o yaml` output (a List, or multi-document YAML) instead of a live cluster",
    )
    p.add_argument("-o", "--output", choices=sorted(WRITERS), default="text")
    p.add_argument(
        "--baseline",
        metavar="OLD_POLICY_DIR",
        help="also judge every object with this (old) policy and report what changes: newly denied, newly "
        "warned, newly admitted, mutated differently; exit 1 only on new denials",
    )
    p.add_argument("--namespace", "-n", metavar="NS", help="audit this namespace only")
    p.add_argument(
        "--apply-reports",
        action="store_true",
        help=f"write the OpenReports reports to the cluster (server-side apply, field manager {FIELD_MANAGER}; "
        f"at most {MAX_RESULTS} results per report)",
    )
    p.add_argument(
        "--webhook-namespace",
        default=WEBHOOK_NAMESPACE,
        metavar="NS",
        help=f"the webhook's own namespace, which its configurations exclude with kube-system (default: "
        f"{WEBHOOK_NAMESPACE}); objects there are counted, not judged",
    )
    p.add_argument(
        "--workers",
        "-j",
        type=workers_option,
        default=None,
        metavar="N",
        help="processes that parse and judge objects (default: the usable cores, capped by the CPU limit; "
        "1: in this process); "
        "the output is the same for any N",
    )
    p.add_argument(
        "--date",
        metavar="YYYY-MM-DD",
        help="the day exceptions are judged on (default: today, UTC): which apply, and which expire within a week",
    )
    p.add_argument(
        "--grant-key",
        metavar="FILE",
        default=os.environ.get("GPU_ADMISSION_GRANT_KEY"),
        help="the webhook's exception grant key file (serve --grant-key; env GPU_ADMISSION_GRANT_KEY): without "
        "it grants cannot be verified, so exceptions held through a controller's grant are not honoured",
    )
    p.add_argument("--page-size", type=int, default=500, metavar="N", help="objects per list request (default 500)")
    p.add_argument(
        "--max-listed", type=int, default=20, metavar="N", help="text output: examples per group (0: all; default 20)"
    )
    p.set_defaults(handler=run)


def _fail(message: str) -> int:
    line = " ".join(message.split())  # one line, whatever a library's message spans
    print(f"gpu-admission audit: {line}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _policy(path: str, what: str) -> Any:
    try:
        return load_policy(path)
    except PolicyError as exc:
        issues = "; ".join(i.render() for i in exc.issues[:3]) + (" …" if len(exc.issues) > 3 else "")
        raise _Stop(f"the {what} in {path} does not load: {issues}") from None


class _Stop(Exception):
    """One line for stderr and exit 2."""


def run(args: argparse.Namespace) -> int:
    from webhook.audit.kube import KubeError

    try:
        return _audit(args)
    except (_Stop, KubeError, SnapshotError) as exc:
        return _fail(str(exc))
    except BrokenPipeError:  # `audit … | head`
        sys.stderr.close()
        return 1
    except Exception as exc:  # a CronJob log gets one line and exit 2, never a traceback
        return _fail(f"internal error ({type(exc).__name__}: {exc}); please report it")


def _audit(args: argparse.Namespace) -> int:
    if args.snapshot and (args.kubeconfig or args.context or args.in_cluster):
        raise _Stop("--snapshot reads files; it cannot be combined with --kubeconfig, --context or --in-cluster")
    if args.snapshot and args.apply_reports:
        raise _Stop("--apply-reports writes to a cluster; use it with --kubeconfig or in-cluster, not --snapshot")
    if args.page_size < 1:
        raise _Stop(f"--page-size must be at least 1 (got {args.page_size})")
    try:
        today = date.fromisoformat(args.date) if args.date else datetime.now(UTC).date()
    except ValueError:
        raise _Stop(f"--date: expected YYYY-MM-DD, got {args.date!r}") from None
    keys = None
    if args.grant_key:
        from webhook.server.grants import read_grant_keys

        try:
            keys = read_grant_keys(args.grant_key)
        except ValueError as exc:
            raise _Stop(f"--grant-key: {exc}") from None
    policy = _policy(args.policy, "policy")
    baseline = _policy(args.baseline, "baseline policy") if args.baseline else None
    kube = None
    inventory: Any
    if args.snapshot:
        from webhook.audit.inventory import SnapshotInventory

        inventory = SnapshotInventory(args.snapshot, args.namespace)
        source = f"snapshot {' '.join(args.snapshot)}"
    else:
        from webhook.audit.inventory import ClusterInventory
        from webhook.audit.kube import Kube, load_client

        in_cluster = args.in_cluster or (
            not args.kubeconfig and not args.context and "KUBERNETES_SERVICE_HOST" in os.environ
        )
        kube = Kube(load_client(args.kubeconfig, args.context, in_cluster), page_size=args.page_size)
        inventory = ClusterInventory(kube, policy, args.namespace)
        source = f"cluster {kube.host}" + (f" (namespace {args.namespace})" if args.namespace else "")
    audit = Audit(
        policy,
        inventory,
        baseline=baseline,
        not_intercepted=frozenset({"kube-system", args.webhook_namespace}),
        today=today,
        grant_keys=keys,
    )
    tally = AuditTally(max_listed=max(0, args.max_listed))
    tally.baseline = baseline is not None
    reports = ReportBuilder(time.time(), policy.settings.enforcement.value)
    exceptions = ExceptionReport(policy, today, verified=keys is not None, max_listed=max(0, args.max_listed))
    report = Run(
        tally,
        reports,
        notes=inventory.notes,
        source=source,
        baseline=args.baseline or "",
        exceptions=exceptions,
        enforcement=policy.settings.enforcement.value,
    )
    progress = Progress(
        sys.stderr,
        report=sys.stdout,
        name="audit",
        unit="objects",
        where=lambda j: getattr(inventory, "listing", "") or j.where,
    )
    workers = args.workers if args.workers is not None else usable_cores()
    stream = progress.observe(reports.observe(tally.observe(exceptions.observe(audit.run(workers)))))
    WRITERS[args.output](stream, sys.stdout, report)
    sys.stdout.flush()
    if args.output != "text":
        for note in inventory.notes:
            print(f"gpu-admission audit: note: {note}", file=sys.stderr)
    if args.apply_reports and kube is not None:
        from webhook.audit.apply import apply_reports

        written = apply_reports(kube, reports, args.namespace)
        print(
            f"gpu-admission audit: applied {written} report(s) (server-side apply, field manager {FIELD_MANAGER})",
            file=sys.stderr,
        )
    return tally.exit_code()
