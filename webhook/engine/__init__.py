"""The pure admission engine. ``evaluate`` is the only entry point every surface uses."""

from webhook.engine.core import evaluate
from webhook.engine.deadline import DeadlineExceeded
from webhook.engine.model.decision import Action, Decision, Violation, WasteReport
from webhook.engine.model.grants import GrantKeys
from webhook.engine.model.requester import Requester

__all__ = ["Action", "DeadlineExceeded", "Decision", "GrantKeys", "Requester", "Violation", "WasteReport", "evaluate"]
