"""The harness's ports: a server whose serving and metrics ports came out equal could not start (its
worker found the port taken by its own metrics listener), which made a test fail by chance."""

from __future__ import annotations

import socket

from tests.server.support import _ephemeral_range, free_port


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
