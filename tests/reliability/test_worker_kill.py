"""A worker killed with SIGKILL under load: the arbiter replaces it, and the only failed requests are
the ones on connections that worker held (the apiserver's client sees a reset for those and opens a
new connection, which lands on a live worker).

Six clients keep one connection each and post reviews back to back. Each client knows which worker
its connection is on (``/readyz`` reports the pid; a kept-alive connection stays on its worker), so
every failure is attributed to a worker.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from tests.reliability.load import Load, answering_pids, wait_for_workers, worker_pids
from tests.server.support import ServerProcess, eventually, serve_args

pytestmark = [pytest.mark.reliability, pytest.mark.server, pytest.mark.slow]

CLIENTS = 6


@pytest.fixture
def server(tmp_path, server_certs) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        tmp_path,
        serve_args(
            server_certs,
            "--workers",
            "2",
            "--threads",
            "4",
            "--namespace-labels",
            "none",
        ),
        ca_files=[server_certs.ca_cert],
    ).start()
    yield proc
    assert proc.stop() == 0


AFTER = 50  # successful requests the load must send once the worker has been replaced


def test_sigkill_of_a_worker_fails_only_its_own_connections(server: ServerProcess):
    before = wait_for_workers(server, 2)
    with Load(server, clients=CLIENTS) as load:
        eventually(
            lambda: (
                len(load.outcomes) > 200
                and all(p in before for p in load.current.values())
                and len(load.current) == CLIENTS
            ),
            180,  # a hang guard: the load is counted (200 requests), not timed
            "the load to run on both workers",
        )
        # the worker holding the most connections (at least half of them: SO_REUSEPORT may put all
        # six on one worker, and the test must not depend on that draw)
        victim = max(before, key=lambda pid: sum(1 for p in load.current.values() if p == pid))
        on_victim = sum(1 for pid in load.current.values() if pid == victim)
        killed_at = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        new: list[int] = []

        def replaced() -> bool:
            # one reading of the master's children per check: the victim stays listed (a zombie) until
            # the master reaps it, then there is one worker, then two; two readings could mix the states
            pids = worker_pids(server)
            new[:] = [p for p in pids if p not in before]
            return len(pids) == 2 and victim not in pids and len(new) == 1

        eventually(replaced, 30, "the arbiter to replace the worker")
        replacement = new[0]
        replaced_at = time.monotonic()
        # N requests after the replacement, counted: how fast they come is the machine's business
        eventually(lambda: load.successes_after(replaced_at) >= AFTER, 180, "requests to succeed again")
    after_kill = [o for o in load.outcomes if o.finished >= killed_at]
    failures = load.failures()
    print(
        f"\nSIGKILL of worker {victim}: {on_victim} of {CLIENTS} connections on it; {len(failures)} failed "
        f"request(s) of {len(load.outcomes)} ({len(after_kill)} after the kill); replaced by {replacement}; "
        f"connection set-up failures: {len(load.setup_failures)}"
    )

    assert on_victim >= 1, "the test needs at least one connection on the killed worker"
    assert all(o.pid == victim for o in failures), f"only the killed worker's connections fail: {failures}"
    assert len(failures) <= on_victim, "at most one failed request per connection the worker held"
    assert all(o.finished >= killed_at for o in failures), "nothing failed before the kill"
    assert not load.setup_failures, "new connections never hit the dead worker"
    survivors = next(p for p in before if p != victim)
    assert sum(1 for o in after_kill if o.ok and o.pid in (survivors, replacement)) > 0
    assert load.successes_after(replaced_at) >= AFTER, "requests succeed again after the kill"
    assert worker_pids(server) == sorted([survivors, replacement])

    # the replacement worker serves too: fresh connections spread over both (SO_REUSEPORT hashing)
    assert replacement in answering_pids(server, 60, until=replacement), "the new worker accepts connections"
    booted = [r for r in server.log_records() if r.get("msg", "").startswith("Booting worker")]
    assert len(booted) == 3
