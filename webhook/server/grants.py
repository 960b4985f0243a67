"""The exception grants' HMAC keys (``serve --grant-key FILE``): read once at start, handed to the engine as data.

The file is a Secret only the webhook's pod mounts: one key per line (32+ random bytes, e.g.
``openssl rand -hex 32``); the first line signs new grants and every line verifies, so a new key is
rotated in by putting it first and keeping the old one until every controller object has been
re-applied (docs/policy.md "Exceptions"). Whoever can read the Secret can forge grants: it is the
platform's, like the serving key.
"""

from __future__ import annotations

from pathlib import Path

from webhook.engine.model.grants import GrantKeys

MIN_KEY_BYTES = 16


def read_grant_keys(path: str | Path) -> GrantKeys:
    """The keys of ``path``; ValueError that says what is wrong and how to fix it."""
    try:
        text = Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    keys = tuple(line.strip() for line in text.splitlines() if line.strip() and not line.startswith(b"#"))
    if not keys:
        raise ValueError(f"{path} holds no key (one per line; create one with `openssl rand -hex 32`)")
    for number, key in enumerate(keys, 1):
        if len(key) < MIN_KEY_BYTES:
            raise ValueError(
                f"{path}: key {number} is {len(key)} bytes, fewer than {MIN_KEY_BYTES} (use `openssl rand -hex 32`)"
            )
    return GrantKeys(keys)
