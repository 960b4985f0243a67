"""``gpu-admission`` command line: a thin edge that parses arguments and calls the real work.

Each sub-command lives in its own module with ``register(subparsers)``; the module's handler returns
the process exit code. Heavy imports (gunicorn, kubernetes, cryptography) happen inside handlers so
that ``gpu-admission check`` starts fast in CI.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext

from webhook import __version__

# module name under webhook.cli -> registers one top-level sub-command
COMMANDS = ("check", "audit", "serve", "policy", "certs")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or with ``only`` a known command's part of it: registering a command
    imports its module, and ``check`` on one file should not pay for importing ``audit``'s."""
    parser = argparse.ArgumentParser(
        prog="gpu-admission",
        description="Kubernetes admission webhook for GPU workloads: intent in, cluster spec out.",
    )
    parser.add_argument("--version", action="version", version=f"gpu-admission {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS if only is None else (only,):
        try:
            module = importlib.import_module(f"webhook.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"webhook.cli.{name}":
                continue  # sub-command not built into this distribution
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; ``argv`` None is the process's own command line (the console script and
    ``python -m webhook``), whose exit follows the return."""
    code = _run(argv)
    if argv is None:
        # The interpreter's exit collects garbage several times over every object still alive: the
        # policy, pydantic's validators, every module imported, 20 ms of a 0.25 s `check`. Frozen, they
        # are skipped; the process ends next, so nothing frozen needed collecting (atexit still runs).
        gc.freeze()
    return code


@contextmanager
def _imports() -> Iterator[None]:
    """Importing the command's modules (pydantic's validators, the engine's classes) allocates tens of
    thousands of long-lived objects and little garbage, yet the collector ran ≈ 90 times over them, ≈ 13
    ms of a 0.25 s `check`. It is off while they import; then they are frozen (never scanned again; what
    little garbage the imports left is kept, a bounded one-off) and the collector runs as usual for the
    command's own work, so memory stays flat on a long stream or a long-lived server. Only for the
    process's own command line: a caller of ``main(argv)`` (tests) keeps its collector as it is."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()


def _run(argv: Sequence[str] | None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    with _imports() if argv is None else nullcontext():
        from webhook.policy.stacks import StackTableError, stacks

        try:
            stacks()  # every command reads the table (the policy model's provider values come from it)
        except StackTableError as err:
            print(f"gpu-admission: error: {err}; unset GPU_ADMISSION_SHARING_STACKS to use the shipped table, or "
                  "fix the entry", file=sys.stderr)
            return 2
        parser = build_parser(words[0] if words and words[0] in COMMANDS else None)
    args = parser.parse_args(words)
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `gpu-admission check ... | head`
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
