"""``gpu-admission serve``: the admission server (gunicorn, gthread workers, TLS only).

Flags win over ``GPU_ADMISSION_*`` environment variables, which win over defaults. Everything that
can be wrong with the configuration (policy, certificate paths, namespace file, bind addresses) is
checked here, before gunicorn starts, and reported with exit code 2; a broken policy prints every
``file:line:col`` problem.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

EXIT_BAD_CONFIG = 2
SERVICE = "gpu-admission"
NAMESPACE = "gpu-admission"
DEV_DNS = ("localhost",)
DEV_IPS = ("127.0.0.1", "::1")


def register(sub: Any) -> None:
    from webhook.cli.spelling import old_spelling
    from webhook.server.settings import ENV_PREFIX, ServeSettings, env

    d = ServeSettings()
    p = sub.add_parser(
        "serve",
        help="run the admission webhook server (TLS, /mutate, /validate, /healthz, /readyz)",
        description="Run the admission server under gunicorn. Without --tls-cert/--tls-key a development CA "
        "and serving certificate are created in --certs-dir. Every option also reads "
        f"{ENV_PREFIX}<OPTION> (e.g. {ENV_PREFIX}WORKERS); a flag wins over the environment.",
    )

    def opt(flag: str, default: object, help: str, *, metavar: str = "F", **kwargs: Any) -> None:
        # a string default goes through ``type`` like a command-line value, so a bad environment value
        # is an ordinary usage error of ``serve`` (and never breaks the other sub-commands)
        name = flag[2:].replace("-", "_").upper()
        fallback = None if default is None else str(default)
        shown = f" (default {default})" if default is not None else ""
        p.add_argument(flag, default=env(name, fallback), metavar=metavar, help=f"{help}{shown}", **kwargs)

    opt("--policy", d.policy, "policy directory", metavar="DIR")
    opt("--tls-cert", None, "serving certificate (PEM, chain allowed)")
    opt("--tls-key", None, "serving key (PEM)")
    opt("--client-ca", None, "require client certificates signed by this CA")
    opt(
        "--client-names",
        ",".join(d.client_names),
        "with --client-ca: the client certificate names (CN or DNS SAN) accepted, comma-separated",
        metavar="NAMES",
    )
    opt("--bind", d.bind, "TLS listener", metavar="HOST:PORT")
    opt("--workers", d.workers, "worker processes; size to the CPU limit", metavar="N", type=int)
    opt("--threads", d.threads, "threads per worker", metavar="N", type=int)
    opt(
        "--metrics-bind",
        d.metrics_bind,
        "plain-HTTP /metrics served by the master; 'off' disables it",
        metavar="HOST:PORT",
    )
    p.add_argument(
        "--namespace-labels",
        dest="namespaces",
        default=None,  # resolved in run(): GPU_ADMISSION_NAMESPACE_LABELS, the old GPU_ADMISSION_NAMESPACES, auto
        metavar="FILE|cluster|none",
        help="where namespace labels come from: a YAML file {ns: {label: value}} (or Namespace objects), "
        "'cluster' (list/watch through the API) or 'none'; auto = cluster inside a pod, none elsewhere "
        f"(default {d.namespaces}; environment {ENV_PREFIX}NAMESPACE_LABELS)",
    )
    old_spelling(p, "--namespaces", "--namespace-labels", dest="namespaces", command="serve",
                 metavar="FILE|cluster|none")
    opt(
        "--dra",
        "auto",
        "watch DRA ResourceClaimTemplates, ResourceClaims and DeviceClasses to resolve pods' claims: "
        "'cluster', 'off', or auto = cluster when namespace labels come from the cluster",
        metavar="cluster|off|auto",
        choices=("cluster", "off", "auto"),
    )
    opt(
        "--nodes",
        "auto",
        "watch Nodes: what each MIG pool's nodes advertise (mig-profile-unavailable, and the gauge "
        "gpu_admission_pool_mig_nodes_disagreeing): 'cluster', 'off', or auto = cluster when namespace labels "
        "come from the cluster",
        metavar="cluster|off|auto",
        choices=("cluster", "off", "auto"),
    )
    opt(
        "--grant-key",
        None,
        "HMAC key file for exception grants (one key per line, the first signs): without it pods that "
        "controllers create never carry a policy exception",
        metavar="FILE",
    )
    opt("--kubeconfig", None, "kubeconfig for --namespace-labels cluster outside a pod")
    opt("--certs-dir", d.certs_dir, "where development certificates go", metavar="DIR")
    opt("--keepalive", d.keepalive, "idle keep-alive seconds", metavar="S", type=int)
    opt(
        "--request-timeout",
        d.request_timeout,
        "seconds a client has to send a whole request (TLS handshake, headers, body) before it is cut off",
        metavar="S",
        type=float,
    )
    opt(
        "--engine-deadline",
        d.engine_deadline,
        "seconds the engine may take per review, below the webhooks' timeoutSeconds; past it /mutate "
        "follows settings.failure and /validate denies (engine-error)",
        metavar="S",
        type=float,
    )
    opt("--graceful-timeout", d.graceful_timeout, "seconds in-flight reviews get after SIGTERM", metavar="S", type=int)
    opt("--policy-interval", d.policy_interval, "how often the policy directory is re-checked", metavar="S", type=float)
    opt("--cert-interval", d.cert_interval, "how often the certificate files are re-checked", metavar="S", type=float)
    opt("--log-level", d.log_level, "log level", metavar="LEVEL", choices=("debug", "info", "warning", "error"))
    p.set_defaults(handler=run)


def _fail(message: str) -> int:
    print(f"gpu-admission serve: {message}", file=sys.stderr)
    return EXIT_BAD_CONFIG


def _multiproc_dir() -> str | None:
    """Point prometheus_client at a multiprocess directory before it is imported; return it if we made it."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        os.makedirs(os.environ["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)
        made = None
    else:
        base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        made = tempfile.mkdtemp(prefix="gpu-admission-metrics-", dir=base)
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = made
    if "prometheus_client.values" in sys.modules:  # imported too early: re-pick the value class
        from prometheus_client import values

        values.ValueClass = values.get_value_class()
    from webhook.server.metrics import wipe_multiproc_dir

    wipe_multiproc_dir()  # before any metric is written: a previous run's files would add to our totals
    return made


def _dev_certs(certs_dir: str) -> tuple[str, str]:
    from webhook.certs.generate import generate

    result = generate(Path(certs_dir), SERVICE, NAMESPACE, dns=DEV_DNS, ips=DEV_IPS)
    verb = "created" if result.created else "reusing"
    print(
        f"gpu-admission serve: no --tls-cert/--tls-key given; {verb} development certificates in {certs_dir}/ "
        f"(CA {result.ca_cert}, serving cert {result.cert} for {SERVICE}.{NAMESPACE}.svc, localhost, 127.0.0.1). "
        "Not for production.",
        file=sys.stderr,
    )
    return str(result.cert), str(result.key)


def _namespace_labels(flag: str | None) -> str:
    """The flag, else ``GPU_ADMISSION_NAMESPACE_LABELS``, else the old ``GPU_ADMISSION_NAMESPACES`` (with a
    warning: deployments written for an older release keep their namespace source), else ``auto``."""
    from webhook.cli.spelling import warn_old
    from webhook.server.settings import ENV_PREFIX, ServeSettings, env

    if flag:
        return flag
    value = env("NAMESPACE_LABELS")
    if value is None and (value := env("NAMESPACES")) is not None:
        warn_old(f"{ENV_PREFIX}NAMESPACES", f"{ENV_PREFIX}NAMESPACE_LABELS", "serve")
    return value if value is not None else ServeSettings().namespaces


def run(args: argparse.Namespace) -> int:
    from webhook.server.settings import ServeSettings, split_hostport

    if bool(args.tls_cert) != bool(args.tls_key):
        return _fail("--tls-cert and --tls-key go together")
    if args.workers < 1 or args.threads < 1:
        return _fail("--workers and --threads must be at least 1")
    metrics_bind = None if str(args.metrics_bind).lower() in ("", "off", "none", "0") else args.metrics_bind
    try:
        host, port = split_hostport(args.bind)
        if metrics_bind:
            metrics_host, metrics_port = split_hostport(metrics_bind)
            wildcards = ("0.0.0.0", "::")
            overlap = metrics_host == host or host in wildcards or metrics_host in wildcards
            if metrics_port == port and overlap:  # the metrics listener would hold it; every worker would retry
                return _fail(f"--metrics-bind {metrics_bind} takes the port of --bind {args.bind}: use another port")
    except ValueError as exc:
        return _fail(str(exc))
    if not 0 < args.engine_deadline <= 30:
        return _fail("--engine-deadline must be between 0 and 30 seconds (the apiserver waits at most 30)")
    if not 0 < args.request_timeout <= 60:
        return _fail("--request-timeout must be between 0 and 60 seconds")
    client_names = tuple(n.strip() for n in str(args.client_names or "").split(",") if n.strip())
    if args.client_ca and not client_names:
        return _fail("--client-names must name at least one client (e.g. kube-apiserver) with --client-ca")
    for flag, path in (("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key), ("--client-ca", args.client_ca)):
        if path and not os.path.isfile(path):
            return _fail(f"{flag} {path}: no such file")

    grant_keys = None
    if args.grant_key:
        from webhook.server.grants import read_grant_keys

        try:
            grant_keys = read_grant_keys(args.grant_key)
        except ValueError as exc:
            return _fail(f"--grant-key: {exc}")

    cleanup = _multiproc_dir()
    # from here on prometheus_client may be imported (multiprocess mode is set up)
    from webhook.policy import PolicyError
    from webhook.server.gunicorn_app import AdmissionServer
    from webhook.server.namespaces import namespace_source
    from webhook.server.reload import PolicyStore
    from webhook.server.runtime import Runtime
    from webhook.server.tls import CertReloader

    try:
        store = PolicyStore.load(args.policy)
    except PolicyError as exc:
        print(f"gpu-admission serve: the policy in {args.policy} does not load:", file=sys.stderr)
        for issue in exc.issues:
            print(f"  {issue.render()}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    args.namespaces = _namespace_labels(args.namespaces)
    try:
        namespaces = namespace_source(args.namespaces, args.kubeconfig)
    except (OSError, ValueError) as exc:
        return _fail(f"--namespace-labels: {exc}")
    except Exception as exc:  # kubernetes config errors, YAML errors
        return _fail(f"--namespace-labels {args.namespaces}: {type(exc).__name__}: {exc}")

    tls_cert, tls_key = args.tls_cert, args.tls_key
    if not tls_cert:
        tls_cert, tls_key = _dev_certs(args.certs_dir)
    from webhook.server.tls import check_files

    problem = check_files(tls_cert, tls_key, args.client_ca)
    if problem:  # never a "ready" server that fails every handshake
        return _fail(f"{problem}; nothing started")

    settings = ServeSettings(
        policy=args.policy,
        tls_cert=tls_cert,
        tls_key=tls_key,
        client_ca=args.client_ca,
        client_names=client_names,
        bind=args.bind,
        workers=args.workers,
        threads=args.threads,
        metrics_bind=metrics_bind,
        namespaces=args.namespaces,
        kubeconfig=args.kubeconfig,
        certs_dir=args.certs_dir,
        keepalive=args.keepalive,
        graceful_timeout=args.graceful_timeout,
        request_timeout=args.request_timeout,
        engine_deadline=args.engine_deadline,
        policy_interval=args.policy_interval,
        cert_interval=args.cert_interval,
        log_level=args.log_level,
    )
    claims = None
    watches_cluster = getattr(namespaces, "status", lambda: {})().get("mode") == "cluster"
    if args.dra == "cluster" or (args.dra == "auto" and watches_cluster):
        from webhook.server.claim_watch import ClaimObjects, resource_api_from_config

        kubeconfig = args.kubeconfig
        claims = ClaimObjects.from_api(lambda: resource_api_from_config(kubeconfig))
    nodes = None
    if args.nodes == "cluster" or (args.nodes == "auto" and watches_cluster):
        from webhook.server.node_watch import NodeObjects, core_api_from_config

        node_kubeconfig = args.kubeconfig
        nodes = NodeObjects.from_api(lambda: core_api_from_config(node_kubeconfig))
    parents = None
    if watches_cluster:  # scale reviews are judged on the object they scale, read from the apiserver
        from webhook.server.namespace_watch import api_client_from_config
        from webhook.server.scale import ApiParents

        kubeconfig = args.kubeconfig
        parents = ApiParents(lambda: api_client_from_config(kubeconfig))
    runtime = Runtime(
        store=store,
        namespaces=namespaces,
        claims=claims,
        nodes=nodes,
        parents=parents,
        tls=CertReloader(settings.cert_interval),
        policy_interval=settings.policy_interval,
        engine_deadline=settings.engine_deadline,
        grant_keys=grant_keys,
    )
    AdmissionServer(settings, runtime, cleanup_dir=cleanup).run()
    return 0
