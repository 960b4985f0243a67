"""Helpers for the platform-team workflow tests: run the real CLI in-process and capture its output."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import POLICIES
from webhook.cli import main

DEFAULT_POLICY = (POLICIES / "default.yaml").read_text(encoding="utf-8")


@dataclass
class Run:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys):
    """``cli("policy", "lint", dir)`` -> Run(exit code, stdout, stderr), through ``webhook.cli.main``."""

    def run(*args: str | Path) -> Run:
        capsys.readouterr()
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return Run(code, captured.out, captured.err)

    return run


def write_policy(directory: Path, text: str, name: str = "default.yaml") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(text, encoding="utf-8")
    return directory


def line_of(text: str, needle: str, occurrence: int = 1) -> int:
    """1-based line of the n-th line containing ``needle`` (``needle$``: ending with it)."""
    seen = 0
    anchored = needle.endswith("$")
    for number, line in enumerate(text.splitlines(), start=1):
        if line.rstrip().endswith(needle[:-1]) if anchored else needle in line:
            seen += 1
            if seen == occurrence:
                return number
    raise AssertionError(f"{needle!r} not in text")
