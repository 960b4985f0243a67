"""``check -o github``: GitHub Actions workflow commands, so findings appear on the PR's changed lines.

Denials become ``::error``, warnings ``::warning`` (title ``[rule-id]``, at the offending field's
file:line), the summary a ``::notice``. Values are escaped as GitHub's toolkit does (``%``, CR, LF
in the message; additionally ``:`` and ``,`` in properties), so a multi-line or comma-bearing message
cannot break the command. The human-readable report follows inside ``::stop-commands::``: manifests
come from pull requests, and an object name with an embedded ``::set-env`` line must stay text.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from io import StringIO
from typing import TYPE_CHECKING, TextIO

from webhook.check.runner import CheckResult, Status, summarize
from webhook.engine.decision import Action

if TYPE_CHECKING:
    from webhook.check.formats import Options


def escape_data(value: str) -> str:
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(value: str) -> str:
    return escape_data(value).replace(":", "%3A").replace(",", "%2C")


def annotation(
    level: str,
    message: str,
    *,
    file: str | None = None,
    line: int | None = None,
    col: int | None = None,
    title: str | None = None,
) -> str:
    """One workflow command line: ``::error file=f,line=3,title=[rule]::message`` + newline."""
    props = [
        f"{key}={escape_property(str(value))}"
        for key, value in (("file", file), ("line", line), ("col", col), ("title", title))
        if value not in (None, "")
    ]
    head = f"::{level} {','.join(props)}" if props else f"::{level}"
    return f"{head}::{escape_data(message)}\n"


def _level(action: Action, fail_on: str) -> str | None:
    if action is Action.DENY or (action is Action.WARN and fail_on == "warn"):
        return "error"
    if action is Action.WARN:
        return "warning"
    return None  # audit: admitted silently, as in the cluster


def write_github(results: Sequence[CheckResult], out: TextIO, options: Options) -> None:
    from webhook.check.formats import summary_line, write_text

    for r in results:
        if r.status in (Status.ERROR, Status.INVALID):
            out.write(
                annotation("error", r.message, file=r.file, line=r.line or None, title=f"gpu-admission {r.status}")
            )
            continue
        if r.decision is None:
            continue
        for v in r.decision.violations:
            level = _level(v.action, options.fail_on)
            if level is None:
                continue
            where = f" ({v.path})" if v.path else ""
            out.write(
                annotation(
                    level, f"{r.label}: {v.message}{where}", file=r.file, line=r.line_of(v.path), title=f"[{v.rule}]"
                )
            )
    out.write(annotation("notice", summary_line(summarize(results), results), title="gpu-admission check"))
    report = StringIO()
    write_text(results, report, options)
    out.write(inert_group("gpu-admission check report", report.getvalue()))


def inert_group(title: str, text: str) -> str:
    """``text`` in a collapsed log group, with workflow commands suspended (a fresh random token)."""
    token = secrets.token_hex(16)
    body = text if text.endswith("\n") or not text else text + "\n"
    return f"::group::{escape_data(title)}\n::stop-commands::{token}\n{body}::{token}::\n::endgroup::\n"
