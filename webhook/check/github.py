"""``check -o github``: GitHub Actions workflow commands, so findings appear on the PR's changed lines.

Denials become ``::error``, warnings ``::warning`` (title ``[rule-id]``, at the offending field's
file:line), the summary a ``::notice``. Values are escaped as GitHub's toolkit does (``%``, CR, LF
in the message; additionally ``:`` and ``,`` in properties), so a multi-line or comma-bearing message
cannot break the command. The human-readable report follows inside ``::stop-commands::``: manifests
come from pull requests, and an object name with an embedded ``::set-env`` line must stay text.
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, TextIO

from webhook.check.runner import UNJUDGED, CheckResult, Rendered, fails
from webhook.engine.model.decision import Action, Violation

if TYPE_CHECKING:
    from webhook.check.formats import Options, Tally


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


def _level(v: Violation, fail_on: str) -> str | None:
    if fails(v, fail_on):
        return "error"
    if v.action is Action.WARN or v.would_deny:  # what enforce would deny is shown, even under audit
        return "warning"
    return None  # audit: admitted silently, as in the cluster


def write_github(results: Iterable[CheckResult], out: TextIO, options: Options, tally: Tally | None = None) -> None:
    """Annotations as results come; the text report is spooled (to disk past 4 MiB) for the group."""
    from webhook.check.formats import summary_line, tallied, text_lines

    results, tally = tallied(results, tally)

    with tempfile.SpooledTemporaryFile(max_size=4 << 20, mode="w+", encoding="utf-8") as report:
        for r in results:
            if isinstance(r, Rendered):  # a pool worker's: (the text report's lines, the annotations)
                text, notes = r.body
                report.write(text)
                out.write(notes)
                continue
            for line in text_lines(r, options):
                report.write(line + "\n")
            for line in annotations(r, options):
                out.write(line)
        summary = summary_line(tally)
        report.write(summary + "\n")
        out.write(annotation("notice", summary, title="gpu-admission check"))
        token = secrets.token_hex(16)
        out.write(f"::group::{escape_data('gpu-admission check report')}\n::stop-commands::{token}\n")
        report.seek(0)
        shutil.copyfileobj(report, out)
        out.write(f"::{token}::\n::endgroup::\n")


def annotations(r: CheckResult, options: Options) -> Iterator[str]:
    if r.status in UNJUDGED:
        yield annotation(
            "error",
            r.message,
            file=r.file,
            line=r.line or None,
            col=r.column or None,
            title=f"gpu-admission {r.status}",
        )
        return
    if r.attention:
        level = "error" if options.fail_on == "warn" else "warning"
        yield annotation(level, f"{r.label}: {r.message}", file=r.file, line=r.line, title="gpu-admission unjudged")
        return
    if r.decision is None:
        return
    for v in r.decision.violations:
        level = _level(v, options.fail_on)
        if level is None:
            continue
        where = f" ({v.path})" if v.path else ""
        yield annotation(
            level, f"{r.label}: {v.message}{where}", file=r.file, line=r.line_of(v.path), title=f"[{v.rule}]"
        )


def inert_group(title: str, text: str) -> str:
    """``text`` in a collapsed log group, with workflow commands suspended (a fresh random token)."""
    token = secrets.token_hex(16)
    body = text if text.endswith("\n") or not text else text + "\n"
    return f"::group::{escape_data(title)}\n::stop-commands::{token}\n{body}::{token}::\n::endgroup::\n"
