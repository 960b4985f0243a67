"""What ``gpu-admission check`` imports to judge one small file: only what the command uses.

A CI job runs ``check`` on a handful of manifests many times a day; every module another command needs
(the server's web stack, the audit's Kubernetes client, the certificates' crypto, the process pool a
single file never starts) is start-up paid for nothing. These tests run the real console entry in a
fresh interpreter and read ``sys.modules`` afterwards: they assert what was imported, never how long
it took (``bench/cli_startup.py`` measures that).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

POD = ROOT / "examples" / "workloads" / "pod.yaml"

HEAVY = ("flask", "werkzeug", "gunicorn", "kubernetes", "urllib3", "prometheus_client", "cryptography", "jsonpatch")
"""Third-party stacks of the other commands (serve, audit, certs)."""

OTHER_COMMANDS = ("webhook.server", "webhook.audit", "webhook.certs", "webhook.render", "webhook.lint",
                  "webhook.policytest")
"""Our own packages that only other commands use."""

POOL = ("concurrent.futures.process", "multiprocessing.pool", "multiprocessing.context")
"""The process pool: forked only for work bigger than one batch, so one small file never needs it."""

_PROBE = (
    "import json, sys\n"
    "from webhook.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "sys.stdout.flush()\n"
    "print('\\nMODULES ' + json.dumps({'code': code, 'modules': sorted(sys.modules)}))\n"
)


def _modules_after(*argv: str) -> tuple[int, set[str], str]:
    proc = subprocess.run([sys.executable, "-c", _PROBE, *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    marker = [line for line in proc.stdout.splitlines() if line.startswith("MODULES ")]
    assert marker, proc.stdout + proc.stderr
    result = json.loads(marker[-1].removeprefix("MODULES "))
    return result["code"], set(result["modules"]), proc.stdout


def _under(modules: set[str], packages: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in packages))


@pytest.fixture(scope="module")
def check_one_file() -> tuple[int, set[str], str]:
    return _modules_after("check", str(POD))


def test_check_judges_the_file(check_one_file):
    """The probe really ran the check: the README pod is admitted with warnings (exit 0) and reported."""
    code, _, out = check_one_file
    assert code == 0, out
    assert "Pod/chat" in out and "checked 1 document(s)" in out


def test_check_imports_no_heavy_stack(check_one_file):
    _, modules, _ = check_one_file
    assert _under(modules, HEAVY) == []


def test_check_imports_no_other_command(check_one_file):
    """Registering every sub-command imported ``audit``'s modules (its formats, runner, exceptions) for
    a ``check``; only the command on the command line is registered now."""
    _, modules, _ = check_one_file
    assert _under(modules, OTHER_COMMANDS) == []


def test_check_of_one_file_imports_no_process_pool(check_one_file):
    _, modules, _ = check_one_file
    assert _under(modules, POOL) == []


def test_the_top_level_help_still_lists_every_command():
    """Registering only the command given must not hide the others from ``gpu-admission --help``."""
    proc = subprocess.run([sys.executable, "-m", "webhook", "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    for command in ("check", "audit", "serve", "policy", "certs"):
        assert command in proc.stdout


def test_an_unknown_command_is_still_a_usage_error():
    proc = subprocess.run([sys.executable, "-m", "webhook", "chekc", str(POD)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2
    assert "invalid choice: 'chekc'" in proc.stderr and "'check'" in proc.stderr


def test_the_collector_is_off_only_while_the_command_imports():
    """The console entry turns the collector off while the command's modules import (none ran before
    the parser was built; ≈ 90 collections ran there before), then on again: the command's own work (the
    policy, the documents; a long stream, a server) runs with it, so its memory stays flat."""
    probe = (
        "import gc, sys\n"
        "runs = []\n"
        "gc.callbacks.append(lambda phase, info: runs.append(1) if phase == 'start' else None)\n"
        "import webhook.cli as cli\n"
        "real_parser = cli.build_parser\n"
        "at_parser = []\n"
        "def parser(*a):\n"
        "    built = real_parser(*a)\n"
        "    at_parser.append(len(runs))\n"
        "    return built\n"
        "cli.build_parser = parser\n"
        "sys.argv = ['gpu-admission', 'check', sys.argv[1]]\n"
        "before = len(runs)\n"
        "code = cli.main()\n"
        "print('\\nGC', code, at_parser[0] - before, len(runs) > at_parser[0], gc.isenabled())\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe, str(POD)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.stdout.splitlines()[-1] == "GC 0 0 True True", proc.stdout + proc.stderr
