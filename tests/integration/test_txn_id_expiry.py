"""Kafka's ``transaction.remove.expired.transaction.cleanup.interval.ms`` acts (#23): with it set short, a
transactional id idle past ``transactional.id.expiration.ms`` is forgotten within seconds, not at the
default hourly pass. Before the key was renamed tierlog accepted Kafka's name and ignored it (its own
key was spelt ``transactions.remove.…``), so this test waited out its deadline there."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.broker import BrokerProcess
from tests.helpers.raw_client import RawClient
from tierlog.protocol import ApiKey

TXN_ID = "expires-soon"
DEADLINE_S = 60.0


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", {
        "transaction.state.log.num.partitions": "1",
        "transactional.id.expiration.ms": "1000",
        "transaction.remove.expired.transaction.cleanup.interval.ms": "200",
    }).start()
    yield b
    if b.alive():
        assert b.stop() == 0, b.stderr_tail()


def listed_ids(c: RawClient) -> set[str]:
    body = c.call(ApiKey.LIST_TRANSACTIONS, 0, {"state_filters": [], "producer_id_filters": []})
    assert body.error_code == 0, body
    return {t.transactional_id for t in body.transaction_states}


def test_kafkas_cleanup_interval_key_forgets_expired_ids(broker: BrokerProcess) -> None:
    c = RawClient(broker.port, client_id="txn-expiry")
    found = c.call(ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": [TXN_ID]})
    assert found.coordinators[0].error_code == 0, found
    init = c.call(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": TXN_ID, "transaction_timeout": 60000,
                                              "producer_id": -1, "producer_epoch": -1})
    assert init.error_code == 0, init
    assert TXN_ID in listed_ids(c)
    deadline = time.monotonic() + DEADLINE_S
    while TXN_ID in listed_ids(c):
        assert time.monotonic() < deadline, (
            f"{TXN_ID} still listed {DEADLINE_S:.0f} s after it expired; broker log:\n{broker.stderr_tail()}")
        time.sleep(0.1)
    assert "removed 1 expired transactional ids" in broker.log_path.read_text(), broker.stderr_tail()
