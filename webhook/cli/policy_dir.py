"""The policy directory a command reads when none is given: ``$GPU_ADMISSION_POLICY``, else ``policies``.

``serve`` already reads that variable; ``check`` and ``policy lint|test|render`` read it too, so one
setting points every command at a policy kept elsewhere (a CI job, a shell, a test session that
judges the product on its shipped default instead of the checkout's ``policies/``).
"""

from __future__ import annotations

import os

ENV = "GPU_ADMISSION_POLICY"
FALLBACK = "policies"
HELP = f"${ENV}, else {FALLBACK}"


def default_policy_dir() -> str:
    """``$GPU_ADMISSION_POLICY`` when set and not empty, else ``policies`` (relative to the cwd)."""
    return os.environ.get(ENV) or FALLBACK
