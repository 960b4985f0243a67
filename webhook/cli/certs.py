"""``gpu-admission certs generate|inject``: TLS for clusters without cert-manager.

``generate`` writes (or keeps, or renews) a private CA and the serving pair, optionally persisted in
Secrets so that a Job can run it repeatedly; ``inject`` puts the CA into ``caBundle`` of both webhook
configurations through the Kubernetes API. Exit codes: 0 done, 1 API/RBAC failure, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import timedelta
from pathlib import Path

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def parse_duration(text: str) -> timedelta:
    """Go-style durations as cert-manager writes them (``720h``, ``2160h0m0s``) plus ``d``/``w``."""
    text = text.strip().lower()
    parts = _DURATION.findall(text)
    if not text or "".join(n + u for n, u in parts) != text:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r} (examples: 720h, 30d, 2160h0m0s)")
    return timedelta(seconds=sum(float(n) * _UNITS[u] for n, u in parts))


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "certs",
        help="generate the webhook CA and serving certificate; inject caBundle",
        description="TLS for the admission webhook on clusters without cert-manager.",
    )
    sub = parser.add_subparsers(dest="certs_command", metavar="ACTION")
    sub.required = True

    gen = sub.add_parser(
        "generate",
        help="create or renew the CA and serving certificate (idempotent)",
        description="Write ca.crt, ca.key, tls.crt, tls.key into --out. A valid pair whose SANs cover the "
        "request is kept; a serving certificate expiring within --renew-before is re-issued under the same CA.",
    )
    gen.add_argument("--service", required=True, help="Service name of the webhook")
    gen.add_argument("--namespace", required=True, help="namespace of the Service (and of the Secrets)")
    gen.add_argument("--dns", action="append", default=[], metavar="NAME", help="extra DNS SAN (repeatable)")
    gen.add_argument("--ip", action="append", default=[], metavar="ADDR", help="extra IP SAN (repeatable)")
    gen.add_argument("--out", type=Path, default=Path("certs"), help="output directory (default: certs/)")
    gen.add_argument(
        "--renew-before",
        type=parse_duration,
        default=timedelta(days=30),
        metavar="DURATION",
        help="re-issue the serving certificate when it expires within this (default: 30d; 720h works too)",
    )
    gen.add_argument(
        "--secret", metavar="NAME", help="also keep tls.crt/tls.key/ca.crt in this kubernetes.io/tls Secret"
    )
    gen.add_argument("--ca-secret", metavar="NAME", help="also keep ca.crt/ca.key in this Secret (for later renewals)")
    gen.add_argument(
        "--kubeconfig", help="kubeconfig for --secret/--ca-secret (default: in-cluster, then ~/.kube/config)"
    )
    gen.set_defaults(handler=_generate)

    inj = sub.add_parser(
        "inject",
        help="set caBundle on every webhook of the webhook configurations",
        description="GET each configuration to learn its webhook names, then strategic-merge PATCH "
        "clientConfig.caBundle of each webhook. Rules, selectors and failurePolicy are not touched.",
    )
    inj.add_argument("--ca", required=True, type=Path, help="PEM file with the CA certificate(s)")
    inj.add_argument("--mutating", metavar="NAME", help="MutatingWebhookConfiguration name")
    inj.add_argument("--validating", metavar="NAME", help="ValidatingWebhookConfiguration name")
    inj.add_argument(
        "--keep-previous",
        action="store_true",
        help="append to the current bundle instead of replacing it (CA rotation; expired certs are dropped)",
    )
    inj.add_argument("--dry-run", action="store_true", help="print the patches, do not PATCH")
    inj.add_argument(
        "--from-file",
        type=Path,
        metavar="FILE",
        help="with --dry-run: read the current configurations from FILE (e.g. manifests/base/rendered.yaml "
        "or `kubectl kustomize` output) instead of the cluster, so no cluster is needed",
    )
    inj.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then $KUBECONFIG or ~/.kube/config)")
    inj.add_argument("--context", help="kubeconfig context")
    inj.set_defaults(handler=_inject)


def _generate(args: argparse.Namespace) -> int:
    from webhook.certs.generate import describe, format_description, generate

    api_client = None
    secrets = []
    if args.secret or args.ca_secret:
        from webhook.certs import secret as sec
        from webhook.certs.inject import load_api_client

        api_client = load_api_client(args.kubeconfig)
        # CA first: on a rotation the CA Secret must never lag behind the serving pair it signed.
        secrets = [s for s in (sec.ca_secret(args.ca_secret or ""), sec.serving_secret(args.secret or "")) if s.name]
        try:
            for spec in secrets:
                restored = sec.seed(api_client, args.namespace, spec, args.out)
                if restored:
                    print(f"restored {', '.join(restored)} from secret {args.namespace}/{spec.name}")
        except sec.SecretError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    try:
        result = generate(args.out, args.service, args.namespace, args.dns, args.ip, args.renew_before)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not result.created:
        print(f"kept the valid certificates in {result.out_dir}")
    else:
        for reason in result.reasons:
            print(f"issuing: {reason}")
        print(f"wrote {result.cert} and {result.key}" + (f" (new CA {result.ca_cert})" if result.ca_created else ""))
        if result.ca_created:
            print("new CA: run `gpu-admission certs inject --keep-previous` so the API server trusts it")
    print(format_description(describe([result.ca_cert, result.cert])))
    if api_client is not None:
        from webhook.certs import secret as sec

        try:
            for spec in secrets:
                state = sec.store(api_client, args.namespace, spec, args.out)
                print(f"secret {args.namespace}/{spec.name}: {state}")
        except sec.SecretError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    return 0


def _inject(args: argparse.Namespace) -> int:
    from kubernetes.config import ConfigException  # the handler may import kubernetes; the parser may not

    from webhook.certs.bundle import BundleError
    from webhook.certs.inject import InjectError, Kind, configurations_from_yaml, inject, load_api_client

    targets: list[tuple[Kind, str]] = []
    if args.mutating:
        targets.append(("mutating", args.mutating))
    if args.validating:
        targets.append(("validating", args.validating))
    if not targets:
        print("error: give --mutating NAME and/or --validating NAME", file=sys.stderr)
        return 2
    try:
        ca_pem = args.ca.read_bytes()
    except OSError as exc:
        print(f"error: cannot read {args.ca}: {exc}", file=sys.stderr)
        return 2
    if args.from_file is not None and not args.dry_run:
        print("error: --from-file plans patches offline; add --dry-run", file=sys.stderr)
        return 2
    try:
        current = None
        if args.from_file is not None:
            try:
                current = configurations_from_yaml(args.from_file.read_text())
            except OSError as exc:
                print(f"error: cannot read {args.from_file}: {exc}", file=sys.stderr)
                return 2
        api_client = load_api_client(args.kubeconfig, args.context) if current is None else None
        plans = inject(
            ca_pem,
            targets,
            keep_previous=args.keep_previous,
            dry_run=args.dry_run,
            api_client=api_client,
            current=current,
        )
    except BundleError as exc:
        print(f"error: {args.ca}: {exc}", file=sys.stderr)
        return 2
    except InjectError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except ConfigException as exc:
        print(f"error: no Kubernetes configuration: {exc}", file=sys.stderr)
        return 1
    for p in plans:
        target = f"{p.kind}webhookconfiguration/{p.name}"
        sizes = ", ".join(f"{w} ({n} CA{'s' if n != 1 else ''})" for w, n in p.bundle_sizes.items())
        if args.dry_run:
            print(f"# dry run: PATCH {target} (application/strategic-merge-patch+json)")
            print(json.dumps(p.patch, indent=2))
        elif p.applied:
            print(f"patched {target}: {sizes}")
        else:
            print(f"unchanged {target}: {sizes}")
    return 0
