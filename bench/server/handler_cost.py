"""What one review costs inside the server process, below HTTP and TLS: bare echo, engine, our app.

``run.py`` measures whole servers and can say only that ours spends so many µs of worker CPU per
request more than the bare echo. This splits that difference without sockets: the server benchmark's
own bodies (``reviews.py``'s mix, each to ``/mutate`` and ``/validate``) are handed, in process, to

* ``bare``: the bare floor's WSGI callable (``bare_app.py``): read, decode, echo;
* ``engine``: the engine entry behind the endpoint (``mutate`` or ``validate``) on the decoded object,
  with the namespace's labels, nothing else: the judgment proper;
* ``ours``: our WSGI app as gunicorn calls it (``AdmissionRoutes`` in front of Flask, the real
  ``Runtime`` and ``Admitter``, namespaces from the same file as ``run.py``'s server, decision lines
  through the server's own logging configuration to ``/dev/null``, metrics on).

Each figure is CPU time of the whole process (the log flusher thread included) per review of the mix,
best of ``--repeat`` runs of ``--number`` passes over it. ``ours - bare`` is what our app adds to an
echo; ``engine`` is the share of that no edge can remove.

Run: ``python bench/server/handler_cost.py [--number N] [--repeat R]``
"""

from __future__ import annotations

import argparse
import io
import logging.config
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import orjson

sys.path.append(str(Path(__file__).resolve().parents[2]))
from bench.server import reviews
from bench.server.bare_app import bare_app

WSGI = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def _environ(path: str, data: bytes) -> dict[str, Any]:
    """What gunicorn's gthread worker hands the app for the apiserver's POST (the fields apps read)."""
    route, _, query = path.partition("?")
    return {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": route,
        "QUERY_STRING": query,
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(data)),
        "REMOTE_ADDR": "127.0.0.1",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8443",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "wsgi.url_scheme": "https",
        "wsgi.input": io.BytesIO(data),
        "wsgi.errors": sys.stderr,
        "wsgi.version": (1, 0),
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }


def _start_response(status: str, headers: list[tuple[str, str]]) -> None:
    if not status.startswith("200"):
        raise SystemExit(f"the app answered {status}: the benchmark's bodies must be admitted")


def wsgi_pass(app: WSGI, bodies: list[reviews.Body]) -> Callable[[], None]:
    def one_pass() -> None:
        for body in bodies:
            b"".join(app(_environ(body.path, body.data), _start_response))

    return one_pass


def engine_pass(policy: Any, bodies: list[reviews.Body], labels: dict[str, dict[str, str]]) -> Callable[[], None]:
    from webhook.engine import Request
    from webhook.server.admission import ENTRIES

    calls = []
    for body in bodies:
        request = orjson.loads(body.data)["request"]
        ns = request["namespace"]
        endpoint = body.path.partition("?")[0].lstrip("/")
        calls.append((ENTRIES[endpoint], Request(request["object"], namespace=ns, namespace_labels=labels.get(ns))))

    def one_pass() -> None:
        for entry, req in calls:
            entry(policy, req)

    return one_pass


def our_app(workdir: Path, namespaces_file: Path) -> WSGI:
    """The app ``serve`` runs, built the way ``serve`` builds it, without gunicorn and TLS."""
    from webhook.server.app import create_app
    from webhook.server.logs import logconfig_dict
    from webhook.server.namespaces import namespace_source
    from webhook.server.reload import PolicyStore
    from webhook.server.runtime import Runtime
    from webhook.server.settings import ServeSettings

    stdout, sys.stdout = sys.stdout, open(os.devnull, "w")  # noqa: SIM115 - the log handler keeps it
    try:
        logging.config.dictConfig(logconfig_dict("info"))
    finally:
        sys.stdout = stdout
    runtime = Runtime(
        PolicyStore.load("policies"),
        namespace_source(str(namespaces_file)),
        engine_deadline=ServeSettings().engine_deadline,
    )
    return create_app(runtime).wsgi_app


def best_cpu(one_pass: Callable[[], None], number: int, repeat: int, reviews_per_pass: int) -> float:
    """Best CPU µs per review (process-wide, so the log flusher's thread counts)."""
    one_pass()  # warm: memos, imports, the first decision line
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        for _ in range(number):
            one_pass()
        best = min(best, (time.process_time() - t0) / (number * reviews_per_pass))
    return best * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=30, help="passes over the mix per timing (default 30)")
    parser.add_argument("--repeat", type=int, default=7, help="timings per figure, the best kept (default 7)")
    args = parser.parse_args(argv)
    from webhook.policy import load_policy

    with tempfile.TemporaryDirectory(prefix="gpu-admission-handler-") as tmp:
        workdir = Path(tmp)
        bodies = reviews.build(workdir / "bodies", rounds=1)
        namespaces_file = workdir / "bodies" / "namespaces.yaml"
        import yaml

        labels = yaml.safe_load(namespaces_file.read_text())
        policy = load_policy("policies")
        passes = {
            "bare": wsgi_pass(bare_app, bodies),
            "engine": engine_pass(policy, bodies, labels),
            "ours": wsgi_pass(our_app(workdir, namespaces_file), bodies),
        }
        figures: dict[str, list[float]] = {name: [] for name in passes}
        for round_ in range(3):  # alternate, order reversed each round: a busy moment hits all three
            order = list(passes) if round_ % 2 == 0 else list(reversed(passes))
            for name in order:
                figures[name].append(best_cpu(passes[name], args.number, args.repeat, len(bodies)))
    best = {name: min(values) for name, values in figures.items()}
    added = best["ours"] - best["bare"]
    print(f"{len(bodies)} reviews per pass (the server benchmark's mix); CPU µs per review, best of 3 rounds:")
    for name in passes:
        print(f"  {name:<7} {best[name]:8.1f}   (rounds: {', '.join(f'{v:.1f}' for v in figures[name])})")
    print(f"  ours - bare = {added:.1f} µs, of which the engine {best['engine']:.1f} µs "
          f"({best['engine'] / added:.0%}); the rest (parse, response, log line, metrics) "
          f"{added - best['engine']:.1f} µs")


if __name__ == "__main__":
    main()
