"""``gpu-admission check``: the admission engine run offline over manifests, for CI."""

from webhook.check.runner import CheckResult, Status, check_sources, summarize

__all__ = ["CheckResult", "Status", "check_sources", "summarize"]
