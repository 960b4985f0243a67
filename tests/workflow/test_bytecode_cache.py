"""The suite's bytecode cache (``tests/bytecode_cache.py``) stays out of the checkout, and only steps in
where the environment turned bytecode writing off."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = (
    "import os, sys, tests.bytecode_cache\n"
    "print(sys.pycache_prefix, sys.dont_write_bytecode, os.environ.get('PYTHONDONTWRITEBYTECODE'),"
    " os.environ.get('PYTHONPYCACHEPREFIX'))\n"
)


def _probe(**env: str) -> list[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env={**base, **env}, capture_output=True,
                          text=True, timeout=60, check=True)
    return proc.stdout.split()


def test_with_writing_off_bytecode_goes_to_a_prefix_outside_the_checkout_for_child_processes_too() -> None:
    prefix, off, variable, inherited = _probe(PYTHONDONTWRITEBYTECODE="1")
    assert off == "False" and variable == "None", "this process and the ones it starts write bytecode again"
    assert inherited == prefix and Path(prefix).is_absolute()
    assert not Path(prefix).resolve().is_relative_to(ROOT), "the checkout gets no __pycache__"


def test_with_writing_on_nothing_changes() -> None:
    assert _probe() == ["None", "False", "None", "None"]
