"""Policy hot reload: re-read the policy directory periodically, swap in a new policy only if it loads.

Why a content hash every couple of seconds rather than inotify or mtimes: a ConfigMap volume updates
by swapping the ``..data`` symlink, which inotify on the files does not see and which may keep
mtimes; reading a few KiB and hashing them costs ~0.1 ms (measured, see docs/operations.md), so
polling is both the simplest and the robust choice. It runs in a daemon thread of each worker, off
the request path.

The swap is one attribute assignment: a request reads ``store.policy`` once and evaluates against
that object, so it sees the old or the new policy, never a mix. A policy that fails to load is
logged with every ``file:line:col`` problem, counted, and shown on ``/readyz`` while the last good
policy keeps serving.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from webhook.policy import Policy, PolicyError, PolicyIssue, load_policy_texts
from webhook.policy.loader import policy_files
from webhook.server import metrics
from webhook.server.logs import server_log

MAX_SHOWN_ISSUES = 20


def read_policy_texts(directory: str | Path) -> tuple[list[tuple[str, str]], str]:
    """The policy files' texts and a hash of names + contents (what changed is what we hash)."""
    digest = hashlib.sha256()
    texts: list[tuple[str, str]] = []
    for path in policy_files(directory):
        try:
            data = path.read_bytes()
            text = data.decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise PolicyError([PolicyIssue(str(path), 0, 0, "", f"cannot read: {exc}")]) from None
        digest.update(str(path).encode() + b"\0" + data + b"\0")
        texts.append((str(path), text))
    return texts, digest.hexdigest()


class PolicyStore:
    """The serving policy of one process, plus what went wrong with the files on disk, if anything."""

    def __init__(self, directory: str | Path, policy: Policy, fingerprint: str):
        self.directory = str(directory)
        self.policy = policy  # read by request threads; replaced, never mutated
        self.loaded_at = time.time()
        self.error: list[str] | None = None  # rendered issues while the files on disk do not load
        self.error_since: float | None = None
        self._good = fingerprint
        self._seen = fingerprint
        self._lock = threading.Lock()
        self._published: set[tuple[str, str]] = set()  # (exception, owner) series this process has set
        self.publish()

    def publish(self) -> None:
        """(Re)write this process's policy gauges."""
        metrics.POLICY_LOADED.set(self.loaded_at)
        metrics.POLICY_ERROR.set(1 if self.error else 0)
        self._publish_exceptions()

    def _publish_exceptions(self) -> None:
        """Each exception's expiry, for the alert that warns a week ahead (lint warns in CI, this in the
        cluster); one a reload removed goes to 0, since a multiprocess gauge cannot forget a series."""
        now = {}
        for exc in self.policy.spec.exceptions:
            day = datetime.combine(exc.expires, datetime.min.time(), tzinfo=UTC)
            now[(exc.name, exc.owner)] = day.timestamp()
        for labels in self._published - now.keys():
            metrics.EXCEPTION_EXPIRY.labels(*labels).set(0)
        for labels, value in now.items():
            metrics.EXCEPTION_EXPIRY.labels(*labels).set(value)
        self._published = set(now)

    @classmethod
    def load(cls, directory: str | Path) -> PolicyStore:
        """The first load: a broken policy here is fatal (there is no last good one); raises PolicyError."""
        texts, fingerprint = read_policy_texts(directory)
        return cls(directory, load_policy_texts(texts), fingerprint)

    def check(self) -> bool:
        """Reload if the files changed; True when a new policy was swapped in."""
        with self._lock:
            try:
                texts, fingerprint = read_policy_texts(self.directory)
            except PolicyError as exc:
                return self._failed(None, exc)
            if fingerprint == self._good:
                if self.error is not None:  # the files went back to what is serving
                    self._clear()
                self._seen = fingerprint
                return False
            if fingerprint == self._seen:
                return False  # the same broken content as last time: already reported
            self._seen = fingerprint
            try:
                policy = load_policy_texts(texts)
            except PolicyError as exc:
                return self._failed(fingerprint, exc)
            except Exception as exc:  # a loader bug must not take the last good policy with it
                return self._failed(fingerprint, PolicyError([PolicyIssue(self.directory, 0, 0, "", repr(exc))]))
            old = self.policy.digest
            self.policy = policy  # the atomic swap
            self.loaded_at = time.time()
            self._good = fingerprint
            self._clear()
            metrics.POLICY_RELOADS.labels("success").inc()
            metrics.POLICY_LOADED.set(self.loaded_at)
            self._publish_exceptions()
            server_log.info(
                "policy reloaded",
                extra={"fields": {"policy": policy.digest, "previous": old, "sources": list(policy.sources)}},
            )
            return True

    def _clear(self) -> None:
        self.error = None
        self.error_since = None
        metrics.POLICY_ERROR.set(0)

    def _failed(self, fingerprint: str | None, exc: PolicyError) -> bool:
        rendered = [issue.render() for issue in exc.issues][:MAX_SHOWN_ISSUES]
        if fingerprint is None and self.error == rendered:
            return False  # e.g. the directory is still missing: reported once
        if fingerprint is None:
            self._seen = ""
        self.error = rendered
        self.error_since = self.error_since or time.time()
        metrics.POLICY_RELOADS.labels("failure").inc()
        metrics.POLICY_ERROR.set(1)
        server_log.error(
            "policy reload failed; the last good policy keeps serving",
            extra={"fields": {"policy": self.policy.digest, "errors": rendered}},
        )
        return False

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "status": "stale" if self.error else "ok",
            "digest": self.policy.digest,
            "directory": self.directory,
            "sources": list(self.policy.sources),
            "loaded_at": _iso(self.loaded_at),
            "failure": self.policy.settings.failure,
        }
        if self.error:
            out["error"] = self.error
            out["error_since"] = _iso(self.error_since)
        return out


def _iso(ts: float | None) -> str | None:
    return None if ts is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


class Ticker:
    """Runs one check every ``interval`` seconds in a daemon thread; a failing check is logged, not fatal."""

    def __init__(self, name: str, interval: float, check: Callable[[], Any]):
        self.name = name
        self.interval = interval
        self.check = check
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=f"gpu-admission-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.check()
            except Exception:
                server_log.exception(f"{self.name} check failed", extra={"fields": {"check": self.name}})
