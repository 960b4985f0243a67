"""JSON logs: one line per admission decision, and gunicorn's own lines in the same shape.

A decision line carries identifiers and the verdict (uid, kind, namespace/name, operation, allowed,
rule ids, patch size, latency) and never the object: pod specs hold environment variables and other
secrets, and the apiserver's audit log is the place for bodies.

Writing is the expensive part of a log line, not formatting it: ``StreamHandler`` holds its lock
across ``write`` + ``flush``, one syscall per line, and with eight request threads the lock and the
GIL hand-offs around that syscall cost more than the rest of the line (measured in
docs/performance.md). :class:`LineWriter` writes the same lines with *combining*: a thread appends
its formatted line to a pending list; if no write is in progress it becomes the writer and writes
everything pending in one ``write``; otherwise the thread already writing picks the line up before
it finishes. A line is still written before its own ``emit`` returns whenever nothing else is being
written, so a quiet server logs exactly as before, and a busy one writes several lines per syscall.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Any, TextIO

import orjson

DECISION_LOGGER = "gpu_admission.decision"
SERVER_LOGGER = "gpu_admission.server"

decision_log = logging.getLogger(DECISION_LOGGER)
server_log = logging.getLogger(SERVER_LOGGER)


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "msg", "pid", ...fields}`` on one line; ``extra={"fields": {...}}``."""

    def format(self, record: logging.LogRecord) -> str:
        seconds = int(record.created)
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            "pid": record.process,
        }
        fields = getattr(record, "fields", None)
        if fields:
            out.update(fields)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


DECISION_FLUSH_DELAY = 0.02
"""Seconds a decision line may wait to be written together with others (see :class:`LineWriter`)."""


class LineWriter(logging.StreamHandler):  # type: ignore[type-arg]
    """A ``StreamHandler`` that formats outside any lock, combines concurrent writes, and batches
    decision lines.

    * Every line is formatted by the thread that logs it, outside any lock.
    * Decision lines (one per review) are not written one by one: the first one of a batch wakes a
      flusher thread that writes whatever has accumulated ``delay`` seconds later, in one ``write``.
      On a container's stdout (a pipe read by the runtime) every write wakes the reader on another
      CPU; per line, that cost more worker CPU than formatting the line (docs/performance.md).
    * Every other line (gunicorn's, warnings, errors) is written at once, after any pending
      decision lines, so order is kept and a crash report is never held back. A worker that exits
      normally writes everything (``Worker exiting`` goes through here, and ``flush`` at shutdown);
      a worker killed with SIGKILL loses at most the last ``delay`` seconds of decision lines.
    * Only one thread writes at a time (``_writing``); a line logged meanwhile is picked up by it.
    """

    def __init__(self, stream: TextIO | None = None, delay: float = DECISION_FLUSH_DELAY):
        super().__init__(stream if stream is not None else sys.stdout)
        self.delay = delay
        self._after_fork()
        os.register_at_fork(after_in_child=self._after_fork)

    def _after_fork(self) -> None:
        """Fresh lock, list and flusher: threads do not survive fork, and the lock may have been held."""
        self._pending: list[str] = []
        self._writing = False
        self._armed = False
        self._guard = threading.Lock()  # held for list operations only, never across I/O
        self._wake = threading.Event()
        self._flusher: threading.Thread | None = None

    def handle(self, record: logging.LogRecord) -> bool:  # type: ignore[override]
        rv = self.filter(record)
        if rv:
            self.emit(rv if isinstance(rv, logging.LogRecord) else record)
        return bool(rv)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + self.terminator
        except Exception:
            self.handleError(record)
            return
        self.submit(line, defer=self.delay > 0 and record.name == DECISION_LOGGER)

    def submit(self, line: str, *, defer: bool) -> None:
        """Queue one formatted line (ending in the terminator); ``defer`` batches it (decision lines)."""
        with self._guard:
            self._pending.append(line)
            if self._writing:
                return  # the thread writing now takes this line before it returns
            if defer:
                if not self._armed:
                    self._armed = True
                    if self._flusher is None:
                        self._flusher = threading.Thread(
                            target=self._flush_loop, name="gpu-admission-log-flush", daemon=True
                        )
                        self._flusher.start()
                    self._wake.set()
                return
            self._writing = True
        self._drain()

    def _flush_loop(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            time.sleep(self.delay)
            with self._guard:
                self._armed = False
                if self._writing or not self._pending:
                    continue
                self._writing = True
            self._drain()

    def _drain(self) -> None:
        """Write pending lines until none are left; only the thread that set ``_writing`` runs this."""
        try:
            while True:
                with self._guard:
                    batch, self._pending = self._pending, []
                    if not batch:
                        self._writing = False
                        return
                try:
                    self.stream.write(batch[0] if len(batch) == 1 else "".join(batch))
                    self.stream.flush()
                except Exception:  # e.g. a closed pipe: the lines are lost, the request is not
                    self.handleError(logging.makeLogRecord({"msg": "log write failed"}))
        except BaseException:
            with self._guard:
                self._writing = False
            raise

    def flush(self) -> None:
        """Write everything pending now (shutdown, tests); waits briefly for a write in progress."""
        deadline = time.monotonic() + 2.0
        while True:
            with self._guard:
                if not self._pending and not self._writing:
                    break
                mine = not self._writing
                if mine:
                    self._writing = True
            if mine:
                self._drain()
            elif time.monotonic() > deadline:
                break
            else:
                time.sleep(0.001)
        super().flush()


class ListeningAddress(logging.Filter):
    """Puts the address back into gunicorn's ``Listening at: %s (%s)`` line.

    With ``reuse_port`` the master binds nothing (each worker opens its own socket), so gunicorn
    logs ``Listening at:  (pid)`` with an empty address. The line is the first thing an operator
    greps for; it names the TLS address the workers listen on."""

    def __init__(self, bind: str = ""):
        super().__init__()
        self.url = f"https://{bind} (one SO_REUSEPORT socket per worker)" if bind else ""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if self.url and record.msg == "Listening at: %s (%s)" and isinstance(args, tuple) and args and not args[0]:
            record.args = (self.url, *args[1:])
        return True


def logconfig_dict(level: str = "info", bind: str = "") -> dict[str, Any]:
    """gunicorn ``logconfig_dict``: every logger (ours and gunicorn's) as JSON lines on stdout."""
    handler = {"()": LineWriter, "formatter": "json", "stream": "ext://sys.stdout"}
    level = level.upper()
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter}},
        "filters": {"listening": {"()": ListeningAddress, "bind": bind}},
        "handlers": {"json": handler},
        "root": {"level": level, "handlers": ["json"]},
        "loggers": {
            "gunicorn.error": {
                "level": level,
                "handlers": ["json"],
                "filters": ["listening"],
                "propagate": False,
                "qualname": "gunicorn.error",
            },
            "gunicorn.access": {"level": level, "handlers": [], "propagate": False, "qualname": "gunicorn.access"},
            DECISION_LOGGER: {"level": level, "handlers": ["json"], "propagate": False},
            SERVER_LOGGER: {"level": level, "handlers": ["json"], "propagate": False},
            "kubernetes": {"level": "WARNING"},
            "urllib3": {"level": "WARNING"},
        },
    }


class _DecisionLine:
    """Writes decision lines without a ``LogRecord`` when the decision logger is plainly configured.

    A decision line is written on every review; building a ``LogRecord`` (thread, process and time
    lookups), walking the logger's handlers and formatting through the generic ``Formatter`` cost
    more than the JSON itself, and in the server that code is cold on every request (measured in
    docs/performance.md). When the decision logger has exactly the handler ``logconfig_dict`` gives
    it (one :class:`LineWriter` with :class:`JsonFormatter`, no filters anywhere, no propagation), the
    line is formatted here and handed to that handler directly. It is byte for byte the line
    ``JsonFormatter`` would write. Any other configuration (tests, embedding, a user's dictConfig)
    takes the standard logging path, so nothing is bypassed that someone set up.
    """

    __slots__ = ("_head", "_pid", "_second", "_tail")

    def __init__(self) -> None:
        self._second = -1
        self._head = ""
        self._pid = os.getpid()
        self._tail = self._make_tail()
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        self._pid = os.getpid()
        self._tail = self._make_tail()

    def _make_tail(self) -> str:
        # what follows the milliseconds: the fixed fields, serialised once, and the comma before
        # the review's own fields. Encoded by orjson, so the bytes are the formatter's.
        fixed = orjson.dumps({"level": "info", "logger": DECISION_LOGGER, "msg": "admission", "pid": self._pid})
        return 'Z",' + fixed[1:-1].decode() + ","

    def handler(self) -> LineWriter | None:
        """The handler to write to directly, or None for the standard path. Checked on every line
        (a few attribute reads), so a later ``dictConfig`` or added filter takes effect at once."""
        handlers = decision_log.handlers
        if len(handlers) != 1 or decision_log.filters or decision_log.propagate:
            return None
        only = handlers[0]
        if isinstance(only, LineWriter) and type(only.formatter) is JsonFormatter and not only.filters:
            return only
        return None

    def write(self, handler: LineWriter, fields: dict[str, Any]) -> None:
        """``{"ts":…,"level":…,"logger":…,"msg":…,"pid":…,`` + the fields' own JSON: the fixed part
        is built once per second (the timestamp) and once per process (the rest), not per line."""
        now = time.time()
        second = int(now)
        if second != self._second:  # one strftime per second, not per line
            self._head = '{"ts":"' + time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)) + "."
            self._second = second
        try:
            body = orjson.dumps(fields, default=str).decode()
        except Exception:
            handler.handleError(logging.makeLogRecord({"msg": "decision line not serialisable"}))
            return
        millis = int((now - second) * 1000)
        line = f"{self._head}{millis:03d}{self._tail}{body[1:]}" if len(body) > 2 else None
        if line is None:  # no fields (never from the server): the formatter's shape, no trailing comma
            line = f"{self._head}{millis:03d}{self._tail[:-1]}}}"
        handler.submit(line + handler.terminator, defer=handler.delay > 0)


_decision_line = _DecisionLine()


def log_decision(fields: dict[str, Any]) -> None:
    """One line per admission review; cheap when the decision logger is disabled.

    The usual configuration writes through :class:`_DecisionLine`'s direct path. Otherwise the record
    is built directly rather than with ``Logger.info``, which would walk the stack for the caller's
    file and line (``findCaller``) that no line prints; level, filters, handlers and propagation
    still apply through ``Logger.handle``."""
    if not decision_log.isEnabledFor(logging.INFO):
        return
    handler = _decision_line.handler()
    if handler is not None and handler.level <= logging.INFO:
        _decision_line.write(handler, fields)
        return
    decision_log.handle(
        decision_log.makeRecord(DECISION_LOGGER, logging.INFO, __file__, 0, "admission", (), None,
                                "log_decision", {"fields": fields})
    )
