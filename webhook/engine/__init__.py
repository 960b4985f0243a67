"""The pure admission engine. ``evaluate`` is the only entry point every surface uses."""

from webhook.engine.core import evaluate
from webhook.engine.deadline import DeadlineExceeded
from webhook.engine.decision import Action, Decision, Violation, WasteReport

__all__ = ["Action", "DeadlineExceeded", "Decision", "Violation", "WasteReport", "evaluate"]
