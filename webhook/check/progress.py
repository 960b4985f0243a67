"""A progress line on stderr for long ``check`` runs, only where a person is watching (a terminal).

CI logs are files or pipes: they never get it, so a log holds the report and nothing else. Nor does a
run whose report goes to the same terminal (the report is the progress, and a redrawn line would mix
with it). When stderr is a terminal and the report is redirected, the line appears once a run has
taken ``after`` seconds, is redrawn at most every ``every`` seconds (a carriage return, no
scrolling) and is erased when the run ends.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TextIO


def _tty(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


class Progress:
    def __init__(
        self,
        stream: TextIO,
        *,
        report: TextIO | None = None,
        after: float = 2.0,
        every: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        name: str = "check",
        unit: str = "documents",
        where: Callable[[Any], str] = lambda r: r.file,
    ) -> None:
        self.enabled = _tty(stream) and not (report is not None and _tty(report))
        self.stream = stream
        self.after = after
        self.every = every
        self.clock = clock
        self.shown = False
        self.name, self.unit, self.where = name, unit, where  # audit counts objects and names its list

    def observe(self, results: Iterable[Any]) -> Iterator[Any]:
        if not self.enabled:
            yield from results
            return
        start = self.clock()
        next_at = start + self.after
        count = 0
        try:
            for r in results:
                count += 1
                if count & 63 == 0 or count == 1:
                    now = self.clock()
                    if now >= next_at:
                        rate = count / max(now - start, 1e-9)
                        what = f"{count:,} {self.unit} ({rate:,.0f}/s), now {self.where(r)}"
                        self._draw(f"gpu-admission {self.name}: {what}")
                        next_at = now + self.every
                yield r
        finally:
            if self.shown:
                self._draw("")

    def _draw(self, text: str) -> None:
        self.stream.write("\r\x1b[2K" + text[:160])
        self.stream.flush()
        self.shown = bool(text)
