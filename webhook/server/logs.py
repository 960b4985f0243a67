"""JSON logs: one line per admission decision, and gunicorn's own lines in the same shape.

A decision line carries identifiers and the verdict (uid, kind, namespace/name, operation, allowed,
rule ids, patch size, latency) and never the object: pod specs hold environment variables and other
secrets, and the apiserver's audit log is the place for bodies.
"""

from __future__ import annotations

import logging
import time
from typing import Any

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


def logconfig_dict(level: str = "info") -> dict[str, Any]:
    """gunicorn ``logconfig_dict``: every logger (ours and gunicorn's) as JSON lines on stdout."""
    handler = {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stdout"}
    level = level.upper()
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter}},
        "handlers": {"json": handler},
        "root": {"level": level, "handlers": ["json"]},
        "loggers": {
            "gunicorn.error": {"level": level, "handlers": ["json"], "propagate": False, "qualname": "gunicorn.error"},
            "gunicorn.access": {"level": level, "handlers": [], "propagate": False, "qualname": "gunicorn.access"},
            DECISION_LOGGER: {"level": level, "handlers": ["json"], "propagate": False},
            SERVER_LOGGER: {"level": level, "handlers": ["json"], "propagate": False},
            "kubernetes": {"level": "WARNING"},
            "urllib3": {"level": "WARNING"},
        },
    }


def log_decision(fields: dict[str, Any]) -> None:
    """One line per admission review; cheap when the decision logger is disabled."""
    if decision_log.isEnabledFor(logging.INFO):
        decision_log.info("admission", extra={"fields": fields})
