"""Old flag spellings: still accepted, but each use says on stderr which name replaced it.

One name has one meaning across the CLI: ``--namespace-labels`` (where namespace labels come from),
``--cluster-objects`` (files of cluster objects), ``--namespace`` (namespace names) and ``--context``
(a kubeconfig context, as kubectl means it). The spellings that meant something else in one sub-command
(``--namespaces``, ``check``/``policy``'s ``--context``) keep working so that scripts and CI files do
not break on upgrade, and the warning tells their owners what to write instead.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any


def warn_old(old: str, new: str, command: str) -> None:
    """The one deprecation message, so tests and users see the same words wherever it is printed."""
    print(
        f"gpu-admission {command}: warning: {old} is an old spelling, deprecated; use {new} (same meaning)",
        file=sys.stderr,
    )


class _OldSpelling(argparse.Action):
    """Stores (or appends) into the new flag's destination, after warning once per use."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, new: str, command: str, append: bool,
                 **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.new, self.command, self.append = new, command, append

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        warn_old(option_string or self.option_strings[0], self.new, self.command)
        if self.append:
            current = list(getattr(namespace, self.dest, None) or [])
            setattr(namespace, self.dest, [*current, values])
        else:
            setattr(namespace, self.dest, values)


def old_spelling(parser: argparse.ArgumentParser, old: str, new: str, *, dest: str, command: str,
                 append: bool = False, metavar: str = "VALUE") -> None:
    """Accept ``old`` as a hidden alias of ``new`` (same ``dest``); its default is the new flag's."""
    parser.add_argument(
        old,
        dest=dest,
        action=_OldSpelling,
        new=new,
        command=command,
        append=append,
        default=argparse.SUPPRESS,
        metavar=metavar,
        help=argparse.SUPPRESS,
    )
