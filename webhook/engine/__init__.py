"""The pure admission engine: a :class:`Request` in, a :class:`Decision` out, through one entry per
question (``mutate``, ``validate``, ``report``, ``explain``)."""

from webhook.engine.core import explain, mutate, report, validate
from webhook.engine.deadline import DeadlineExceeded
from webhook.engine.model.decision import Action, Decision, Violation, WasteReport
from webhook.engine.model.grants import GrantKeys
from webhook.engine.model.request import Request, Stage
from webhook.engine.model.requester import Requester

__all__ = [
    "Action",
    "DeadlineExceeded",
    "Decision",
    "GrantKeys",
    "Request",
    "Requester",
    "Stage",
    "Violation",
    "WasteReport",
    "explain",
    "mutate",
    "report",
    "validate",
]
