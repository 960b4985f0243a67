"""The harness's ports: a server whose serving and metrics ports came out equal could not start (its
worker found the port taken by its own metrics listener), which made a test fail by chance."""

from __future__ import annotations

import socket

import pytest

from tests.server.support import _ephemeral_range, _share, free_port


def test_ports_are_never_handed_out_twice_and_stay_below_the_ephemeral_range() -> None:
    ports = [free_port() for _ in range(400)]
    assert len(set(ports)) == len(ports)
    low, _ = _ephemeral_range()
    assert all(1024 <= port < low for port in ports)  # no outgoing connection's local port can take one


def test_every_port_handed_out_can_be_bound_at_once() -> None:
    listeners = []
    try:
        for _ in range(50):
            port = free_port()
            listener = socket.create_server(("127.0.0.1", port))  # it was free: this bind succeeds
            listeners.append(listener)
    finally:
        for listener in listeners:
            listener.close()


def test_parallel_workers_hand_out_disjoint_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under pytest-xdist each worker is its own process with its own record of ports given out: two
    workers drawing from the same pool could give one port to two servers. Their shares are disjoint."""
    low, _ = _ephemeral_range()
    whole = set(range(max(1024, low - 12_000), low))
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    shares = []
    for worker in ("gw0", "gw1"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        shares.append(set(_share()))
        assert all(free_port() in shares[-1] for _ in range(20))
    assert not shares[0] & shares[1]
    assert shares[0] | shares[1] == whole
