"""Bytecode caching for the test run, kept outside the checkout, where the environment turned it off.

The suite starts hundreds of Python processes (gunicorn servers and their workers, the CLI, ``check``
pools), each importing the product, and pytest rewrites the asserts of every test module it collects.
With ``PYTHONDONTWRITEBYTECODE`` set, as on the project's machines, none of that was cached: every
process compiled every module from source, and every run (and each xdist worker) rewrote every test
module again (collection took 9.5 s of CPU per process instead of 3).

Where bytecode writing is off, this turns it on with ``sys.pycache_prefix`` / ``PYTHONPYCACHEPREFIX``
pointing at a directory under the temporary directory, for this process and the processes it starts, so
the checkout still gets no ``__pycache__`` (what the variable is usually set for). Python and pytest
validate each cached file against its source's modification time and size, and write it atomically, so
concurrent workers and edited sources are safe. Where bytecode writing is on, nothing changes.

Imported first by ``tests/conftest.py``: before the test modules are collected and before xdist starts
its workers (which inherit the environment).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path


def enable_outside_the_checkout() -> None:
    if not (sys.dont_write_bytecode or os.environ.get("PYTHONDONTWRITEBYTECODE")):
        return
    prefix = os.environ.get("PYTHONPYCACHEPREFIX") or sys.pycache_prefix
    if not prefix:
        prefix = str(Path(tempfile.gettempdir()) / f"gpu-admission-pycache-{os.getuid()}")
    sys.pycache_prefix = prefix
    sys.dont_write_bytecode = False
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = prefix


enable_outside_the_checkout()
