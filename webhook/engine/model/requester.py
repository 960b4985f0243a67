"""Who asks: the requester of an admission request, as the engine may judge it.

Some facts about an object are only as trustworthy as whoever wrote them: the scheduler's
extended-resource-claim marker on a ResourceClaim means "quota already counted this" only when the
scheduler put it there. The edge that knows the requester (the server, from the AdmissionReview's
``request.userInfo``) passes one small frozen value per review; offline edges (``check``, ``policy
test``) pass none unless a suite names one, and a manifest in a repository is nobody's but a user's.
Username and groups only: what identity rules need, nothing the engine could leak or log by mistake.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SCHEDULER = "system:kube-scheduler"
"""The kube-scheduler's user name (its binding cycle writes the claims of DRA-backed extended resources)."""


@dataclass(frozen=True, slots=True)
class Requester:
    """``request.userInfo`` reduced to what the engine judges: the user name and the groups."""

    username: str = ""
    groups: tuple[str, ...] = ()

    @classmethod
    def from_user_info(cls, info: Any) -> Requester | None:
        """From an AdmissionReview's ``request.userInfo``; None when absent or not an object."""
        if not isinstance(info, Mapping):
            return None
        name = info.get("username")
        groups = info.get("groups")
        return cls(
            name if isinstance(name, str) else "",
            tuple(g for g in groups if isinstance(g, str)) if isinstance(groups, list) else (),
        )

    @property
    def is_scheduler(self) -> bool:
        return self.username == SCHEDULER

    @classmethod
    def parse(cls, text: str) -> Requester:
        """``USER[,GROUP…]`` (``check --as``): judge manifests as the pipeline that will apply them."""
        parts = [p.strip() for p in text.split(",")]
        if not parts or not parts[0] or any(not p for p in parts[1:]):
            raise ValueError(f"expected USER[,GROUP…], got {text!r}")
        return cls(parts[0], tuple(parts[1:]))
