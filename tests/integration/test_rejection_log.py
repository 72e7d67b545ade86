"""A burst of refused requests from one client is one log line naming its client id (issue 27)."""

from __future__ import annotations

import socket
import struct
from pathlib import Path

from tests.helpers.broker import BrokerProcess


def old_produce_frame(client_id: bytes, correlation_id: int) -> bytes:
    # Produce v0, refused since Kafka 4.0 (KIP-896): the broker closes the connection.
    body = struct.pack(">hhih", 0, 0, correlation_id, len(client_id)) + client_id + struct.pack(">hii", 1, 1000, 0)
    return struct.pack(">i", len(body)) + body


def test_a_burst_of_refused_requests_is_one_line_with_the_client_id(own_broker: BrokerProcess, tmp_path: Path) -> None:
    for i in range(40):
        with socket.create_connection(("127.0.0.1", own_broker.port), timeout=10) as s:
            s.sendall(old_produce_frame(b"reconnect-loop", i))
            assert s.recv(100) == b""  # closed without an answer, as Kafka does
    lines = [line for line in own_broker.log_path.read_text().splitlines() if "closing connection" in line]
    assert len(lines) == 1, lines
    assert "client 'reconnect-loop'" in lines[0], lines[0]
