"""The engine's time budget: a point on the monotonic clock past which evaluation gives up.

The apiserver waits ``timeoutSeconds`` for the webhook and then applies ``failurePolicy`` on its own,
with an opaque message and, for the mutating webhook (``Ignore``), an object stored unmutated. A
decision the webhook makes itself is better: the server passes a deadline below ``timeoutSeconds``
and the engine checks it between steps (templates, resolution, mutation, each rule). Every step is
bounded by the size caps of :mod:`webhook.engine.shape`, so a check between steps is enough to stop
within one step of the deadline. Reading the clock is the engine's only contact with the outside,
and only when a deadline is given (``check``, ``policy test`` and the benchmarks pass none).
"""

from __future__ import annotations

import time


class DeadlineExceeded(Exception):
    """Evaluation ran past its deadline; ``stage`` says where it was."""

    def __init__(self, stage: str):
        super().__init__(f"evaluation ran past its deadline ({stage})")
        self.stage = stage


def check(deadline: float | None, stage: str) -> None:
    """Raise :class:`DeadlineExceeded` when ``deadline`` (``time.monotonic()`` seconds) has passed."""
    if deadline is not None and time.monotonic() > deadline:
        raise DeadlineExceeded(stage)
