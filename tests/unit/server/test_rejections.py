"""Rejections logged once per client address and reason per minute (issue 27 point 6)."""

from __future__ import annotations

import struct

from tierlog.server.rejections import RejectionLimiter, client_id_of


def test_once_per_address_and_reason_per_interval_with_the_count_of_the_rest() -> None:
    lim = RejectionLimiter(interval_s=60.0)
    assert lim.admit("10.0.0.1", "old-produce", 0.0) == 0
    assert [lim.admit("10.0.0.1", "old-produce", t) for t in (1.0, 2.0, 59.9)] == [None, None, None]
    assert lim.admit("10.0.0.2", "old-produce", 3.0) == 0  # another address
    assert lim.admit("10.0.0.1", "garbage", 4.0) == 0  # another reason
    assert lim.admit("10.0.0.1", "old-produce", 60.0) == 3  # the next line says how many were not logged
    assert lim.admit("10.0.0.1", "old-produce", 61.0) is None


def test_memory_is_bounded() -> None:
    lim = RejectionLimiter(interval_s=60.0, max_keys=100)
    for i in range(1000):
        assert lim.admit(f"10.0.{i // 256}.{i % 256}", "x", 0.0) == 0
    assert len(lim._seen) <= 100


def test_client_id_from_a_header_whose_body_cannot_be_read() -> None:
    frame = struct.pack(">hhih", 0, 1, 7, 6) + b"sarama" + b"\xff\xff"
    assert client_id_of(frame) == "sarama"
    assert client_id_of(struct.pack(">hhih", 0, 1, 7, -1)) is None
    assert client_id_of(b"\x00\x01") is None
    assert client_id_of(struct.pack(">hhih", 0, 1, 7, 50) + b"short") is None
