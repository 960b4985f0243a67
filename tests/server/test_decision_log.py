"""Decision lines: the direct path writes exactly what the logging path would, and steps aside
whenever someone configured the decision logger differently."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import orjson
import pytest

from webhook.server import logs
from webhook.server.logs import DECISION_LOGGER, JsonFormatter, LineWriter, log_decision

FIELDS = {"endpoint": "validate", "uid": "u-1", "decision": "denied", "rules": ["gang-incomplete"], "latency_ms": 0.2}


@pytest.fixture
def decision_logger() -> Iterator[logging.Logger]:
    log = logging.getLogger(DECISION_LOGGER)
    saved = (list(log.handlers), list(log.filters), log.level, log.propagate)
    yield log
    log.handlers[:], log.filters[:] = saved[0], saved[1]
    log.setLevel(saved[2])
    log.propagate = saved[3]


def _writer(log: logging.Logger) -> tuple[LineWriter, io.StringIO]:
    stream = io.StringIO()
    handler = LineWriter(stream, delay=0)  # no batching: the line is written before emit returns
    handler.setFormatter(JsonFormatter())
    log.handlers[:] = [handler]
    log.filters[:] = []
    log.setLevel(logging.INFO)
    log.propagate = False
    return handler, stream


@pytest.mark.parametrize("fields", [FIELDS, {**FIELDS, "name": "ü/\\\"x", "when": object()}, {}],
                         ids=["plain", "escapes-and-default-str", "no-fields"])
def test_direct_line_equals_the_formatter_line(decision_logger: logging.Logger, fields: dict) -> None:
    handler, stream = _writer(decision_logger)
    assert logs._decision_line.handler() is handler, "the shipped configuration takes the direct path"
    log_decision(dict(fields))
    direct = stream.getvalue()
    record = decision_logger.makeRecord(DECISION_LOGGER, logging.INFO, "f", 0, "admission", (), None,
                                        extra={"fields": dict(fields)})
    reference = JsonFormatter().format(record) + "\n"
    ts_direct, ts_reference = orjson.loads(direct)["ts"], orjson.loads(reference)["ts"]
    assert ts_direct[:17] == ts_reference[:17] and ts_direct.endswith("Z") and len(ts_direct) == 24
    assert direct.replace(ts_direct, "T") == reference.replace(ts_reference, "T"), "byte for byte, but the time"


def test_a_filter_on_the_logger_is_honoured(decision_logger: logging.Logger) -> None:
    _, stream = _writer(decision_logger)
    seen: list[str] = []

    def keep_allowed_only(record: logging.LogRecord) -> bool:
        seen.append(record.fields["uid"])  # type: ignore[attr-defined]
        return record.fields["decision"] != "denied"  # type: ignore[attr-defined]

    decision_logger.addFilter(keep_allowed_only)
    log_decision(dict(FIELDS))
    log_decision({**FIELDS, "uid": "u-2", "decision": "allowed"})
    assert seen == ["u-1", "u-2"], "a filter sees every record: the direct path stepped aside"
    assert [orjson.loads(line)["uid"] for line in stream.getvalue().splitlines()] == ["u-2"]


def test_other_handlers_and_levels_take_the_logging_path(decision_logger: logging.Logger) -> None:
    handler, stream = _writer(decision_logger)
    handler.setLevel(logging.WARNING)
    log_decision(dict(FIELDS))
    assert stream.getvalue() == "", "a handler raised to warning writes no decision line"
    capture = io.StringIO()
    plain = logging.StreamHandler(capture)
    plain.setFormatter(logging.Formatter("%(name)s %(message)s"))
    decision_logger.handlers[:] = [plain]
    assert logs._decision_line.handler() is None
    log_decision(dict(FIELDS))
    assert capture.getvalue() == f"{DECISION_LOGGER} admission\n"
